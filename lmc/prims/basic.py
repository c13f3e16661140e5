"""Elementwise and shape primitives: activation, bias, add, reshape, global average pool."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType, flt
from lmc.prims.axes import Axes
from lmc.prims import Elementwise, Prim, primitive

GELU_C = 0.7978845608028654  # sqrt(2/pi): tanh-form GELU, as the reference and jax.nn.gelu(approximate=True)


# act kind → its float64 formula (the template's math is templates/prims/act/<kind>.mlir.j2)
# and the kinks random test inputs keep away from.  Adding an activation: one line here, one
# fragment there (and its name in fields.Activation to reach it from YAML).
ACTIVATIONS = {
    "relu": lambda xp, x: xp.maximum(x, 0.0),
    "relu6": lambda xp, x: xp.minimum(xp.maximum(x, 0.0), 6.0),
    "swish": lambda xp, x: x / (1.0 + xp.exp(-x)),
    "h_swish": lambda xp, x: x * xp.minimum(xp.maximum(x + 3.0, 0.0), 6.0) / 6.0,
    "gelu": lambda xp, x: 0.5 * x * (1.0 + xp.tanh(GELU_C * (x + 0.044715 * x ** 3))),
    "sigmoid": lambda xp, x: 1.0 / (1.0 + xp.exp(-x)),
    "h_sigmoid": lambda xp, x: xp.minimum(xp.maximum(x + 3.0, 0.0), 6.0) / 6.0,
    "softplus": lambda xp, x: xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x))),
}
# act kind → its ONNX form (opset 17 has no tanh GELU: spelled out)
def _onnx_gelu(b, x):
    x3 = b.op("Mul", b.op("Mul", x, x), x)
    inner = b.op("Mul", b.const(GELU_C), b.op("Add", x, b.op("Mul", b.const(0.044715), x3)))
    return b.op("Mul", b.op("Mul", b.const(0.5), x), b.op("Add", b.const(1.0), b.op("Tanh", inner)))


ONNX_ACTIVATIONS = {
    "relu": lambda b, x: b.op("Relu", x),
    "relu6": lambda b, x: b.op("Clip", x, b.const(0.0), b.const(6.0)),
    "swish": lambda b, x: b.op("Mul", x, b.op("Sigmoid", x)),
    "h_swish": lambda b, x: b.op("HardSwish", x),
    "gelu": _onnx_gelu,
    "sigmoid": lambda b, x: b.op("Sigmoid", x),
    "h_sigmoid": lambda b, x: b.op("HardSigmoid", x, alpha=1.0 / 6.0, beta=0.5),
    "softplus": lambda b, x: b.op("Softplus", x),
}
KINKS = {"relu": [0.0], "relu6": [0.0, 6.0], "h_swish": [-3.0, 3.0], "h_sigmoid": [-3.0, 3.0]}
# kinds whose derivative mask reads the same off the output (relu: y > 0 iff x > 0; relu6:
# 0 < y < 6 iff 0 < x < 6): they save y, not x.  The pre-activation then need not be kept — when
# y is saved anyway (the next layer's input) or x feeds nothing else (a batch norm's output), one
# full-size tensor fewer is written per step (benchmarks/NOTES.md, session 15)
SAVES_OUTPUT = {"relu", "relu6"}
KINK_GAP = 0.05          # no test input within this distance of a kink


@primitive("act")
class Act(Elementwise):
    """y = act(x), elementwise.  Saves x (the pre-activation), or y for SAVES_OUTPUT kinds.
    gelu is the tanh form 0.5·x·(1+tanh(√(2/π)(x+0.044715x³))), as the Lean kit and jax.nn.gelu."""
    inputs = ("x",)
    params = ()
    examples = [(dict(kind=k), [TensorType((3, 5))], []) for k in ACTIVATIONS]

    def infer(self, ins, ps):
        (x,) = ins
        return x, x.size

    @staticmethod
    def reference(xp, x, kind):
        return ACTIVATIONS[kind](xp, x)

    def onnx(self, b, ins, ps, st):
        return ONNX_ACTIVATIONS[self.kind](b, ins[0])

    def context(self, ins, ps, out):
        return {"saved": "%y" if self.kind in SAVES_OUTPUT else "%x"}

    def draw(self, rng, t, is_input):
        kinks = KINKS.get(self.kind, [])
        if not (is_input and kinks):
            return super().draw(rng, t, is_input)
        return away_from_kinks(rng, t, kinks)


def away_from_kinks(rng, t, kinks) -> np.ndarray:
    """Uniform f32 values in [−8, 8) of type t, none within KINK_GAP of a kink (so both sides of
    every kink are drawn: relu6 at 6, h_swish at ±3)."""
    x = rng.uniform(-8.0, 8.0, t.dims)
    for k in kinks:
        near = np.abs(x - k) < KINK_GAP
        x[near] = k + np.where(x[near] >= k, KINK_GAP, -KINK_GAP)
    return x.astype(np.float32)


@primitive("bias")
class Bias(Prim):
    """y = x + b broadcast along dim 1 (channels of NCHW, features of [B, F], or dim 1 of any rank)."""
    inputs = ("x",)
    params = ("b",)
    examples = [({}, [TensorType((2, 3, 4, 5))], [TensorType((3,))]), ({}, [TensorType((4, 3))], [TensorType((3,))]),
                (dict(layout="hbwc"), [TensorType((2, 3, 4, 5))], [TensorType((3,))])]

    what = "bias"

    def infer(self, ins, ps):
        """A [C] parameter along dim 1 of x; y has x's type (one elementwise op)."""
        (x,), (b,) = ins, ps
        if x.rank < 2 or b.dims != (x.dims[1],):
            raise ShapeError(f"{self.what} of shape {b.shape_str()} does not match {x.shape_str()}")
        return x, x.size

    def saved(self, ins, ps, out):
        return []

    def layouts(self, ins, ps):
        return ("nchw", "hbwc") if ins[0].rank == 4 else ("nchw",)

    def context(self, ins, ps, out):
        x = ins[0]
        c = Axes(self.layout).pos("c") if x.rank == 4 else 1       # channels' axis (lmc/graph/layout.py)
        return {"cdim": f"[{c}]", "other_dims": [d for d in range(x.rank) if d != c]}

    @staticmethod
    def reference(xp, x, b):
        return x + b.reshape((1, -1) + (1,) * (x.ndim - 2))

    def onnx(self, b, ins, ps, st):
        return b.op("Add", ins[0], b.channel(ps[0], b.ins[0].rank))


