"""Data-parallel step cost on this machine: one process at global batch B against `--nproc 2`
at B/2 per rank, on synthetic data, for the nets of `make bench` — the median ms per step (from
each step's images/s with --log-every 1, the first 2 steps dropped) and the all-reduce host time
per update (`allreduce_seconds` of the run's end record / steps: the time the training thread
waits for it).  The 2-rank run twice, interleaved over `--rounds`: the backward whole
(LMC_DIST_OVERLAP=off: the all-reduce after it) and in two halves (on, the default: the late
layers' gradients summed while the early layers' backward runs).

On a 2-core machine the two ranks share the cores (one IREE worker each), so this measures the
overhead of the split and the all-reduce, not a speedup: data parallelism pays off with one
device (or one machine) per rank.

usage: python benchmarks/dist_step.py [--steps 10] [--rounds 3] [--nets mnist_cnn resnet18]"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NETS = {"mnist_mlp": ("specs/mnist_mlp.yaml", 128, []),
        "mnist_cnn": ("specs/mnist_cnn.yaml", 128, []),
        "resnet18": ("specs/resnet18.yaml", 128, ["input.height=32", "input.width=32"])}


def one(spec, batch, sets, steps, nproc, out, overlap="on"):
    cmd = [sys.executable, "-m", "lmc", "train", spec, "--max-steps", str(steps), "--log-every", "1", "--out", str(out),
           "--overwrite", "--set", "dataset=synthetic", "--set", f"train.batch_size={batch // nproc}"]
    for s in sets:
        cmd += ["--set", s]
    if nproc > 1:
        cmd += ["--nproc", str(nproc)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LMC_DIST_OVERLAP": overlap}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    ms = [1e3 * batch / r["images_per_s"] for r in recs if r["kind"] == "step"][2:]
    end = [r for r in recs if r["kind"] == "end"][-1]
    return statistics.median(ms), 1e3 * end.get("allreduce_seconds", 0.0) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nets", nargs="*", default=list(NETS))
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    rows = []
    med = statistics.median
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.nets:
            spec, batch, sets = NETS[name]
            t = {"1": [], "off": [], "on": []}
            r = {"off": [], "on": []}
            for k in range(a.rounds):
                order = ("off", "on") if k % 2 == 0 else ("on", "off")
                t["1"].append(one(spec, batch, sets, a.steps, 1, Path(tmp) / f"{name}-1")[0])
                for ov in order:
                    ms, ar = one(spec, batch, sets, a.steps, 2, Path(tmp) / f"{name}-2{ov}", ov)
                    t[ov].append(ms)
                    r[ov].append(ar)
                print(f"{name} round {k + 1}: 1 process {t['1'][-1]:.1f}, 2 ranks whole {t['off'][-1]:.1f} "
                      f"(all-reduce {r['off'][-1]:.1f}), halves {t['on'][-1]:.1f} (all-reduce {r['on'][-1]:.1f}) ms",
                      flush=True)
            rows.append((name, batch, med(t["1"]), med(t["off"]), med(r["off"]), med(t["on"]), med(r["on"])))
    load1 = os.getloadavg()[0]
    print(f"| net (global batch) | 1 process ms/step | 2 ranks, backward whole: ms/step | all-reduce wait | "
          f"2 ranks, two halves: ms/step | all-reduce wait | load {load0:.1f}–{load1:.1f} |")
    print("|---|---|---|---|---|---|---|")
    for name, batch, t1, t0, a0, t2, a2 in rows:
        print(f"| {name} ({batch}) | {t1:.1f} | {t0:.1f} | {a0:.1f} | {t2:.1f} | {a2:.1f} | |")


if __name__ == "__main__":
    main()
