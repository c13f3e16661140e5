"""Micro-benchmark helpers for A/B experiments on one machine under noisy load: compile a
module text under given extra iree-compile flags, and time several candidates interleaved
(round-robin, several repetitions, medians) so that load drifts hit all of them alike."""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmc.compile import compile_module  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.run.runtime import Module  # noqa: E402


@contextlib.contextmanager
def extra_flags(flags):
    """IREE_EXTRA_FLAGS plus `flags` (after them, so they win) while compiling: a caller's
    IREE_EXTRA_FLAGS (the znver3 target of an AVX2 A/B) stays in force."""
    old = os.environ.get("IREE_EXTRA_FLAGS")
    os.environ["IREE_EXTRA_FLAGS"] = " ".join([old or "", *flags]).strip()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("IREE_EXTRA_FLAGS", None)
        else:
            os.environ["IREE_EXTRA_FLAGS"] = old


def load(text: str, flags=(), driver=None, options: LowerOptions = LowerOptions()) -> Module:
    """Compile `text` (lowered with `options`) under extra flags and load it."""
    with extra_flags(flags):
        c = compile_module(text, options=options)
    return Module(c.path, driver=driver)


def wait(out):
    o = out[0] if isinstance(out, (tuple, list)) else out
    np.asarray(o).ravel()[:1]


def interleave(cands: dict, reps: int = 7, warmup: int = 1, cpu: bool = False) -> dict:
    """cands: name → zero-arg callable that runs to completion.  Returns name → median wall ms,
    or with cpu=True name → (median wall ms, median process CPU ms): the CPU time of all the
    process's threads (IREE's workers included) hardly moves with other processes' load, so it
    separates candidates where the wall time is too noisy to."""
    for _ in range(warmup):
        for f in cands.values():
            f()
    ts = {k: [] for k in cands}
    cs = {k: [] for k in cands}
    for _ in range(reps):
        for k, f in cands.items():
            c0, t0 = time.process_time(), time.perf_counter()
            f()
            ts[k].append(1e3 * (time.perf_counter() - t0))
            cs[k].append(1e3 * (time.process_time() - c0))
    if cpu:
        return {k: (statistics.median(ts[k]), statistics.median(cs[k])) for k in cands}
    return {k: statistics.median(v) for k, v in ts.items()}


def load_avg() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def report_blocks(cands: dict, reps: int, block: int):
    """Time candidates that each run `block` calls (interleave, CPU time too) and print ms per
    call, with the load average before and after."""
    print(load_avg(), flush=True)
    r = interleave(cands, reps=reps, cpu=True)
    width = max(len(k) for k in r) + 2
    for k, (wall, cpu) in r.items():
        print(f"{k:{width}s} {wall / block:8.2f} ms  CPU {cpu / block:8.2f} ms")
    print(load_avg())


def report_steps(name: str, cands: dict, reps: int):
    """Time whole train steps (name → zero-arg step) interleaved, CPU time too, and print one
    line of medians per net with the load average before and after."""
    print(f"  {load_avg()}", flush=True)
    r = interleave(cands, reps=reps, cpu=True)
    print(f"  {name}: " + ", ".join(f"{k} {w:.1f} ms (CPU {c:.1f})" for k, (w, c) in r.items()), load_avg(), flush=True)
