"""conv: 2-D convolution, NCHW input, OIHW kernel [O, C/groups, kh, kw], no bias.
Padding (lo, hi) per spatial dim is decided by the layer (XLA-SAME, symmetric or valid) and
passed in; this primitive only checks that the output is non-empty."""
from __future__ import annotations

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.prims import Prim, conv_out, primitive


def _t(*d):
    return TensorType(tuple(d))


def _live(n: int, k: int, s: int, lo: int, out: int, dl: int = 1) -> tuple[int, int]:
    """Kernel offsets [first, last+1) along one axis that read an input element for some output
    (the others only ever meet padding; taps `dl` apart).  All of them if none does (an
    all-padding conv)."""
    taps = [i for i in range(k) if any(0 <= i * dl + s * o - lo < n for o in range(out))]
    return (taps[0], taps[-1] + 1) if taps else (0, k)


def _unreached(n: int, k: int, s: int, lo: int, hi: int) -> int:
    """Rows (or cols) of the padded input that the last window does not reach: the stride
    does not divide.  The backward pads them back (dx) or crops them (dw)."""
    return (n + lo + hi - k) % s


def _hbwc(b, cin, h, wd, kh, kw, s, lo, hi, interior, g, cout, dl=1) -> dict:
    """Types and slices of the kw-patches of an NCHW tensor [b, cin, h, wd] taken to HBWC and
    padded (lo, hi, interior) per spatial axis, for a kh×kw kernel at stride s with its taps
    `dl` apart (dilation), `g` groups."""
    hp = h + lo[0] + hi[0] + (h - 1) * interior
    wp = wd + lo[1] + hi[1] + (wd - 1) * interior
    oh, ow = (hp - (kh - 1) * dl - 1) // s + 1, (wp - (kw - 1) * dl - 1) // s + 1
    cg, og = cin // g, cout // g
    return dict(
        th=_t(h, b, wd, cin).mlir, tp=_t(hp, b, wp, cin).mlir,
        lo=f"[{lo[0]}, 0, {lo[1]}, 0]", hi=f"[{hi[0]}, 0, {hi[1]}, 0]", interior=f"[{interior}, 0, {interior}, 0]",
        cols=[f"[0:{hp}, 0:{b}, {j * dl}:{j * dl + (ow - 1) * s + 1}:{s}, 0:{cin}]" for j in range(kw)],
        col=_t(hp, b, ow, cin).mlir, P=_t(hp, b, ow, kw * cin).mlir,
        rows=[f"[{i * dl}:{i * dl + (oh - 1) * s + 1}:{s}, 0:{b}, 0:{ow}, 0:{kw * cin}]" for i in range(kh)],
        R=_t(oh, b, ow, kw * cin).mlir, R3=_t(oh, b * ow, kw * cin).mlir, Rg=_t(oh, b, ow, kw, g, cg).mlir,
        W=_t(kh, g, kw, cg, og).mlir, W1=_t(1, g, kw, cg, og).mlir, Wi=_t(g, kw, cg, og).mlir,
        Yg=_t(g, oh, b, ow, og).mlir, kw=kw, cin_g=cg, cout_g=og, out=(oh, ow), P_type=_t(hp, b, ow, kw * cin),
        # few input channels (a stem): every row's patches side by side, one matmul of depth
        # kh·kw·cin instead of kh of depth kw·cin, each writing the whole output again
        fuse_rows=g == 1 and kh > 1 and kw * cin < FUSE_ROWS_BELOW, Rk=_t(oh, b, ow, kh * kw * cin).mlir,
        Rk3=_t(oh, b * ow, kh * kw * cin).mlir,
        Wk=_t(kh * kw * cg, og).mlir, Y4=_t(oh, b, ow, og).mlir)


FUSE_ROWS_BELOW = 32     # kw·cin under which a one-group conv's rows become one matmul (_hbwc)


