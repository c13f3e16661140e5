"""Data-parallel training on MPI (mpi4py): `lmc train SPEC --nproc N`, or started by `mpiexec`.

The engine is MPI through mpi4py — the `dist` extra (`pip install lmc[dist]`: mpi4py and the
MPICH wheel, whose `mpiexec` is the launcher), imported only when a run has more than one rank.
Each rank runs the compiled `@grad_step` on its shard of the global batch; the gradient
accumulators G come to the host, are packed into ~25 MB buckets and summed across ranks by
MPI_Iallreduce (each bucket's reduction starts as soon as it is packed, while the next is being
copied); every rank uploads the same sums and runs `@apply_step`, whose grad_scale is
1/(grad_accum_steps · N): the mean over the global batch.  Where the lowering split the backward
(`@grad_late` + `@grad_early`, lowering.backward_cut), the late layers' accumulators are summed
by a helper thread (`sum_started`: its copies, reduction and upload) while `@grad_early` runs,
and the early ones' after it (LMC_DIST_OVERLAP=on; benchmarks/NOTES.md has why it is off by
default: ranks that share a machine's cores gain nothing from it).  Parameters and optimizer
state are replicated and stay bit-identical (checked by `Checker`).

Rank and world size come from the launcher's environment (MPICH/Hydra: PMI_RANK/PMI_SIZE;
Open MPI: OMPI_COMM_WORLD_*; Slurm's PMI via the same variables).  A single-process run gets
`Single`, which does nothing and imports nothing.

Failure: every collective waits with a deadline (`timeout` seconds, `--dist-timeout`): a rank
that died or hangs makes the others stop with an error naming the step, and MPI_Abort ends the
job (the launcher itself reports a rank killed by a signal: `launch` names it, the rank that died
first by its lifeline, `lmc.run.lifeline`)."""
from __future__ import annotations

import importlib.util
import json
import pickle
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from lmc.core.errors import RunError, TrainError
from lmc.core.tools import installed
from lmc.run import lifeline

BUCKET_BYTES = 25 * 2 ** 20        # DDP's default bucket size
DEFAULT_TIMEOUT = 300.0            # seconds a rank waits for the others in a collective
_RANK_ENV = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
             ("PMIX_RANK", None))


def launched_size() -> int:
    """The world size the launcher's environment announces (1 when started without one)."""
    for rank, size in _RANK_ENV:
        if size and os.environ.get(size):
            try:
                return int(os.environ[size])
            except ValueError:
                return 1
    return 1


def launched_rank() -> int:
    """This process's rank as the launcher's environment says (0 without one)."""
    for rank, _ in _RANK_ENV:
        if os.environ.get(rank, "").isdigit():
            return int(os.environ[rank])
    return 0


class Single:
    """One process: rank 0 of 1 (the trainer calls no collective then)."""
    rank, size, local_rank, local_size = 0, 1, 0, 1
    reduce_seconds = 0.0


