"""A/B of the network-wide activation layout (lmc/graph/layout.py, issue 15 item 1): the same net
lowered with the layout pass (HBWC between primitives that have an HBWC form) and with
layout=nchw (LowerOptions; every value NCHW; each conv transposes to and from HBWC itself), compiled
alike, their train steps timed interleaved in one process (wall and process CPU ms, medians).
Also prints the transposes each module spells and the compile time of each.

    python benchmarks/layout_ab.py [--nets mnist_cnn cifar_cnn_bn resnet18] [--reps 9]"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
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

NETS = {"mnist_cnn": ["train.batch_size=128"], "cifar_cnn_bn": ["train.batch_size=128"],
        "resnet18": ["train.batch_size=128", "input.height=32", "input.width=32"],
        "mobilenet_v2": ["train.batch_size=128", "input.height=32", "input.width=32"],
        "efficientnet_b0": ["train.batch_size=128", "input.height=32", "input.width=32"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", nargs="*", default=["mnist_cnn", "cifar_cnn_bn", "resnet18"])
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    for name in args.nets:
        net = infer(load_spec(ROOT / "specs" / f"{name}.yaml", NETS[name]))
        cands = {}
        for layout in ("nchw", "hbwc"):
            # the other LMC_* switches as this command line sets them, the layout varied
            options = dataclasses.replace(LowerOptions.from_env(), layout=layout)
            text = lower(net, options=options)
            t0 = time.perf_counter()
            m = micro.load(text, options=options)
            dt = time.perf_counter() - t0
            print(f"{name} {layout}: {text.count('stablehlo.transpose')} transposes in the text, "
                  f"compile {dt:.1f} s (0 if cached)", flush=True)
            cands[layout] = stepper(net, m)[0]
        print(f"  {micro.load_avg()}", flush=True)
        r = micro.interleave(cands, reps=args.reps, cpu=True)
        print("  " + ", ".join(f"{k} {w:.1f} ms (CPU {c:.1f})" for k, (w, c) in r.items()), micro.load_avg(), flush=True)


if __name__ == "__main__":
    main()
