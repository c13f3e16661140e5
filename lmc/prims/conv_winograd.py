"""conv_winograd: the same convolution as `conv`, with its stride-1 3×3 convolutions (one group,
every tap live, enough channels) computed by Winograd's minimal filtering F(m×m, 3×3), m = 2 or 4
(Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016); every other conv keeps
`conv`'s forms.  The default spelling of conv on every backend (LowerOptions.conv_form
"winograd"; "matmul" gives `conv` alone).

Per α×α input tile d (α = m + 2, tiles at stride m over the padded input) and output channel o:
    y_tile[o] = Aᵀ [ Σ_c (G w[o, c] Gᵀ) ⊙ (Bᵀ d[c] B) ] A          (an m×m output tile)
so the 9 multiply-adds per output pixel and channel pair become α²/m²: 4 for m = 2, 2.25 for
m = 4: one matmul per each of the α² tile positions, batched, V [α², tiles, C] · U [α², C, O].
The transforms are separable (rows, then columns), each a sum of broadcast slices times
constant vectors.  The backward is the adjoint of that bilinear map, exact in exact arithmetic
like the forward:
    DY = A dy Aᵀ per tile (m×m → α×α),  dU = Σ_tiles V ⊙ DY,  dw = Gᵀ dU G,
    dV = Σ_o DY ⊙ U,  dx = the overlap-add of B dV Bᵀ over the tiles (tiles overlap by 2),
so dW and dx share DY, and dW needs no patches of x (fwd saves V: α²/m² = 4 or 2.25 × x's size).
`_tile` picks m per conv.  Measured against `conv`'s row matmuls and between the two m in
benchmarks/NOTES.md ("Winograd").  Rounding: F(2×2)'s constants are 0, ±1, ±½, its error that
of the direct form; F(4×4)'s reach 8 and 1/24, its error 10–20× larger and growing with the
input channels, so `_tile` keeps it to ≤ 128 of them (≤ 6e-6 of max|y|, inside the
per-primitive oracle's 1e-5, which checks both)."""
from __future__ import annotations

import numpy as np

from lmc.core.types import TensorType
from lmc.prims import primitive
from lmc.prims.conv import Conv, _live

# F(m×m, 3×3) by Cook–Toom at the points 0, ±1 (m = 2) and 0, ±1, ±2 (m = 4), and ∞:
# Bᵀ [α, α], G [α, 3], Aᵀ [m, α] with α = m + 2 (Lavin & Gray's matrices)
MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}
TILE4_MIN = 2.0     # F(4×4, 3×3) where the tiles outweigh the weights by this much (see _tile)
TILE4_MAX_C = 128   # … and the sum runs over at most this many input channels (its f32 error)


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


