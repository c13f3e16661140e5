"""What the Python side of a training loop costs per step, for one spec (default mnist_cnn,
batch 128): blocks of N steps through

  bare   — `train_step` on device arrays only (state fed back, x/labels/hp uploaded once);
  hp     — bare plus a fresh hp vector per step (NumPy, uploaded by the call);
  train  — what `lmc train` does per step: a fresh hp vector built with `hyperparams` and a
           new host batch (x, labels as NumPy, uploaded by the call), the loss read back
           every `--log-every` steps;

interleaved block by block (so load drifts hit both), medians per step.

    python benchmarks/loop_overhead.py [SPEC] [--set k=v] [--steps 20] [--blocks 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmc.train.bench import _initial  # noqa: E402
from lmc.compile import compile_module  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import abi, lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.run.runtime import Module  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec", nargs="?", default=str(ROOT / "specs/mnist_cnn.yaml"))
    ap.add_argument("--set", action="append", default=["train.batch_size=128"])
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--blocks", type=int, default=5, help="blocks per mode, interleaved")
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()
    net = infer(load_spec(args.spec, args.set))
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    m = Module(compile_module(lower(net, options=options), options=options).path)
    rng = np.random.default_rng(0)
    ps, opt, st, x, y = _initial(net, rng)
    a = abi(net)
    n_state = len(ps) + len(opt) + len(st)
    cfg = net.spec.train
    # a pool of distinct host batches, as a loader would hand them over
    xs = [rng.standard_normal(a.x.dims).astype(np.float32) for _ in range(8)]
    ys = [rng.integers(0, a.logits.dims[-1], a.labels.dims).astype(np.int32) for _ in range(8)]
    state = [m.upload(v) for v in ps + opt + st]
    xd, yd = m.upload(x), m.upload(y)
    hpd = m.upload(a.hp_vector(cfg, 1e-3, 1))
    f = m.train_step
    step = [0]

    def bare(n):
        nonlocal state
        for _ in range(n):
            out = f(*state, xd, yd, hpd)
            state = list(out[:n_state])
        out[-2].to_host()

    def train(n):
        nonlocal state
        pending = []
        for _ in range(n):
            step[0] += 1
            k = step[0] % len(xs)
            hp = a.hp_vector(cfg, 1e-3, step[0])
            out = f(*state, xs[k], ys[k], hp)
            state = list(out[:n_state])
            pending.append(out[-2])
            if len(pending) >= args.log_every:
                [float(v.to_host()) for v in pending]
                pending = []
        [float(v.to_host()) for v in pending]

    def hp_only(n):
        nonlocal state
        for _ in range(n):
            step[0] += 1
            hp = a.hp_vector(cfg, 1e-3, step[0])
            out = f(*state, xd, yd, hp)
            state = list(out[:n_state])
        out[-2].to_host()

    modes = {"bare": bare, "hp": hp_only, "train": train}
    for fn in modes.values():
        fn(2)
    per = {k: [] for k in modes}
    for _ in range(args.blocks):
        for k, fn in modes.items():
            t0 = time.perf_counter()
            fn(args.steps)
            per[k].append(1e3 * (time.perf_counter() - t0) / args.steps)
    b = statistics.median(per["bare"])
    print(f"{net.spec.name} (batch {net.batch}), {args.blocks} blocks of {args.steps} steps per mode, medians:")
    for k, v in per.items():
        t = statistics.median(v)
        print(f"  {k:6s} {t:8.2f} ms/step  {t - b:+7.2f} ms = {100 * (t - b) / b:+5.1f}%   blocks {[round(u, 2) for u in v]}")


if __name__ == "__main__":
    main()
