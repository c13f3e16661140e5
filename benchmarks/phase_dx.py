"""A/B of the strided conv's dx (benchmarks/NOTES.md, issue 15 item 3): phase decomposition
(`Conv.phase_dx = True`) against the convolution of the interior-padded dy (False), on single
strided convs (@vjp) and on whole train steps, interleaved, wall and process CPU time.

    python benchmarks/phase_dx.py [--nets resnet18] [--reps 7]"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                                   # noqa: E402
from lmc.train.bench import stepper  # noqa: E402
from lmc.compile import compile_module  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower, prim_test_module  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.prims import make_prim  # noqa: E402
from lmc.prims.conv import Conv  # noqa: E402
from lmc.run.runtime import Module  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402
from lmc.core.types import TensorType as T  # noqa: E402

# resnet18 at 3×32×32, batch 128: the first conv of layers 2–4 (3×3/2) and a projection (1×1/2)
CONVS = [((128, 64, 8, 8), (128, 64, 3, 3), (1, 1, 1, 1)),
         ((128, 128, 4, 4), (256, 128, 3, 3), (1, 1, 1, 1)),
         ((128, 64, 8, 8), (128, 64, 1, 1), (0, 0, 0, 0))]
NETS = {"resnet18": ["train.batch_size=128", "input.height=32", "input.width=32"]}


def compiled(text_fn, phase: bool, options: LowerOptions = LowerOptions()):
    Conv.phase_dx = phase
    try:
        text = text_fn()
    finally:
        Conv.phase_dx = True
    t0 = time.perf_counter()
    c = compile_module(text, options=options)
    return Module(c.path), (None if c.cached else time.perf_counter() - t0), text.count("dot_general")


def conv_case(xd, wd, pad, reps):
    prim = make_prim("conv", stride=2, pad=pad, groups=1)
    y, _ = prim.infer([T(xd)], [T(wd)])
    rng = np.random.default_rng(0)
    x, w, dy = (rng.standard_normal(d).astype(np.float32) for d in (xd, wd, y.dims))
    cands = {}
    for phase in (False, True):
        m, cs, nd = compiled(lambda: prim_test_module(prim, [T(xd)], [T(wd)]), phase)
        up = [m.upload(a) for a in (dy, x, w)]
        cands[f"phase={phase}"] = (lambda m=m, up=up: micro.wait(m.vjp(*up)))
        print(f"  conv {xd}->{wd} phase={phase}: {nd} dot_generals, compile {cs and round(cs, 1)} s", flush=True)
    return micro.interleave(cands, reps=reps, cpu=True)


def net_case(name, sets, reps):
    net = infer(load_spec(ROOT / "specs" / f"{name}.yaml", sets))
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    cands = {}
    for phase in (False, True):
        m, cs, nd = compiled(lambda: lower(net, options=options), phase, options)
        step, _ = stepper(net, m)
        cands[f"phase={phase}"] = step
        print(f"  {name} phase={phase}: {nd} dot_generals, compile {cs and round(cs, 1)} s", flush=True)
    return micro.interleave(cands, reps=reps, cpu=True)


def compile_times(name, sets, reps):
    """Cold iree-compile seconds of each variant (fresh cache each time), alternated."""
    import os
    import tempfile
    net = infer(load_spec(ROOT / "specs" / f"{name}.yaml", sets))
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    out = {False: [], True: []}
    for _ in range(reps):
        for phase in (False, True):
            Conv.phase_dx = phase
            try:
                text = lower(net, options=options)
            finally:
                Conv.phase_dx = True
            old = os.environ.get("LMC_CACHE")
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["LMC_CACHE"] = tmp
                t0 = time.perf_counter()
                compile_module(text, options=options)
                out[phase].append(time.perf_counter() - t0)
            if old is None:
                os.environ.pop("LMC_CACHE")
            else:
                os.environ["LMC_CACHE"] = old
    return {f"phase={k}": [round(t, 1) for t in v] for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--nets", nargs="*", default=list(NETS))
    ap.add_argument("--no-convs", action="store_true")
    ap.add_argument("--compile-reps", type=int, default=0, help="also time cold compiles of each net")
    args = ap.parse_args()
    for n in args.nets if args.compile_reps else []:
        print(micro.load_avg(), flush=True)
        print(f"{n} cold compile s:", compile_times(n, NETS[n], args.compile_reps), micro.load_avg(), flush=True)
    if args.compile_reps:
        return
    if not args.no_convs:
        for xd, wd, pad in CONVS:
            print(micro.load_avg(), flush=True)
            r = conv_case(xd, wd, pad, args.reps)
            print(f"conv vjp {xd} {wd}: " + ", ".join(f"{k} {v[0]:.2f} ms (CPU {v[1]:.2f})" for k, v in r.items()),
                  micro.load_avg(), flush=True)
    for n in args.nets:
        print(micro.load_avg(), flush=True)
        r = net_case(n, NETS[n], args.reps)
        print(f"{n} step: " + ", ".join(f"{k} {v[0]:.1f} ms (CPU {v[1]:.1f})" for k, v in r.items()),
              micro.load_avg(), flush=True)


if __name__ == "__main__":
    main()
