"""Compile every lowerable spec for the given backends with a cold cache and print a table:
spec, backend, batch, MLIR size, compile seconds, vmfb size.  Usage:
    python benchmarks/compile_report.py [--backends llvm-cpu cuda rocm] [--specs specs/a.yaml ...]"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmc.compile import compile_module  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backends", nargs="*", default=["llvm-cpu", "cuda", "rocm"])
    ap.add_argument("--specs", nargs="*", type=Path)
    args = ap.parse_args()
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    specs = args.specs or sorted((ROOT / "specs").glob("*.yaml"))
    print("| spec | backend | batch | MLIR chars | compile s | vmfb bytes |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LMC_CACHE"] = cache          # cold: measure real compiles
        for path in specs:
            net = infer(load_spec(path))
            if net.unlowered or net.spec.train is None:
                continue
            for b in args.backends:
                text = lower(net, backend=b, options=options)
                t0 = time.perf_counter()
                try:
                    c = compile_module(text, backend=b, options=options)
                    size = f"{c.path.stat().st_size:,}"
                except Exception as e:  # report and go on
                    size = f"FAILED: {str(e).splitlines()[0][:60]}"
                print(f"| {path.stem} | {b} | {net.batch} | {len(text):,} | {time.perf_counter() - t0:.1f} | {size} |",
                      flush=True)


if __name__ == "__main__":
    main()
