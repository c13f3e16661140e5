"""Primitives of the CNN bestiary: dilated_conv (atrous), conv1d (1-D, dilated, causal by its
padding, grouped or depthwise), avg_pool, channel_shuffle, leaky_relu and tanh."""
from __future__ import annotations

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType, flt
from lmc.prims import Elementwise, Prim, conv_out, primitive
from lmc.prims.basic import away_from_kinks
from lmc.prims.conv import Conv, _nchw_taps


def _t(*d):
    return TensorType(tuple(d))


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
    pad, groups as `conv`.  FLOPs 2·B·O·oh·ow·(C/groups)·kh·kw, as `conv`.  Lowered by conv's
    own template (its patch and tap slices `dilation` apart; the dead taps of a rate larger
    than the map dropped as in conv); LMC_CONV_FORM=direct does not apply to it."""
    examples = [
        (dict(stride=1, pad=(2, 2, 2, 2), groups=1, dilation=2), [_t(2, 3, 6, 6)], [_t(4, 3, 3, 3)]),
        (dict(stride=1, pad=(6, 6, 6, 6), groups=1, dilation=6), [_t(1, 2, 5, 5)], [_t(3, 2, 3, 3)]),   # ASPP: rate > map, dead taps
        (dict(stride=2, pad=(2, 2, 1, 1), groups=1, dilation=2), [_t(2, 2, 7, 6)], [_t(3, 2, 3, 2)]),   # strided, non-square
        (dict(stride=1, pad=(3, 3, 3, 3), groups=4, dilation=3), [_t(2, 4, 5, 5)], [_t(4, 1, 3, 3)]),   # depthwise
        (dict(stride=2, pad=(2, 2, 2, 2), groups=2, dilation=2), [_t(1, 4, 6, 6)], [_t(6, 2, 3, 3)]),   # grouped, strided
        (dict(stride=1, pad=(2, 2, 2, 2), groups=1, dilation=2, layout="hbwc"), [_t(2, 3, 6, 6)], [_t(4, 3, 3, 3)]),
        (dict(stride=2, pad=(2, 2, 1, 1), groups=1, dilation=2, layout="hbwc"), [_t(2, 2, 7, 6)], [_t(3, 2, 3, 2)]),
    ]

    def bf16_conv(self, ins, ps):
        return False        # f32: no bf16 form checked (train.bf16_conv covers conv's matmul form)

    @property
    def tap_spacing(self) -> int:
        return self.dilation

    @staticmethod
    def reference(xp, x, w, stride, pad, groups, dilation):
        """Direct: a sum over the k·k taps of strided slices `dilation` apart (float64)."""
        ph0, ph1, pw0, pw1 = pad
        xpd = xp.pad(x, ((0, 0), (0, 0), (ph0, ph1), (pw0, pw1)))
        b, c, h, wd = xpd.shape
        o, ci, kh, kw = w.shape
        d = dilation
        oh = (h - (kh - 1) * d - 1) // stride + 1
        ow = (wd - (kw - 1) * d - 1) // stride + 1
        xg = xpd.reshape(b, groups, ci, h, wd)
        wg = w.reshape(groups, o // groups, ci, kh, kw)
        y = 0.0
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, :, i * d:i * d + (oh - 1) * stride + 1:stride, j * d:j * d + (ow - 1) * stride + 1:stride]
                y = y + xp.einsum("bgchw,goc->bgohw", patch, wg[:, :, :, i, j])
        return y.reshape(b, o, oh, ow)


@primitive("conv1d")
class Conv1d(Prim):
    """1-D convolution of [B, C, T]: w [O, C/groups, K], taps `dilation` apart, padding
    (lo, hi) on T (lo = (K−1)·d, hi = 0: causal), or w [C, K] for a depthwise conv (groups = C).
    FLOPs 2·B·O·T_out·(C/groups)·K.  Its own template, no stablehlo.convolution (conv's reasons);
    saves x.  Two forms:
    - depthwise (one input and one output channel per group): K shifted slices of the padded x
      × per-channel weights, elementwise, as conv's depthwise form; dx by the flipped kernel;
    - otherwise: the K tap slices of the padded x stacked into patches [B, g, C/g, K, T_out]
      and one dot_general batched over the groups; the backward re-slices the patches (K·x of
      memory not kept); dw = dy·patchesᵀ, dx = Σ_k the k-th tap of wᵀ·dy padded back to its
      offset k·d, cropped by the padding."""
    inputs = ("x",)
    params = ("w",)
    examples = [
        (dict(dilation=2, pad=(2, 0), groups=1), [_t(2, 3, 8)], [_t(4, 3, 2)]),       # wave_net: causal, dilated
        (dict(dilation=1, pad=(0, 2), groups=2), [_t(1, 4, 6)], [_t(6, 2, 3)]),       # grouped, high pad only
        (dict(dilation=2, pad=(4, 0)), [_t(2, 2, 3)], [_t(2, 3)]),                    # depthwise [C, K], causal; dead taps
        (dict(dilation=1, pad=(2, 1), groups=3), [_t(2, 3, 5)], [_t(3, 1, 2)]),       # depthwise [C, 1, K]; pad > K − 1
        (dict(dilation=1, pad=(0, 0), groups=1), [_t(2, 4, 5)], [_t(3, 4, 1)]),       # 1×1 projection
    ]

    def _w(self, w):
        return (w.dims[0], 1, w.dims[1]) if w.rank == 2 else w.dims

    def template(self, ctx):
        """The depthwise form is its own kernel (templates/prims/conv1d_depthwise.mlir.j2)."""
        return "prims/conv1d_depthwise.mlir.j2" if ctx["depthwise"] else super().template(ctx)

    def saved(self, ins, ps, out):
        return list(ins)

    def context(self, ins, ps, out):
        (x,), (w,) = ins, ps
        b, c, t = x.dims
        o, ci, k = self._w(w)
        g = c // ci if w.rank == 2 else self.groups
        og, d = o // g, self.dilation
        lo, hi = self.pad
        tp, to = t + lo + hi, out.dims[2]
        if g == c and ci == 1 and og == 1:
            # depthwise: K shifted slices × per-channel weights, elementwise (a dot_general
            # batched over C groups of K-long contractions measured 4× slower)
            ek = (k - 1) * d
            return dict(depthwise=True, k=k, c=c, wck=_t(c, k).mlir, wc1=_t(c, 1).mlir, wc=_t(c).mlir,
                        xp=_t(b, c, tp).mlir, lo=f"[0, 0, {lo}]", hi=f"[0, 0, {hi}]",
                        taps=[f"[0:{b}, 0:{c}, {i * d}:{i * d + to}]" for i in range(k)],
                        dyp=_t(b, c, to + 2 * ek - lo - hi).mlir, dlo=f"[0, 0, {ek - lo}]", dhi=f"[0, 0, {ek - hi}]",
                        dtaps=[f"[0:{b}, 0:{c}, {i * d}:{i * d + t}]" for i in range(k)])
        return dict(depthwise=False, 
            x4=_t(b, g, ci, t).mlir, xp4=_t(b, g, ci, tp).mlir, w4=_t(g, og, ci, k).mlir,
            tap=_t(b, g, ci, 1, to).mlir, tap3=_t(b, g, ci, to).mlir, P=_t(b, g, ci, k, to).mlir, yd=_t(g, b, to, og).mlir,
            y4=_t(b, g, og, to).mlir, dP=_t(g, ci, k, b, to).mlir, dPk=_t(g, ci, 1, b, to).mlir,
            dPk3=_t(g, ci, b, to).mlir, dxp=_t(g, ci, b, tp).mlir, dxc=_t(g, ci, b, t).mlir,
            lo=f"[0, 0, 0, {lo}]", hi=f"[0, 0, 0, {hi}]", k=k,
            taps=[f"[0:{b}, 0:{g}, 0:{ci}, {i * d}:{i * d + to}]" for i in range(k)],
            dtaps=[f"[0:{g}, 0:{ci}, {i}:{i + 1}, 0:{b}, 0:{to}]" for i in range(k)],
            dlo=[f"[0, 0, 0, {i * d}]" for i in range(k)], dhi=[f"[0, 0, 0, {tp - to - i * d}]" for i in range(k)],
            crop=f"[0:{g}, 0:{ci}, 0:{b}, {lo}:{lo + t}]")

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

    def onnx(self, b, ins, ps, st):
        w, groups = ps[0], getattr(self, "groups", 1)
        if b.pt[0].rank == 2:                              # depthwise [C, K]: [C, 1, K]
            w, groups = b.op("Unsqueeze", w, b.ints([1])), b.ins[0].dims[1]
        return b.op("Conv", ins[0], w, dilations=[self.dilation], pads=[self.pad[0], self.pad[1]], group=groups,
                    strides=[1])

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


@primitive("avg_pool")
class AvgPool(Prim):
    """y = mean over each size×size window (stride, zero padding pad = (h_lo, h_hi, w_lo, w_hi),
    always divided by size²: PyTorch's count_include_pad).  FLOPs size² per output element.
    Saves nothing.  Two forms:
    - windows tiling the input exactly (size = stride dividing H, W, no pad: DenseNet's 2×2/2):
      x as [B, C, oh, s, ow, s], y = sum over the window dims / s²; dx = dy broadcast / s²;
    - otherwise: y = Σ of the size² strided tap slices of the padded x / size²; dx = the
      adjoint, as depthwise conv's dx with all-ones weights: the taps of dy interior-padded by
      stride − 1 and padded k−1−lo / k−1−hi+r (r: rows the last window does not reach), / size²."""
    inputs = ("x",)
    params = ()
    examples = [
        (dict(size=2, stride=2, pad=(0, 0, 0, 0)), [_t(2, 3, 6, 4)], []),     # tiled (transition layer)
        (dict(size=3, stride=2, pad=(1, 1, 1, 1)), [_t(2, 2, 7, 7)], []),     # ShuffleNet v1 shortcut
        (dict(size=3, stride=2, pad=(1, 1, 1, 1)), [_t(1, 2, 6, 5)], []),
        (dict(size=2, stride=2, pad=(0, 0, 0, 0)), [_t(1, 2, 5, 5)], []),     # last row/col unread
        (dict(size=3, stride=1, pad=(0, 2, 1, 0)), [_t(1, 2, 4, 4)], []),     # asymmetric
    ]

    def infer(self, ins, ps):
        (x,) = ins
        out = _pool_out(x, self.size, self.stride, self.pad)
        return out, out.size * self.size * self.size

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        (x,) = ins
        b, c, h, w = x.dims
        _, _, oh, ow = out.dims
        k, s = self.size, self.stride
        ph0, ph1, pw0, pw1 = self.pad
        ctx = {"inv": flt(1.0 / (k * k))}
        if k == s and self.pad == (0, 0, 0, 0) and h % s == 0 and w % s == 0:
            return {**ctx, "tiled": True, "x6": _t(b, c, oh, s, ow, s).mlir}
        rh, rw = (h + ph0 + ph1 - k) % s, (w + pw0 + pw1 - k) % s
        f = _nchw_taps(b, c, h, w, k, k, s, (ph0, pw0), (ph1, pw1), 0)
        d = _nchw_taps(b, c, oh, ow, k, k, 1, (k - 1 - ph0, k - 1 - pw0), (k - 1 - ph1 + rh, k - 1 - pw1 + rw), s - 1)
        assert f["out"] == (oh, ow) and d["out"] == (h, w), "lmc bug: avg_pool geometry"
        return {**ctx, "tiled": False, "f": f, "d": d}

    @staticmethod
    def reference(xp, x, size, stride, pad):
        return sum(_windows(xp, x, size, stride, pad, 0.0)) / (size * size)

    def onnx(self, b, ins, ps, st):
        ph0, ph1, pw0, pw1 = self.pad
        return b.op("AveragePool", ins[0], kernel_shape=[self.size] * 2, strides=[self.stride] * 2,
                    pads=[ph0, pw0, ph1, pw1], count_include_pad=1)


@primitive("channel_shuffle")
class ChannelShuffle(Prim):
    """ShuffleNet's channel shuffle of NCHW x in `groups` groups: [B, g·n, H, W] viewed as
    [B, g, n, H, W], the two swapped, back to [B, n·g, H, W] (channel i·n + j goes to j·g + i).
    Saves nothing.  bwd: the inverse shuffle (view [B, n, g, H, W], swap back).  FLOPs 0."""
    inputs = ("x",)
    params = ()
    examples = [(dict(groups=2), [_t(2, 6, 3, 2)], []), (dict(groups=3), [_t(1, 12, 2, 2)], [])]

    def infer(self, ins, ps):
        (x,) = ins
        if x.rank != 4 or x.dims[1] % self.groups:
            raise ShapeError(f"cannot shuffle {x.shape_str()} in {self.groups} channel groups")
        return x, 0

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        b, c, h, w = ins[0].dims
        g = self.groups
        return {"gn": _t(b, g, c // g, h, w).mlir, "ng": _t(b, c // g, g, h, w).mlir}

    @staticmethod
    def reference(xp, x, groups):
        b, c, h, w = x.shape
        return xp.transpose(x.reshape(b, groups, c // groups, h, w), (0, 2, 1, 3, 4)).reshape(b, c, h, w)

    def onnx(self, b, ins, ps, st):
        _, c, h, w = b.ins[0].dims
        g = self.groups
        v = b.op("Reshape", ins[0], b.ints([0, g, c // g, h, w]))
        return b.op("Reshape", b.op("Transpose", v, perm=[0, 2, 1, 3, 4]), b.ints([0, c, h, w]))


class _Elementwise(Elementwise):
    """y has x's type; FLOPs 1 per element."""
    inputs = ("x",)
    params = ()

    def infer(self, ins, ps):
        return ins[0], ins[0].size


@primitive("leaky_relu")
class LeakyRelu(_Elementwise):
    """y = x for x ≥ 0, alpha·x below (Darknet: alpha 0.1).  FLOPs 1 per element.
    Saves x.  bwd: dx = dy where x ≥ 0, alpha·dy below."""
    examples = [(dict(alpha=0.1), [_t(2, 3, 4, 4)], []), (dict(alpha=0.2), [_t(3, 5)], [])]

    def context(self, ins, ps, out):
        return {"alpha_lit": flt(self.alpha)}

    def draw(self, rng, t, is_input):
        return away_from_kinks(rng, t, [0.0]) if is_input else super().draw(rng, t, is_input)

    @staticmethod
    def reference(xp, x, alpha):
        return xp.where(x >= 0, x, alpha * x)

    def onnx(self, b, ins, ps, st):
        return b.op("LeakyRelu", ins[0], alpha=float(self.alpha))


@primitive("tanh")
class Tanh(_Elementwise):
    """y = tanh(x).  FLOPs 1 per element.  Saves y.  bwd: dx = dy·(1 − y²)."""
    examples = [({}, [_t(3, 5)], []), ({}, [_t(2, 2, 3)], [])]

    def saved(self, ins, ps, out):
        return [out]

    @staticmethod
    def reference(xp, x):
        return xp.tanh(x)

    def onnx(self, b, ins, ps, st):
        return b.op("Tanh", ins[0])
