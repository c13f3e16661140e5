"""A/B of the dense layer's dW form on mnist_mlp's train step (issue 15 item 2, the dense path
on AVX2): the module text's dense_bwd dW rewritten in place, each variant compiled for the host
and for znver3 (AVX2, no AVX-512), all steps interleaved, wall and process CPU time.

    python benchmarks/dense_forms.py [--reps 9] [--block 20]"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                          # noqa: E402
from lmc.train.bench import stepper  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402

DW = re.compile(r"  %dw = stablehlo.dot_general %x, %dy, contracting_dims = \[0\] x \[0\] : "
                r"\((tensor<(\d+)x(\d+)xf32>), (tensor<\d+x(\d+)xf32>)\) -> (tensor<\d+x\d+xf32>)\n")


def variant(text: str, form: str) -> str:
    def sub(m):
        xt, b, k, dyt, n, wt = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), m.group(6)
        if form == "barrier":      # keep the optimizer's update out of the dW matmul's dispatch
            return (f"  %dw0 = stablehlo.dot_general %x, %dy, contracting_dims = [0] x [0] : ({xt}, {dyt}) -> {wt}\n"
                    f"  %dw = stablehlo.optimization_barrier %dw0 : {wt}\n")
        if form == "dwT":          # dWᵀ = dyᵀ·x, then one transpose
            return (f"  %dwt = stablehlo.dot_general %dy, %x, contracting_dims = [0] x [0] : ({dyt}, {xt}) -> tensor<{n}x{k}xf32>\n"
                    f"  %dw = stablehlo.transpose %dwt, dims = [1, 0] : (tensor<{n}x{k}xf32>) -> {wt}\n")
        if form == "dwT_barrier":
            return (f"  %dwt = stablehlo.dot_general %dy, %x, contracting_dims = [0] x [0] : ({dyt}, {xt}) -> tensor<{n}x{k}xf32>\n"
                    f"  %dwt1 = stablehlo.optimization_barrier %dwt : tensor<{n}x{k}xf32>\n"
                    f"  %dw = stablehlo.transpose %dwt1, dims = [1, 0] : (tensor<{n}x{k}xf32>) -> {wt}\n")
        if form in ("xT", "xT_barrier", "xT_both"):   # a materialised xᵀ (the barrier stops IREE folding it back)
            xtt = f"tensor<{k}x{b}xf32>"
            lines = f"  %xT0 = stablehlo.transpose %x, dims = [1, 0] : ({xt}) -> {xtt}\n"
            src = "%xT0"
            if form != "xT":
                lines += f"  %xT = stablehlo.optimization_barrier %xT0 : {xtt}\n"
                src = "%xT"
            if form == "xT_both":
                lines += (f"  %dw0 = stablehlo.dot_general {src}, %dy, contracting_dims = [1] x [0] : ({xtt}, {dyt}) -> {wt}\n"
                          f"  %dw = stablehlo.optimization_barrier %dw0 : {wt}\n")
            else:
                lines += f"  %dw = stablehlo.dot_general {src}, %dy, contracting_dims = [1] x [0] : ({xtt}, {dyt}) -> {wt}\n"
            return lines
        raise ValueError(form)
    if form == "as_is":
        return text
    out, n = DW.subn(sub, text)
    assert n > 0, "no dense dW found"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--block", type=int, default=20, help="steps per timed block")
    ap.add_argument("--forms", nargs="*", default=["as_is", "barrier", "dwT", "dwT_barrier"])
    ap.add_argument("--cpus", nargs="*", default=["host", "znver3"],
                    help='target CPUs, each optionally with extra flags: "znver3:--iree-opt-data-tiling"')
    args = ap.parse_args()
    net = infer(load_spec(ROOT / "specs" / "mnist_mlp.yaml", ["train.batch_size=128"]))
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    text = lower(net, options=options)
    cands = {}
    for cpu in args.cpus:          # "znver3" or "znver3:--flag1,--flag2" (extra iree-compile flags)
        name, _, extra = cpu.partition(":")
        for form in args.forms:
            m = micro.load(variant(text, form), [f"--iree-llvmcpu-target-cpu={name}"] + [f for f in extra.split(",") if f],
                           options=options)
            step, _ = stepper(net, m)
            cands[f"{cpu}/{form}"] = (lambda step=step: [step() for _ in range(args.block)])
    micro.report_blocks(cands, args.reps, args.block)


if __name__ == "__main__":
    main()
