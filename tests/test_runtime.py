"""The runtime's process settings: the calling thread yields the CPU to IREE's task workers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmc.run import runtime

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import json, os, threading, numpy as np
from lmc.compile import compile_module
from lmc.lower.lowering import prim_test_module
from lmc.prims import make_prim
from lmc.run.runtime import Module
from lmc.core.types import TensorType
tid = threading.get_native_id()
before = os.getpriority(os.PRIO_PROCESS, tid)
m = Module(compile_module(prim_test_module(make_prim("act", kind="relu"), [TensorType((4,))], [])).path)
after = os.getpriority(os.PRIO_PROCESS, tid)
y = np.asarray(m.forward(np.array([-1.0, 0.5, 2.0, -3.0], np.float32))).tolist()
workers = [os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")
           if open(f"/proc/self/task/{t}/comm").read().startswith("iree-worker")]
print(json.dumps(dict(before=before, after=after, workers=workers, y=y)))
"""


def _run(nice: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LMC_CALLER_NICE": nice}
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_bad_caller_nice_is_a_clear_error():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LMC_CALLER_NICE": "high"}
    r = subprocess.run([sys.executable, "-m", "lmc.cli", "bench", str(ROOT / "specs" / "mnist_linear.yaml"), "--timed-steps", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "LMC_CALLER_NICE='high': expected an integer nice value, 0 (off) to 19" in r.stderr
    assert "Traceback" not in r.stderr


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities (Linux)")


def test_caller_yields_to_workers():
    r = _run("10")
    assert r["y"] == [0.0, 0.5, 2.0, 0.0]
    assert r["after"] == max(10, r["before"]), r
    assert r["workers"] and all(w == r["before"] for w in r["workers"]), f"the workers keep their priority: {r}"


def test_caller_nice_can_be_turned_off():
    r = _run("0")
    assert r["after"] == r["before"], r


HEAP_SCRIPT = r"""
import json, os
from lmc.run.runtime import keep_freed_memory
tuned = keep_freed_memory()
heap, flags = None, ""
lines = open("/proc/self/smaps").read().splitlines()
for i, line in enumerate(lines):
    if line.endswith("[heap]"):
        lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
        heap = hi - lo
        flags = next(l for l in lines[i + 1:] if l.startswith("VmFlags")).split()[1:]
        break
print(json.dumps({"tuned": tuned, "heap": heap, "hg": "hg" in flags}))
"""


def _heap(malloc_mode: str) -> dict:
    env = {**os.environ, "LMC_MALLOC": malloc_mode}
    r = subprocess.run([sys.executable, "-c", HEAP_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.skipif(runtime._thp_mode() not in ("madvise", "always") or sys.platform != "linux",
                    reason="no transparent huge pages to advise on this machine")
def test_the_heap_is_grown_once_and_advised_huge_pages():
    on = _heap("tuned")
    assert on["tuned"] and on["hg"], on
    assert on["heap"] >= 1 << 30, on               # the reserve: ~2 GB of address space, untouched
    off = _heap("nothp")
    assert off["tuned"] and not off["hg"] and off["heap"] < 1 << 30, off
    plain = _heap("system")
    assert not plain["tuned"] and not plain["hg"], plain


def test_an_unknown_malloc_mode_is_a_clear_error():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LMC_MALLOC": "huge"}
    r = subprocess.run([sys.executable, "-m", "lmc.cli", "bench", str(ROOT / "specs" / "mnist_linear.yaml"), "--timed-steps", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "LMC_MALLOC='huge'" in r.stderr and "Traceback" not in r.stderr
