"""Cold iree-compile time of one spec's train module under candidate flag sets, interleaved.

The module is lowered once (or read from `--mlir FILE`), written to a temp file, and compiled
with lmc's flags (`lmc.compile.flags()`, IREE_EXTRA_FLAGS included as usual) plus each
candidate's, `--reps` times per candidate in rounds A B C … A B C …, each run a fresh
iree-compile process writing a throw-away .vmfb (no lmc cache involved, so every run is cold).
Per run: wall seconds, the child's CPU seconds (user + sys, from
`resource.getrusage(RUSAGE_CHILDREN)` deltas — the number to trust on a shared machine), the
1-minute load average at its start, and the vmfb's size and hash.  Run it under `nice -n 10` on
a shared machine.  A candidate (`--cand`) is a quoted string of extra flags appended
after lmc's (later flags win); the empty string is the baseline.

    python benchmarks/compile_flags.py --spec specs/mobilenet_v2.yaml \
        --set input.height=32 --set input.width=32 --set train.batch_size=128 \
        --reps 2 --cand= --cand='--iree-hal-link-executables=false' --cand='--iree-llvmcpu-slp-vectorization=false'

(`--cand=VALUE` with the `=`: argparse would take a bare `--iree-…` value for an option.)

--step NET …: instead of compile times, the train step of each named spec (with its `--set`s as
`NET:key=value,key=value`) compiled once per candidate (through `lmc.compile.compile_module`, the
candidate in IREE_EXTRA_FLAGS, lmc's cache as usual) and timed interleaved
(`micro.interleave(cpu=True)`, `--rounds` rounds): median wall and process CPU ms per step, and
the loss after the same steps from the same start under each candidate (the numbers must agree).

    python benchmarks/compile_flags.py --step mnist_cnn resnet18:input.height=32,input.width=32 \
        --rounds 9 --cand= --cand='--iree-llvmcpu-slp-vectorization=false'

--timing: add `--mlir-timing --mlir-timing-display=list` to every run and print each
candidate's costliest passes (thread-summed wall, from the last run's report).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmc.compile import find_compiler, flags  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def compile_once(exe: str, src: Path, fl: list[str], extra: list[str], out: Path,
                 timing: bool = False) -> dict:
    """One cold iree-compile of `src`; {"wall", "cpu", "load", "stderr", "bytes", "sha"} (the vmfb's
size and hash: a flag whose vmfb is byte-identical to the baseline's changed no code).  Raises on failure."""
    cmd = [exe, str(src), *fl, *extra, "-o", str(out)]
    if timing:
        cmd += ["--mlir-timing", "--mlir-timing-display=list"]
    load = os.getloadavg()[0]
    c0, t0 = child_cpu(), time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, child_cpu() - c0
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(extra)}: {r.stderr[-2000:]}")
    data = out.read_bytes()
    out.unlink()
    return {"wall": wall, "cpu": cpu, "load": load, "stderr": r.stderr, "bytes": len(data),
            "sha": hashlib.sha256(data).hexdigest()[:12]}


