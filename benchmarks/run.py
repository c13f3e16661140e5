"""`make bench`: lmc vs JAX vs PyTorch (eager and torch.compile) on the same nets, same batch,
same optimizer, measured in one run on this machine.  Prints a table and the lmc/JAX ratio;
`--json FILE` writes the raw numbers, `--readme` rewrites the README's table."""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lmc.bench import bench          # noqa: E402
from lmc.infer import infer          # noqa: E402
from lmc.spec import load_spec       # noqa: E402
import peers                         # noqa: E402

NETS = [  # (spec, overrides)
    ("specs/mnist_mlp.yaml", ["train.batch_size=128"]),
    ("specs/mnist_cnn.yaml", ["train.batch_size=128"]),
    ("specs/cifar_cnn_bn.yaml", ["train.batch_size=128"]),
    ("specs/resnet18.yaml", ["train.batch_size=128", "input.height=32", "input.width=32"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--nets", nargs="*", help="subset of spec paths")
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for spec, sets in NETS:
        if args.nets and spec not in args.nets:
            continue
        if not (ROOT / spec).exists():
            print(f"skip {spec}: not found", file=sys.stderr)
            continue
        net = infer(load_spec(ROOT / spec, sets))
        row = {"net": Path(spec).stem, "batch": net.batch}
        r = bench(net, steps=args.steps, forward=False)
        row["lmc"] = r["step_ms_median"]
        try:
            call, _ = peers.jax_step(net)
            row["jax"] = 1e3 * peers.time_calls(call, args.steps)[0]
        except Exception as e:  # report, don't hide
            row["jax"] = None
            print(f"jax failed on {spec}: {e}", file=sys.stderr)
        try:
            row["torch"] = 1e3 * peers.time_calls(peers.torch_step(net), args.steps)[0]
        except Exception as e:
            row["torch"] = None
            print(f"torch failed on {spec}: {e}", file=sys.stderr)
        if not args.no_torch_compile:
            try:
                row["torch_compile"] = 1e3 * peers.time_calls(peers.torch_step(net, compile=True), args.steps)[0]
            except Exception as e:
                row["torch_compile"] = None
                print(f"torch.compile failed on {spec}: {str(e)[:200]}", file=sys.stderr)
        rows.append(row)
        print_row(row, flush=True)
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2))


def machine():
    import iree.compiler
    v = {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
         "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    for mod in ("jax", "torch", "iree.compiler"):
        try:
            v[mod] = __import__(mod, fromlist=["x"]).__version__
        except Exception:
            pass
    return v


def fmt(v):
    return "n/a" if v is None else f"{v:.1f}"


def print_row(r, flush=False):
    print(f"{r['net']}: lmc {fmt(r['lmc'])} ms, jax {fmt(r.get('jax'))}, torch {fmt(r.get('torch'))}, "
          f"torch.compile {fmt(r.get('torch_compile'))}", file=sys.stderr, flush=flush)


def table(rows):
    lines = ["| net (batch) | lmc ms | JAX ms | PyTorch eager ms | torch.compile ms | lmc/JAX | lmc/best peer |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        peers_ = [v for k, v in r.items() if k in ("jax", "torch", "torch_compile") and v]
        best = min(peers_) if peers_ else None
        lines.append(f"| {r['net']} ({r['batch']}) | {fmt(r['lmc'])} | {fmt(r.get('jax'))} | {fmt(r.get('torch'))} | "
                     f"{fmt(r.get('torch_compile'))} | {r['lmc'] / r['jax']:.2f} | " if r.get("jax") else
                     f"| {r['net']} ({r['batch']}) | {fmt(r['lmc'])} | n/a | {fmt(r.get('torch'))} | {fmt(r.get('torch_compile'))} | n/a | ")
        lines[-1] += f"{r['lmc'] / best:.2f} |" if best else "n/a |"
    return "\n".join(lines)


if __name__ == "__main__":
    main()
