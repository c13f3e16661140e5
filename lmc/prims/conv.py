"""conv: 2-D convolution, NCHW input, OIHW kernel [O, C/groups, kh, kw], no bias.
Padding (lo, hi) per spatial dim is decided by the layer (XLA-SAME, symmetric or valid) and
passed in; this primitive only checks that the output is non-empty."""
from __future__ import annotations

from ..errors import ShapeError
from ..types import TensorType
from . import Prim, conv_out, primitive


def _t(*d):
    return TensorType(tuple(d))


@primitive("conv")
class Conv(Prim):
    """y = conv(x, w; stride, pad=(ph_lo, ph_hi, pw_lo, pw_hi), groups).  Saves x.
    dx: conv of dy (lhs-dilated by the stride) with the reversed, I/O-swapped kernel.
    dw: the "transpose trick" — x and dy with batch and feature swapped, dy as the kernel
    (rhs-dilated by the stride), batch_group_count = groups; only standard dimension numbers,
    because IREE mis-lowers the ones JAX's autodiff emits (../shared/reference/iree.md §3.2)."""
    inputs = ("x",)
    params = ("w",)
    examples = [
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1), [_t(2, 3, 5, 5)], [_t(4, 3, 3, 3)]),
        (dict(stride=2, pad=(0, 1, 0, 1), groups=1), [_t(2, 3, 6, 6)], [_t(4, 3, 3, 3)]),   # xla_same, even
        (dict(stride=2, pad=(1, 1, 1, 1), groups=1), [_t(1, 2, 6, 6)], [_t(3, 2, 3, 3)]),   # symmetric, even
        (dict(stride=2, pad=(1, 1, 1, 1), groups=1), [_t(2, 2, 7, 7)], [_t(3, 2, 3, 3)]),   # odd input
        (dict(stride=2, pad=(0, 0, 0, 0), groups=1), [_t(2, 3, 6, 6)], [_t(4, 3, 1, 1)]),   # strided 1x1
        (dict(stride=1, pad=(0, 0, 0, 0), groups=1), [_t(2, 3, 6, 5)], [_t(2, 3, 3, 2)]),   # valid, non-square
        (dict(stride=2, pad=(1, 1, 1, 1), groups=4), [_t(2, 4, 6, 6)], [_t(4, 1, 3, 3)]),   # depthwise
        (dict(stride=1, pad=(2, 2, 2, 2), groups=2), [_t(1, 4, 5, 5)], [_t(6, 2, 5, 5)]),   # grouped
        (dict(stride=4, pad=(0, 0, 0, 0), groups=1), [_t(2, 3, 8, 8)], [_t(5, 3, 4, 4)]),   # patchify
    ]

    def infer(self, ins, ps):
        (x,), (w,) = ins, ps
        if x.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.shape_str()}")
        b, c, h, wd = x.dims
        o, ci, kh, kw = w.dims
        g = self.groups
        if c != ci * g or o % g:
            raise ShapeError(f"the kernel expects {ci * g} input channels but the input has {c}")
        ph0, ph1, pw0, pw1 = self.pad
        oh, ow = conv_out(h, kh, self.stride, ph0, ph1), conv_out(wd, kw, self.stride, pw0, pw1)
        if oh <= 0 or ow <= 0:
            raise ShapeError(f"a {kh}x{kw} kernel does not fit a {h}x{wd} input (output would be {oh}x{ow})")
        return _t(b, o, oh, ow), 2 * b * o * oh * ow * ci * kh * kw

    def context(self, ins, ps, out):
        (x,), (w,) = ins, ps
        b, c, h, wd = x.dims
        o, ci, kh, kw = w.dims
        _, _, oh, ow = out.dims
        s, g = self.stride, self.groups
        ph0, ph1, pw0, pw1 = self.pad
        # rows of the padded input the last window never reaches (the stride does not divide)
        rh = (h + ph0 + ph1 - kh) % s
        rw = (wd + pw0 + pw1 - kw) % s
        ctx = {
            "s": s, "g": g,
            "pad": f"[[{ph0}, {ph1}], [{pw0}, {pw1}]]",
            # dx = conv(dy dilated by s, reversed kernel): padding k-1-lo, k-1-hi+r
            "dx_pad": f"[[{kh - 1 - ph0}, {kh - 1 - ph1 + rh}], [{kw - 1 - pw0}, {kw - 1 - pw1 + rw}]]",
            "wt": _t(c, o // g, kh, kw).mlir,
            "wg": _t(g, o // g, ci, kh, kw).mlir,
            "wgt": _t(g, ci, o // g, kh, kw).mlir,
            "xt": _t(c, b, h, wd).mlir,
            "dyt": _t(o, b, oh, ow).mlir,
            "dwt": _t(ci, o, kh, kw).mlir,
        }
        # dw: the hi padding that makes the output exactly k: hi - r; crop the input when negative
        eh, ew = ph1 - rh, pw1 - rw
        ctx["crop"] = eh < 0 or ew < 0
        ctx["xc"] = _t(c, b, h + min(eh, 0), wd + min(ew, 0)).mlir
        ctx["crop_limits"] = f"[0:{c}, 0:{b}, 0:{h + min(eh, 0)}, 0:{wd + min(ew, 0)}]"
        ctx["dw_pad"] = f"[[{ph0}, {max(eh, 0)}], [{pw0}, {max(ew, 0)}]]"
        return ctx

    @staticmethod
    def reference(xp, x, w, stride, pad, groups):
        """Direct convolution as a sum over kernel offsets of strided slices (float64)."""
        ph0, ph1, pw0, pw1 = pad
        xpd = xp.pad(x, ((0, 0), (0, 0), (ph0, ph1), (pw0, pw1)))
        b, c, h, wd = xpd.shape
        o, ci, kh, kw = w.shape
        oh = (h - kh) // stride + 1
        ow = (wd - kw) // stride + 1
        xg = xpd.reshape(b, groups, ci, h, wd)
        wg = w.reshape(groups, o // groups, ci, kh, kw)
        y = 0.0
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, :, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
                y = y + xp.einsum("bgchw,goc->bgohw", patch, wg[:, :, :, i, j])
        return y.reshape(b, o, oh, ow)
