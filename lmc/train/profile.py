"""`lmc bench --profile`: where a train step's time goes, dispatch by dispatch (llvm-cpu).

Compiles the net's fused @train_step (the cached module when there is one), writes `lmc
bench`'s seed-0 arguments as .npy files, runs IREE's `iree-benchmark-module` with the HAL's
host-execution profiling and reads the events back with `iree-profile`.  Every call but the
first counts: the first touches the step's memory (page faults, the heap's huge pages zeroed by
the kernel) and ran up to 5× slower than later ones.  glibc's malloc is tuned for the child as
lmc's runtime tunes its own (no mmap, no trimming, the heap on huge pages), else the first
touches of fresh transient pages would dominate.

`top_share` is the figure `lmc bench` and `make bench` report: the few costliest dispatches'
share of the step's dispatch time, so a step whose time sits in a handful of dispatches (one
matmul to fix) is told apart from one spread over hundreds (fusion, memory traffic)."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from lmc.compile import compile_module
from lmc.core.errors import TrainError
from lmc.core.tools import installed
from lmc.graph.infer import TypedNet
from lmc.lower.lowering import abi, lower
from lmc.lower.options import LowerOptions
from lmc.run.runtime import TRANSIENTS_SIZE
from lmc.train.bench import _initial
from lmc.train.masks import draw

TOP = 5                 # the dispatches `lmc bench --profile` names
_KEY = re.compile(r"\S+_dispatch_\d+_(\S+)")
# a dispatch name's kind, by the first of these words in it (transposes first: IREE names a
# fused one `elementwise_transpose_…`)
_KINDS = (("transpose", "transpose"), ("matmul", "matmul"), ("matvec", "matmul"), ("mmt4d", "mmt4d"),
          ("conv", "conv"), ("reduction", "reduction"), ("memcpy", "copy"), ("elementwise", "elementwise"))

Row = tuple[float, int, str, str]       # total ms, calls, dispatch name, kind


def _tool(name: str) -> str:
    """An IREE runtime tool next to this Python (the pip wheel), else on PATH."""
    found = installed(name)
    if not found:
        raise TrainError(f"{name} not found (the dispatch profile needs IREE's runtime tools)",
                         hint="pip install iree-base-runtime (or `make setup`)")
    return found


def dispatch_rows(net: TypedNet, options: LowerOptions = LowerOptions(), reps: int = 10,
                  text: str | None = None) -> tuple[str, list[Row]]:
    """Profile net's fused @train_step over `reps` calls: (iree-benchmark-module's train_step
    lines, one row per dispatch over every call but the first).  text: the module to profile
    instead of the lowering's (benchmarks' variants of it).  The module is compiled with the
    synchronous ABI whatever `options.invocation` says (iree-benchmark-module calls it that
    way; the dispatches are the same).  TrainError with the tool's message when one fails."""
    options = dataclasses.replace(options, invocation="sync")
    if text is None:
        text = lower(net, functions="train_step", options=options)
    c = compile_module(text, options=options)
    a = abi(net)
    ps, opt, st, x, y = _initial(net, np.random.default_rng(0))
    hp = a.hp_vector(net.spec.train, 1e-4, 1)
    masks = draw(a.masks, net.spec.train, 0, 0, 0)
    with tempfile.TemporaryDirectory() as d:
        ins = []
        for i, v in enumerate(ps + opt + st + [x, y, hp] + list(masks)):
            f = Path(d) / f"a{i}.npy"
            np.save(f, np.ascontiguousarray(v))
            ins.append(f"--input=@{f}")
        size = transients_size(c.path, "train_step")
        if size is not None:           # the caller's transient storage (external transients)
            ins.append(f"--input={max(size, 1)}xi8")
        prof = Path(d) / "p.ireeprof"
        env = {**os.environ, "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2 ** 31 - 1),
               "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
        cmd = [_tool("iree-benchmark-module"), f"--module={c.path}", "--device=local-task",
               "--function=train_step", "--benchmark_repetitions=1", f"--benchmark_min_time={reps + 1}x",
               "--device_profiling_mode=host-execution", f"--device_profiling_output={prof}", *ins]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise TrainError(f"iree-benchmark-module failed on {net.spec.name}'s train step: {r.stderr.strip()[-1500:]}")
        line = "\n".join(l for l in r.stdout.splitlines() if "train_step" in l)
        s = subprocess.run([_tool("iree-profile"), "dispatch", "--dispatch_events", "--format=jsonl", str(prof)],
                           capture_output=True, text=True)
        if s.returncode != 0:
            raise TrainError(f"iree-profile failed: {s.stderr.strip()[-1500:]}")
        return line, rows(s.stdout)


def transients_size(vmfb, fn: str) -> int | None:
    """The transient storage `fn` takes as its last argument, bytes; None where it allocates
    its own."""
    import iree.runtime as rt
    instance = rt.VmInstance()          # held while the module is read (it must outlive it)
    module = rt.VmModule.mmap(instance, str(vmfb))
    c = module.lookup_function(fn).reflection.get(TRANSIENTS_SIZE)
    del module
    return None if c is None else int(c)


def kind(name: str) -> str:
    """A dispatch's kind from its name's tail (`matmul_8x8x8_f32` → matmul, `batch_mmt4d_…` →
    mmt4d, the packed matmuls; else its first word: pack, unpack, softmax …)."""
    return next((k for word, k in _KINDS if word in name), name.split("_")[0])


def rows(jsonl: str, skip: int = 1) -> list[Row]:
    """`iree-profile dispatch --dispatch_events` JSONL as rows (total ms, count, name, kind) per
    dispatch, over every call but the first `skip` (one call, one submission)."""
    events = [e for e in (json.loads(l) for l in jsonl.splitlines() if l.startswith("{"))
              if e.get("type") == "host_dispatch_event" and _KEY.fullmatch(e.get("key", ""))]
    first = sorted({e["submission_id"] for e in events})[:skip]
    agg: dict[str, list] = {}
    for e in events:
        if e["submission_id"] not in first:
            r = agg.setdefault(e["key"], [0.0, 0])
            r[0] += e["duration_ns"] * 1e-6
            r[1] += 1
    return [(t, n, k, kind(_KEY.fullmatch(k).group(1))) for k, (t, n) in agg.items()]


def top_share(rows_: list[Row], top: int = TOP) -> dict | None:
    """The `top` costliest dispatches' share of the step's dispatch time, with each one's ms
    per step, the dispatches per step, the dispatch time per step (ms) and the time per kind;
    None when the profile has no dispatch rows."""
    if not rows_:
        return None
    steps = min(c for _, c, _, _ in rows_)          # every dispatch runs at least once per step
    tot = sum(t for t, _, _, _ in rows_)
    best = sorted(rows_, reverse=True)[:top]
    kinds: dict[str, float] = {}
    for t, _, _, k in rows_:
        kinds[k] = kinds.get(k, 0.0) + t / steps
    return {"top": top, "share": sum(t for t, _, _, _ in best) / tot,
            "dispatches_per_step": sum(c for _, c, _, _ in rows_) / steps, "dispatch_ms": tot / steps,
            "names": [n.split("_dispatch_", 1)[1] for _, _, n, _ in best],
            "top_ms": [t / steps for t, _, _, _ in best],
            "by_kind_ms": dict(sorted(kinds.items(), key=lambda kv: -kv[1]))}


def profile(net: TypedNet, options: LowerOptions = LowerOptions(), reps: int = 10, top: int = TOP) -> dict:
    """`lmc bench --profile`'s figures (top_share) for net's fused @train_step, plus the calls
    profiled."""
    _, rs = dispatch_rows(net, options, reps)
    share = top_share(rs, top)
    if share is None:
        raise TrainError(f"the dispatch profile of {net.spec.name}'s train step has no dispatch events")
    return {**share, "profiled_calls": reps}
