"""Per-dispatch profile of a spec's @train_step on llvm-cpu (issue 15: "a profile per net
listing the top dispatches"): compiles the module (extra iree-compile flags allowed), writes
lmc.bench's seed-0 arguments as .npy, runs `iree-benchmark-module` with HAL host-execution
profiling and prints the top dispatches and the time per dispatch kind per step, over every step
but the first (`profile`).

    python benchmarks/dispatch_profile.py specs/mnist_mlp.yaml [--set train.batch_size=128]
        [--flags --iree-llvmcpu-target-cpu=znver3] [--reps 20] [--top 12]

Run with glibc's malloc tuned as lmc's runtime does (MALLOC_MMAP_MAX_=0,
MALLOC_TRIM_THRESHOLD_=..., the heap on huge pages; set here for the child), else first touches of fresh transient
pages dominate (benchmarks/NOTES.md, session 2)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                                  # noqa: E402
from lmc.train.bench import _initial  # noqa: E402
from lmc.compile import compile_module  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import abi, lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.run.runtime import TRANSIENTS_SIZE  # noqa: E402
from lmc.train.masks import draw  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--flags", nargs="*", default=[])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--dense-dw", default="as_is", help="a dense dW form of benchmarks/dense_forms.py (A/B)")
    ap.add_argument("--no-phase-dx", action="store_true", help="strided convs' dx on the interior-padded dy (A/B)")
    args = ap.parse_args()
    from lmc.prims.conv import Conv
    Conv.phase_dx = not args.no_phase_dx
    net = infer(load_spec(args.spec, args.sets))
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    try:
        bench_line, rows_ = profile(net, options, args.reps, args.flags, args.dense_dw)
    except RuntimeError as e:
        sys.exit(str(e))
    print(bench_line)
    summarize(rows_, args.top)


def profile(net, options: LowerOptions, reps: int = 20, flags=(), dense_dw: str = "as_is") -> tuple[str, list]:
    """Profile net's @train_step: (iree-benchmark-module's train_step lines, the dispatch rows
    of every step but the first: `rows`).  The first call is left out: its dispatches are the
    first to touch the step's memory (page faults, the heap's huge pages zeroed by the kernel)
    and ran up to 5× slower than later ones (mnist_cnn: its forward's Winograd transforms 8.5–11.6
    ms against 1.7–2.5), which made a profile of a few steps misleading.  RuntimeError with the
    tool's stderr when one fails."""
    text = lower(net, functions="train_step", options=options)
    if dense_dw != "as_is":
        import dense_forms
        text = dense_forms.variant(text, dense_dw)
    with micro.extra_flags(list(flags)):
        c = compile_module(text, options=options)
    a = abi(net)
    ps, opt, st, x, y = _initial(net, np.random.default_rng(0))
    hp = a.hp_vector(net.spec.train, 1e-4, 1)
    masks = draw(a.masks, net.spec.train, 0, 0, 0)
    bindir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as d:
        ins = []
        for i, v in enumerate(ps + opt + st + [x, y, hp] + list(masks)):
            f = Path(d) / f"a{i}.npy"
            np.save(f, np.ascontiguousarray(v))
            ins.append(f"--input=@{f}")
        size = transients_size(c.path, "train_step")
        if size is not None:           # the caller's transient storage (LMC_TRANSIENTS): a zero-filled buffer
            ins.append(f"--input={max(size, 1)}xi8")
        prof = Path(d) / "p.ireeprof"
        # glibc.malloc.hugetlb=1: the heap on transparent huge pages, as lmc's runtime advises it
        env = {**os.environ, "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2 ** 31 - 1),
               "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
        cmd = [str(bindir / "iree-benchmark-module"), f"--module={c.path}", "--device=local-task",
               "--function=train_step", "--benchmark_repetitions=1", f"--benchmark_min_time={reps}x",
               "--device_profiling_mode=host-execution", f"--device_profiling_output={prof}", *ins]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-3000:])
        bench_line = "\n".join(l for l in r.stdout.splitlines() if "train_step" in l)
        s = subprocess.run([str(bindir / "iree-profile"), "dispatch", "--dispatch_events", "--format=jsonl", str(prof)],
                           capture_output=True, text=True)
        if s.returncode != 0:
            raise RuntimeError(s.stderr[-3000:])
        return bench_line, rows(s.stdout)


def transients_size(vmfb, fn: str) -> int | None:
    """The transient storage `fn` takes as its last argument (lowering.with_transients), bytes;
    None where it allocates its own."""
    import iree.runtime as rt
    instance = rt.VmInstance()          # held while the module is read (it must outlive it)
    module = rt.VmModule.mmap(instance, str(vmfb))
    c = module.lookup_function(fn).reflection.get(TRANSIENTS_SIZE)
    del module
    return None if c is None else int(c)


_KEY = re.compile(r"\S+_dispatch_\d+_(\S+)")


def _kind(k: str) -> str:
    """A dispatch name's kind: transposes first (IREE names a fused one `elementwise_transpose_…`)."""
    for word, kind in (("transpose", "transpose"), ("matmul", "matmul"), ("matvec", "matmul"), ("conv", "conv"),
                       ("reduction", "reduction"), ("memcpy", "copy"), ("elementwise", "elementwise")):
        if word in k:
            return kind
    return k.split("_")[0]


def rows(jsonl: str, skip: int = 1) -> list[tuple[float, int, str, str]]:
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
    return [(t, n, k, _kind(_KEY.fullmatch(k).group(1))) for k, (t, n) in agg.items()]


def top_share(rows: list, top: int = 5) -> dict | None:
    """The `top` costliest dispatches' share of the step's dispatch time, the dispatches per
    step and the dispatch time per step (ms); None when the profile has no dispatch rows."""
    if not rows:
        return None
    steps = min(c for _, c, _, _ in rows)
    tot = sum(t for t, _, _, _ in rows)
    best = sorted(rows, reverse=True)[:top]
    return {"top": top, "share": sum(t for t, _, _, _ in best) / tot,
            "dispatches_per_step": sum(c for _, c, _, _ in rows) / steps, "dispatch_ms": tot / steps,
            "names": [n.split("_dispatch_", 1)[1] for _, _, n, _ in best]}


def summarize(rows: list, top: int):
    """Top dispatches by time per step, and the time per kind (matmul, transpose, ...)."""
    if not rows:
        print("no dispatch rows in the profile")
        return
    steps = min(c for _, c, _, _ in rows)          # every dispatch runs at least once per step
    tot = sum(t for t, _, _, _ in rows)
    print(f"{len(rows)} dispatches, {sum(c for _, c, _, _ in rows) / steps:.0f} per step, "
          f"{tot / steps:.2f} ms per step of dispatch time ({steps} steps)")
    kinds = {}
    for t, _, _, k in rows:
        kinds[k] = kinds.get(k, 0.0) + t
    print("by kind: " + ", ".join(f"{k} {t / steps:.2f} ms ({100 * t / tot:.0f}%)"
                                  for k, t in sorted(kinds.items(), key=lambda kv: -kv[1])))
    print(f"| top {top} dispatch | ms per step | share |\n|---|---|---|")
    for t, c, name, _ in sorted(rows, reverse=True)[:top]:
        print(f"| `{name.split('_dispatch_', 1)[1]}` ×{c // steps} | {t / steps:.2f} | {100 * t / tot:.1f}% |")


if __name__ == "__main__":
    main()
