"""max_pool: window max with −∞ padding: XLA-SAME geometry by default (output ceil(in/stride),
the extra row/col on the high side), or an explicit pad = (h_lo, h_hi, w_lo, w_hi) (symmetric
nets: (k−1)//2 on both sides, as nn.MaxPool2d(k, s, (k−1)//2)).  Any size/stride, overlapping
windows included."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import ShapeError
from lmc.prims.axes import Axes
from lmc.core.types import TensorType
from lmc.prims import Prim, conv_out, primitive, same_pad


def _t(*d):
    return TensorType(tuple(d))


@primitive("max_pool")
class MaxPool(Prim):
    """y = max over each size×size window (stride s, −∞ padding: SAME, or `pad` when given).
    Saves x and y.
    Backward without select_and_scatter (IREE 3.13 cannot lower it); ties go to the first
    maximal position of the window in row-major order.
    - Windows tiling the input exactly (size = stride dividing H and W, the common 2×2/2): x as
      [B, C, oh, s, ow, s], y = max over the window dims; dx = dy at the first maximal position
      (one reduction, one select; 5.5× faster backward than per-offset pads at 128×32×28×28).
    - Otherwise (overlapping, padded): idx = the first maximal offset of each window; the padded
      input seen as s×s tiles, where a window's offset (t·s + r, t'·s + r') lands in tile
      (oh + t, ow + t') at (r, r'), so dx is one select-sum over the ⌈k/s⌉² tile shifts of idx
      and dy (2× faster backward than per-offset interior pads for ResNet's 3×3/2).  The forward
      is a reduce_window, except at stride 1 (the inception 3×3/1 branch pool): the elementwise
      max of the k² offset slices, the same windows (exact), because IREE 3.13's llvm-cpu fused
      GoogLeNet's stride-1 reduce_window into a dispatch needing 3 MiB of stack (its limit is
      32 KiB), and the slices fuse as plain elementwise work."""
    inputs = ("x",)
    params = ()
    examples = [(dict(size=2, stride=2), [_t(2, 3, 6, 6)], []),
                (dict(size=3, stride=2), [_t(2, 2, 7, 7)], []),
                (dict(size=3, stride=2), [_t(1, 2, 8, 8)], []),
                (dict(size=2, stride=2), [_t(2, 2, 5, 5)], []),
                (dict(size=3, stride=1), [_t(1, 2, 4, 5)], []),
                (dict(size=3, stride=2, pad=(1, 1, 1, 1)), [_t(2, 2, 8, 8)], []),      # torchvision's stem pool
                (dict(size=3, stride=2, pad=(1, 1, 1, 1)), [_t(1, 2, 7, 6)], []),
                (dict(size=2, stride=2, pad=(0, 0, 0, 0)), [_t(1, 2, 5, 5)], []),     # last row/col unread
                (dict(size=3, stride=1, pad=(1, 1, 1, 1)), [_t(2, 2, 2, 2)], []),     # window larger than the map
                # the HBWC form (lmc/graph/layout.py): tiled, general strided/padded, stride 1
                (dict(size=2, stride=2, layout="hbwc"), [_t(2, 3, 6, 4)], []),
                (dict(size=3, stride=2, pad=(1, 1, 1, 1), layout="hbwc"), [_t(2, 3, 7, 6)], []),
                (dict(size=3, stride=2, layout="hbwc"), [_t(1, 2, 8, 7)], []),
                (dict(size=3, stride=1, layout="hbwc"), [_t(2, 3, 4, 5)], [])]

    def __init__(self, pad=None, **attrs):
        # pad=None: SAME (the attrs, hence the symbols, of SAME pools as before `pad` existed)
        if pad is None:
            super().__init__(**attrs)
        else:
            super().__init__(pad=tuple(pad), **attrs)
        self.pad = None if pad is None else tuple(pad)

    def pads(self, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """(lo, hi) along H and along W."""
        if self.pad is None:
            return same_pad(h, self.size, self.stride), same_pad(w, self.size, self.stride)
        return tuple(self.pad[:2]), tuple(self.pad[2:])

    def onnx(self, b, ins, ps, st):
        h, w = b.ins[0].dims[2:]
        (ph0, ph1), (pw0, pw1) = self.pads(h, w)
        return b.op("MaxPool", ins[0], kernel_shape=[self.size] * 2, strides=[self.stride] * 2,
                    pads=[ph0, pw0, ph1, pw1])

    def infer(self, ins, ps):
        (x,) = ins
        if x.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.shape_str()}")
        b, c, h, w = x.dims
        k, s = self.size, self.stride
        if self.pad is None and (k > h or k > w):
            raise ShapeError(f"a {k}x{k} pooling window is larger than the {h}x{w} input")
        (ph0, ph1), (pw0, pw1) = self.pads(h, w)
        oh, ow = conv_out(h, k, s, ph0, ph1), conv_out(w, k, s, pw0, pw1)
        # a pad of k or more would give windows of padding only (−∞)
        if oh <= 0 or ow <= 0 or max(ph0, ph1, pw0, pw1) >= k:
            raise ShapeError(f"a {k}x{k} window padded {[ph0, ph1, pw0, pw1]} does not fit a {h}x{w} input")
        return _t(b, c, oh, ow), b * c * oh * ow * k * k

    def saved(self, ins, ps, out):
        return [ins[0], out]

    def layouts(self, ins, ps):
        return ("nchw", "hbwc")

    def context(self, ins, ps, out):
        b, c, h, w = self.logical(ins[0]).dims
        _, _, oh, ow = self.logical(out).dims
        k, s = self.size, self.stride
        ph, pw = self.pads(h, w)
        ax = Axes(self.layout)               # where b, c, h, w sit (lmc/graph/layout.py)

        def t(dtype="f32", **size):
            return TensorType(ax.dims(**size), dtype).mlir

        def split(dtype="f32", **size):      # the 6-D view: h → (h, s), w → (w, s)
            dims, pos = ax.split(s=s, **size)
            return TensorType(dims, dtype).mlir, pos

        iy = t("i32", b=b, c=c, h=oh, w=ow)
        # windows that tile the input exactly: the reshape form (no pads, one reduction)
        if k == s and ph == (0, 0) and pw == (0, 0) and h % s == 0 and w % s == 0:
            x6, pos = split(b=b, c=c, h=oh, w=ow)
            return {"tiled": True, "k": k, "s": s, "x6": x6, "i6": split("i32", b=b, c=c, h=oh, w=ow)[0],
                    "m6": split("i1", b=b, c=c, h=oh, w=ow)[0], "iy": iy, "kept": ax.kept(pos),
                    "hs": pos["hs"], "ws": pos["ws"], "wdims": f"[{pos['hs']}, {pos['ws']}]"}
        # general: the padded input as s×s tiles; a window spans tn tiles per axis
        tn = -(-k // s)
        # tiles covering every window and every input row/col (rows no window reads included)
        th, tw = max(oh + tn - 1, -(-(h + ph[0]) // s)), max(ow + tn - 1, -(-(w + pw[0]) // s))
        kw = tn * s                                # offset code i·kw + j: row-major, no aliasing
        offsets = [dict(n=f"{i}_{j}", q=i * kw + j,
                        limits=ax.slice(b, c, (i, i + (oh - 1) * s + 1, s), (j, j + (ow - 1) * s + 1, s)))
                   for i in range(k) for j in range(k)]
        shifts = [dict(n=f"{a}_{e}", low=ax.vec(h=a, w=e), high=ax.vec(h=th - oh - a, w=tw - ow - e),
                       rh0=a * s, rw0=e * s) for a in range(tn) for e in range(tn)]
        x6, pos = split(b=b, c=c, h=th, w=tw)
        return {"tiled": False, "slices": s == 1, "k": k, "s": s, "kw": kw, "nidx": kw * kw, "offsets": offsets, "shifts": shifts,
                "xp": t(b=b, c=c, h=h + sum(ph), w=w + sum(pw)),
                "low": ax.vec(h=ph[0], w=pw[0]), "high": ax.vec(h=ph[1], w=pw[1]),
                "high_t": ax.vec(h=th * s - h - ph[0], w=tw * s - w - pw[0]), "xpt": t(b=b, c=c, h=th * s, w=tw * s),
                "unpad": ax.slice(b, c, (ph[0], ph[0] + h), (pw[0], pw[0] + w)),
                "win": ax.vec(b=1, c=1, h=k, w=k)[1:-1], "wstrides": ax.vec(b=1, c=1, h=s, w=s)[1:-1],
                "iy": iy, "yt": t(b=b, c=c, h=th, w=tw), "iyt": t("i32", b=b, c=c, h=th, w=tw), "x6": x6,
                "i6": split("i32", b=b, c=c, h=th, w=tw)[0], "m6": split("i1", b=b, c=c, h=th, w=tw)[0],
                "kept": ax.kept(pos), "hs": pos["hs"], "ws": pos["ws"]}

    def draw(self, rng, t, is_input):
        """Inputs: distinct values 4/size apart, so every window has a unique maximum and a
        ±ε·t step never reorders one (the template takes the first maximum, the reference
        any; ties are pinned down in test_max_pool_ties.py)."""
        if not is_input:
            return super().draw(rng, t, is_input)
        x = (rng.permutation(t.size) - t.size / 2) * (4.0 / t.size)
        return x.reshape(t.dims).astype(np.float32)

    @staticmethod
    def reference(xp, x, size, stride, pad=None):
        b, c, h, w = x.shape
        if pad is None:
            ph, pw = same_pad(h, size, stride), same_pad(w, size, stride)
        else:
            ph, pw = tuple(pad[:2]), tuple(pad[2:])
        xpd = xp.pad(x, ((0, 0), (0, 0), ph, pw), constant_values=-xp.inf)
        oh, ow = (h + sum(ph) - size) // stride + 1, (w + sum(pw) - size) // stride + 1
        wins = [xpd[:, :, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
                for i in range(size) for j in range(size)]
        return xp.max(xp.stack(wins), axis=0)

