"""Whether an all-reduce started before a computation finishes while it runs (issue: overlap the
gradient all-reduce with the backward).  Each of 2 ranks starts MPI_Iallreduce of a ResNet-18-sized
gradient (11,181,642 float32) in lmc's 25 MB buckets, computes for C ms without calling MPI
(NumPy matmuls, which release the GIL, as an IREE invocation does), then waits.  If MPICH
progressed the reduction during the computation, the wait after it is ~0; if not, it is the
reduction's whole time.  Run it plain and with MPICH_ASYNC_PROGRESS=1 (MPICH's progress thread):

    OPENBLAS_NUM_THREADS=1 .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/mpi_progress.py
    OPENBLAS_NUM_THREADS=1 MPICH_ASYNC_PROGRESS=1 .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/mpi_progress.py

Medians of rounds 2-5 printed by rank 0."""
import os
import statistics
import time

import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
N = 11_181_642
buf = np.ones(N, np.float32)
per = 25 * 2**20 // 4
a = np.random.rand(512, 512).astype(np.float32)
def compute(ms):
    t = time.perf_counter()
    while (time.perf_counter() - t) * 1e3 < ms:
        a @ a
res = {}
for rnd in range(5):
    for C in (0, 100):
        comm.Barrier()
        t0 = time.perf_counter()
        reqs = [comm.Iallreduce(MPI.IN_PLACE, [buf[s:s + per], MPI.FLOAT], op=MPI.SUM) for s in range(0, N, per)]
        t1 = time.perf_counter()
        compute(C)
        t2 = time.perf_counter()
        MPI.Request.Waitall(reqs)
        t3 = time.perf_counter()
        res.setdefault(C, []).append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t3 - t0) * 1e3))
if comm.rank == 0:
    for C, rows in res.items():
        med = [statistics.median(r[i] for r in rows[1:]) for i in range(4)]
        print(f"compute {C} ms: post {med[0]:.1f} ms, compute {med[1]:.1f} ms, wait after {med[2]:.1f} ms, total {med[3]:.1f} ms"
              f" (async progress={os.environ.get('MPICH_ASYNC_PROGRESS', '0')})", flush=True)
