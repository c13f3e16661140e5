"""A/B of two lowerings of one net that no option switches between (a template change, before
and after): dump the module text at each checkout, then time the train steps of both texts
interleaved in one process (micro.interleave: medians of wall and process CPU ms per step).

    git stash; python benchmarks/texts_ab.py dump mnist_cnn /tmp/before.mlir; git stash pop
    python benchmarks/texts_ab.py dump mnist_cnn /tmp/after.mlir
    python benchmarks/texts_ab.py time mnist_cnn /tmp/before.mlir /tmp/after.mlir [--reps 11]

Both texts must have the same ABI (the same net and recipe): the steps run on the same
arguments, `lmc.train.bench.stepper`'s."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                          # noqa: E402
from options_ab import NETS           # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402
from lmc.train.bench import stepper  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["dump", "time"])
    ap.add_argument("net", help="a spec stem under specs/ (options_ab.NETS sets its batch and size)")
    ap.add_argument("files", nargs="+", help="dump: the file to write; time: the module texts")
    ap.add_argument("--reps", type=int, default=11)
    args = ap.parse_args()
    net = infer(load_spec(ROOT / "specs" / f"{args.net}.yaml", NETS.get(args.net, [])))
    if args.what == "dump":
        Path(args.files[0]).write_text(lower(net, options=LowerOptions.from_env()))
        return
    cands = {}
    for f in args.files:
        cands[Path(f).name] = stepper(net, micro.load(Path(f).read_text()))[0]
    micro.report_steps(args.net, cands, args.reps)


if __name__ == "__main__":
    main()
