"""conv_winograd: the same convolution as `conv`, with its stride-1 3×3 convolutions (one group,
every tap live, enough channels) computed by Winograd's minimal filtering F(2×2, 3×3) (Lavin &
Gray, "Fast Algorithms for Convolutional Neural Networks", 2016); every other conv keeps `conv`'s
forms.  The default spelling of conv on every backend (LowerOptions.conv_form "winograd";
"matmul" gives `conv` alone).

Per 4×4 input tile d (tiles at stride 2 over the padded input) and output channel o:
    y_tile[o] = Aᵀ [ Σ_c (G w[o, c] Gᵀ) ⊙ (Bᵀ d[c] B) ] A          (a 2×2 output tile)
so the 9 multiply-adds per output pixel and channel pair become 4: one matmul per each of the
16 tile positions, batched, V [16, tiles, C] · U [16, C, O].  The transforms are separable
(rows, then columns), each a sum of broadcast slices times constant vectors.
The backward is the adjoint of that bilinear map, exact in exact arithmetic like the forward:
    DY = A dy Aᵀ per tile (2×2 → 4×4),  dU = Σ_tiles V ⊙ DY,  dw = Gᵀ dU G,
    dV = Σ_o DY ⊙ U,  dx = the overlap-add of B dV Bᵀ over the tiles (tiles overlap by 2),
so dW and dx share DY, and dW needs no patches of x (fwd saves V, 4× x's size).
Measured against `conv`'s row matmuls in benchmarks/NOTES.md ("Winograd").  Rounding: the
constants are 0, ±1, ±½; the error is that of the direct form (the per-primitive oracle checks
it at the same tolerance)."""
from __future__ import annotations

import numpy as np

from lmc.core.types import TensorType
from lmc.prims import primitive
from lmc.prims.conv import Conv, _live

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def _t(*d) -> str:
    return TensorType(tuple(d)).mlir


def _dense(a) -> str:
    a = np.asarray(a, np.float64)

    def rec(v):
        return "[" + ", ".join(rec(u) for u in v) + "]" if v.ndim else repr(float(v))
    return f"dense<{rec(a)}> : {_t(*a.shape)}"


def _stage(src, part, out, dims, kdim, terms) -> dict:
    """One separable transform stage: out = Σ broadcast(slice(src)) · broadcast(k) over the terms
    (slice limits, constant vector k along out's dim `kdim`); all-zero k are left out."""
    keep = [(lim, k) for lim, k in terms if np.any(k)]
    return dict(src=_t(*src), part=_t(*part), out=_t(*out), dims=str(list(dims)), kdim=kdim,
                k_t=_t(len(keep[0][1])), terms=[dict(limits=lim, k=_dense(k)) for lim, k in keep])


def _lim(*spans) -> str:
    """Slice limits from (start, stop[, step]) per dim."""
    return "[" + ", ".join(f"{s[0]}:{s[1]}" + (f":{s[2]}" if len(s) > 2 and s[2] != 1 else "") for s in spans) + "]"


