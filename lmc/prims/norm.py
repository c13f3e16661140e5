"""batch_norm: per-channel normalization over (batch, height, width) with batch statistics in
training and running statistics in eval (ε = 1e-5, biased variance, as the Lean kit); and
layer_norm, the same normalization over one axis at every other position."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import ShapeError
from lmc.prims.axes import Axes, channel_sums
from lmc.core.types import TensorType, flt
from lmc.prims import Prim, primitive

EPS = 1e-5


@primitive("batch_norm")
class BatchNorm(Prim):
    """y = γ·(x − μ)·rsqrt(σ² + ε) + β, μ/σ² over [0, 2, 3] (or [0] for [B, C]).
    Saves x̂ and rsqrt(σ²+ε); also returns (μ, σ²) as stats for the running estimates.
    bwd: dγ = Σ dy·x̂, dβ = Σ dy, dx = rstd/N·(N·dx̂ − Σdx̂ − x̂·Σ(dx̂·x̂)), dx̂ = dy·γ."""
    inputs = ("x",)
    params = ("gamma", "beta")
    has_eval = True
    examples = [({}, [TensorType((3, 4, 5, 5))], [TensorType((4,)), TensorType((4,))]),
                ({}, [TensorType((2, 3, 1, 1))], [TensorType((3,)), TensorType((3,))]),
                ({}, [TensorType((6, 5))], [TensorType((5,)), TensorType((5,))]),
                (dict(layout="hbwc"), [TensorType((3, 4, 5, 2))], [TensorType((4,)), TensorType((4,))]),
                (dict(layout="hbwc"), [TensorType((4, 3, 4, 4))], [TensorType((3,)), TensorType((3,))])]   # split sums

    def layouts(self, ins, ps):
        return ("nchw", "hbwc") if ins[0].rank == 4 else ("nchw",)

    def infer(self, ins, ps):
        (x,) = ins
        if x.rank not in (2, 4):
            raise ShapeError(f"batch norm expects [batch, channels(, height, width)], got {x.shape_str()}")
        c = x.dims[1]
        for p in ps:
            if p.dims != (c,):
                raise ShapeError(f"batch norm over {c} channels got a parameter of shape {p.shape_str()}")
        return x, 8 * x.size

    def saved(self, ins, ps, out):
        return [ins[0], ps[0]]     # x̂ (shape of x) and rsqrt(σ²+ε) (shape [C])

    def stats(self, ins, ps, out):
        return [ps[0], ps[0]]      # μ and σ² per channel (shape [C]); the running state alike

    def context(self, ins, ps, out):
        (x,) = ins
        n = x.size // ps[0].dims[0]
        if x.rank == 2:
            cs, cdim = {"axes": "[0]", "split": None, "flat": None}, "[1]"
        else:           # the axes other than channels, in x's layout (lmc/graph/layout.py)
            cs, cdim = channel_sums(x, self.layout), f"[{Axes(self.layout).pos('c')}]"
        return {"cs": cs, "cdim": cdim, "inv_n": flt(1.0 / n), "eps": flt(EPS), "c": ps[0].mlir}

    @staticmethod
    def reference(xp, x, gamma, beta):
        mu, var = BatchNorm.stats_reference(xp, x, gamma, beta)
        return BatchNorm.eval_reference(xp, x, gamma, beta, mu, var)

    @classmethod
    def stats_reference(cls, xp, x, gamma, beta):
        """μ and the biased σ² per channel (what the running estimates follow)."""
        axes = (0, 2, 3) if x.ndim == 4 else (0,)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        mu = x.mean(axis=axes)
        return [mu, ((x - mu.reshape(shape)) ** 2).mean(axis=axes)]

    @classmethod
    def eval_reference(cls, xp, x, gamma, beta, mean, var):
        """y = γ·(x − mean)/√(var + ε) + β with given (running) statistics."""
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return (x - mean.reshape(shape)) / xp.sqrt(var.reshape(shape) + EPS) * gamma.reshape(shape) \
            + beta.reshape(shape)

    def onnx(self, b, ins, ps, st):
        return b.op("BatchNormalization", ins[0], *ps, *st, epsilon=EPS)

    def draw_state(self, rng, ts):
        mean, var = ts
        return [rng.standard_normal(mean.dims).astype(np.float32),
                rng.uniform(0.2, 3.0, var.dims).astype(np.float32)]     # a variance is positive


@primitive("layer_norm")
class LayerNorm(Prim):
    """y = γ·(x − μ)/√(σ² + ε) + β with μ, σ² (biased) over `axis` at every other position:
    the last axis for tokens, 1 (channels) for ConvNeXt's NCHW LayerNorm.  γ, β [x.dims[axis]].
    FLOPs 8 per element (the seed's count, as batch norm's)."""
    inputs = ("x",)
    params = ("gamma", "beta")
    examples = [(dict(axis=-1), [TensorType((2, 3, 5))], [TensorType((5,)), TensorType((5,))]),
                (dict(axis=-1), [TensorType((4, 6))], [TensorType((6,)), TensorType((6,))]),
                (dict(axis=1), [TensorType((2, 3, 2, 2))], [TensorType((3,)), TensorType((3,))])]

    def infer(self, ins, ps):
        (x,) = ins
        if not -x.rank <= self.axis < x.rank:
            raise ShapeError(f"layer norm axis {self.axis} does not fit {x.shape_str()}")
        d = x.dims[self.axis]
        for p in ps:
            if p.dims != (d,):
                raise ShapeError(f"layer norm over {d} features got a parameter of shape {p.shape_str()}")
        return x, 8 * x.size

    def saved(self, ins, ps, out):
        (x,) = ins
        return [x, self._rows(x)]     # x̂ (shape of x) and rsqrt(σ²+ε) (x without `axis`)

    def _rows(self, x):
        ax = self.axis % x.rank
        return TensorType(x.dims[:ax] + x.dims[ax + 1:])

    def context(self, ins, ps, out):
        (x,) = ins
        ax = self.axis % x.rank
        return {"ax": ax, "rest": [d for d in range(x.rank) if d != ax], "inv_d": flt(1.0 / x.dims[ax]),
                "eps": flt(EPS), "r": self._rows(x).mlir, "c": ps[0].mlir}

    @staticmethod
    def reference(xp, x, gamma, beta, axis):
        shape = [1] * x.ndim
        shape[axis] = -1
        mu = x.mean(axis=axis, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=axis, keepdims=True)
        return (x - mu) / xp.sqrt(var + EPS) * gamma.reshape(shape) + beta.reshape(shape)

    def onnx(self, b, ins, ps, st):
        (x,), rank = ins, b.ins[0].rank
        ax = self.axis % rank
        if ax == rank - 1:
            return b.op("LayerNormalization", x, *ps, axis=-1, epsilon=EPS)
        d = b.op("Sub", x, b.op("ReduceMean", x, axes=[ax]))
        var = b.op("ReduceMean", b.op("Mul", d, d), axes=[ax])
        y = b.op("Div", d, b.op("Sqrt", b.op("Add", var, b.const(EPS))))
        return b.op("Add", b.op("Mul", y, b.channel(ps[0], rank, ax)), b.channel(ps[1], rank, ax))