def _nchw_taps(b, c, h, wd, kh, kw, s, lo, hi, interior, dl=1) -> dict:
    """Padding and the k·k strided tap slices of an NCHW tensor (depthwise form), taps `dl`
    apart."""
    hp = h + lo[0] + hi[0] + (h - 1) * interior
    wp = wd + lo[1] + hi[1] + (wd - 1) * interior
    oh, ow = (hp - (kh - 1) * dl - 1) // s + 1, (wp - (kw - 1) * dl - 1) // s + 1
    return dict(xp=_t(b, c, hp, wp).mlir, lo=f"[0, 0, {lo[0]}, {lo[1]}]", hi=f"[0, 0, {hi[0]}, {hi[1]}]",
                interior=f"[0, 0, {interior}, {interior}]", out=(oh, ow),
                taps=[f"[0:{b}, 0:{c}, {i * dl}:{i * dl + (oh - 1) * s + 1}:{s}, {j * dl}:{j * dl + (ow - 1) * s + 1}:{s}]"
                      for i in range(kh) for j in range(kw)])


@primitive("conv")
class Conv(Prim):
    """y = conv(x, w; stride, pad=(ph_lo, ph_hi, pw_lo, pw_hi), groups).
    No stablehlo.convolution: IREE 3.13's llvm-cpu codegen for it (forward and above all the two
    backward convolutions) was 2–4× slower than matmuls, and its im2col path miscompiles
    depthwise convs at batch > 1 and 3×3 convs with a 1×1 output.  Two forms:
    - depthwise (groups = C, one input channel per group): k·k shifted slices times per-channel
      weights, elementwise; saves x.
    - otherwise: kw-patches of x in an [H, B, W, C] layout and one matmul per live kernel row
      (see the template's header for the formulas); saves the patches, so the backward does
      not rebuild them.  dx is the same computation on dy with the flipped kernel (stride > 1:
      s² such convolutions of dy, one per output phase, each with the sub-kernel of the taps
      that reach it — `_phases`; with dilation, dy interior-padded by s − 1), dw is a matmul
      batched over output rows.
    benchmarks/NOTES.md has the measurements behind each choice."""
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
        (dict(stride=2, pad=(1, 1, 1, 1), groups=3), [_t(2, 6, 5, 5)], [_t(6, 2, 3, 3)]),   # grouped, strided
        (dict(stride=1, pad=(0, 0, 0, 0), groups=3), [_t(2, 6, 3, 3)], [_t(9, 2, 1, 1)]),   # grouped 1x1 (ShuffleNet v1)
        (dict(stride=4, pad=(0, 0, 0, 0), groups=1), [_t(2, 3, 8, 8)], [_t(5, 3, 4, 4)]),   # patchify
        (dict(stride=2, pad=(0, 0, 0, 0), groups=1), [_t(1, 1, 4, 6)], [_t(6, 1, 2, 2)]),   # patchify, one channel, non-square
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1), [_t(2, 3, 1, 1)], [_t(4, 3, 3, 3)]),   # 1x1 input: centre tap only
        (dict(stride=2, pad=(1, 1, 1, 1), groups=1), [_t(2, 3, 2, 2)], [_t(4, 3, 3, 3)]),   # s2 to 1x1: dead first row/col
        (dict(stride=1, pad=(2, 0, 0, 1), groups=1), [_t(1, 2, 2, 3)], [_t(3, 2, 3, 2)]),   # asymmetric, taps dead on one side
        (dict(stride=1, pad=(1, 1, 0, 0), groups=3), [_t(2, 3, 4, 4)], [_t(3, 1, 3, 1)]),   # depthwise, non-square kernel
        # the HBWC form (lmc/graph/layout.py): plain, strided (phase dx), grouped, grouped strided, dead taps
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1, layout="hbwc"), [_t(2, 3, 5, 5)], [_t(4, 3, 3, 3)]),
        (dict(stride=2, pad=(1, 1, 1, 1), groups=1, layout="hbwc"), [_t(2, 2, 7, 7)], [_t(3, 2, 3, 3)]),
        (dict(stride=1, pad=(2, 2, 2, 2), groups=2, layout="hbwc"), [_t(1, 4, 5, 5)], [_t(6, 2, 5, 5)]),
        (dict(stride=2, pad=(1, 1, 1, 1), groups=3, layout="hbwc"), [_t(2, 6, 5, 5)], [_t(6, 2, 3, 3)]),
        (dict(stride=1, pad=(2, 0, 0, 1), groups=1, layout="hbwc"), [_t(1, 2, 2, 3)], [_t(3, 2, 3, 2)]),
        # one side HBWC, the other NCHW (lmc/graph/layout.py: conv converts inside its matmuls)
        (dict(stride=2, pad=(1, 1, 1, 1), groups=1, layout="hbwc", out_layout="nchw"), [_t(2, 2, 7, 7)], [_t(3, 2, 3, 3)]),
        (dict(stride=1, pad=(1, 1, 1, 1), groups=2, out_layout="hbwc"), [_t(2, 4, 5, 5)], [_t(4, 2, 3, 3)]),
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1, out_layout="hbwc"), [_t(2, 3, 5, 5)], [_t(4, 3, 3, 3)]),
        (dict(stride=2, pad=(0, 0, 0, 0), groups=1, out_layout="hbwc"), [_t(1, 1, 4, 6)], [_t(6, 1, 2, 2)]),
        (dict(stride=2, pad=(0, 1, 0, 1), groups=1, out_layout="hbwc"), [_t(2, 3, 6, 6)], [_t(4, 3, 3, 3)]),
        # kw·cin ≥ FUSE_ROWS_BELOW: one matmul per kernel row (the examples above, with few
        # channels, take the fused rows), NCHW and HBWC
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1), [_t(2, 11, 4, 4)], [_t(3, 11, 3, 3)]),
        (dict(stride=2, pad=(1, 1, 1, 1), groups=1, layout="hbwc"), [_t(2, 11, 5, 5)], [_t(3, 11, 3, 3)]),
    ]

    prefer_hbwc = True
    mixes_layouts = True

    def conv_matmuls(self, ins, ps):
        """The matmul form (the depthwise form has none: elementwise taps)."""
        return not self._depthwise(self.logical(ins[0]), ps[0])

    def layouts(self, ins, ps):
        """The matmul form works in HBWC; the depthwise form's shifted slices stay NCHW."""
        return ("nchw",) if self._depthwise(ins[0], ps[0]) else ("nchw", "hbwc")

    def infer(self, ins, ps):
        (x,), (w,) = ins, ps
        if x.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.shape_str()}")
        b, c, h, wd = x.dims
        o, ci, kh, kw = w.dims
        g, d = self.groups, self.tap_spacing
        if c != ci * g or o % g:
            raise ShapeError(f"the kernel expects {ci * g} input channels but the input has {c}")
        ph0, ph1, pw0, pw1 = self.pad
        ekh, ekw = (kh - 1) * d + 1, (kw - 1) * d + 1          # the kernel's extent (dilated)
        oh, ow = conv_out(h, ekh, self.stride, ph0, ph1), conv_out(wd, ekw, self.stride, pw0, pw1)
        if oh <= 0 or ow <= 0:
            kernel = f"a {kh}x{kw} kernel" + (f" dilated by {d}" if d > 1 else "")
            raise ShapeError(f"{kernel} does not fit a {h}x{wd} input (output would be {oh}x{ow})")
        return _t(b, o, oh, ow), 2 * b * o * oh * ow * ci * kh * kw

    def onnx(self, b, ins, ps, st):
        ph0, ph1, pw0, pw1 = self.pad
        d = self.tap_spacing
        return b.op("Conv", ins[0], ps[0], strides=[self.stride] * 2, pads=[ph0, pw0, ph1, pw1],
                    group=self.groups, dilations=[d, d])

    @property
    def tap_spacing(self) -> int:
        """Distance between kernel taps: 1 here, `dilation` in dilated_conv."""
        return 1

    def _depthwise(self, x, w) -> bool:
        return self.groups == x.dims[1] and w.dims[1] == 1 and w.dims[0] == x.dims[1]

    def template(self, ctx):
        """The depthwise form is its own kernel (templates/prims/conv_depthwise.mlir.j2); the
        patch matmuls are this primitive's template (conv.mlir.j2, dilated_conv's includes it)."""
        return "prims/conv_depthwise.mlir.j2" if ctx.get("depthwise") else super().template(ctx)

    def saved(self, ins, ps, out):
        (x,), (w,) = ins, ps
        if self._depthwise(self.logical(x), w):
            return [x]
        return [self.context(ins, ps, out)["f"]["P_type"]]

    def context(self, ins, ps, out):
        (x,), (w,), out = [self.logical(ins[0])], ps, self.logical_out(out)
        b, c, h, wd = x.dims
        o, ci, kh, kw = w.dims
        _, _, oh, ow = out.dims
        s, g, dl = self.stride, self.groups, self.tap_spacing
        ph0, ph1, pw0, pw1 = self.pad
        ekh, ekw = (kh - 1) * dl + 1, (kw - 1) * dl + 1          # the kernel's extent (dilated)
        rh, rw = _unreached(h, ekh, s, ph0, ph1), _unreached(wd, ekw, s, pw0, pw1)
        if self._depthwise(x, w):
            f = _nchw_taps(b, c, h, wd, kh, kw, s, (ph0, pw0), (ph1, pw1), 0, dl)
            # dx = the forward sum's adjoint: taps of dy dilated by s, padded ek−1−lo / ek−1−hi+r
            d = _nchw_taps(b, c, oh, ow, kh, kw, 1, (ekh - 1 - ph0, ekw - 1 - pw0),
                           (ekh - 1 - ph1 + rh, ekw - 1 - pw1 + rw), s - 1, dl)
            assert f["out"] == (oh, ow) and d["out"] == (h, wd), "lmc bug: depthwise conv geometry"
            return dict(depthwise=True, f=f, d=d, c=c, kk=kh * kw, wck=_t(c, kh * kw).mlir,
                        wc1=_t(c, 1).mlir, wc=_t(c).mlir)
        i0, i1 = _live(h, kh, s, ph0, oh, dl)
        j0, j1 = _live(wd, kw, s, pw0, ow, dl)
        kh2, kw2 = i1 - i0, j1 - j0
        ekh2, ekw2 = (kh2 - 1) * dl + 1, (kw2 - 1) * dl + 1
        # the conv with only the live taps: same output, padding shrunk (negative = cropped input)
        lo, hi = (ph0 - i0 * dl, pw0 - j0 * dl), (ph1 - (kh - i1) * dl, pw1 - (kw - j1) * dl)
        f = _hbwc(b, c, h, wd, kh2, kw2, s, lo, hi, 0, g, o, dl)
        d = _hbwc(b, o, oh, ow, kh2, kw2, 1, (ekh2 - 1 - lo[0], ekw2 - 1 - lo[1]),
                  (ekh2 - 1 - hi[0] + rh, ekw2 - 1 - hi[1] + rw), s - 1, g, c, dl)
        assert f["out"] == (oh, ow) and d["out"] == (h, wd), "lmc bug: conv geometry"
        og = o // g
        ph = self._phases(b, c, h, wd, o, oh, ow, kh2, kw2, s, lo, g) if s > 1 and dl == 1 and self.phase_dx else None
        return dict(depthwise=False, g=g, f=f, d=d, o=o, ci=ci, kh=kh, kw=kw, i0=i0, i1=i1, j0=j0, j1=j1, ph=ph,
                    wl=_t(o, ci, kh2, kw2).mlir, wg=_t(g, og, ci, kh2, kw2).mlir, yt=_t(b, g, og, oh, ow).mlir,
                    dyT=_t(oh, g, og, b, ow).mlir, dwb=_t(oh, g, og, kw2, ci).mlir, dwq=_t(oh, og, kw2 * ci).mlir, dy3=_t(oh, b * ow, o).mlir, dwi=_t(g, og, kw2, ci).mlir,
                    dwi1=_t(1, g, og, kw2, ci).mlir, dwc=_t(kh2, g, og, kw2, ci).mlir,
                    dwk=_t(oh, o, kh2 * kw2 * ci).mlir, dwks=_t(o, kh2 * kw2 * ci).mlir, dwk5=_t(1, o, kh2, kw2, ci).mlir,
                    dxt=_t(b, g, ci, h, wd).mlir, yh=_t(oh, b, ow, g, og).mlir, xh=_t(h, b, wd, g, ci).mlir)

    # dx of a strided conv by phase decomposition (the template's header); False: the
    # convolution of the interior-padded dy (benchmarks/NOTES.md compares the two)
    phase_dx = True

    @staticmethod
    def _phases(b, c, h, wd, o, oh, ow, kh, kw, s, lo, g) -> dict:
        """dx of a stride-s conv (live kernel kh×kw, padding lo of the live conv) as s² stride-1
        convolutions of the un-dilated dy, one per output phase.  Along one axis, dx row
        h = s·u + r (residue r) is padded row p = h + lo = s·(u + δ) + t with t = (r + lo) mod s,
        δ = (r + lo) div s, and gets Σ_m dy[u + δ − m] · w[t + s·m] (m < k_t = #taps ≡ t mod s):
        a full correlation of dy with the sub-kernel w[t::s] (flipped), dy padded k_t − 1 − δ
        low and U + δ − oh high (negative = cropped), U = ⌈H/s⌉ rows per phase.  The phases are
        interleaved ([U, s] → U·s rows) and cropped to H.  Work: the kh·kw taps at H·W/s²
        positions, not at H·W (the interior-padded dy's zeros)."""
        U, V = -(-h // s), -(-wd // s)
        cg = c // g

        def axis(r, k):
            t, dl = (r + lo[k]) % s, (r + lo[k]) // s
            n = (kh, kw)[k]
            kt = len(range(t, n, s))
            return t, dl, kt

        phases = []
        for rh in range(s):
            for rw in range(s):
                th, dh, kth = axis(rh, 0)
                tw, dw, ktw = axis(rw, 1)
                q = dict(live=kth > 0 and ktw > 0, Z=_t(g, U, b, V, cg).mlir, Z7=_t(g, U, 1, b, V, 1, cg).mlir)
                if q["live"]:
                    q["d"] = _hbwc(b, o, oh, ow, kth, ktw, 1, (kth - 1 - dh, ktw - 1 - dw), (U + dh - oh, V + dw - ow),
                                   0, g, c)
                    assert q["d"]["out"] == (U, V), "lmc bug: conv phase geometry"
                    q["wslice"] = f"[0:{o}, 0:{cg}, {th}:{kh}:{s}, {tw}:{kw}:{s}]"
                    q["wq"] = _t(o, cg, kth, ktw).mlir
                    q["wqg"] = _t(g, o // g, cg, kth, ktw).mlir
                phases.append(q)
        return dict(phases=phases, s=s, dyh=_t(oh, b, ow, o).mlir,
                    row=_t(g, U, 1, b, V, s, cg).mlir, stack=_t(g, U, s, b, V, s, cg).mlir,
                    full=_t(g, U * s, b, V * s, cg).mlir, dxh=_t(g, h, b, wd, cg).mlir,
                    hi=f"[0, {h - U * s}, 0, {wd - V * s}, 0]")

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