class Mpi:
    """The MPI world of this process (mpi4py's COMM_WORLD), with deadlines on every wait."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT):
        try:
            from mpi4py import MPI
        except ImportError:
            raise RunError("data-parallel training needs mpi4py and an MPI library",
                             hint="pip install 'lmc[dist]' (mpi4py and the MPICH wheel)") from None
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()
        self._lifeline = lifeline.hold(self.rank)   # closed by the kernel when this process ends
        self.timeout = timeout
        self.step = 0                       # for messages: the step of the collective waited on
        self.reduce_seconds = 0.0           # host time in sum_buffers (copies + all-reduce + wait)
        self._bufs: dict[int, np.ndarray] = {}    # flat buffers by caller's key, kept between updates
        # sum_started's thread, started now: before a CPU module lowers the caller's priority
        # (runtime.yield_to_workers), which a thread started later would inherit and be starved by
        self._helper = ThreadPoolExecutor(1, thread_name_prefix="lmc-allreduce")
        self._helper.submit(lambda: None).result()

    # -------------------------------------------------------------- waiting with a deadline
    def _wait(self, reqs, what: str):
        t0 = time.monotonic()
        pause = 0.0
        while not self.MPI.Request.Testall(reqs):
            if time.monotonic() - t0 > self.timeout:
                msg = (f"rank {self.rank}: the other ranks did not join the {what} of step {self.step} within "
                       f"{self.timeout:g} s (a rank died or hangs); aborting the job")
                print(f"error: {msg}", file=sys.stderr, flush=True)
                report(f"error: {msg}")
                self.abort(3)
            if pause:
                time.sleep(pause)
            pause = min(pause * 2 or 1e-5, 1e-3)

    def abort(self, code: int = 1):
        self.comm.Abort(code)

    # -------------------------------------------------------------- collectives
    def sum_buffers(self, arrays, extra: np.ndarray, key: int = 0):
        """Σ over ranks of device (or host) arrays and of a small float64 vector `extra`.
        The arrays are copied into one flat float32 buffer (one per `key`), bucket by bucket;
        each bucket's Iallreduce starts when it is full.  Returns (host arrays, summed extra) —
        views into the buffer, valid until the next call with this key."""
        t0 = time.perf_counter()
        out = self._sum(arrays, extra, key)
        self.reduce_seconds += time.perf_counter() - t0
        return out

    def sum_started(self, arrays, finish, key: int = 1) -> "Started":
        """sum_buffers(arrays) (no extra) on a helper thread, `finish` applied there to the summed
        host arrays (the upload to the device): its copies, reduction and upload overlap what
        the caller runs next.  The caller makes no other MPI call until `Started.result()`,
        which waits for it and counts only the time spent waiting there as reduce_seconds."""
        return Started(self, arrays, finish, key)

    def _sum(self, arrays, extra, key):
        MPI = self.MPI
        sizes = [int(np.prod(a.shape)) for a in arrays]
        total = sum(sizes)
        buf = self._bufs.get(key)
        if buf is None or buf.size != total:
            buf = self._bufs[key] = np.empty(total, np.float32)
        reqs, start, off = [], 0, 0
        per = max(1, BUCKET_BYTES // 4)
        for a, n in zip(arrays, sizes):
            host = a.to_host() if hasattr(a, "to_host") else a
            buf[off:off + n] = np.asarray(host, np.float32).reshape(-1)
            off += n
            if off - start >= per:
                reqs.append(self.comm.Iallreduce(MPI.IN_PLACE, [buf[start:off], MPI.FLOAT], op=MPI.SUM))
                start = off
        if off > start:
            reqs.append(self.comm.Iallreduce(MPI.IN_PLACE, [buf[start:off], MPI.FLOAT], op=MPI.SUM))
        ext = None
        if extra is not None:
            ext = np.ascontiguousarray(extra, np.float64).copy()
            reqs.append(self.comm.Iallreduce(MPI.IN_PLACE, [ext, MPI.DOUBLE], op=MPI.SUM))
        self._wait(reqs, "gradient all-reduce")
        out, off = [], 0
        for a, n in zip(arrays, sizes):
            out.append(buf[off:off + n].reshape(a.shape))
            off += n
        return out, ext

    def mean_arrays(self, arrays):
        """The mean over ranks of host/device arrays (BN running statistics), as new host arrays."""
        if not arrays:
            return []
        summed, _ = self.sum_buffers(arrays, np.zeros(1), key=2)
        return [(s / np.float32(self.size)).astype(np.float32) for s in summed]

    def allgather(self, obj):
        """Every rank's `obj` (pickled), in rank order (Iallgather of the lengths, then
        Iallgatherv of the bytes, both with the deadline)."""
        MPI = self.MPI
        data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
        n = np.array([data.size], np.int64)
        lens = np.zeros(self.size, np.int64)
        self._wait([self.comm.Iallgather([n, MPI.INT64_T], [lens, MPI.INT64_T])], "gather")
        out = np.empty(int(lens.sum()), np.uint8)
        offs = np.concatenate([[0], np.cumsum(lens)[:-1]])
        self._wait([self.comm.Iallgatherv([data, MPI.BYTE], [out, (lens, offs), MPI.BYTE])], "gather")
        return [pickle.loads(out[o:o + k].tobytes()) for o, k in zip(offs, lens)]



class Started:
    """A sum of arrays over ranks running on the world's helper thread (Mpi.sum_started)."""

    def __init__(self, world: Mpi, arrays, finish, key: int):
        self.world = world
        self.future = world._helper.submit(self._run, arrays, finish, key)

    def _run(self, arrays, finish, key):
        summed, _ = self.world._sum(arrays, None, key)
        return finish(summed)

    def result(self):
        """finish(the summed arrays), once the helper is done (its error raised here)."""
        t0 = time.perf_counter()
        try:
            return self.future.result()
        finally:
            self.world.reduce_seconds += time.perf_counter() - t0


