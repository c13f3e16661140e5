"""Per-dispatch profile of a spec's @train_step on llvm-cpu (issue 15: "a profile per net
listing the top dispatches"): compiles the module (extra iree-compile flags allowed), writes
lmc.bench's seed-0 arguments as .npy, runs `iree-benchmark-module` with HAL host-execution
profiling and prints the top dispatches and the time per dispatch kind per step, over every step
but the first (`profile`; the profile itself is lmc's, lmc/train/profile.py, which `lmc bench
--profile` reports in brief).

    python benchmarks/dispatch_profile.py specs/mnist_mlp.yaml [--set train.batch_size=128]
        [--flags --iree-llvmcpu-target-cpu=znver3] [--reps 20] [--top 12]

The child runs with glibc's malloc tuned as lmc's runtime does (MALLOC_MMAP_MAX_=0,
MALLOC_TRIM_THRESHOLD_=..., the heap on huge pages), else first touches of fresh transient
pages dominate (benchmarks/NOTES.md, session 2)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                                  # noqa: E402
from lmc.core.errors import LmcError  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402
from lmc.train import profile as lmc_profile  # noqa: E402
from lmc.train.profile import dispatch_rows  # noqa: E402


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
    """Profile net's @train_step (lmc.train.profile.dispatch_rows, `reps` calls, the first left
    out): (iree-benchmark-module's train_step lines, the dispatch rows).  flags: extra
    iree-compile flags; dense_dw: a dense dW form of dense_forms.py.  RuntimeError with the
    tool's message when one fails."""
    text = lower(net, functions="train_step", options=options)
    if dense_dw != "as_is":
        import dense_forms
        text = dense_forms.variant(text, dense_dw)
    try:
        with micro.extra_flags(list(flags)):
            return dispatch_rows(net, options, max(reps - 1, 1), text=text)
    except LmcError as e:
        raise RuntimeError(str(e)) from None


rows = lmc_profile.rows
top_share = lmc_profile.top_share


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
