"""Experiment: is a Winograd F(2×2, 3×3) 3×3 stride-1 conv, written in StableHLO, faster under
IREE llvm-cpu than lmc's conv form?  For the shapes of mnist_cnn's convs (batch 128, f32, pad 1):
conv2 (C=O=32, 28×28) and conv4 (C=O=64, 14×14).  (The data gradient dx is the same conv with the
kernel flipped: same cost, not timed separately.)

Each candidate is a standalone `module @model` with one function
    @conv(x: [H, B, W, C] (HBWC, lmc's internal activation layout), w: [O, C, 3, 3]) -> y: [H, B, W, O]
  lmc        lmc's conv_fwd for that layer, cut out of mnist_cnn's lowered module under
             conv_form "matmul" (the 3 row
             matmuls, K = 3·C, over the padded input's column slices), y only returned
  lmc+P      the same, also returning the patches x_P it saves for the backward (the train step's fwd)
  lmc.mm     its 3 row matmuls and their sum alone, on given patches
  im2col     one matmul, K = 9·C, over the 9 shifted slices concatenated
  conv       one stablehlo.convolution in the same HBWC layout; conv_nhwc: in NHWC (x, y [B, H, W, C])
  wino       Winograd F(2×2,3×3): 4×4 input tiles at stride 2 (16 strided slices of the padded
             input); V = Bᵀ d B as adds/subtracts of the slices (rows, then columns), the 16 tile
             positions concatenated as the leading dim, channels innermost: V [16, tiles·B, C];
             U = G g Gᵀ (from w, every call: [O, C, 9]·(G⊗G)ᵀ); M = one dot_general batched over
             the 16 positions, [16, tiles·B, C]·[16, C, O]; y = Aᵀ M A as adds (2×2 outputs per
             tile), the four output phases concatenated back into [H, B, W, O]
  wino_split the same without V's concatenate (IREE copies each position into the stacked V with a
             flow.tensor.update): 16 separate matmuls [tiles·B, C]·[C, O]
  wino:<in>/<out>  transform spellings: in ∈ adds, dot (one dot_general with the constant 16×16
             Bᵀ⊗Bᵀ over the stacked slices), bcast (Σ of 16 broadcast·constant terms into
             [16, …] at once), bcast2 (the same separable: rows, then columns); out ∈ adds, dot
             (4×16 Aᵀ⊗Aᵀ, then a transpose), bcast (Σ of 16 terms straight into [T, 2, B, T, 2, O]).
             wino = wino:adds/adds; wino_dotin = wino:dot/adds; wino_dotout = wino:adds/dot
  wino_mm    the batched matmul alone on given V, U: the matmul's share of wino's time
  f2, f4     Winograd F(2×2,3×3) / F(4×4,3×3) (6×6 tiles at stride 4, 36 positions) with both
             transforms separable broadcast multiply-adds (module_wino_m: 2 dispatches each way, no
             concatenates); f<m>/dot (the default): output transform by the constant Aᵀ⊗Aᵀ matrix,
             f<m>/bcast2: separable like the input.  Parts, timed alone on given inputs:
             f<m>.in (x → V), f<m>.mm (V, U → M), f<m>[/bcast2].out (M → y)
  f4x<k>     f4/bcast2 in k batch chunks, one after another: x sliced along its batch, each
             chunk's conv a call of the same function, the outputs concatenated (each chunk's
             transforms stay in cache; benchmarks/NOTES.md, "Winograd in batch chunks")
Numerics are checked against a float64 numpy direct conv (max |y − ref| / max |ref|).  Then all
candidates of a shape are timed interleaved (micro.interleave: round-robin, medians of wall and of
process CPU ms per call; device-resident inputs; the call is synchronous).  Dispatch counts are
read from an --compile-to=executable-sources run.

    python benchmarks/winograd_ab.py [--shapes conv2 conv4] [--reps 11] [--forms ...]
        [--flags --iree-global-opt-data-tiling]"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                               # noqa: E402
from lmc.compile import compile_module, find_compiler, flags  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.run.runtime import Module  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402

B = 128
SHAPES = {"conv2": (28, 32, 32), "conv4": (14, 64, 64)}      # H (= W), C, O
FORMS = ["lmc", "lmc+P", "lmc.mm", "im2col", "conv", "conv_nhwc", "wino", "wino:bcast2/adds", "wino_dotout",
         "f2/bcast2", "f4", "f4/bcast2", "f2.in", "f2.mm", "f2/bcast2.out", "f4.in", "f4.mm", "f4/bcast2.out"]
# also: wino_split, wino_dotin, wino:<in>/<out> with in ∈ adds dot bcast bcast2, out ∈ adds dot bcast,
# f2, f<m>/bcast, f<m>.out (all measured no better than these; numbers in the commit message)

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


# F(4×4, 3×3) (Lavin & Gray 2015): 6×6 tiles at stride 4
BT4 = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)
AT4 = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)


def t(*dims) -> str:
    return "tensor<" + "x".join(str(d) for d in dims) + "xf32>"


def dense(a: np.ndarray) -> str:
    def rec(x):
        return "[" + ", ".join(rec(v) for v in x) + "]" if x.ndim else repr(float(x))
    return f"dense<{rec(np.asarray(a, np.float64))}> : {t(*a.shape)}"


_MNIST = []


def lmc_fwd(h: int, c: int, o: int) -> tuple[str, str]:
    """(name, text) of lmc's conv_fwd for this shape, cut out of mnist_cnn's lowered module."""
    if not _MNIST:
        # the row-matmul form (conv_form "matmul"; the default now spells these convs as
        # conv_winograd, the build of this probe's F(2×2,3×3))
        _MNIST.append(lower(infer(load_spec(ROOT / "specs" / "mnist_cnn.yaml", [f"train.batch_size={B}"])),
                            options=LowerOptions(conv_form="matmul")))
    text = _MNIST[0]
    sig = f"(%x: {t(h, B, h, c)}, %w: {t(o, c, 3, 3)})"
    m = re.search(r"^func\.func private @(conv_fwd_\w+)" + re.escape(sig) + r".*?^}\n", text, re.M | re.S)
    assert m, f"no conv_fwd {sig} in mnist_cnn's module"
    return m.group(1), m.group(0)


def module_lmc(h, c, o, with_p=False) -> str:
    name, fn = lmc_fwd(h, c, o)
    y, p = t(h, B, h, o), t(h + 2, B, h, 3 * c)
    rt = f"{y}, {p}" if with_p else y
    ret = f"%r#0, %r#1 : {y}, {p}" if with_p else f"%r#0 : {y}"
    return (f"module @model {{\n{fn}"
            f"func.func @conv(%x: {t(h, B, h, c)}, %w: {t(o, c, 3, 3)}) -> ({rt}) {{\n"
            f"  %r:2 = func.call @{name}(%x, %w) : ({t(h, B, h, c)}, {t(o, c, 3, 3)}) -> ({y}, {p})\n"
            f"  return {ret}\n}}\n}}\n")


def module_lmc_mm(h, c, o) -> str:
    """lmc's 3 row matmuls and their sum alone, on given patches x_P [H+2, B, W, 3C] and kernel rows
    [3, 3C, O] (the dot_generals as the template spells them): the matmuls' share of lmc's time."""
    pt, rt_, rg = t(h + 2, B, h, 3 * c), t(h, B, h, 3 * c), t(h, B, h, 3, 1, c)
    yg = t(1, h, B, h, o)
    L = [f"func.func @conv(%P: {pt}, %W: {t(3, 3, c, o)}) -> {t(h, B, h, o)} {{"]
    for i in range(3):
        L.append(f"  %r{i} = stablehlo.slice %P [{i}:{i + h}, 0:{B}, 0:{h}, 0:{3 * c}] : ({pt}) -> {rt_}")
        L.append(f"  %rg{i} = stablehlo.reshape %r{i} : ({rt_}) -> {rg}")
        L.append(f"  %w{i}s = stablehlo.slice %W [{i}:{i + 1}, 0:3, 0:{c}, 0:{o}] : ({t(3, 3, c, o)}) -> {t(1, 3, c, o)}")
        L.append(f"  %m{i} = stablehlo.dot_general %rg{i}, %w{i}s, batching_dims = [4] x [0], contracting_dims = [3, 5] x [1, 2] : "
                 f"({rg}, {t(1, 3, c, o)}) -> {yg}")
    L.append(f"  %a1 = stablehlo.add %m0, %m1 : {yg}")
    L.append(f"  %a2 = stablehlo.add %a1, %m2 : {yg}")
    L.append(f"  %y = stablehlo.reshape %a2 : ({yg}) -> {t(h, B, h, o)}")
    L.append(f"  return %y : {t(h, B, h, o)}\n}}")
    return "module @model {\n" + "\n".join(L) + "\n}\n"


def module_conv(h, c, o, nhwc=False) -> str:
    xt, yt = (t(B, h, h, c), t(B, h, h, o)) if nhwc else (t(h, B, h, c), t(h, B, h, o))
    dn = "[b, 0, 1, f]x[o, i, 0, 1]->[b, 0, 1, f]" if nhwc else "[0, b, 1, f]x[o, i, 0, 1]->[0, b, 1, f]"
    return (f"module @model {{\nfunc.func @conv(%x: {xt}, %w: {t(o, c, 3, 3)}) -> {yt} {{\n"
            f"  %y = stablehlo.convolution(%x, %w) dim_numbers = {dn}, "
            f"window = {{stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]}} "
            f"{{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : ({xt}, {t(o, c, 3, 3)}) -> {yt}\n"
            f"  return %y : {yt}\n}}\n}}\n")


def module_im2col(h, c, o) -> str:
    """One matmul, K = 9·C, over the 9 shifted slices of the padded input concatenated on C."""
    xt, yt, pt = t(h, B, h, c), t(h, B, h, o), t(h + 2, B, h + 2, c)
    L = [f"func.func @conv(%x: {xt}, %w: {t(o, c, 3, 3)}) -> {yt} {{",
         "  %zero = stablehlo.constant dense<0.0> : tensor<f32>",
         f"  %xp = stablehlo.pad %x, %zero, low = [1, 0, 1, 0], high = [1, 0, 1, 0], interior = [0, 0, 0, 0] : ({xt}, tensor<f32>) -> {pt}"]
    for i in range(3):
        for j in range(3):
            L.append(f"  %s{i}{j} = stablehlo.slice %xp [{i}:{i + h}, 0:{B}, {j}:{j + h}, 0:{c}] : ({pt}) -> {xt}")
    L.append("  %P = stablehlo.concatenate " + ", ".join(f"%s{i}{j}" for i in range(3) for j in range(3))
             + f", dim = 3 : ({', '.join([xt] * 9)}) -> {t(h, B, h, 9 * c)}")
    L.append(f"  %Pf = stablehlo.reshape %P : ({t(h, B, h, 9 * c)}) -> {t(h * B * h, 9 * c)}")
    L.append(f"  %wt = stablehlo.transpose %w, dims = [2, 3, 1, 0] : ({t(o, c, 3, 3)}) -> {t(3, 3, c, o)}")
    L.append(f"  %wf = stablehlo.reshape %wt : ({t(3, 3, c, o)}) -> {t(9 * c, o)}")
    L.append(f"  %yf = stablehlo.dot_general %Pf, %wf, contracting_dims = [1] x [0] : ({t(h * B * h, 9 * c)}, {t(9 * c, o)}) -> {t(h * B * h, o)}")
    L.append(f"  %y = stablehlo.reshape %yf : ({t(h * B * h, o)}) -> {yt}")
    L.append(f"  return %y : {yt}\n}}")
    return "module @model {\n" + "\n".join(L) + "\n}\n"


def _lin(out: str, terms, ty: str, L: list):
    """%out = Σ sign·%name over terms [(sign, name)], as adds/subtracts."""
    terms = sorted(terms, key=lambda st: -st[0])      # a positive term first
    (s0, a0), rest = terms[0], terms[1:]
    assert s0 == 1
    acc = a0
    for k, (s, a) in enumerate(rest):
        nm = out if k == len(rest) - 1 else f"{out}_{k}"
        L.append(f"  %{nm} = stablehlo.{'add' if s > 0 else 'subtract'} %{acc}, %{a} : {ty}")
        acc = nm


def module_wino(h, c, o, tin="adds", tout="adds", mm_only=False) -> str:
    """tin "split": the "adds" input transform, its 16 positions left apart (no concatenate: IREE
    3.13 copies each into the stacked V with a flow.tensor.update) and 16 separate matmuls; tout
    must be "adds" then."""
    split = tin == "split"
    tin = "adds" if split else tin
    assert not split or tout == "adds"
    T = (h + 1) // 2                 # tiles per side
    N = T * B * T
    hp = 2 * T + 2
    L = []
    if mm_only:                      # the batched matmul alone, on given V and U
        L.append(f"func.func @conv(%V: {t(16, N, c)}, %U: {t(16, c, o)}) -> {t(16, N, o)} {{")
        L.append(f"  %M = stablehlo.dot_general %V, %U, batching_dims = [0] x [0], contracting_dims = [2] x [1] : "
                 f"({t(16, N, c)}, {t(16, c, o)}) -> {t(16, N, o)}")
        L.append(f"  return %M : {t(16, N, o)}\n}}")
        return "module @model {\n" + "\n".join(L) + "\n}\n"
    dt = t(T, B, T, c)
    L.append(f"func.func @conv(%x: {t(h, B, h, c)}, %w: {t(o, c, 3, 3)}) -> {t(h, B, h, o)} {{")
    L.append("  %zero = stablehlo.constant dense<0.0> : tensor<f32>")
    L.append(f"  %xp = stablehlo.pad %x, %zero, low = [1, 0, 1, 0], high = [{hp - h - 1}, 0, {hp - h - 1}, 0], "
             f"interior = [0, 0, 0, 0] : ({t(h, B, h, c)}, tensor<f32>) -> {t(hp, B, hp, c)}")
    for a in range(4):
        for b in range(4):
            L.append(f"  %d{a}{b} = stablehlo.slice %xp [{a}:{a + 2 * T - 1}:2, 0:{B}, {b}:{b + 2 * T - 1}:2, 0:{c}] : "
                     f"({t(hp, B, hp, c)}) -> {dt}")
    vt = t(16, T, B, T, c)
    if tin == "bcast":                           # V = Σ_ab (Bᵀ[:, a] ⊗ Bᵀ[:, b]) · d[a][b]: one elementwise op
        terms = []
        for a in range(4):
            for b in range(4):
                L.append(f"  %d{a}{b}b = stablehlo.broadcast_in_dim %d{a}{b}, dims = [1, 2, 3, 4] : ({dt}) -> {vt}")
                L.append(f"  %k{a}{b} = stablehlo.constant {dense(np.kron(BT[:, a], BT[:, b]))}")
                L.append(f"  %k{a}{b}b = stablehlo.broadcast_in_dim %k{a}{b}, dims = [0] : ({t(16)}) -> {vt}")
                L.append(f"  %p{a}{b} = stablehlo.multiply %d{a}{b}b, %k{a}{b}b : {vt}")
                terms.append((1, f"p{a}{b}"))
        _lin("Vc", terms, vt, L)
        L.append(f"  %V = stablehlo.reshape %Vc : ({vt}) -> {t(16, N, c)}")
    elif tin == "bcast2":                        # the same, separable: rows, then columns
        rt_, r4 = t(T, B, hp, c), t(4, T, B, hp, c)
        terms = []
        for a in range(4):
            L.append(f"  %e{a} = stablehlo.slice %xp [{a}:{a + 2 * T - 1}:2, 0:{B}, 0:{hp}, 0:{c}] : ({t(hp, B, hp, c)}) -> {rt_}")
            L.append(f"  %e{a}b = stablehlo.broadcast_in_dim %e{a}, dims = [1, 2, 3, 4] : ({rt_}) -> {r4}")
            L.append(f"  %ka{a} = stablehlo.constant {dense(BT[:, a])}")
            L.append(f"  %ka{a}b = stablehlo.broadcast_in_dim %ka{a}, dims = [0] : ({t(4)}) -> {r4}")
            L.append(f"  %q{a} = stablehlo.multiply %e{a}b, %ka{a}b : {r4}")
            terms.append((1, f"q{a}"))
        _lin("R", terms, r4, L)
        c4, v6 = t(4, T, B, T, c), t(4, 4, T, B, T, c)
        terms = []
        for b in range(4):
            L.append(f"  %f{b} = stablehlo.slice %R [0:4, 0:{T}, 0:{B}, {b}:{b + 2 * T - 1}:2, 0:{c}] : ({r4}) -> {c4}")
            L.append(f"  %f{b}b = stablehlo.broadcast_in_dim %f{b}, dims = [0, 2, 3, 4, 5] : ({c4}) -> {v6}")
            L.append(f"  %kb{b} = stablehlo.constant {dense(BT[:, b])}")
            L.append(f"  %kb{b}b = stablehlo.broadcast_in_dim %kb{b}, dims = [1] : ({t(4)}) -> {v6}")
            L.append(f"  %g{b} = stablehlo.multiply %f{b}b, %kb{b}b : {v6}")
            terms.append((1, f"g{b}"))
        _lin("Vc", terms, v6, L)
        L.append(f"  %V = stablehlo.reshape %Vc : ({v6}) -> {t(16, N, c)}")
    elif tin == "adds":
        for x in range(4):                       # rows: r[x][b] = Σ_a Bᵀ[x, a] d[a][b]
            for b in range(4):
                _lin(f"r{x}{b}", [(int(BT[x, a]), f"d{a}{b}") for a in range(4) if BT[x, a]], dt, L)
        for x in range(4):
            for y in range(4):
                _lin(f"v{x}{y}", [(int(BT[y, b]), f"r{x}{b}") for b in range(4) if BT[y, b]], dt, L)
                L.append(f"  %v{x}{y}e = stablehlo.reshape %v{x}{y} : ({dt}) -> {t(1, T, B, T, c)}")
    if split:
        pass
    elif tin == "adds":
        L.append("  %Vc = stablehlo.concatenate " + ", ".join(f"%v{x}{y}e" for x in range(4) for y in range(4))
                 + f", dim = 0 : ({', '.join([t(1, T, B, T, c)] * 16)}) -> {t(16, T, B, T, c)}")
        L.append(f"  %V = stablehlo.reshape %Vc : ({t(16, T, B, T, c)}) -> {t(16, N, c)}")
    elif tin == "dot":                           # V = (Bᵀ⊗Bᵀ) · D, D the 16 slices stacked
        for a in range(4):
            for b in range(4):
                L.append(f"  %d{a}{b}e = stablehlo.reshape %d{a}{b} : ({dt}) -> {t(1, T, B, T, c)}")
        L.append("  %Dc = stablehlo.concatenate " + ", ".join(f"%d{a}{b}e" for a in range(4) for b in range(4))
                 + f", dim = 0 : ({', '.join([t(1, T, B, T, c)] * 16)}) -> {t(16, T, B, T, c)}")
        L.append(f"  %D = stablehlo.reshape %Dc : ({t(16, T, B, T, c)}) -> {t(16, N * c)}")
        L.append(f"  %BB = stablehlo.constant {dense(np.kron(BT, BT))}")
        L.append(f"  %Vf = stablehlo.dot_general %BB, %D, contracting_dims = [1] x [0] : ({t(16, 16)}, {t(16, N * c)}) -> {t(16, N * c)}")
        L.append(f"  %V = stablehlo.reshape %Vf : ({t(16, N * c)}) -> {t(16, N, c)}")
    # U[ξν] = G g Gᵀ: [O, C, 9] · (G⊗G)ᵀ → [O, C, 16] → [16, C, O]
    L.append(f"  %GG = stablehlo.constant {dense(np.kron(G, G))}")
    L.append(f"  %wr = stablehlo.reshape %w : ({t(o, c, 3, 3)}) -> {t(o, c, 9)}")
    L.append(f"  %Uo = stablehlo.dot_general %wr, %GG, contracting_dims = [2] x [1] : ({t(o, c, 9)}, {t(16, 9)}) -> {t(o, c, 16)}")
    L.append(f"  %U = stablehlo.transpose %Uo, dims = [2, 1, 0] : ({t(o, c, 16)}) -> {t(16, c, o)}")
    mt = t(N, o)
    if split:
        for k in range(16):
            x, y = k // 4, k % 4
            L.append(f"  %u{k}s = stablehlo.slice %U [{k}:{k + 1}, 0:{c}, 0:{o}] : ({t(16, c, o)}) -> {t(1, c, o)}")
            L.append(f"  %u{k} = stablehlo.reshape %u{k}s : ({t(1, c, o)}) -> {t(c, o)}")
            L.append(f"  %v{k}f = stablehlo.reshape %v{x}{y} : ({dt}) -> {t(N, c)}")
            L.append(f"  %m{x}{y} = stablehlo.dot_general %v{k}f, %u{k}, contracting_dims = [1] x [0] : ({t(N, c)}, {t(c, o)}) -> {mt}")
    else:
        L.append(f"  %M = stablehlo.dot_general %V, %U, batching_dims = [0] x [0], contracting_dims = [2] x [1] : "
                 f"({t(16, N, c)}, {t(16, c, o)}) -> {t(16, N, o)}")
    if tout == "bcast":                          # Y[t, i, b, t', j] = Σ_ξν Aᵀ[i, ξ] Aᵀ[j, ν] M[ξν]: one elementwise op
        y6, m4 = t(T, 2, B, T, 2, o), t(T, B, T, o)
        terms = []
        for k in range(16):
            L.append(f"  %m{k}s = stablehlo.slice %M [{k}:{k + 1}, 0:{N}, 0:{o}] : ({t(16, N, o)}) -> {t(1, N, o)}")
            L.append(f"  %m{k}r = stablehlo.reshape %m{k}s : ({t(1, N, o)}) -> {m4}")
            L.append(f"  %m{k}b = stablehlo.broadcast_in_dim %m{k}r, dims = [0, 2, 3, 5] : ({m4}) -> {y6}")
            L.append(f"  %a{k} = stablehlo.constant {dense(np.outer(AT[:, k // 4], AT[:, k % 4]))}")
            L.append(f"  %a{k}b = stablehlo.broadcast_in_dim %a{k}, dims = [1, 4] : ({t(2, 2)}) -> {y6}")
            L.append(f"  %o{k} = stablehlo.multiply %m{k}b, %a{k}b : {y6}")
            terms.append((1, f"o{k}"))
        _lin("ys", terms, y6, L)
    elif tout == "adds":
        for k in range(0 if split else 16):
            L.append(f"  %m{k}s = stablehlo.slice %M [{k}:{k + 1}, 0:{N}, 0:{o}] : ({t(16, N, o)}) -> {t(1, N, o)}")
            L.append(f"  %m{k // 4}{k % 4} = stablehlo.reshape %m{k}s : ({t(1, N, o)}) -> {mt}")
        for i in range(2):                       # s[i][ν] = Σ_ξ Aᵀ[i, ξ] M[ξ][ν]
            for v in range(4):
                _lin(f"s{i}{v}", [(int(AT[i, x]), f"m{x}{v}") for x in range(4) if AT[i, x]], mt, L)
        for i in range(2):
            for j in range(2):
                _lin(f"y{i}{j}f", [(int(AT[j, v]), f"s{i}{v}") for v in range(4) if AT[j, v]], mt, L)
                L.append(f"  %y{i}{j} = stablehlo.reshape %y{i}{j}f : ({mt}) -> {t(T, 1, B, T, 1, o)}")
        for i in range(2):
            L.append(f"  %yr{i} = stablehlo.concatenate %y{i}0, %y{i}1, dim = 4 : "
                     f"({t(T, 1, B, T, 1, o)}, {t(T, 1, B, T, 1, o)}) -> {t(T, 1, B, T, 2, o)}")
        L.append(f"  %ys = stablehlo.concatenate %yr0, %yr1, dim = 1 : ({t(T, 1, B, T, 2, o)}, {t(T, 1, B, T, 2, o)}) -> {t(T, 2, B, T, 2, o)}")
    else:                                        # Y = (Aᵀ⊗Aᵀ) · M → [i, j, T, B, T, O] → [T, i, B, T, j, O]
        L.append(f"  %AA = stablehlo.constant {dense(np.kron(AT, AT))}")
        L.append(f"  %Mf = stablehlo.reshape %M : ({t(16, N, o)}) -> {t(16, N * o)}")
        L.append(f"  %Yf = stablehlo.dot_general %AA, %Mf, contracting_dims = [1] x [0] : ({t(4, 16)}, {t(16, N * o)}) -> {t(4, N * o)}")
        L.append(f"  %Y6 = stablehlo.reshape %Yf : ({t(4, N * o)}) -> {t(2, 2, T, B, T, o)}")
        L.append(f"  %ys = stablehlo.transpose %Y6, dims = [2, 0, 3, 4, 1, 5] : ({t(2, 2, T, B, T, o)}) -> {t(T, 2, B, T, 2, o)}")
    L.append(f"  %yf = stablehlo.reshape %ys : ({t(T, 2, B, T, 2, o)}) -> {t(2 * T, B, 2 * T, o)}")
    if 2 * T != h:
        L.append(f"  %y = stablehlo.slice %yf [0:{h}, 0:{B}, 0:{h}, 0:{o}] : ({t(2 * T, B, 2 * T, o)}) -> {t(h, B, h, o)}")
    else:
        L.append(f"  %y = stablehlo.reshape %yf : ({t(2 * T, B, 2 * T, o)}) -> {t(h, B, h, o)}")
    L.append(f"  return %y : {t(h, B, h, o)}\n}}")
    return "module @model {\n" + "\n".join(L) + "\n}\n"


def module_wino_m(h, c, o, m: int, tout: str = "dot", part: str = "all") -> str:
    """Winograd F(m×m, 3×3), m = 2 or 4, α = m + 2: the input transform separable as broadcast
    multiply-adds (rows into R [α, T, B, Wp, C], then columns into V [α, α, T, B, T, C]); U =
    G g Gᵀ; one batched matmul over the α² positions; the output transform either one dot_general
    with the constant Aᵀ⊗Aᵀ [m², α²] and a transpose (tout "dot") or Σ of α² broadcast·constant
    terms straight into [T, m, B, T, m, O] ("bcast") or separable like the input ("bcast2": over
    ξ into S [m, α, T, B, T, O], then over ν into [T, m, B, T, m, O]).  part: "all", "in" (x → V
    only), "mm" (V, U → M only), "out" (M → y only)."""
    BTm, Gm, ATm = (BT, G, AT) if m == 2 else (BT4, G4, AT4)
    al = m + 2
    P = al * al
    T = -(-h // m)
    N = T * B * T
    hp = m * T + 2
    L = []
    if part == "mm":                             # the batched matmul alone, on given V, U
        L.append(f"func.func @conv(%V: {t(P, N, c)}, %U: {t(P, c, o)}) -> {t(P, N, o)} {{")
        L.append(f"  %M = stablehlo.dot_general %V, %U, batching_dims = [0] x [0], contracting_dims = [2] x [1] : "
                 f"({t(P, N, c)}, {t(P, c, o)}) -> {t(P, N, o)}")
        L.append(f"  return %M : {t(P, N, o)}\n}}")
        return "module @model {\n" + "\n".join(L) + "\n}\n"
    if part == "out":
        L.append(f"func.func @conv(%M: {t(P, N, o)}) -> {t(h, B, h, o)} {{")
    else:
        L.append(f"func.func @conv(%x: {t(h, B, h, c)}, %w: {t(o, c, 3, 3)}) -> "
                 f"{t(P, N, c) if part == 'in' else t(h, B, h, o)} {{")
        L.append("  %zero = stablehlo.constant dense<0.0> : tensor<f32>")
        L.append(f"  %xp = stablehlo.pad %x, %zero, low = [1, 0, 1, 0], high = [{hp - h - 1}, 0, {hp - h - 1}, 0], "
                 f"interior = [0, 0, 0, 0] : ({t(h, B, h, c)}, tensor<f32>) -> {t(hp, B, hp, c)}")
        rt_, r4 = t(T, B, hp, c), t(al, T, B, hp, c)
        terms = []
        for a in range(al):
            L.append(f"  %e{a} = stablehlo.slice %xp [{a}:{a + m * (T - 1) + 1}:{m}, 0:{B}, 0:{hp}, 0:{c}] : ({t(hp, B, hp, c)}) -> {rt_}")
            L.append(f"  %e{a}b = stablehlo.broadcast_in_dim %e{a}, dims = [1, 2, 3, 4] : ({rt_}) -> {r4}")
            L.append(f"  %ka{a} = stablehlo.constant {dense(BTm[:, a])}")
            L.append(f"  %ka{a}b = stablehlo.broadcast_in_dim %ka{a}, dims = [0] : ({t(al)}) -> {r4}")
            L.append(f"  %q{a} = stablehlo.multiply %e{a}b, %ka{a}b : {r4}")
            terms.append((1, f"q{a}"))
        _lin("R", terms, r4, L)
        c4, v6 = t(al, T, B, T, c), t(al, al, T, B, T, c)
        terms = []
        for b in range(al):
            L.append(f"  %f{b} = stablehlo.slice %R [0:{al}, 0:{T}, 0:{B}, {b}:{b + m * (T - 1) + 1}:{m}, 0:{c}] : ({r4}) -> {c4}")
            L.append(f"  %f{b}b = stablehlo.broadcast_in_dim %f{b}, dims = [0, 2, 3, 4, 5] : ({c4}) -> {v6}")
            L.append(f"  %kb{b} = stablehlo.constant {dense(BTm[:, b])}")
            L.append(f"  %kb{b}b = stablehlo.broadcast_in_dim %kb{b}, dims = [1] : ({t(al)}) -> {v6}")
            L.append(f"  %g{b} = stablehlo.multiply %f{b}b, %kb{b}b : {v6}")
            terms.append((1, f"g{b}"))
        _lin("Vc", terms, v6, L)
        L.append(f"  %V = stablehlo.reshape %Vc : ({v6}) -> {t(P, N, c)}")
        if part == "in":
            L.append(f"  return %V : {t(P, N, c)}\n}}")
            return "module @model {\n" + "\n".join(L) + "\n}\n"
        L.append(f"  %GG = stablehlo.constant {dense(np.kron(Gm, Gm))}")
        L.append(f"  %wr = stablehlo.reshape %w : ({t(o, c, 3, 3)}) -> {t(o, c, 9)}")
        L.append(f"  %Uo = stablehlo.dot_general %wr, %GG, contracting_dims = [2] x [1] : ({t(o, c, 9)}, {t(P, 9)}) -> {t(o, c, P)}")
        L.append(f"  %U = stablehlo.transpose %Uo, dims = [2, 1, 0] : ({t(o, c, P)}) -> {t(P, c, o)}")
        L.append(f"  %M = stablehlo.dot_general %V, %U, batching_dims = [0] x [0], contracting_dims = [2] x [1] : "
                 f"({t(P, N, c)}, {t(P, c, o)}) -> {t(P, N, o)}")
    y6 = t(T, m, B, T, m, o)
    if tout == "dot":
        L.append(f"  %AA = stablehlo.constant {dense(np.kron(ATm, ATm))}")
        L.append(f"  %Mf = stablehlo.reshape %M : ({t(P, N, o)}) -> {t(P, N * o)}")
        L.append(f"  %Yf = stablehlo.dot_general %AA, %Mf, contracting_dims = [1] x [0] : ({t(m * m, P)}, {t(P, N * o)}) -> {t(m * m, N * o)}")
        L.append(f"  %Y6 = stablehlo.reshape %Yf : ({t(m * m, N * o)}) -> {t(m, m, T, B, T, o)}")
        L.append(f"  %ys = stablehlo.transpose %Y6, dims = [2, 0, 3, 4, 1, 5] : ({t(m, m, T, B, T, o)}) -> {y6}")
    elif tout == "bcast2":                       # separable: S [m, α, …] over ξ, then Y over ν
        M6, s6, s5 = t(al, al, T, B, T, o), t(m, al, T, B, T, o), t(al, T, B, T, o)
        L.append(f"  %M6 = stablehlo.reshape %M : ({t(P, N, o)}) -> {M6}")
        terms = []
        for xi in range(al):
            L.append(f"  %n{xi}s = stablehlo.slice %M6 [{xi}:{xi + 1}, 0:{al}, 0:{T}, 0:{B}, 0:{T}, 0:{o}] : ({M6}) -> {t(1, al, T, B, T, o)}")
            L.append(f"  %n{xi} = stablehlo.reshape %n{xi}s : ({t(1, al, T, B, T, o)}) -> {s5}")
            L.append(f"  %n{xi}b = stablehlo.broadcast_in_dim %n{xi}, dims = [1, 2, 3, 4, 5] : ({s5}) -> {s6}")
            L.append(f"  %ki{xi} = stablehlo.constant {dense(ATm[:, xi])}")
            L.append(f"  %ki{xi}b = stablehlo.broadcast_in_dim %ki{xi}, dims = [0] : ({t(m)}) -> {s6}")
            L.append(f"  %z{xi} = stablehlo.multiply %n{xi}b, %ki{xi}b : {s6}")
            terms.append((1, f"z{xi}"))
        _lin("S", terms, s6, L)
        s4 = t(m, T, B, T, o)
        terms = []
        for nu in range(al):
            L.append(f"  %h{nu}s = stablehlo.slice %S [0:{m}, {nu}:{nu + 1}, 0:{T}, 0:{B}, 0:{T}, 0:{o}] : ({s6}) -> {t(m, 1, T, B, T, o)}")
            L.append(f"  %h{nu} = stablehlo.reshape %h{nu}s : ({t(m, 1, T, B, T, o)}) -> {s4}")
            L.append(f"  %h{nu}b = stablehlo.broadcast_in_dim %h{nu}, dims = [1, 0, 2, 3, 5] : ({s4}) -> {y6}")
            L.append(f"  %kj{nu} = stablehlo.constant {dense(ATm[:, nu])}")
            L.append(f"  %kj{nu}b = stablehlo.broadcast_in_dim %kj{nu}, dims = [4] : ({t(m)}) -> {y6}")
            L.append(f"  %u{nu} = stablehlo.multiply %h{nu}b, %kj{nu}b : {y6}")
            terms.append((1, f"u{nu}"))
        _lin("ys", terms, y6, L)
    else:
        m4 = t(T, B, T, o)
        terms = []
        for k in range(P):
            L.append(f"  %m{k}s = stablehlo.slice %M [{k}:{k + 1}, 0:{N}, 0:{o}] : ({t(P, N, o)}) -> {t(1, N, o)}")
            L.append(f"  %m{k}r = stablehlo.reshape %m{k}s : ({t(1, N, o)}) -> {m4}")
            L.append(f"  %m{k}b = stablehlo.broadcast_in_dim %m{k}r, dims = [0, 2, 3, 5] : ({m4}) -> {y6}")
            L.append(f"  %a{k} = stablehlo.constant {dense(np.outer(ATm[:, k // al], ATm[:, k % al]))}")
            L.append(f"  %a{k}b = stablehlo.broadcast_in_dim %a{k}, dims = [1, 4] : ({t(m, m)}) -> {y6}")
            L.append(f"  %o{k} = stablehlo.multiply %m{k}b, %a{k}b : {y6}")
            terms.append((1, f"o{k}"))
        _lin("ys", terms, y6, L)
    L.append(f"  %yf = stablehlo.reshape %ys : ({y6}) -> {t(m * T, B, m * T, o)}")
    if m * T != h:
        L.append(f"  %y = stablehlo.slice %yf [0:{h}, 0:{B}, 0:{h}, 0:{o}] : ({t(m * T, B, m * T, o)}) -> {t(h, B, h, o)}")
    else:
        L.append(f"  %y = stablehlo.reshape %yf : ({t(m * T, B, m * T, o)}) -> {t(h, B, h, o)}")
    L.append(f"  return %y : {t(h, B, h, o)}\n}}")
    return "module @model {\n" + "\n".join(L) + "\n}\n"


def module_chunked(h, c, o, k: int) -> str:
    """f4/bcast2 over k batch chunks of B/k: slices of x, one call per chunk, y concatenated."""
    global B
    whole = B
    B = whole // k
    try:
        body = module_wino_m(h, c, o, 4, "bcast2")
    finally:
        B = whole
    body = body.replace("module @model {\n", "").rstrip().rstrip("}").replace("func.func @conv(", "func.func private @convk(")
    b = whole // k
    xt, wt, yt = t(h, b, h, c), t(o, c, 3, 3), t(h, b, h, o)
    L = [f"func.func @conv(%x: {t(h, whole, h, c)}, %w: {wt}) -> {t(h, whole, h, o)} {{"]
    for i in range(k):
        L.append(f"  %x{i} = stablehlo.slice %x [0:{h}, {i * b}:{(i + 1) * b}, 0:{h}, 0:{c}] : ({t(h, whole, h, c)}) -> {xt}")
        L.append(f"  %y{i} = func.call @convk(%x{i}, %w) : ({xt}, {wt}) -> {yt}")
    L.append(f"  %y = stablehlo.concatenate {', '.join(f'%y{i}' for i in range(k))}, dim = 1 : "
             f"({', '.join([yt] * k)}) -> {t(h, whole, h, o)}")
    L.append(f"  return %y : {t(h, whole, h, o)}\n}}")
    return "module @model {\n" + body + "\n" + "\n".join(L) + "\n}\n"


def module_text(form, h, c, o) -> str:
    if re.fullmatch(r"f4x\d+", form):
        return module_chunked(h, c, o, int(form[3:]))
    if form == "lmc":
        return module_lmc(h, c, o)
    if form == "lmc+P":
        return module_lmc(h, c, o, with_p=True)
    if form == "conv":
        return module_conv(h, c, o)
    if form == "wino":
        return module_wino(h, c, o)
    if form == "wino_dotin":
        return module_wino(h, c, o, tin="dot")
    if form == "wino_dotout":
        return module_wino(h, c, o, tout="dot")
    if form == "wino_mm":
        return module_wino(h, c, o, mm_only=True)
    if form == "im2col":
        return module_im2col(h, c, o)
    if form == "lmc.mm":
        return module_lmc_mm(h, c, o)
    mm = re.fullmatch(r"f([24])(?:/(dot|bcast2?))?(?:\.(in|mm|out))?", form)
    if mm:                                       # f2, f4, f4/bcast, f4.in, f4.out: module_wino_m
        return module_wino_m(h, c, o, int(mm.group(1)), mm.group(2) or "dot", mm.group(3) or "all")
    if form == "wino_split":
        return module_wino(h, c, o, tin="split")
    if form.startswith("wino:"):                 # wino:<in>/<out>, e.g. wino:bcast/bcast
        tin, tout = form[5:].split("/")
        return module_wino(h, c, o, tin=tin, tout=tout)
    if form == "conv_nhwc":
        return module_conv(h, c, o, nhwc=True)
    raise ValueError(form)


def reference(x, w):
    """float64 direct conv, HBWC, pad 1."""
    h, b, wd, c = x.shape
    xp = np.pad(x.astype(np.float64), ((1, 1), (0, 0), (1, 1), (0, 0)))
    y = np.zeros((h, b, wd, w.shape[0]))
    for i in range(3):
        for j in range(3):
            y += (xp[i:i + h, :, j:j + wd, :].reshape(-1, c) @ w[:, :, i, j].T.astype(np.float64)).reshape(y.shape)
    return y


def dispatches(text: str, extra) -> int | None:
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "m.mlir", Path(d) / "e.mlir"
        src.write_text(text)
        r = subprocess.run([find_compiler(), str(src), *flags("llvm-cpu", None, text), *extra,
                            "--compile-to=executable-sources", "-o", str(dst)], capture_output=True, text=True)
        return dst.read_text().count("hal.executable.export public") if r.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES))
    ap.add_argument("--forms", nargs="*", default=FORMS)
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--block", type=int, default=2, help="calls per timed sample")
    ap.add_argument("--flags", nargs="*", default=[], help="extra iree-compile flags for every candidate")
    ap.add_argument("--dump", help="write each module text into this folder")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for shape in args.shapes:
        h, c, o = SHAPES[shape]
        x = rng.standard_normal((h, B, h, c)).astype(np.float32)
        w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        ref = reference(x, w)
        print(f"{shape}: C={c} O={o} {h}x{h} batch {B}  ({2 * 9 * c * o * h * h * B / 1e9:.2f} GFLOP direct)", flush=True)
        cands = {}
        for form in args.forms:
            text = module_text(form, h, c, o)
            if args.dump:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                (Path(args.dump) / f"{shape}_{form}.mlir").write_text(text)
            t0 = time.perf_counter()
            try:
                with micro.extra_flags(args.flags):
                    comp = compile_module(text, options=None)
            except Exception as e:                          # report and go on
                print(f"  {form}: compile FAILED: {str(e)[:600]}", flush=True)
                continue
            dt = time.perf_counter() - t0
            m = Module(comp.path)
            if form == "wino_mm":
                T = (h + 1) // 2
                ins = [m.upload(rng.standard_normal((16, T * B * T, c)).astype(np.float32)),
                       m.upload(rng.standard_normal((16, c, o)).astype(np.float32))]
                err = float("nan")
            elif form == "lmc.mm":
                ins = [m.upload(rng.standard_normal((h + 2, B, h, 3 * c)).astype(np.float32)),
                       m.upload(rng.standard_normal((3, 3, c, o)).astype(np.float32))]
                err = float("nan")
            elif form.endswith((".out", ".mm")):         # M → y, or V, U → M, of F(m×m): random
                mw = int(form[1])
                T = -(-h // mw)
                P = (mw + 2) ** 2
                ins = ([m.upload(rng.standard_normal((P, T * B * T, o)).astype(np.float32))] if form.endswith(".out") else
                       [m.upload(rng.standard_normal((P, T * B * T, c)).astype(np.float32)),
                        m.upload(rng.standard_normal((P, c, o)).astype(np.float32))])
                err = float("nan")
            elif form.endswith(".in"):
                ins = [m.upload(x), m.upload(w)]
                err = float("nan")
            else:
                nhwc = form == "conv_nhwc"                  # [B, H, W, C] in and out
                ins = [m.upload(x.transpose(1, 0, 2, 3) if nhwc else x), m.upload(w)]
                out = m.conv(*ins)
                y = np.asarray(out[0] if isinstance(out, (tuple, list)) else out)
                y = y.transpose(1, 0, 2, 3) if nhwc else y
                err = float(np.abs(y - ref).max() / np.abs(ref).max())
            nd = dispatches(text, args.flags)
            print(f"  {form}: compile {dt:.1f} s (0 if cached), {nd} dispatches, max rel err {err:.2e}", flush=True)
            cands[form] = (lambda m=m, ins=ins: [m.conv(*ins) for _ in range(args.block)])
        print(f"  {micro.load_avg()}", flush=True)
        r = micro.interleave(cands, reps=args.reps, cpu=True)
        for k, (wall, cpu) in r.items():
            print(f"  {shape} {k:12s} wall {wall / args.block:8.2f} ms  CPU {cpu / args.block:8.2f} ms", flush=True)
        print(f"  {micro.load_avg()}", flush=True)


if __name__ == "__main__":
    main()