def report(line: str) -> None:
    """Append a rank's last words to the launcher's report file (`LMC_DIST_REPORT`): MPI_Abort
    can kill the I/O forwarders before a rank's stderr reaches the console, so `launch` prints
    whatever of this file it did not see."""
    path = os.environ.get("LMC_DIST_REPORT")
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line.rstrip("\n") + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def current(timeout: float | None = None):
    """The world of this process: MPI when a launcher started several ranks, else Single
    (which imports nothing)."""
    if launched_size() <= 1:
        return Single()
    return Mpi(DEFAULT_TIMEOUT if timeout is None else timeout)


def checksum(arrays) -> str:
    """A bit-exact fingerprint of host arrays: the bytes folded into 64-bit sums and xors."""
    h = []
    for a in arrays:
        b = np.ascontiguousarray(a)
        v = b.reshape(-1).view(np.uint8)
        pad = (-v.size) % 8
        if pad:
            v = np.concatenate([v, np.zeros(pad, np.uint8)])
        w = v.view(np.uint64)
        h.append(f"{int(w.sum(dtype=np.uint64)):016x}{int(np.bitwise_xor.reduce(w)) if w.size else 0:016x}")
    return "".join(h)


class Diverged(TrainError):
    pass


def check_same(w, what: str, arrays, step: int) -> None:
    """Stop with an error when the ranks' `arrays` are not bit-identical."""
    if w.size == 1:
        return
    sums = w.allgather(checksum(arrays))
    bad = [r for r, s in enumerate(sums) if s != sums[0]]
    if bad:
        raise Diverged(f"data-parallel ranks diverged at step {step}: the {what} of rank(s) "
                       f"{', '.join(map(str, bad))} differ from rank 0's",
                       hint="a nondeterministic kernel or a rank that read other data; report it")


def shard(a: np.ndarray, rank: int, size: int) -> np.ndarray:
    """Rank `rank`'s contiguous slice of a global batch (axis 0)."""
    if size == 1:
        return a
    n = a.shape[0] // size
    return np.ascontiguousarray(a[rank * n:(rank + 1) * n])


# ------------------------------------------------------------------ the launcher side
def mpiexec() -> str:
    """The MPI launcher: the one installed next to this Python (the MPICH wheel), else PATH's."""
    found = installed("mpiexec", "mpirun")
    if found:
        return found
    raise RunError("--nproc needs an MPI launcher (mpiexec), and none is installed",
                     hint="pip install 'lmc[dist]' (mpi4py and the MPICH wheel, which ships mpiexec)")


_PID = re.compile(r"PID (\d+) RUNNING AT (\S+)\s*=?\s*EXIT CODE: (\d+)")
_SIGNAL = re.compile(r"EXIT STRING: ([^\n(]*)\(signal (\d+)\)")


