"""What a network-wide HBWC layout could save (issue 15 item 1), measured as an upper bound:
the conv templates' four layout changes at their NCHW boundaries (x → HBWC and the output
back in the forward; dy → HBWC and dx back in the backward) are replaced in the module text by
`stablehlo.reshape`s of the same shapes.  TIMING ONLY: the numbers that module computes are
meaningless (a reshape is not a transpose); it runs the same matmuls, patch copies, BN, pools
and optimizer, minus those transposes — what keeping activations in HBWC between convs would
remove, if the other primitives took HBWC at no extra cost.  Interleaved steps, CPU time.

    python benchmarks/layout_bound.py [--nets mnist_cnn cifar_cnn_bn] [--reps 9]"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                          # noqa: E402
from lmc.bench import stepper          # noqa: E402
from lmc.infer import infer            # noqa: E402
from lmc.lower import lower            # noqa: E402
from lmc.spec import load_spec         # noqa: E402

NETS = {"mnist_cnn": ["train.batch_size=128"], "cifar_cnn_bn": ["train.batch_size=128"],
        "resnet18": ["train.batch_size=128", "input.height=32", "input.width=32"]}
BOUNDARY = re.compile(r"(  %(?:x_t|dy_t|yt|dxt) = )stablehlo\.transpose (%\w+), dims = \[[\d, ]+\] : ")


def without_boundary_transposes(text: str) -> tuple[str, int]:
    return BOUNDARY.subn(r"\1stablehlo.reshape \2 : ", text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", nargs="*", default=["mnist_cnn", "cifar_cnn_bn"])
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    for name in args.nets:
        net = infer(load_spec(ROOT / "specs" / f"{name}.yaml", NETS[name]))
        text = lower(net)
        bound, n = without_boundary_transposes(text)
        cands = {}
        for k, t in (("as is", text), ("no boundary transposes", bound)):
            step, _ = stepper(net, micro.load(t))
            cands[k] = step
        print(f"{name}: {n} transposes replaced; {micro.load_avg()}", flush=True)
        r = micro.interleave(cands, reps=args.reps, cpu=True)
        print("  " + ", ".join(f"{k} {w:.1f} ms (CPU {c:.1f})" for k, (w, c) in r.items()), micro.load_avg(), flush=True)


if __name__ == "__main__":
    main()