def _winograd(b, c, h, wd, o, oh, ow, lo, m) -> dict:
    """Types, slices and constants of F(m×m, 3×3) for x [b, c, h, wd] padded `lo` low (and as
    much high as the tiles need), output [b, o, oh, ow]: α×α tiles (α = m + 2) at stride m."""
    BT, G, AT = MATRICES[m]
    al, P = m + 2, (m + 2) ** 2
    T, S = -(-oh // m), -(-ow // m)            # tiles down, across
    N, hp, wp = T * b * S, m * T + 2, m * S + 2

    def every(a, n):                           # n slots a, a + m, …: one per tile
        return (a, a + m * (n - 1) + 1, m)
    rows = _stage((hp, b, wp, c), (T, b, wp, c), (al, T, b, wp, c), (1, 2, 3, 4), 0,
                  [(_lim(every(a, T), (0, b), (0, wp), (0, c)), BT[:, a]) for a in range(al)])
    cols = _stage((al, T, b, wp, c), (al, T, b, S, c), (al, al, T, b, S, c), (0, 2, 3, 4, 5), 1,
                  [(_lim((0, al), (0, T), (0, b), every(j, S), (0, c)), BT[:, j]) for j in range(al)])
    out1 = _stage((al, al, T, b, S, o), (1, al, T, b, S, o), (m, al, T, b, S, o), (0, 1, 2, 3, 4, 5), 0,
                  [(_lim((i, i + 1), (0, al), (0, T), (0, b), (0, S), (0, o)), AT[:, i]) for i in range(al)])
    out2 = _stage((m, al, T, b, S, o), (m, 1, T, b, S, o), (T, m, b, S, m, o), (1, 4, 0, 2, 3, 5), 4,
                  [(_lim((0, m), (j, j + 1), (0, T), (0, b), (0, S), (0, o)), AT[:, j]) for j in range(al)])
    # backward: DY = A dy Aᵀ (the output transform's adjoint), rows then columns
    dyr = _stage((m * T, b, m * S, o), (T, b, m * S, o), (al, T, b, m * S, o), (1, 2, 3, 4), 0,
                 [(_lim(every(i, T), (0, b), (0, m * S), (0, o)), AT[i, :]) for i in range(m)])
    dyc = _stage((al, T, b, m * S, o), (al, T, b, S, o), (al, al, T, b, S, o), (0, 2, 3, 4, 5), 1,
                 [(_lim((0, al), (0, T), (0, b), every(j, S), (0, o)), AT[j, :]) for j in range(m)])

    # the input transform's adjoint: columns, then rows; tile t's taps 0…m−1 land on mt + (0…m−1)
    # (half 0), taps m, m+1 on m(t + 1) + (0, 1) (half 1, two wide): two interleaved halves, the
    # second shifted by one tile (and, for m > 2, padded to m wide before it is interleaved)
    def taps(half):
        return range(m) if half == 0 else range(m, m + 2)

    def adj_cols(half):
        tw = len(taps(half))
        return _stage((al, al, T, b, S, c), (al, 1, T, b, S, c), (al, T, b, S, tw, c), (0, 4, 1, 2, 3, 5), 4,
                      [(_lim((0, al), (n, n + 1), (0, T), (0, b), (0, S), (0, c)), BT[n, list(taps(half))])
                       for n in range(al)])

    def adj_rows(half):
        tw = len(taps(half))
        return _stage((al, T, b, wp, c), (1, T, b, wp, c), (T, tw, b, wp, c), (1, 0, 2, 3, 4), 1,
                      [(_lim((n, n + 1), (0, T), (0, b), (0, wp), (0, c)), BT[n, list(taps(half))])
                       for n in range(al)])
    crop = dict(dRcrop=_lim((0, al), (0, T), (0, b), (0, wp), (0, c))) if m > 2 else {}
    return dict(
        m=m, xh=_t(h, b, wd, c), xp=_t(hp, b, wp, c), xlo=f"[{lo[0]}, 0, {lo[1]}, 0]",
        xhi=f"[{hp - h - lo[0]}, 0, {wp - wd - lo[1]}, 0]",
        rows=rows, cols=cols, V6=_t(al, al, T, b, S, c), V=_t(P, N, c), V_type=TensorType((P, N, c)),
        GG=_dense(np.kron(G, G)), GG_t=_t(P, 9), w9=_t(o, c, 9), Uo=_t(o, c, P), U=_t(P, c, o),
        M=_t(P, N, o), M6=_t(al, al, T, b, S, o), out1=out1, out2=out2,
        Yf=_t(m * T, b, m * S, o), yh=_t(oh, b, ow, o), ycrop=_lim((0, oh), (0, b), (0, ow), (0, o)),
        dyp=_t(m * T, b, m * S, o), dyhi=f"[{m * T - oh}, 0, {m * S - ow}, 0]", dyr=dyr, dyc=dyc,
        DY6=_t(al, al, T, b, S, o), DY=_t(P, N, o), dU=_t(P, c, o), **_du_split(N, c, o, P),
        dwo=_t(c, o, 9), dwt=_t(o, c, 9),
        dV=_t(P, N, c), dV6=_t(al, al, T, b, S, c), adj_cols=[adj_cols(0), adj_cols(1)],
        adj_rows=[adj_rows(0), adj_rows(1)],
        # the halves' types: half 1 two taps wide (G5n, F5n), both m wide once widened (G5w, F5w;
        # for m = 2 that is half 1 as it is); the column halves padded one tile apart (Gfull,
        # m·S + m wide: dR's width for m = 2, cropped to it for m > 2)
        G5n=_t(al, T, b, S, 2, c), G5w=_t(al, T, b, S, m, c), G4=_t(al, T, b, m * S, c),
        Gfull=_t(al, T, b, m * S + m, c), dR=_t(al, T, b, wp, c),
        F5n=_t(T, 2, b, wp, c), F5w=_t(T, m, b, wp, c), F4=_t(m * T, b, wp, c),
        dx_rows=_dx_rows(T, b, wp, c, h, wd, lo, m), **crop)


def _dx_rows(T, b, wp, c, h, wd, lo, m) -> list[dict]:
    """dx's rows straight from the two row halves A, B [mT, b, wp, c] of the overlap-add, cropped
    to x: padded row r is A[r] (r < m), A[r] + B[r − m] (m ≤ r < mT) or B[r − m] (r ≥ mT), and x
    holds padded rows lo₀ … lo₀ + h − 1, columns lo₁ … lo₁ + wd − 1.  Up to three pieces along
    the rows (outermost in HBWC), concatenated: IREE writes each piece into its place of dx,
    where padding the halves, summing and cropping cost a zero fill, two copies and a crop."""
    cols = (lo[1], lo[1] + wd)
    r0, r1 = lo[0], lo[0] + h
    pieces = []
    for lo_r, hi_r, use_a, use_b in ((r0, min(m, r1), True, False), (max(m, r0), min(m * T, r1), True, True),
                                     (max(m * T, r0), r1, False, True)):
        if hi_r <= lo_r:
            continue
        pieces.append(dict(
            a=_lim((lo_r, hi_r), (0, b), cols, (0, c)) if use_a else None,
            b=_lim((lo_r - m, hi_r - m), (0, b), cols, (0, c)) if use_b else None,
            t=_t(hi_r - lo_r, b, wd, c)))
    return pieces


def _tile(b: int, c: int, o: int, oh: int, ow: int) -> int:
    """The output tile's side m: 4 where the N₄ tiles of F(4×4) outweigh the c × o weights,
    N₄·(c + o) ≥ TILE4_MIN · c·o, else 2.  F(4×4) halves the tiles' transforms and products per
    output pixel (36 products per 16 pixels against 16 per 4) but transforms each weight into
    36 values, not 16: memory-bound few-channel convs on large maps gain, weight-heavy deep
    stages lose (benchmarks/NOTES.md).  And only up to TILE4_MAX_C input channels: F(4×4)'s
    f32 error grows with the channel sum, from ≈ 10× the direct form's at 16 channels to
    1.6e-5 of max|y| at 512 (F(2×2)'s stays the direct form's); up to 128 it is ≤ 6e-6, inside
    the per-primitive oracle's 1e-5, which checks F(4×4) at 128 channels.
    Not on a map of one F(4×4) tile row or column (oh or ow ≤ 4): IREE 3.13's cuda and rocm
    codegen fails on that form's dx (a vector.transfer_write outside the workgroup
    distribution), and F(2×2) has two tiles there."""
    n4 = b * -(-oh // 4) * -(-ow // 4)
    return 4 if min(oh, ow) > 4 and c <= TILE4_MAX_C and n4 * (c + o) >= TILE4_MIN * c * o else 2


DU_CHUNK = 256      # tiles per partial product of dU (see _du_split)


def _du_split(N: int, c: int, o: int, P: int) -> dict:
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
    return dict(du_k=k, Vs=_t(P * k, n, c), DYs=_t(P * k, n, o), dUs=_t(P * k, c, o), dU4=_t(P, k, c, o))


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
        # F(4×4, 3×3) (tile=4 pins m; the lowering picks it by _tile): a plain map, an odd one
        # (cropped, HBWC), valid and non-square with mixed layouts, one tile, and the dU split
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1, tile=4), [TensorType((2, 8, 8, 8))], [TensorType((8, 8, 3, 3))]),
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1, layout="hbwc", tile=4), [TensorType((2, 8, 7, 7))],
         [TensorType((9, 8, 3, 3))]),
        (dict(stride=1, pad=(0, 0, 0, 0), groups=1, layout="hbwc", out_layout="nchw", tile=4),
         [TensorType((2, 8, 9, 7))], [TensorType((8, 8, 3, 3))]),
        (dict(stride=1, pad=(2, 0, 1, 2), groups=1, out_layout="hbwc", tile=4), [TensorType((1, 10, 5, 6))],
         [TensorType((8, 10, 3, 3))]),
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1, tile=4), [TensorType((3, 8, 3, 4))], [TensorType((8, 8, 3, 3))]),
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1, tile=4), [TensorType((2, 8, 48, 48))], [TensorType((8, 8, 3, 3))]),
        # the most input channels _tile gives F(4×4) (TILE4_MAX_C): its error grows with them
        (dict(stride=1, pad=(1, 1, 1, 1), groups=1, tile=4), [TensorType((2, 128, 8, 8))], [TensorType((16, 128, 3, 3))]),
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

    @staticmethod
    def reference(xp, x, w, tile=None, **attrs):
        """conv's reference: an example's `tile` pins the algorithm, not the function."""
        return Conv.reference(xp, x, w, **attrs)

    def saved(self, ins, ps, out):
        return [self.context(ins, ps, out)["wg"]["V_type"]]

    def context(self, ins, ps, out):
        x, y = self.logical(ins[0]), self.logical_out(out)
        b, c, h, wd = x.dims
        _, o, oh, ow = y.dims
        m = getattr(self, "tile", None) or _tile(b, c, o, oh, ow)      # an example may pin m (attr tile)
        return dict(wg=_winograd(b, c, h, wd, o, oh, ow, (self.pad[0], self.pad[2]), m))

    def template(self, ctx):
        return "prims/conv_winograd.mlir.j2"