def rank_pids(metrics: Path) -> list[int]:
    """The ranks' process ids as the run's last header/resume record lists them."""
    pids: list[int] = []
    try:
        for line in metrics.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") in ("header", "resume") and "pids" in rec:
                pids = rec["pids"]
    except OSError:
        pass
    return pids


def require_mpi() -> None:
    """--nproc needs mpi4py (the `dist` extra): refused before anything is compiled or loaded."""
    if importlib.util.find_spec("mpi4py") is None:
        raise RunError("--nproc needs mpi4py", hint="pip install 'lmc[dist]' (mpi4py and the MPICH wheel)")


def launch(argv: list[str], nproc: int, devices: list[str] | None, console_err, metrics: Path) -> int:
    """`lmc train … --nproc N`: run N ranks of `lmc train …` (argv without --nproc) under
    mpiexec, pass their output through, and turn a rank's death (which makes the launcher stop
    the others) into one line naming the rank.  Returns the exit code: the ranks' (0, 2, 130),
    or 1 when a rank died."""
    require_mpi()
    exe = mpiexec()
    env = dict(os.environ)
    cores = os.cpu_count() or 1
    # N ranks share this machine's cores: each IREE CPU device gets its share of workers
    env.setdefault("LMC_TASK_WORKERS", str(max(1, cores // nproc)))
    if devices:
        env["LMC_DEVICES"] = ",".join(devices)
    cmd = [exe, "-n", str(nproc), sys.executable, "-m", "lmc", *argv]
    fd, report_path = tempfile.mkstemp(prefix="lmc-dist-", suffix=".log")
    os.close(fd)
    env["LMC_DIST_REPORT"] = report_path
    try:
        lines = lifeline.Lifelines()
        env[lifeline.ENV] = lines.path
    except OSError:                              # no Unix socket here: the launcher's report alone
        lines = None
    try:
        return _supervise(cmd, env, console_err, metrics, Path(report_path), lines)
    finally:
        Path(report_path).unlink(missing_ok=True)
        if lines:
            lines.close()


def _supervise(cmd, env, console_err, metrics: Path, report_path: Path, lines) -> int:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    seen: list[str] = []

    def pump(src, dst):
        for line in src:
            seen.append(line)
            dst.write(line)
            dst.flush()

    threads = [threading.Thread(target=pump, args=(proc.stdout, sys.stdout), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, sys.stderr), daemon=True)]
    for t in threads:
        t.start()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)   # mpiexec forwards Ctrl-C to the ranks
    try:
        rc = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old)
    for t in threads:
        t.join(timeout=5)
    text = "".join(seen)
    try:
        lost = [x for x in report_path.read_text().splitlines() if x and x not in text]
    except OSError:
        lost = []
    for line in lost:                            # a rank's message the abort cut off
        console_err(line)
    died = [(int(m.group(1)), m.group(2), int(m.group(3))) for m in _PID.finditer(text)]
    if rc != 0 and died:
        pids = rank_pids(metrics)
        sig = _SIGNAL.search(text)
        # the rank the signal took: the one whose exit code is that signal's number (a peer that
        # noticed the loss and aborted on its own can be reported first), else the first reported
        pid, host, code = next((d for d in died if sig and d[2] == int(sig.group(2))), died[0])
        who = f"rank {pids.index(pid)} (pid {pid} on {host})" if pid in pids else f"a rank (pid {pid} on {host})"
        first = lines.close() if lines else None
        # the launcher named a rank its clean-up killed (trusted only when every rank held a line)
        if first and first[1] != pid and lines.held >= len(pids) > 0:
            who = f"rank {first[0]} (pid {first[1]} on {first[2]})"
        how = (f"was killed by signal {sig.group(2)} ({sig.group(1).strip()})" if sig
               else f"exited with code {code}")
        if code in (2, 130) and not sig:
            return code                          # an lmc error or Ctrl-C: the rank said why
        console_err(f"error: {who} {how}; the launcher stopped the other ranks.  The last checkpoint is "
                    f"in {metrics.parent} (continue with --resume)")
        return 1
    return rc