def step_ab(nets: list[str], cands: list[str], rounds: int) -> None:
    """Train-step A/B of the candidates on each net (see the module docstring)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import micro
    from lmc.compile import compile_module
    from lmc.run.runtime import Module
    from lmc.train.bench import stepper
    options = LowerOptions.from_env()
    old = os.environ.get("IREE_EXTRA_FLAGS", "")
    print("| net | flags | step wall ms | step CPU ms | CPU vs first | loss after warm-up + rounds |")
    print("|---|---|---|---|---|---|")
    for spec in nets:
        name, _, sets = spec.partition(":")
        net = infer(load_spec(ROOT / "specs" / f"{name}.yaml", [s for s in sets.split(",") if s]))
        text = lower(net, backend="llvm-cpu", options=options)
        steps, holders = {}, {}
        for c in cands:
            os.environ["IREE_EXTRA_FLAGS"] = f"{old} {c}".strip()
            try:
                m = Module(compile_module(text, backend="llvm-cpu", options=options).path)
            finally:
                os.environ["IREE_EXTRA_FLAGS"] = old
            steps[c], holders[c] = stepper(net, m)
        before = micro.load_avg()
        r = micro.interleave(steps, reps=rounds, cpu=True)
        after = micro.load_avg()
        c0 = r[cands[0]][1]
        for c in cands:
            w, u = r[c]
            print(f"| {spec} | `{c or '(baseline)'}` | {w:.1f} | {u:.1f} | {100 * (u / c0 - 1):+.1f}% | "
                  f"{holders[c]['loss']:.6f} |", flush=True)
        print(f"<!-- {spec}: {before} → {after} -->", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, help="the spec whose train module is compiled")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="recipe/spec overrides")
    ap.add_argument("--reps", type=int, default=2, help="rounds (each candidate once per round)")
    ap.add_argument("--timing", action="store_true", help="--mlir-timing report, top passes per candidate")
    ap.add_argument("--top", type=int, default=12, help="with --timing: passes shown")
    ap.add_argument("--mlir", type=Path, help="compile this MLIR file instead of lowering --spec")
    ap.add_argument("--step", nargs="+", metavar="NET[:k=v,…]", help="train-step A/B on these specs instead")
    ap.add_argument("--rounds", type=int, default=9, help="with --step: interleaved rounds")
    ap.add_argument("--cand", dest="cands", action="append", required=True,
                    help="one candidate's extra flags, quoted ('' = baseline); repeat; the first is the reference")
    args = ap.parse_args()
    if args.step:
        step_ab(args.step, args.cands, args.rounds)
        return
    if not (args.spec or args.mlir):
        ap.error("--spec or --mlir (or --step)")
    if args.mlir:
        text = args.mlir.read_text()
    else:
        net = infer(load_spec(args.spec, args.sets))
        text = lower(net, backend="llvm-cpu", options=LowerOptions.from_env())
    exe = find_compiler()
    fl = flags("llvm-cpu", None, text)
    print(f"# {(args.spec or args.mlir).stem}: {len(text):,} chars; flags: {shlex.join(fl)}", flush=True)
    res: dict[str, list[dict]] = {c: [] for c in args.cands}
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "m.mlir"
        src.write_text(text)
        for rnd in range(args.reps):
            for c in args.cands:
                r = compile_once(exe, src, fl, shlex.split(c), Path(d) / "m.vmfb", args.timing)
                res[c].append(r)
                print(f"round {rnd} | {c or '(baseline)'} | wall {r['wall']:.1f} s | cpu {r['cpu']:.1f} s | "
                      f"load {r['load']:.1f} | vmfb {r['bytes']:,} {r['sha']}", flush=True)
    base = args.cands[0]
    bw = statistics.median(r["wall"] for r in res[base])
    bc = statistics.median(r["cpu"] for r in res[base])
    print("\n| flags | wall s (runs) | CPU s (runs) | median CPU vs first | load | vmfb |")
    print("|---|---|---|---|---|---|")
    for c in args.cands:
        w = [r["wall"] for r in res[c]]
        u = [r["cpu"] for r in res[c]]
        ld = [r["load"] for r in res[c]]
        print(f"| `{c or '(baseline)'}` | {', '.join(f'{x:.1f}' for x in w)} | {', '.join(f'{x:.1f}' for x in u)} | "
              f"{100 * (statistics.median(u) / bc - 1):+.1f}% (wall {100 * (statistics.median(w) / bw - 1):+.1f}%) | "
              f"{min(ld):.1f}–{max(ld):.1f} | "
              f"{'same as first' if res[c][0]['sha'] == res[base][0]['sha'] else res[c][0]['sha']} |")
    if args.timing:
        from benchmarks.compile_report import top_passes
        for c in args.cands:
            print(f"\n## {c or '(baseline)'}: costliest passes (s, thread-summed)")
            for p, t in top_passes(res[c][-1]["stderr"], args.top):
                print(f"  {t:8.2f}  {p}")


if __name__ == "__main__":
    main()
