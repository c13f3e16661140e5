"""max_pool: window max with XLA-SAME geometry (output ceil(in/stride), −∞ padding with the
extra row/col on the high side).  Any size/stride, overlapping windows included."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..types import TensorType
from . import Prim, primitive, same_pad


def _t(*d):
    return TensorType(tuple(d))


@primitive("max_pool")
class MaxPool(Prim):
    """y = max over each size×size window (stride s, −∞ SAME padding).  Saves x and y.
    Backward without select_and_scatter (IREE 3.13 cannot lower it); ties go to the first
    maximal position of the window in row-major order.
    - Windows tiling the input exactly (size = stride dividing H and W, the common 2×2/2): x as
      [B, C, oh, s, ow, s], y = max over the window dims; dx = dy at the first maximal position
      (one reduction, one select; 5.5× faster backward than per-offset pads at 128×32×28×28).
    - Otherwise (overlapping, padded): idx = the first maximal offset of each window; the padded
      input seen as s×s tiles, where a window's offset (t·s + r, t'·s + r') lands in tile
      (oh + t, ow + t') at (r, r'), so dx is one select-sum over the ⌈k/s⌉² tile shifts of idx
      and dy (2× faster backward than per-offset interior pads for ResNet's 3×3/2)."""
    inputs = ("x",)
    params = ()
    examples = [(dict(size=2, stride=2), [_t(2, 3, 6, 6)], []),
                (dict(size=3, stride=2), [_t(2, 2, 7, 7)], []),
                (dict(size=3, stride=2), [_t(1, 2, 8, 8)], []),
                (dict(size=2, stride=2), [_t(2, 2, 5, 5)], []),
                (dict(size=3, stride=1), [_t(1, 2, 4, 5)], [])]

    def infer(self, ins, ps):
        (x,) = ins
        if x.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.shape_str()}")
        b, c, h, w = x.dims
        if self.size > h or self.size > w:
            raise ShapeError(f"a {self.size}x{self.size} pooling window is larger than the {h}x{w} input")
        oh, ow = -(-h // self.stride), -(-w // self.stride)
        return _t(b, c, oh, ow), b * c * oh * ow * self.size * self.size

    def saved(self, ins, ps, out):
        return [ins[0], out]

    def context(self, ins, ps, out):
        (x,) = ins
        b, c, h, w = x.dims
        _, _, oh, ow = out.dims
        k, s = self.size, self.stride
        ph, pw = same_pad(h, k, s), same_pad(w, k, s)
        # windows that tile the input exactly: the reshape form (no pads, one reduction)
        if k == s and ph == (0, 0) and pw == (0, 0) and h % s == 0 and w % s == 0:
            return {"tiled": True, "k": k, "s": s, "x6": _t(b, c, oh, s, ow, s).mlir,
                    "i6": TensorType((b, c, oh, s, ow, s), "i32").mlir,
                    "m6": TensorType((b, c, oh, s, ow, s), "i1").mlir, "iy": TensorType((b, c, oh, ow), "i32").mlir}
        # general: the padded input as s×s tiles; a window spans tn tiles per axis
        tn = -(-k // s)
        th, tw = oh + tn - 1, ow + tn - 1          # tiles covering every window
        kw = tn * s                                # offset code i·kw + j: row-major, no aliasing
        offsets = [dict(n=f"{i}_{j}", q=i * kw + j,
                        limits=f"[0:{b}, 0:{c}, {i}:{i + (oh - 1) * s + 1}:{s}, {j}:{j + (ow - 1) * s + 1}:{s}]")
                   for i in range(k) for j in range(k)]
        shifts = [dict(n=f"{a}_{e}", low=f"[0, 0, {a}, {e}]", high=f"[0, 0, {tn - 1 - a}, {tn - 1 - e}]",
                       rh0=a * s, rw0=e * s) for a in range(tn) for e in range(tn)]
        return {"tiled": False, "k": k, "s": s, "kw": kw, "nidx": kw * kw, "offsets": offsets, "shifts": shifts,
                "xp": _t(b, c, h + sum(ph), w + sum(pw)).mlir,
                "low": f"[0, 0, {ph[0]}, {pw[0]}]", "high": f"[0, 0, {ph[1]}, {pw[1]}]",
                "high_t": f"[0, 0, {th * s - h - ph[0]}, {tw * s - w - pw[0]}]", "xpt": _t(b, c, th * s, tw * s).mlir,
                "unpad": f"[0:{b}, 0:{c}, {ph[0]}:{ph[0] + h}, {pw[0]}:{pw[0] + w}]",
                "iy": TensorType((b, c, oh, ow), "i32").mlir, "yt": _t(b, c, th, tw).mlir,
                "iyt": TensorType((b, c, th, tw), "i32").mlir, "x6": _t(b, c, th, s, tw, s).mlir,
                "i6": TensorType((b, c, th, s, tw, s), "i32").mlir,
                "m6": TensorType((b, c, th, s, tw, s), "i1").mlir}

    def draw(self, rng, t, is_input):
        """Inputs: distinct values 4/size apart, so every window has a unique maximum and a
        ±ε·t step never reorders one (the template takes the first maximum, the reference
        any; ties are pinned down in test_max_pool_ties.py)."""
        if not is_input:
            return super().draw(rng, t, is_input)
        x = (rng.permutation(t.size) - t.size / 2) * (4.0 / t.size)
        return x.reshape(t.dims).astype(np.float32)

    @staticmethod
    def reference(xp, x, size, stride):
        b, c, h, w = x.shape
        ph, pw = same_pad(h, size, stride), same_pad(w, size, stride)
        xpd = xp.pad(x, ((0, 0), (0, 0), ph, pw), constant_values=-xp.inf)
        oh, ow = -(-h // stride), -(-w // stride)
        wins = [xpd[:, :, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
                for i in range(size) for j in range(size)]
        return xp.max(xp.stack(wins), axis=0)
