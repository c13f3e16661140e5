"""Cold-compile report.  Default: compile every lowerable spec for the given backends with a
cold cache and print a table: spec, backend, batch, MLIR size, compile seconds, vmfb size.

--phases: where one cold iree-compile of a spec's train module spends its time.  The compile is
run as a chain of iree-compile invocations, one per group of IREE's pipeline phases
(`--compile-from=P --compile-to=Q`, each reading the previous one's MLIR), and each is timed
(wall) — so the phases add up to a real compile, plus the printing and parsing of the IR
between them and the start of each process (the `startup + IR I/O` column: the part of each stage's wall time that its own
`--mlir-timing` report does not cover).  The executables (dispatches) are counted in the
executable-sources IR, so codegen's time per dispatch is shown too.  With --timing-dir, each
stage's `--mlir-timing --mlir-timing-display=list` report is kept (the costliest passes).

    python benchmarks/compile_report.py [--backends llvm-cpu cuda rocm] [--specs specs/a.yaml ...]
    python benchmarks/compile_report.py --phases --specs specs/resnet18.yaml --set input.height=32 ...
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmc.compile import compile_module, find_compiler, flags  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402

# (summary phase, IREE --compile-to phase the stage ends at); each stage starts where the
# previous one ended ("start" first)
STAGES = [
    ("input conversion (StableHLO → linalg)", "input"),
    ("ABI + preprocessing", "preprocessing"),
    ("global optimization", "global-optimization"),
    ("dispatch creation", "dispatch-creation"),
    ("flow + stream", "stream"),
    ("executable sources + configuration", "executable-configurations"),
    ("codegen (translate every dispatch)", "executable-targets"),
    ("HAL: LLVM serialisation of the executables", "hal"),
    ("VM + bytecode", "end"),
]
_TOTAL = re.compile(r"Total Execution Time: ([\d.]+) seconds")
_ROW = re.compile(r"^\s+[\d.]+ \(\s*[\d.]+%\)\s+([\d.]+) \(\s*[\d.]+%\)  (\S.*)$")


def phases(text: str, backend: str = "llvm-cpu", timing_dir: Path | None = None) -> dict:
    """Run the staged compile of `text`; {"stages": [(phase, wall s, mlir-timing s)],
    "dispatches": n, "total_s": Σ wall}.  Raises RuntimeError with iree-compile's stderr."""
    exe = find_compiler()
    fl = flags(backend, None, text)
    out = {"stages": [], "dispatches": None}
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "start.mlir"
        src.write_text(text)
        prev = "start"
        for name, to in STAGES:
            dst = Path(d) / (f"{to}.mlir" if to != "end" else "out.vmfb")
            cmd = [exe, str(src), *fl, f"--compile-from={prev}", f"--compile-to={to}",
                   "--mlir-timing", "--mlir-timing-display=list", "-o", str(dst)]
            if prev == "start":
                cmd.remove("--compile-from=start")
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if r.returncode != 0:
                raise RuntimeError(f"{to}: {r.stderr[-2000:]}")
            m = _TOTAL.search(r.stderr)
            out["stages"].append((name, wall, float(m.group(1)) if m else None))
            if timing_dir is not None:
                timing_dir.mkdir(parents=True, exist_ok=True)
                (timing_dir / f"{len(out['stages']):02d}-{to}.txt").write_text(r.stderr)
            if to == "executable-configurations":
                out["dispatches"] = dst.read_text().count("hal.executable.export public")
            src.unlink()
            src, prev = dst, to
    out["total_s"] = sum(w for _, w, _ in out["stages"])
    return out


def top_passes(report: str, n: int = 5) -> list[tuple[str, float]]:
    """The n costliest leaf-ish passes of a `--mlir-timing-display=list` report (wall s),
    pipelines and pass-manager adaptors (which contain others) left out."""
    rows = []
    for line in report.splitlines():
        m = _ROW.match(line)
        if m and not re.search(r"Pipeline|root|Adaptor|Total", m.group(2)):
            rows.append((m.group(2), float(m.group(1))))
    return sorted(rows, key=lambda r: -r[1])[:n]


def phase_table(spec: str, net, res: dict, timing_dir: Path | None = None) -> str:
    tot, nd = res["total_s"], res["dispatches"]
    lines = [f"### {spec} (batch {net.batch}): {tot:.1f} s staged, {nd} executables", "",
             "| phase | wall s | share | startup + IR I/O s |" + (" costliest passes (s, summed over threads) |" if timing_dir else ""),
             "|---|---|---|---|" + ("---|" if timing_dir else "")]
    for i, (name, wall, mt) in enumerate(res["stages"], 1):
        io = "n/a" if mt is None else f"{max(0.0, wall - mt):.1f}"
        extra = ""
        if timing_dir:
            f = next(timing_dir.glob(f"{i:02d}-*.txt"))
            extra = " " + ", ".join(f"{p} {t:.1f}" for p, t in top_passes(f.read_text(), 3)) + " |"
        per = f" ({1e3 * wall / nd:.0f} ms per executable)" if nd and name.startswith("codegen") else ""
        lines.append(f"| {name}{per} | {wall:.1f} | {100 * wall / tot:.0f}% | {io} |{extra}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="*", default=["llvm-cpu", "cuda", "rocm"])
    ap.add_argument("--specs", nargs="*", type=Path)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="recipe/spec overrides (--phases)")
    ap.add_argument("--phases", action="store_true", help="per-phase compile time of each spec (first backend)")
    ap.add_argument("--timing-dir", type=Path, help="with --phases: keep each stage's --mlir-timing report here")
    args = ap.parse_args()
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    specs = args.specs or sorted((ROOT / "specs").glob("*.yaml"))
    if args.phases:
        for path in specs:
            net = infer(load_spec(path, args.sets))
            text = lower(net, backend=args.backends[0], options=options)
            tdir = args.timing_dir / path.stem if args.timing_dir else None
            res = phases(text, args.backends[0], tdir)
            print(phase_table(path.stem, net, res, tdir), flush=True)
            print()
        return
    print("| spec | backend | batch | MLIR chars | compile s | vmfb bytes |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LMC_CACHE"] = cache          # cold: measure real compiles
        for path in specs:
            net = infer(load_spec(path))
            if net.unlowered or net.spec.train is None:
                continue
            for b in args.backends:
                text = lower(net, backend=b, options=options)
                t0 = time.perf_counter()
                try:
                    c = compile_module(text, backend=b, options=options)
                    size = f"{c.path.stat().st_size:,}"
                except Exception as e:  # report and go on
                    size = f"FAILED: {str(e).splitlines()[0][:60]}"
                print(f"| {path.stem} | {b} | {net.batch} | {len(text):,} | {time.perf_counter() - t0:.1f} | {size} |",
                      flush=True)


if __name__ == "__main__":
    main()
