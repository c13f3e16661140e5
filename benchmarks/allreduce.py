"""All-reduce cost at 2 ranks on this machine, the measurement behind lmc's choice of engine
(lmc/run/dist.py, docs/distributed.md): a ResNet-18-sized gradient (11,181,642 float32) summed by

- MPI (mpi4py + the MPICH wheel): one in-place MPI_Allreduce, and lmc's own path
  (`lmc.dist.Mpi.sum_buffers`: 62 host arrays packed into 25 MB buckets, Iallreduce per bucket);
- torch.distributed with the gloo backend (when torch is installed: the bench extra), one
  in-place all_reduce of one tensor.

Each candidate runs in 2 fresh processes, 3 warm-up calls then `--iters` timed ones; rounds
alternate the engines (interleaved, as benchmarks/run.py) and the median per engine is reported
with the load average.

usage: python benchmarks/allreduce.py [--iters 20] [--rounds 3] [--floats 11181642]"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _sizes(total: int) -> list[int]:
    """ResNet-18-like tensor sizes summing to `total`: a few big ones and many small."""
    big = [2359296] * 4 + [1179648, 589824, 294912, 147456, 73728, 36864]
    out, left = [], total
    for b in big:
        if left <= 0:
            break
        out.append(min(b, left))
        left -= out[-1]
    while left > 0:
        out.append(min(512, left))
        left -= out[-1]
    return out


def worker(engine: str, floats: int, iters: int) -> None:
    import numpy as np
    times = []
    if engine in ("mpi", "mpi-lmc"):
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()
        if engine == "mpi":
            buf = np.ones(floats, np.float32)

            def call():
                comm.Allreduce(MPI.IN_PLACE, [buf, MPI.FLOAT], op=MPI.SUM)
        else:
            from lmc.run.dist import Mpi
            w = Mpi(60.0)
            arrays = [np.ones(n, np.float32) for n in _sizes(floats)]

            def call():
                w.sum_buffers(arrays, np.zeros(3))
        barrier = comm.Barrier
    else:
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        rank = dist.get_rank()
        t = torch.ones(floats, dtype=torch.float32)

        def call():
            dist.all_reduce(t)
        barrier = dist.barrier
    for i in range(3 + iters):
        barrier()
        t0 = time.perf_counter()
        call()
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        print(json.dumps({"engine": engine, "ms": times}))


def run(engine: str, floats: int, iters: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    me = [sys.executable, __file__, "--worker", engine, "--floats", str(floats), "--iters", str(iters)]
    if engine.startswith("mpi"):
        from lmc.run.dist import mpiexec
        out = subprocess.run([mpiexec(), "-n", "2", *me], env=env, capture_output=True, text=True, timeout=600)
        lines = out.stdout
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen(me, env={**env, "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                           "MASTER_PORT": str(port)}, stdout=subprocess.PIPE, text=True)
                 for r in range(2)]
        lines = "".join(p.communicate(timeout=600)[0] for p in procs)
    for line in lines.splitlines():
        if line.startswith("{"):
            return json.loads(line)["ms"]
    raise RuntimeError(f"{engine}: no result")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--floats", type=int, default=11_181_642)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.floats, a.iters)
    engines = ["mpi", "mpi-lmc"]
    import importlib.util
    if importlib.util.find_spec("torch") is not None:
        engines.append("gloo")
    else:
        print("torch is not installed: no gloo column (pip install 'lmc[bench]')")
    got = {e: [] for e in engines}
    load0 = os.getloadavg()[0]
    for _ in range(a.rounds):
        for e in engines:
            got[e] += run(e, a.floats, a.iters)
    load1 = os.getloadavg()[0]
    print(f"all-reduce of {a.floats:,} float32 ({a.floats * 4 / 2**20:.1f} MiB) at 2 ranks, "
          f"{a.rounds}×{a.iters} calls, load {load0:.1f}–{load1:.1f}:")
    for e in engines:
        ms = got[e]
        print(f"  {e:8s} median {statistics.median(ms):7.1f} ms   min {min(ms):7.1f}   max {max(ms):7.1f}")


if __name__ == "__main__":
    main()