@primitive("add")
class Add(Elementwise):
    """y = a + b (a residual join).  bwd sends dy to both."""
    inputs = ("a", "b_in")
    params = ()
    n_inputs = 2
    examples = [({}, [TensorType((2, 3, 4, 4)), TensorType((2, 3, 4, 4))], []),
                (dict(layout="hbwc"), [TensorType((2, 3, 4, 5)), TensorType((2, 3, 4, 5))], [])]

    def infer(self, ins, ps):
        a, b = ins
        if a.dims != b.dims:
            raise ShapeError(f"cannot add {a.shape_str()} and {b.shape_str()}")
        return a, a.size

    def saved(self, ins, ps, out):
        return []

    @staticmethod
    def reference(xp, a, b):
        return a + b

    def onnx(self, b, ins, ps, st):
        return b.op("Add", *ins)


@primitive("reshape")
class Reshape(Prim):
    """y = reshape(x) to `dims` (row-major; flatten is [B, C·H·W])."""
    inputs = ("x",)
    params = ()
    examples = [(dict(dims=(2, 60)), [TensorType((2, 3, 4, 5))], [])]

    def infer(self, ins, ps):
        (x,) = ins
        out = TensorType(tuple(self.dims))
        if out.size != x.size:
            raise ShapeError(f"cannot reshape {x.shape_str()} to {out.shape_str()}")
        return out, 0

    def saved(self, ins, ps, out):
        return []

    @staticmethod
    def reference(xp, x, dims):
        return x.reshape(dims)

    def onnx(self, b, ins, ps, st):
        return b.op("Reshape", ins[0], b.shape(b.sym("dims")))


@primitive("global_avg_pool")
class GlobalAvgPool(Prim):
    """y[b, c] = mean over H, W of x[b, c, :, :]."""
    inputs = ("x",)
    params = ()
    examples = [({}, [TensorType((2, 3, 4, 5))], []), (dict(layout="hbwc"), [TensorType((2, 3, 4, 5))], [])]

    def infer(self, ins, ps):
        (x,) = ins
        if x.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.shape_str()}")
        return TensorType(x.dims[:2]), x.size

    def saved(self, ins, ps, out):
        return []

    def layouts(self, ins, ps):
        return ("nchw", "hbwc")

    def context(self, ins, ps, out):
        h, w = self.logical(ins[0]).dims[2:]
        ax = Axes(self.layout)
        return {"inv_hw": flt(1.0 / (h * w)), "hw": f"[{ax.pos('h')}, {ax.pos('w')}]",
                "bc": f"[{ax.pos('b')}, {ax.pos('c')}]"}

    @staticmethod
    def reference(xp, x):
        return x.mean(axis=(2, 3))

    def onnx(self, b, ins, ps, st):
        return b.op("Flatten", b.op("GlobalAveragePool", ins[0]), axis=1)
