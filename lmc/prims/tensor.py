"""Tensor primitives: concat, slice, broadcast, mul (broadcasting) and upsample (bilinear)
lower; transpose, scale, channel_matmul, linear and roll are declared (shape rule, FLOPs,
float64 reference; no template yet): layers built from them are counted by `lmc info` and
refused by `lmc render` until each has its template."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType, flt
from lmc.prims import Prim, primitive
from lmc.prims.basic import Bias
from lmc.prims.dense import row_split


@primitive("concat")
class Concat(Prim):
    """y = [x0, x1, …] joined along `axis` (any number of inputs, any axis: channels of a
    feature map, a class token prepended to [B, T, D] on axis 1).  Saves nothing.
    bwd: dx_i = dy[offset_i : offset_i + n_i] along the axis."""
    inputs = tuple(f"x{i}" for i in range(16))      # names for the tests; any number is taken
    params = ()
    n_inputs = 2
    examples = [
        (dict(axis=1), [TensorType((2, 3, 4, 4)), TensorType((2, 5, 4, 4))], []),
        (dict(axis=1), [TensorType((2, 1, 4)), TensorType((2, 6, 4))], []),      # a class token on [B, T, D]
        (dict(axis=2), [TensorType((2, 3, 2)), TensorType((2, 3, 4)), TensorType((2, 3, 1))], []),
        (dict(axis=0), [TensorType((1, 3)), TensorType((2, 3))], []),
    ]

    def infer(self, ins, ps):
        a = ins[0]
        ax = self.axis
        if not 0 <= ax < a.rank:
            raise ShapeError(f"cannot concatenate {a.shape_str()} along axis {ax}")
        for t in ins[1:]:
            if t.rank != a.rank or t.dims[:ax] + t.dims[ax + 1:] != a.dims[:ax] + a.dims[ax + 1:]:
                raise ShapeError(f"cannot concatenate {a.shape_str()} and {t.shape_str()} along axis {ax}")
        return TensorType(a.dims[:ax] + (sum(t.dims[ax] for t in ins),) + a.dims[ax + 1:]), 0

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        parts, off = [], 0
        for t in ins:
            n = t.dims[self.axis]
            lim = [f"{off}:{off + n}" if d == self.axis else f"0:{m}" for d, m in enumerate(out.dims)]
            parts.append(dict(t=t.mlir, limits="[" + ", ".join(lim) + "]"))
            off += n
        return {"parts": parts}

    @staticmethod
    def reference(xp, *args, axis):
        return xp.concatenate(args, axis=axis)

    def onnx(self, b, ins, ps, st):
        return b.op("Concat", *ins, axis=self.axis)


@primitive("transpose")
class Transpose(Prim):
    """y = x with its axes permuted: y.dims[i] = x.dims[perm[i]].  Saves nothing.
    bwd: dx = dy permuted back by the inverse permutation."""
    inputs = ("x",)
    params = ()
    examples = [(dict(perm=(0, 2, 3, 1)), [TensorType((2, 3, 4, 5))], []),
                (dict(perm=(0, 2, 1, 3)), [TensorType((2, 3, 4, 2))], []),
                (dict(perm=(0, 2, 1)), [TensorType((2, 3, 4))], [])]

    def infer(self, ins, ps):
        (x,) = ins
        if sorted(self.perm) != list(range(x.rank)):
            raise ShapeError(f"permutation {list(self.perm)} does not fit {x.shape_str()}")
        return TensorType(tuple(x.dims[p] for p in self.perm)), 0

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        inv = [0] * len(self.perm)
        for i, p in enumerate(self.perm):
            inv[p] = i
        return {"perm": list(self.perm), "inv": inv}

    @staticmethod
    def reference(xp, x, perm):
        return xp.transpose(x, perm)

    def onnx(self, b, ins, ps, st):
        return b.op("Transpose", ins[0], perm=list(self.perm))


def _bilinear_taps(n: int, s: int):
    """Source rows (i0, i1) and weight of i1 for each of the n·s outputs: half-pixel centres
    (align_corners = false), edges clamped — PyTorch's / jax.image.resize's bilinear."""
    src = np.clip((np.arange(n * s) + 0.5) / s - 0.5, 0.0, n - 1)
    i0 = np.floor(src).astype(int)
    i1 = np.minimum(i0 + 1, n - 1)
    return i0, i1, src - i0


def _interp_matrix(n: int, s: int) -> np.ndarray:
    """A [n·s, n]: row o holds output o's two bilinear weights (half-pixel centres, edges
    clamped), so resizing an axis is one matmul with a constant."""
    i0, i1, f = _bilinear_taps(n, s)
    a = np.zeros((n * s, n))
    np.add.at(a, (np.arange(n * s), i0), 1.0 - f)
    np.add.at(a, (np.arange(n * s), i1), f)
    return a


def _dense(a: np.ndarray) -> str:
    return "[" + ", ".join("[" + ", ".join(flt(v) for v in row) + "]" for row in a) + "]"


@primitive("upsample")
class Upsample(Prim):
    """Bilinear resize by an integer factor: [B, C, H, W] → [B, C, scale·H, scale·W], half-pixel
    centres (align_corners = false), edges clamped (PyTorch's / jax.image.resize's bilinear).
    FLOPs: 4 per output element (the seed's count).  Saves nothing.  The separable
    constant-matrix form: y = A_H · x · A_Wᵀ per image and channel (A_n [n·s, n], two nonzeros
    a row); dx = A_Hᵀ · dy · A_W."""
    inputs = ("x",)
    params = ()
    examples = [(dict(scale=2), [TensorType((2, 3, 4, 5))], []),
                (dict(scale=3), [TensorType((1, 2, 3, 2))], []),
                (dict(scale=2), [TensorType((2, 2, 1, 1))], [])]      # a 1x1 map: every output = it

    def infer(self, ins, ps):
        (x,) = ins
        if x.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.shape_str()}")
        b, c, h, w = x.dims
        out = TensorType((b, c, self.scale * h, self.scale * w))
        return out, 4 * out.size

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        b, c, h, w = ins[0].dims
        s = self.scale
        return {"ah": _dense(_interp_matrix(h, s)), "aw": _dense(_interp_matrix(w, s)),
                "ah_t": TensorType((s * h, h)).mlir, "aw_t": TensorType((s * w, w)).mlir,
                "xw": TensorType((b, c, h, s * w)).mlir, "yt": TensorType((b, c, s * w, s * h)).mlir,
                "dyw": TensorType((b, c, s * h, w)).mlir, "dxt": TensorType((b, c, w, h)).mlir}

    @staticmethod
    def reference(xp, x, scale):
        _, _, h, w = x.shape
        i0, i1, f = _bilinear_taps(h, scale)
        x = x[:, :, i0, :] * (1.0 - f)[:, None] + x[:, :, i1, :] * f[:, None]
        j0, j1, f = _bilinear_taps(w, scale)
        return x[:, :, :, j0] * (1.0 - f) + x[:, :, :, j1] * f

    def onnx(self, b, ins, ps, st):
        """The separable form with the same constant matrices: A_H · x · A_Wᵀ."""
        h, w = b.ins[0].dims[2:]
        y = b.op("MatMul", b.const(_interp_matrix(h, self.scale)), ins[0])
        return b.op("MatMul", y, b.const(_interp_matrix(w, self.scale).T))


@primitive("scale")
class Scale(Prim):
    """y = x · s broadcast along dim 1 (a per-channel scale, e.g. ConvNeXt's LayerScale).
    Saves x.  bwd: dx = dy·s, ds = Σ_{all dims but 1} dy·x."""
    inputs = ("x",)
    params = ("s",)
    examples = [({}, [TensorType((2, 3, 4, 5))], [TensorType((3,))]), ({}, [TensorType((4, 3))], [TensorType((3,))])]

    what = "scale"
    infer, context = Bias.infer, Bias.context        # the per-channel shape rule; saves x (Prim.saved)

    @staticmethod
    def reference(xp, x, s):
        return x * s.reshape((1, -1) + (1,) * (x.ndim - 2))

    def onnx(self, b, ins, ps, st):
        return b.op("Mul", ins[0], b.channel(ps[0], b.ins[0].rank))


@primitive("channel_matmul")
class ChannelMatmul(Prim):
    """y[b, o, …] = Σ_c w[o, c]·x[b, c, …]: a 1×1 convolution whose weight is stored [O, C].
    Saves x.  bwd: dx[b, c, …] = Σ_o w[o, c]·dy[b, o, …], dw[o, c] = Σ_{b, …} dy[b, o, …]·x[b, c, …]."""
    inputs = ("x",)
    params = ("w",)
    examples = [({}, [TensorType((2, 3, 4, 5))], [TensorType((6, 3))]), ({}, [TensorType((3, 4))], [TensorType((2, 4))])]

    def infer(self, ins, ps):
        (x,), (w,) = ins, ps
        if x.rank < 2 or w.rank != 2 or w.dims[1] != x.dims[1]:
            raise ShapeError(f"a [{', '.join(map(str, w.dims))}] channel matmul does not fit {x.shape_str()}")
        out = TensorType((x.dims[0], w.dims[0]) + x.dims[2:])
        return out, 2 * out.size * w.dims[1]

    def context(self, ins, ps, out):
        (x,), (w,) = ins, ps
        r = x.rank
        last = (x.dims[0],) + x.dims[2:] + (w.dims[0],)     # dot_general's [B, …, O]
        return {"yt": TensorType(last).mlir, "xt": TensorType(last[:-1] + (x.dims[1],)).mlir, "rest": [0] + list(range(2, r)),
                "to_y": [0, r - 1] + list(range(1, r - 1)), "to_last": [0] + list(range(2, r)) + [1]}

    @staticmethod
    def reference(xp, x, w):
        return xp.einsum("oc,bc...->bo...", w, x)

    def onnx(self, b, ins, ps, st):
        r = b.ins[0].rank
        wt = b.op("Transpose", ps[0], perm=[1, 0])
        if r == 2:
            return b.op("MatMul", ins[0], wt)
        to_last = [0] + list(range(2, r)) + [1]
        y = b.op("MatMul", b.op("Transpose", ins[0], perm=to_last), wt)
        return b.op("Transpose", y, perm=[0, r - 1] + list(range(1, r - 1)))


@primitive("linear")
class Linear(Prim):
    """y = x·w (+ b) over the last axis: x [..., K], w [K, N], b [N] → [..., N]
    (dense for token streams [B, T, K]).  FLOPs 2·rows·K·N (the bias is not counted).
    Saves x.  bwd: dx = dy·wᵀ, dw = Σ_rows xᵀ·dy, db = Σ_rows dy."""
    mixed_precision = True
    inputs = ("x",)
    params = ("w", "b")
    examples = [({}, [TensorType((2, 3, 4))], [TensorType((4, 5)), TensorType((5,))]),
                ({}, [TensorType((2, 3, 4))], [TensorType((4, 5))]),
                ({}, [TensorType((3, 4))], [TensorType((4, 2)), TensorType((2,))]),
                # 1,040 rows ≥ SPLIT_ROWS_MIN: dW summed over 4 chunks of 260 rows
                ({}, [TensorType((2, 520, 4))], [TensorType((4, 6)), TensorType((6,))])]

    def infer(self, ins, ps):
        x, w = ins[0], ps[0]
        if x.rank < 2 or x.dims[-1] != w.dims[0]:
            raise ShapeError(f"a [{w.dims[0]}, {w.dims[1]}] linear layer does not fit {x.shape_str()}")
        if len(ps) > 1 and ps[1].dims != (w.dims[1],):
            raise ShapeError(f"bias of shape {ps[1].shape_str()} does not match [{w.dims[1]}] outputs")
        return TensorType(x.dims[:-1] + (w.dims[1],)), 2 * (x.size // w.dims[0]) * w.dims[0] * w.dims[1]

    def context(self, ins, ps, out):
        x, (k, n) = ins[0], ps[0].dims
        r = x.rank
        return {"has_b": len(ps) > 1, "lead": list(range(r - 1)), "k_ax": r - 1,
                "dw_split": row_split(x.size // k, k, n)}

    @staticmethod
    def reference(xp, x, w, b=None):
        return x @ w if b is None else x @ w + b

    def onnx(self, b, ins, ps, st):
        y = b.op("MatMul", ins[0], ps[0])
        return y if len(ps) == 1 else b.op("Add", y, ps[1])


@primitive("slice")
class Slice(Prim):
    """y = x[start₀:limit₀, start₁:limit₁, …] (every axis given, unit strides): a branch of a
    channel split, token 0, the last input channel.  Saves nothing.
    bwd: dx = dy padded back with zeros (low = start, high = dims − limit)."""
    inputs = ("x",)
    params = ()
    examples = [
        (dict(start=(0, 2, 0, 0), limit=(2, 5, 3, 3)), [TensorType((2, 6, 3, 3))], []),   # channels
        (dict(start=(0, 0, 0), limit=(2, 1, 4)), [TensorType((2, 5, 4))], []),            # token 0
        (dict(start=(1, 1, 2), limit=(3, 4, 4)), [TensorType((3, 5, 4))], []),            # every axis
    ]

    def infer(self, ins, ps):
        (x,) = ins
        if len(self.start) != x.rank or len(self.limit) != x.rank or any(
                not 0 <= a < b <= n for a, b, n in zip(self.start, self.limit, x.dims)):
            raise ShapeError(f"slice {list(self.start)}:{list(self.limit)} does not fit {x.shape_str()}")
        return TensorType(tuple(b - a for a, b in zip(self.start, self.limit))), 0

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        (x,) = ins
        return {"limits": "[" + ", ".join(f"{a}:{b}" for a, b in zip(self.start, self.limit)) + "]",
                "low": list(self.start), "high": [n - b for n, b in zip(x.dims, self.limit)],
                "interior": [0] * x.rank}

    @staticmethod
    def reference(xp, x, start, limit):
        return x[tuple(slice(a, b) for a, b in zip(start, limit))]

    def onnx(self, b, ins, ps, st):
        axes = list(range(len(self.start)))
        return b.op("Slice", ins[0], b.shape(b.sym("start")), b.shape(b.sym("limit")), b.ints(axes))


def _broadcast(a: TensorType, out: TensorType) -> dict:
    """How `a` broadcasts to `out` (NumPy rules): broadcast_in_dim's dims (a's axes onto out's
    trailing ones), the axes of out a gradient sums over (the leading ones and those where a has
    size 1 but out does not), and the type of that sum before it is reshaped to a."""
    lead = out.rank - a.rank
    axes = list(range(lead)) + [lead + i for i, n in enumerate(a.dims) if n == 1 and out.dims[lead + i] != 1]
    kept = TensorType(tuple(m for d, m in enumerate(out.dims) if d not in axes))
    return {"bdims": list(range(lead, out.rank)), "axes": axes, "kept": kept.mlir,
            "same": a.dims == out.dims}


@primitive("broadcast")
class Broadcast(Prim):
    """y = a broadcast to `dims` (NumPy rules: trailing axes aligned, size-1 axes stretched).
    `a` is the input, or a parameter used as a value (a class token, a position table, learned
    queries).  Saves nothing.  bwd: da = dy summed over the broadcast axes, reshaped to a."""
    inputs = ("a",)
    params = ()
    examples = [
        (dict(dims=(2, 3, 4, 4)), [TensorType((2, 3, 1, 1))], []),        # a pooled map back to H, W
        (dict(dims=(2, 1, 5)), [], [TensorType((5,))]),                  # a parameter: the class token
        (dict(dims=(2, 4, 3)), [], [TensorType((4, 3))]),                # learned queries / positions
        (dict(dims=(3, 2, 4)), [TensorType((3, 1, 4))], []),             # a middle axis
    ]

    def infer(self, ins, ps):
        (a,) = list(ins) + list(ps)
        dims = tuple(self.dims)
        lead = len(dims) - a.rank
        if lead < 0 or any(n not in (1, m) for n, m in zip(a.dims, dims[lead:])):
            raise ShapeError(f"cannot broadcast {a.shape_str()} to {TensorType(dims).shape_str()}")
        return TensorType(dims), 0

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        (a,) = list(ins) + list(ps)
        # a parameter reaches bwd as an argument (bwd(dy, saved..., params...)), unused
        return {"a": a.mlir, "is_param": bool(ps), **_broadcast(a, out)}

    @staticmethod
    def reference(xp, a, dims):
        return xp.broadcast_to(a, tuple(dims))

    def onnx(self, b, ins, ps, st):
        return b.op("Expand", (list(ins) + list(ps))[0], b.shape(b.sym("dims")))


@primitive("mul")
class Mul(Prim):
    """y = a · b elementwise, b broadcast to a's shape (NumPy rules): a gate [B, C, 1, 1] on a
    feature map, a sigmoid gate on its tanh twin.  Saves a and b.
    bwd: da = dy·b,  db = Σ_broadcast axes dy·a (reshaped to b)."""
    inputs = ("a", "b_in")
    params = ()
    n_inputs = 2
    examples = [
        ({}, [TensorType((2, 3, 4, 4)), TensorType((2, 3, 4, 4))], []),   # same shape
        ({}, [TensorType((2, 3, 4, 4)), TensorType((2, 3, 1, 1))], []),   # squeeze-excite gate
        (dict(layout="hbwc"), [TensorType((2, 3, 4, 5)), TensorType((2, 3, 1, 1))], []),   # the gate, HBWC
        ({}, [TensorType((2, 5, 4)), TensorType((4,))], []),              # leading axes
        ({}, [TensorType((2, 5, 4)), TensorType((5, 1))], []),            # both kinds
    ]

    def layouts(self, ins, ps):
        """Both 4-D: the NumPy broadcast of b onto a holds axis by axis in either layout (a
        gate [B, C, 1, 1] is [1, B, 1, C] in HBWC); a lower-rank b aligns with NCHW's trailing axes."""
        return ("nchw", "hbwc") if all(t.rank == 4 for t in ins) else ("nchw",)

    def infer(self, ins, ps):
        a, b = ins
        lead = a.rank - b.rank
        if lead < 0 or any(n not in (1, m) for n, m in zip(b.dims, a.dims[lead:])):
            raise ShapeError(f"cannot multiply {a.shape_str()} by {b.shape_str()}")
        return a, a.size

    def context(self, ins, ps, out):
        return _broadcast(ins[1], out)

    @staticmethod
    def reference(xp, a, b):
        return a * b

    def onnx(self, b, ins, ps, st):
        return b.op("Mul", *ins)


@primitive("roll")
class Roll(Prim):
    """y = x cyclically shifted by `shifts` along `axes` (Swin's shifted windows):
    y[(i + s) mod n] = x[i], i.e. y = [x[n−s:], x[:n−s]] on each axis.  Saves nothing.
    bwd: dy rolled back (by −s)."""
    inputs = ("x",)
    params = ()
    examples = [(dict(shifts=(-1, -1), axes=(1, 2)), [TensorType((2, 4, 4, 3))], []),
                (dict(shifts=(2, 5), axes=(1, 2)), [TensorType((1, 3, 4, 2))], [])]

    def infer(self, ins, ps):
        (x,) = ins
        if any(not 0 <= a < x.rank for a in self.axes) or len(self.axes) != len(self.shifts):
            raise ShapeError(f"roll axes {list(self.axes)} do not fit {x.shape_str()}")
        return x, 0

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        (x,) = ins

        def steps(sign):
            """Each axis's roll as a concatenation of two slices, the second starting at 0."""
            out = []
            for s, a in zip(self.shifts, self.axes):
                n = x.dims[a]
                p = (n - sign * s) % n            # y = [x[p:], x[:p]] along a
                if p == 0:
                    continue
                rng = lambda lo, hi: ", ".join(f"{lo}:{hi}" if i == a else f"0:{d}" for i, d in enumerate(x.dims))  # noqa: E731
                head = x.with_dims(tuple(n - p if i == a else d for i, d in enumerate(x.dims)))
                tail = x.with_dims(tuple(p if i == a else d for i, d in enumerate(x.dims)))
                out.append({"axis": a, "hi": rng(p, n), "lo": rng(0, p), "head": head.mlir, "tail": tail.mlir})
            return out
        return {"fwd_steps": steps(1), "bwd_steps": steps(-1)}

    @staticmethod
    def reference(xp, x, shifts, axes):
        return xp.roll(x, tuple(shifts), axis=tuple(axes))

    def onnx(self, b, ins, ps, st):
        """Each axis's roll as the concatenation of two slices: y = [x[n−s:], x[:n−s]]."""
        y = ins[0]
        big = 2 ** 62
        for s, a in zip(self.shifts, self.axes):
            n = b.ins[0].dims[a]
            p = (n - s) % n
            if p:
                hi = b.op("Slice", y, b.ints([p]), b.ints([big]), b.ints([a]))
                lo = b.op("Slice", y, b.ints([0]), b.ints([p]), b.ints([a]))
                y = b.op("Concat", hi, lo, axis=a)
        return y
