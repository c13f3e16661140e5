"""train.bf16 on llvm-cpu: the emulated form (operands rounded on their f32 bits, f32 dot) against
the convert form (rounded, converted to bf16, bf16×bf16→f32 dot) and plain f32 — an isolated
matmul of vit_tiny's MLP shape (x [64, 65, 192] · w [192, 768], the bench row's batch) and the
vit_tiny / tiny_gpt bench-row train steps, all interleaved, wall and process CPU ms.  First
checks that each bf16 form is numerically a bf16×bf16 product with f32 accumulation (against
float64 on the rounded operands).

    python benchmarks/bf16_forms.py [--reps 7] [--block 5] [--skip-steps]"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                          # noqa: E402
from lmc.train.bench import stepper  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.core.render import env  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402

X, W, Y = "tensor<64x65x192xf32>", "tensor<192x768xf32>", "tensor<64x65x768xf32>"
DT = ["--iree-global-opt-data-tiling"]   # packed (mmt4d) matmuls: the only path to AVX512-BF16 vdpbf16ps
STEP_FORMS = [("f32", []), ("f32", DT), ("emulated", []), ("convert", []), ("convert", DT)]
ROWS = {"vit_tiny": ("specs/vit_tiny.yaml", ["train.batch_size=64", "input.height=32", "input.width=32",
                                             "layers.0.patch_embed.patch_size=4",
                                             "layers.0.patch_embed.n_patches=64"]),
        "tiny_gpt": ("specs/tiny_gpt.yaml", ["train.batch_size=32", "train.grad_clip_norm=0"])}


def matmul_module(form: str | None) -> str:
    """One public @mm: y = x·w through the `_dot.j2` macro in `form` (None: plain f32)."""
    ctx = {"bf16": form} if form else {}
    m = env().get_template("prims/_dot.j2").make_module(ctx)
    body = m.dot("y", "%x", X, "%w", W, "contracting_dims = [2] x [0]", Y)
    return f"module @model {{\nfunc.func @mm(%x: {X}, %w: {W}) -> {Y} {{\n{body}\n  return %y : {Y}\n}}\n}}\n"


def bf16_round(a: np.ndarray) -> np.ndarray:
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).view(np.float32)


def check(mods: dict, x: np.ndarray, w: np.ndarray) -> None:
    ref = np.einsum("btk,kn->btn", bf16_round(x).astype(np.float64), bf16_round(w).astype(np.float64))
    unr = np.einsum("btk,kn->btn", x.astype(np.float64), w.astype(np.float64))
    scale = np.abs(ref).max()
    for k, m in mods.items():
        y = np.asarray(m.mm(x, w))
        print(f"  {k:10s} max|y - bf16 ref| / max|y| = {np.abs(y - ref).max() / scale:.2e}   "
              f"vs the unrounded f32 product {np.abs(y - unr).max() / scale:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--block", type=int, default=5, help="calls per timed block")
    ap.add_argument("--skip-steps", action="store_true", help="the isolated matmul only")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 65, 192)).astype(np.float32)
    w = (rng.standard_normal((192, 768)) * 0.05).astype(np.float32)
    mods = {k + ("+dt" if fl else ""): micro.load(matmul_module(f), fl) for fl in ([], DT) for k, f in
            (("f32", None), ("emulated", "emulated"), ("convert", "convert"))}
    print("numerics (isolated matmul):")
    check(mods, x, w)
    xd, wd = mods["f32"].upload(x), mods["f32"].upload(w)
    cands = {f"matmul/{k}": (lambda m=m: [micro.wait(m.mm(xd, wd)) for _ in range(args.block)])
             for k, m in mods.items()}
    if not args.skip_steps:
        for row, (spec, sets) in ROWS.items():
            for form, fl in STEP_FORMS:
                net = infer(load_spec(ROOT / spec, sets + ([] if form == "f32" else ["train.bf16=true"])))
                # the other LMC_* switches as this command line sets them, the bf16 form varied
                options = dataclasses.replace(LowerOptions.from_env(), bf16_form="emulated" if form == "f32" else form)
                m = micro.load(lower(net, options=options), fl, options=options)
                step, _ = stepper(net, m)
                cands[f"{row}/{form}" + ("+dt" if fl else "")] = (lambda step=step: [step() for _ in range(args.block)])
    micro.report_blocks(cands, args.reps, args.block)


if __name__ == "__main__":
    main()
