"""max_pool: window max with XLA-SAME geometry (output ceil(in/stride), −∞ padding with the
extra row/col on the high side).  Any size/stride, overlapping windows included."""
from __future__ import annotations

from ..errors import ShapeError
from ..types import TensorType
from . import Prim, primitive, same_pad


def _t(*d):
    return TensorType(tuple(d))


@primitive("max_pool")
class MaxPool(Prim):
    """y = max over each size×size window (stride s, −∞ SAME padding).  Saves x and y.
    Windows that tile the input exactly (size = stride dividing H and W, the common 2×2/2) use
    a reshape to [B, C, oh, s, ow, s]: a max over the window dims and, backward, one select of
    dy at the first maximal position (5× faster backward than the general form at 128×32×28×28).
    General bwd without select_and_scatter (IREE 3.13 cannot lower it): for each window offset (i, j),
    mask = (x at that offset == y) and no earlier offset of the window matched (first-max tie
    breaking); the selected dy is put back at its input positions with an interior-padded
    `pad` (stride s − 1) and summed over offsets."""
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
        hp, wp = h + sum(ph), w + sum(pw)
        offsets = []
        for i in range(k):
            for j in range(k):
                offsets.append(dict(
                    n=f"{i}_{j}",
                    limits=f"[0:{b}, 0:{c}, {i}:{i + (oh - 1) * s + 1}:{s}, {j}:{j + (ow - 1) * s + 1}:{s}]",
                    low=f"[0, 0, {i}, {j}]",
                    high=f"[0, 0, {hp - i - (oh - 1) * s - 1}, {wp - j - (ow - 1) * s - 1}]",
                ))
        # windows that tile the input exactly: the reshape form (no pads, one reduction)
        tiled = k == s and ph == (0, 0) and pw == (0, 0) and h % s == 0 and w % s == 0
        return {"tiled": tiled, "x6": _t(b, c, oh, s, ow, s).mlir, "m6": TensorType((b, c, oh, s, ow, s), "i1").mlir,
                "i6": TensorType((b, c, oh, s, ow, s), "i32").mlir, "iy": TensorType((b, c, oh, ow), "i32").mlir,
                "k": k, "s": s, "xp": _t(b, c, hp, wp).mlir, "mask": _t(b, c, oh, ow).with_dims((b, c, oh, ow)).mlir.replace("f32", "i1"),
                "low": f"[0, 0, {ph[0]}, {pw[0]}]", "high": f"[0, 0, {ph[1]}, {pw[1]}]",
                "interior": f"[0, 0, {s - 1}, {s - 1}]",
                "unpad": f"[0:{b}, 0:{c}, {ph[0]}:{ph[0] + h}, {pw[0]}:{pw[0] + w}]",
                "offsets": offsets}

    @staticmethod
    def reference(xp, x, size, stride):
        b, c, h, w = x.shape
        ph, pw = same_pad(h, size, stride), same_pad(w, size, stride)
        xpd = xp.pad(x, ((0, 0), (0, 0), ph, pw), constant_values=-xp.inf)
        oh, ow = -(-h // stride), -(-w // stride)
        wins = [xpd[:, :, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
                for i in range(size) for j in range(size)]
        return xp.max(xp.stack(wins), axis=0)
