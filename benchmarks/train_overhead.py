"""Python overhead of `lmc train`'s loop: mean step time through the real trainer vs a bare loop
of @train_step calls on device-resident arrays (same module, same batch size).

    PYTHONPATH=. python benchmarks/train_overhead.py specs/digits_cnn.yaml --steps 400

bare/device: x, y uploaded once, hp vectors precomputed, results fed straight back; one
             host read at the end (the floor: what the device and IREE's call path cost).
bare/numpy:  the same, but x and y passed as fresh numpy arrays each step (upload per call).
lmc train:   lmc.train.trainer.train with --steps: background batching, lr schedule, hp vector, loss reads
             every 10 steps, metrics.jsonl; its train_seconds excludes compile, data loading,
             eval and checkpoints.
Runs are interleaved `--repeat` times and the best of each is reported (the machine is shared);
"cpu" is process CPU time (all threads, IREE's workers included) per step, steadier than wall
time when other processes compete for the cores."""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from lmc.compile import compile_module
from lmc.graph.infer import infer
from lmc.graph.init import init_tensors
from lmc.lower.lowering import abi, lower
from lmc.lower.options import LowerOptions
from lmc.run.runtime import Module
from lmc.spec.netspec import load_spec
from lmc.train.trainer import TrainOptions, train
from lmc.data.fit import load_data


def bare(mod, net, a, x, y, steps: int, upload_batch: bool) -> float:
    params, state = init_tensors(net, 0)
    P = [mod.upload(p) for p in params]
    O = [mod.upload(v) for v in a.initial_opt()]
    S = [mod.upload(s) for s in state]
    xd, yd = (x, y) if upload_batch else (mod.upload(x), mod.upload(y))
    cfg = net.spec.train
    hps = [a.hp_vector(cfg, cfg.learning_rate, s + 1) for s in range(steps)]
    nP, nO = len(P), len(O)
    out = mod.train_step(*P, *O, *S, xd, yd, hps[0])          # warm-up call
    P, O, S = out[:nP], out[nP:nP + nO], out[nP + nO:-2]
    t0, c0 = time.perf_counter(), time.process_time()
    for s in range(steps):
        out = mod.train_step(*P, *O, *S, xd, yd, hps[s])
        P, O, S = out[:nP], out[nP:nP + nO], out[nP + nO:-2]
    float(out[-2].to_host())
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def through_lmc(spec: Path, steps: int, data: Path | None) -> float:
    net = infer(load_spec(spec))
    with tempfile.TemporaryDirectory() as d:
        opts = TrainOptions(out=Path(d) / "run", max_steps=steps + 1, overwrite=True, data=data)
        s = train(net, opts, Console(stderr=True, quiet=True))
    return s.train_seconds / s.steps_run, s.train_cpu_seconds / s.steps_run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec", type=Path)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", type=Path, default=None, help="dataset file/dir instead of the spec's")
    args = ap.parse_args()
    net = infer(load_spec(args.spec))
    a = abi(net)
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    mod = Module(compile_module(lower(net, options=options), options=options).path)
    ds = load_data(net, args.data, 0)
    x = np.ascontiguousarray(ds.x_train[:net.batch], np.float32)
    y = np.ascontiguousarray(ds.y_train[:net.batch], np.int32)
    res = {"bare/device": [], "bare/numpy": [], "lmc train": []}
    for _ in range(args.repeat):
        res["bare/device"].append(bare(mod, net, a, x, y, args.steps, False))
        res["bare/numpy"].append(bare(mod, net, a, x, y, args.steps, True))
        res["lmc train"].append(through_lmc(args.spec, args.steps, args.data))
    floor = min(w for w, _ in res["bare/device"])
    cfloor = min(c for _, c in res["bare/device"])
    print(f"{net.spec.name}: batch {net.batch}, {net.total_params:,} params, {args.steps} steps, best of {args.repeat}")
    for k, v in res.items():
        t = min(w for w, _ in v)
        c = min(c for _, c in v)
        print(f"  {k:12s} wall {1e3 * t:8.3f} ms/step ({net.batch / t:9,.0f} img/s, +{100 * (t - floor) / t:5.1f}% of the "
              f"step vs bare/device)   cpu {1e3 * c:8.3f} ms/step (+{100 * (c - cfloor) / c:5.1f}%)   all wall: "
              + ", ".join(f"{1e3 * w:.2f}" for w, _ in v))


if __name__ == "__main__":
    main()
