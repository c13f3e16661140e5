"""The runtime's process settings: the calling thread yields the CPU to IREE's task workers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
