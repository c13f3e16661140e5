"""Declared primitives (shape rule, FLOPs, float64 reference; no template yet) for the CNN
bestiary: dilated_conv (atrous), conv1d (1-D, dilated, causal by its padding), avg_pool,
window_max (a max pool of any window, for inputs smaller than it), leaky_relu and tanh."""
from __future__ import annotations

from ..errors import ShapeError
from ..types import TensorType
from . import Prim, conv_out, primitive
from .conv import Conv


def _pool_out(x, size, stride, pad):
    if x.rank != 4:
        raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.shape_str()}")
    b, c, h, w = x.dims
    ph0, ph1, pw0, pw1 = pad
    oh, ow = conv_out(h, size, stride, ph0, ph1), conv_out(w, size, stride, pw0, pw1)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"a {size}x{size} window does not fit a {h}x{w} input (output would be {oh}x{ow})")
    return TensorType((b, c, oh, ow))


def _windows(xp, x, size, stride, pad, fill):
    ph0, ph1, pw0, pw1 = pad
    xpd = xp.pad(x, ((0, 0), (0, 0), (ph0, ph1), (pw0, pw1)), constant_values=fill)
    oh = (xpd.shape[2] - size) // stride + 1
    ow = (xpd.shape[3] - size) // stride + 1
    return [xpd[:, :, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
            for i in range(size) for j in range(size)]


@primitive("dilated_conv")
class DilatedConv(Conv):
    """conv with the kernel taps `dilation` apart (atrous; effective size (k−1)·d + 1), stride,
    pad, groups as `conv`.  FLOPs 2·B·O·oh·ow·(C/groups)·kh·kw, as `conv`."""
    examples = []

    @property
    def tap_spacing(self) -> int:
        return self.dilation

    def saved(self, ins, ps, out):
        return list(ins)

    def context(self, ins, ps, out):
        return {}

    @staticmethod
    def reference(xp, x, w, stride, pad, groups, dilation):
        o, ci, kh, kw = w.shape
        wd = xp.zeros((o, ci, (kh - 1) * dilation + 1, (kw - 1) * dilation + 1))
        if hasattr(wd, "at"):
            wd = wd.at[:, :, ::dilation, ::dilation].set(w)
        else:
            wd[:, :, ::dilation, ::dilation] = w
        return Conv.reference(xp, x, wd, stride, pad, groups)


@primitive("conv1d")
class Conv1d(Prim):
    """1-D convolution of [B, C, T]: w [O, C/groups, K], taps `dilation` apart, padding
    (lo, hi) on T (lo = (K−1)·d, hi = 0: causal), or w [C, K] for a depthwise conv (groups = C).
    FLOPs 2·B·O·T_out·(C/groups)·K."""
    inputs = ("x",)
    params = ("w",)

    def _w(self, w):
        return (w.dims[0], 1, w.dims[1]) if w.rank == 2 else w.dims

    def infer(self, ins, ps):
        (x,), (w,) = ins, ps
        if x.rank != 3:
            raise ShapeError(f"expected a 1-D signal [batch, channels, time], got {x.shape_str()}")
        b, c, t = x.dims
        o, ci, k = self._w(w)
        g = c // ci if w.rank == 2 else self.groups
        if c != ci * g or o % g:
            raise ShapeError(f"the kernel expects {ci * g} input channels but the input has {c}")
        lo, hi = self.pad
        to = t + lo + hi - (k - 1) * self.dilation
        if to <= 0:
            raise ShapeError(f"a kernel of {k} taps dilated by {self.dilation} does not fit {t} steps")
        return TensorType((b, o, to)), 2 * b * o * to * ci * k

    @staticmethod
    def reference(xp, x, w, dilation, pad, groups=1):
        if w.ndim == 2:
            w, groups = w[:, None, :], x.shape[1]
        xpd = xp.pad(x, ((0, 0), (0, 0), tuple(pad)))
        b, c, t = xpd.shape
        o, ci, k = w.shape
        to = t - (k - 1) * dilation
        xg = xpd.reshape(b, groups, ci, t)
        wg = w.reshape(groups, o // groups, ci, k)
        y = 0.0
        for i in range(k):
            y = y + xp.einsum("bgct,goc->bgot", xg[:, :, :, i * dilation:i * dilation + to], wg[:, :, :, i])
        return y.reshape(b, o, to)


class _WindowPool(Prim):
    """A size×size window reduction with stride and padding pad = (h_lo, h_hi, w_lo, w_hi);
    FLOPs size² per output element."""
    inputs = ("x",)
    params = ()

    def infer(self, ins, ps):
        (x,) = ins
        out = _pool_out(x, self.size, self.stride, self.pad)
        return out, out.size * self.size * self.size


@primitive("avg_pool")
class AvgPool(_WindowPool):
    """y = mean over each size×size window (stride, zero padding pad = (h_lo, h_hi, w_lo, w_hi),
    always divided by size², PyTorch's count_include_pad).  FLOPs size² per output element."""

    @staticmethod
    def reference(xp, x, size, stride, pad):
        return sum(_windows(xp, x, size, stride, pad, 0.0)) / (size * size)


@primitive("window_max")
class WindowMax(_WindowPool):
    """y = max over each size×size window (stride, −∞ padding pad = (h_lo, h_hi, w_lo, w_hi)):
    `max_pool` for windows larger than the input (which `max_pool` refuses).
    FLOPs size² per output element."""

    @staticmethod
    def reference(xp, x, size, stride, pad):
        return xp.max(xp.stack(_windows(xp, x, size, stride, pad, -xp.inf)), axis=0)


class _Elementwise(Prim):
    """y has x's type; FLOPs 1 per element."""
    inputs = ("x",)
    params = ()

    def infer(self, ins, ps):
        return ins[0], ins[0].size


@primitive("leaky_relu")
class LeakyRelu(_Elementwise):
    """y = x for x ≥ 0, alpha·x below (Darknet: alpha 0.1).  FLOPs 1 per element."""

    @staticmethod
    def reference(xp, x, alpha):
        return xp.where(x >= 0, x, alpha * x)


@primitive("tanh")
class Tanh(_Elementwise):
    """y = tanh(x).  FLOPs 1 per element.  bwd: dx = dy·(1 − y²)."""

    @staticmethod
    def reference(xp, x):
        return xp.tanh(x)