def _winograd(b, c, h, wd, o, oh, ow, lo) -> dict:
    """Types, slices and constants of F(2×2, 3×3) for x [b, c, h, wd] padded `lo` low (and as
    much high as the tiles need), output [b, o, oh, ow]."""
    T, S = -(-oh // 2), -(-ow // 2)            # tiles down, across
    N, hp, wp = T * b * S, 2 * T + 2, 2 * S + 2
    rows = _stage((hp, b, wp, c), (T, b, wp, c), (4, T, b, wp, c), (1, 2, 3, 4), 0,
                  [(_lim((a, a + 2 * T - 1, 2), (0, b), (0, wp), (0, c)), BT[:, a]) for a in range(4)])
    cols = _stage((4, T, b, wp, c), (4, T, b, S, c), (4, 4, T, b, S, c), (0, 2, 3, 4, 5), 1,
                  [(_lim((0, 4), (0, T), (0, b), (j, j + 2 * S - 1, 2), (0, c)), BT[:, j]) for j in range(4)])
    out1 = _stage((4, 4, T, b, S, o), (1, 4, T, b, S, o), (2, 4, T, b, S, o), (0, 1, 2, 3, 4, 5), 0,
                  [(_lim((i, i + 1), (0, 4), (0, T), (0, b), (0, S), (0, o)), AT[:, i]) for i in range(4)])
    out2 = _stage((2, 4, T, b, S, o), (2, 1, T, b, S, o), (T, 2, b, S, 2, o), (1, 4, 0, 2, 3, 5), 4,
                  [(_lim((0, 2), (j, j + 1), (0, T), (0, b), (0, S), (0, o)), AT[:, j]) for j in range(4)])
    # backward: DY = A dy Aᵀ (the output transform's adjoint), rows then columns
    dyr = _stage((2 * T, b, 2 * S, o), (T, b, 2 * S, o), (4, T, b, 2 * S, o), (1, 2, 3, 4), 0,
                 [(_lim((i, i + 2 * T - 1, 2), (0, b), (0, 2 * S), (0, o)), AT[i, :]) for i in range(2)])
    dyc = _stage((4, T, b, 2 * S, o), (4, T, b, S, o), (4, 4, T, b, S, o), (0, 2, 3, 4, 5), 1,
                 [(_lim((0, 4), (0, T), (0, b), (j, j + 2 * S - 1, 2), (0, o)), AT[j, :]) for j in range(2)])

    # the input transform's adjoint: columns, then rows; tile t's taps 0–1 land on 2t + (0, 1),
    # taps 2–3 on 2(t + 1) + (0, 1): two interleaved halves, the second shifted by one tile
    def adj_cols(half):
        return _stage((4, 4, T, b, S, c), (4, 1, T, b, S, c), (4, T, b, S, 2, c), (0, 4, 1, 2, 3, 5), 4,
                      [(_lim((0, 4), (n, n + 1), (0, T), (0, b), (0, S), (0, c)), BT[n, 2 * half:2 * half + 2])
                       for n in range(4)])

    def adj_rows(half):
        return _stage((4, T, b, wp, c), (1, T, b, wp, c), (T, 2, b, wp, c), (1, 0, 2, 3, 4), 1,
                      [(_lim((n, n + 1), (0, T), (0, b), (0, wp), (0, c)), BT[n, 2 * half:2 * half + 2])
                       for n in range(4)])
    return dict(
        xh=_t(h, b, wd, c), xp=_t(hp, b, wp, c), xlo=f"[{lo[0]}, 0, {lo[1]}, 0]",
        xhi=f"[{hp - h - lo[0]}, 0, {wp - wd - lo[1]}, 0]",
        rows=rows, cols=cols, V6=_t(4, 4, T, b, S, c), V=_t(16, N, c), V_type=TensorType((16, N, c)),
        GG=_dense(np.kron(G, G)), GG_t=_t(16, 9), w9=_t(o, c, 9), Uo=_t(o, c, 16), U=_t(16, c, o),
        M=_t(16, N, o), M6=_t(4, 4, T, b, S, o), out1=out1, out2=out2,
        Yf=_t(2 * T, b, 2 * S, o), yh=_t(oh, b, ow, o), ycrop=_lim((0, oh), (0, b), (0, ow), (0, o)),
        dyp=_t(2 * T, b, 2 * S, o), dyhi=f"[{2 * T - oh}, 0, {2 * S - ow}, 0]", dyr=dyr, dyc=dyc,
        DY6=_t(4, 4, T, b, S, o), DY=_t(16, N, o), dU=_t(16, c, o), **_du_split(N, c, o), dwo=_t(c, o, 9), dwt=_t(o, c, 9),
        dV=_t(16, N, c), dV6=_t(4, 4, T, b, S, c), adj_cols=[adj_cols(0), adj_cols(1)],
        adj_rows=[adj_rows(0), adj_rows(1)], G5=_t(4, T, b, S, 2, c), G4=_t(4, T, b, 2 * S, c),
        dR=_t(4, T, b, wp, c), F5=_t(T, 2, b, wp, c), F4=_t(2 * T, b, wp, c),
        dx_rows=_dx_rows(T, b, wp, c, h, wd, lo))


def _dx_rows(T, b, wp, c, h, wd, lo) -> list[dict]:
    """dx's rows straight from the two row halves A, B [2T, b, wp, c] of the overlap-add, cropped
    to x: padded row r is A[r] (r < 2), A[r] + B[r − 2] (2 ≤ r < 2T) or B[r − 2] (r ≥ 2T), and x
    holds padded rows lo₀ … lo₀ + h − 1, columns lo₁ … lo₁ + wd − 1.  Up to three pieces along
    the rows (outermost in HBWC), concatenated: IREE writes each piece into its place of dx,
    where padding the halves, summing and cropping cost a zero fill, two copies and a crop."""
    cols = (lo[1], lo[1] + wd)
    r0, r1 = lo[0], lo[0] + h
    pieces = []
    for lo_r, hi_r, use_a, use_b in ((r0, min(2, r1), True, False), (max(2, r0), min(2 * T, r1), True, True),
                                     (max(2 * T, r0), r1, False, True)):
        if hi_r <= lo_r:
            continue
        pieces.append(dict(
            a=_lim((lo_r, hi_r), (0, b), cols, (0, c)) if use_a else None,
            b=_lim((lo_r - 2, hi_r - 2), (0, b), cols, (0, c)) if use_b else None,
            t=_t(hi_r - lo_r, b, wd, c)))
    return pieces


DU_CHUNK = 256      # tiles per partial product of dU (see _du_split)


def _du_split(N: int, c: int, o: int) -> dict:
    """dU = Σ over all N tiles of Vᵀ·DY per tile position.  IREE 3.13 runs that product (M, N
    = channels, K = tiles in the tens of thousands) with an 8×16 register tile that streams the
    whole K once per tile: both operands 4–8 times from memory.  Split into chunks of n tiles
    (a free reshape of [16, N, ·] to [16·k, n, ·]), each chunk's operands stay in cache across
    those passes; the k partial products are then summed.  n: the largest divisor of N up to
    DU_CHUNK; no split when that leaves chunks under 64 tiles or a single chunk."""
    n = max(d for d in range(1, min(N, DU_CHUNK) + 1) if N % d == 0)
    k = N // n if n >= 64 else 1
    if k == 1:
        return dict(du_k=1)
    return dict(du_k=k, Vs=_t(16 * k, n, c), DYs=_t(16 * k, n, o), dUs=_t(16 * k, c, o), dU4=_t(16, k, c, o))


@primitive("conv_winograd")
class ConvWinograd(Conv):
    examples = [
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1), [TensorType((2, 8, 6, 6))], [TensorType((8, 8, 3, 3))]),
        # odd map (the last tile row/column cropped), HBWC in and out
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1, layout="hbwc"), [TensorType((2, 8, 5, 5))], [TensorType((9, 8, 3, 3))]),
        # valid (no padding), non-square; one side in HBWC, the other NCHW (both ways)
        (dict(stride=1, pad=(0, 0, 0, 0), groups=1, layout="hbwc", out_layout="nchw"), [TensorType((2, 8, 7, 6))],
         [TensorType((8, 8, 3, 3))]),
        (dict(stride=1, pad=(2, 0, 1, 2), groups=1, out_layout="hbwc"), [TensorType((1, 10, 4, 5))],
         [TensorType((8, 10, 3, 3))]),
        # a 2×2 map (one tile)
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1), [TensorType((3, 8, 2, 2))], [TensorType((8, 8, 3, 3))]),
        # 288 tiles: dU as two partial products of 144 tiles, summed (_du_split)
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1), [TensorType((2, 8, 24, 24))], [TensorType((8, 8, 3, 3))]),
    ]
    # below this many input or output channels the row matmuls stay: the transforms cost per
    # channel, the products save per channel pair.  8 is a guess, not a measured crossover (the
    # convs measured in benchmarks/NOTES.md have 32–512; the 1- and 3-channel stems stay rows)
    min_channels = 8
    # train.bf16_conv keeps conv's row matmuls: bf16 modules are compiled with data tiling
    # (lmc/compile.py), under which IREE 3.13 refuses these batched matmuls ("large vector sizes")
    takes_bf16 = False

    def covers(self, ins, ps) -> bool:
        """Stride 1, one group, a 3×3 kernel whose taps all read the input, no cropping, and
        at least `min_channels` channels in and out; the lowering keeps `conv` elsewhere."""
        (x,), (w,) = ins, ps
        b, c, h, wd = x.dims
        o, _, kh, kw = w.dims
        if (self.stride, self.groups, self.tap_spacing, kh, kw) != (1, 1, 1, 3, 3) or min(self.pad) < 0:
            return False
        if c < self.min_channels or o < self.min_channels:
            return False
        ph0, ph1, pw0, pw1 = self.pad
        oh, ow = h + ph0 + ph1 - 2, wd + pw0 + pw1 - 2
        return _live(h, 3, 1, ph0, oh) == (0, 3) and _live(wd, 3, 1, pw0, ow) == (0, 3)

    def saved(self, ins, ps, out):
        return [self.context(ins, ps, out)["wg"]["V_type"]]

    def context(self, ins, ps, out):
        x, y = self.logical(ins[0]), self.logical_out(out)
        b, c, h, wd = x.dims
        _, o, oh, ow = y.dims
        return dict(wg=_winograd(b, c, h, wd, o, oh, ow, (self.pad[0], self.pad[2])))

    def template(self, ctx):
        return "prims/conv_winograd.mlir.j2"
