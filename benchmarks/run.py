"""`make bench`: lmc vs JAX vs PyTorch (eager and torch.compile) on the same nets, same batch,
same optimizer, measured in one run on this machine.

Each candidate runs in a process of its own, as a user would run it: thread pools, spinning
OpenMP workers, allocator settings and thread priorities of one framework cannot slow
another down (in one shared process they did: lmc lowers its calling thread's priority, and
PyTorch's OpenMP workers spin after each call).  The machine may be shared, so the
candidates of one net are timed *interleaved*: the parent asks each process in turn for a
block of steps (one step for the CNNs, ~0.2 s worth for small nets), with a short pause
after each block so the previous candidate's threads are idle, `--steps` rounds after
warm-up, per-step medians reported; a load drift then hits all of them alike.  Besides wall
time the table keeps each candidate's process CPU time per step (all its threads), which
hardly moves with other processes' load.  A peer that fails to build or run is reported as
n/a with its error on stderr and in the results file, never hidden.

    python benchmarks/run.py [--nets mnist_cnn ...] [--steps 10] [--json out.json]
                             [--results benchmarks/RESULTS.md]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lmc.train.bench import sgemm_peak_gflops, stepper, train_step_flops  # noqa: E402
from lmc.compile import compile_training  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import abi, lower, lower_train  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.run.runtime import training_module  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402
import peers                             # noqa: E402

NETS = [  # (spec, overrides): the four nets, batch 128, ResNet-18 at CIFAR size
    ("specs/mnist_mlp.yaml", ["train.batch_size=128"]),
    ("specs/mnist_cnn.yaml", ["train.batch_size=128"]),
    ("specs/cifar_cnn_bn.yaml", ["train.batch_size=128"]),
    ("specs/resnet18.yaml", ["train.batch_size=128", "input.height=32", "input.width=32"]),
    # the conv family's (issue 11): depthwise convs and squeeze-excite, at CIFAR size
    ("specs/mobilenet_v2.yaml", ["train.batch_size=128", "input.height=32", "input.width=32"]),
    ("specs/efficientnet_b0.yaml", ["train.batch_size=128", "input.height=32", "input.width=32"]),
    # the transformer rows (issue 10): ViT-Tiny at CIFAR size with 4×4 patches, batch 64, AdamW;
    # tiny_gpt at batch 32 (clipping off: the peers do not implement it)
    ("specs/vit_tiny.yaml", ["train.batch_size=64", "input.height=32", "input.width=32",
                             "layers.0.patch_embed.patch_size=4", "layers.0.patch_embed.n_patches=64"]),
    ("specs/tiny_gpt.yaml", ["train.batch_size=32", "train.grad_clip_norm=0"]),
]
# compile-only rows (--compile-only-nets, and in `make bench`): cold compile and first call of
# every candidate, no timed steps; the ImageNet nets at their spec's resolution, batch 32
COMPILE_ONLY = [(f"specs/{n}.yaml", ["train.batch_size=32"])
                for n in ("resnet50", "efficientnet_v2_s", "convnext_tiny", "swin_tiny")]
PEERS = ("jax", "torch", "torch_compile")
# torchvision's own model (peers.TORCHVISION: resnet18), eager and torch.compile, each in the
# default (NCHW) and the channels_last memory format; the faster format of each is reported
TV_PEERS = ("tv", "tv_cl", "tv_compile", "tv_compile_cl")


def lmc_candidate(net, form: str | None = None, cold: bool = True):
    """form: a dense dW rewrite of benchmarks/dense_forms.py (the candidate "lmc+FORM", for A/Bs).
    cold: compile into an empty LMC_CACHE (this process's own), so compile_s is a cold
    iree-compile of the train module (lowering included) whatever the user cache holds."""
    if cold:
        import tempfile
        os.environ["LMC_CACHE"] = tempfile.mkdtemp(prefix="lmc-bench-cold-")
    t0 = time.perf_counter()
    options = LowerOptions.from_env()     # after _serve applied an lmc@KEY=VALUE switch
    # as `lmc train` does: the training functions' module(s) (two, side by side, where LMC_SPLIT
    # splits the net), @forward's compiled beside one or after two
    a = abi(net, halves=options.split)
    texts = lower_train(net, a, options=options)
    if form:
        import dense_forms
        texts = [dense_forms.variant(text, form) for text in texts]
    train, fwd = compile_training(texts, lower(net, "forward", options=options), options=options)
    cs = [p.result() for p in train]
    compile_s = time.perf_counter() - t0
    step, _ = stepper(net, training_module([c.path for c in cs]), a=a, queued=options.queued)

    def settle():
        """After the first step: the @forward compile done, so the timed steps run alone."""
        fwd.result()
        if cold:                                    # loaded: the private cache can go
            import shutil
            shutil.rmtree(os.environ["LMC_CACHE"], ignore_errors=True)
    return step, {"compile_s": None if all(c.cached for c in cs) else compile_s, "settle": settle}


def peer_candidate(name, net):
    if name == "jax":
        return peers.jax_step(net)[0], {}
    if name in TV_PEERS:
        return peers.torchvision_step(net, compile="compile" in name, channels_last=name.endswith("_cl")), {}
    return peers.torch_step(net, compile=name == "torch_compile"), {}


def first_call(call) -> float:
    """Run once (JIT compiles happen here); seconds."""
    t0 = time.perf_counter()
    call()
    if hasattr(call, "finish"):
        call.finish()
    return time.perf_counter() - t0


# --avx2: each candidate also as "<name>_avx2", restricted to AVX2+FMA (no AVX-512) in its own
# process — an AVX2 machine's instruction set (Zen 3) emulated on this one: lmc compiles for
# znver3, XLA caps its ISA, PyTorch's ATen kernels and oneDNN likewise.  Same cores, caches and
# clocks as the host, so it isolates the instruction set, not a Zen 3 box's memory system.
AVX2_ENV = {"IREE_EXTRA_FLAGS": "--iree-llvmcpu-target-cpu=znver3", "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
            "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def _serve(conn, name: str, spec: str, sets: list[str], cold: bool = True):
    """A candidate's process: build its step, then run blocks of steps on request."""
    try:
        if name.endswith("_avx2"):
            os.environ.update(AVX2_ENV)         # before JAX / PyTorch initialise, and before lmc compiles
            name = name[:-len("_avx2")]
        if name.startswith("lmc@"):             # lmc with an environment switch (LMC_INPLACE=off …)
            key, _, val = name[len("lmc@"):].partition("=")
            os.environ[key] = val
            name = "lmc"
        net = infer(load_spec(ROOT / spec, sets))
        if name == "lmc" or name.startswith("lmc+"):
            call, info = lmc_candidate(net, name.partition("+")[2] or None, cold)
        else:
            call, info = peer_candidate(name, net)
        step_s = first_call(call)
        if "settle" in info:
            info["settle"]()
        conn.send(("ok", {"first": step_s + (info.get("compile_s") or 0.0), "compile_s": info.get("compile_s"),
                          "step_s": step_s}))
    except Exception as e:  # report, don't hide
        conn.send(("error", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"))
        return
    while True:
        msg = conn.recv()
        if msg[0] == "quit":
            return
        n = msg[1]
        try:
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                call()
            if hasattr(call, "finish"):     # a queued step: the block ends when its last step does
                call.finish()
            conn.send(("ok", (time.perf_counter() - t0, time.process_time() - c0)))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {str(e).strip()[:300]}"))
            return


class Candidate:
    """One candidate's process and the pipe to it."""

    def __init__(self, ctx, name, spec, sets, cold: bool = True):
        self.name = name
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, name, spec, sets, cold), daemon=True)
        self.proc.start()
        child.close()       # the child's end lives in the child only: its death is an EOF here, not a hang
        try:
            status, value = self.conn.recv()
        except EOFError:
            status, value = "error", f"the {self.name} process died"
        if status != "ok":
            self.close()
            raise RuntimeError(value)
        self.first_call_s = value["first"]
        self.compile_s, self.first_step_s = value["compile_s"], value["step_s"]

    def run(self, n: int) -> tuple[float, float]:
        """n steps; (wall s, process CPU s)."""
        self.conn.send(("run", n))
        try:
            status, value = self.conn.recv()
        except EOFError:
            status, value = "error", f"the {self.name} process died"
        if status != "ok":
            raise RuntimeError(value)
        return value

    def close(self):
        try:
            self.conn.send(("quit",))
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()


def measure(cands: dict, steps: int, warmup: int = 2, block_s: float = 0.2, settle_s: float = 0.3) -> dict:
    """Interleaved rounds: each round runs a block of consecutive steps of every candidate in
    turn (blocks of ≈ block_s seconds, so a 5 ms step is timed over ~40 steps), pausing
    settle_s after each block so no thread of the previous candidate is still spinning.
    Returns ({name: (wall ms, CPU ms) per step, medians over `steps` rounds}, {name: error})."""
    block, errors = {}, {}
    for k, c in cands.items():
        try:
            c.run(warmup)
            wall, _ = c.run(1)
            block[k] = max(1, min(100, int(block_s / max(wall, 1e-6))))
        except RuntimeError as e:
            errors[k] = str(e)
        time.sleep(settle_s)
    wall = {k: [] for k in block}
    cpu = {k: [] for k in block}
    for _ in range(steps):
        for k in list(block):
            if k in errors:
                continue
            try:
                w, p = cands[k].run(block[k])
            except RuntimeError as e:
                errors[k] = str(e)
                continue
            wall[k].append(1e3 * w / block[k])
            cpu[k].append(1e3 * p / block[k])
            time.sleep(settle_s)
    res = {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in block if k not in errors}
    return res, errors


def _peak(conn):
    conn.send(sgemm_peak_gflops())


def measure_peak(avx2: bool = False) -> float:
    """sgemm_peak_gflops in a process of its own (OpenBLAS's threads do not stay in this one);
    avx2: OpenBLAS's Haswell (AVX2+FMA) kernels, the peak of the --avx2 rows' instruction set."""
    ctx = mp.get_context("spawn")
    if avx2:                                        # the child inherits it before NumPy loads
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    conn, child = ctx.Pipe()
    p = ctx.Process(target=_peak, args=(child,), daemon=True)
    try:
        p.start()
    finally:
        os.environ.pop("OPENBLAS_CORETYPE", None)
    child.close()
    v = conn.recv()
    p.join()
    return v


def _profile(conn, spec: str, sets: list[str], top: int):
    try:
        import dispatch_profile
        net = infer(load_spec(ROOT / spec, sets))
        _, rows = dispatch_profile.profile(net, LowerOptions.from_env(), reps=10)
        conn.send(("ok", dispatch_profile.top_share(rows, top)))
    except Exception as e:  # report, don't hide
        conn.send(("error", f"{type(e).__name__}: {str(e).strip()[-300:]}"))


def profile_net(spec: str, sets: list[str], top: int = 5):
    """benchmarks/dispatch_profile.py's per-dispatch profile of lmc's step (its own process,
    after the timed rounds): dispatch_profile.top_share's dict, or the error string."""
    ctx = mp.get_context("spawn")
    conn, child = ctx.Pipe()
    p = ctx.Process(target=_profile, args=(child, spec, sets, top), daemon=True)
    p.start()
    child.close()
    try:
        status, value = conn.recv()
    except EOFError:
        status, value = "error", "the profiling process died"
    p.join()
    return value if status == "ok" else str(value)


def run_net(spec: str, sets: list[str], steps: int, which: tuple[str, ...], profile: bool = False,
            cold: bool = True, compile_only: bool = False) -> dict:
    net = infer(load_spec(ROOT / spec, sets))
    if net.spec.name in peers.TORCHVISION:
        which = which + tuple(p for p in TV_PEERS if "compile" not in p or "torch_compile" in which)
    row = {"net": Path(spec).stem, "batch": net.batch, "errors": {}, "first_call_s": {}, "cpu": {},
           "train_flops": train_step_flops(net), "compile_only": compile_only, "lmc_compile_s": {},
           "lmc_first_step_s": {}}
    ctx = mp.get_context("spawn")
    cands = {}
    try:
        for name in ("lmc",) + which:       # built one after another: compiles do not overlap
            try:
                cands[name] = Candidate(ctx, name, spec, sets, cold)
                row["first_call_s"][name] = round(cands[name].first_call_s, 2)
                if name.startswith("lmc"):
                    row["lmc_compile_s"][name] = cands[name].compile_s
                    row["lmc_first_step_s"][name] = round(cands[name].first_step_s, 2)
                if compile_only:               # no timed rounds: free its memory for the next
                    cands.pop(name).close()
            except Exception as e:
                row["errors"][name] = str(e)
                print(f"{name} failed on {spec}: {row['errors'][name]}", file=sys.stderr, flush=True)
        load0 = os.getloadavg()[0]
        res, errors = measure(cands, steps)
        for name, err in errors.items():
            row["errors"][name] = err
            print(f"{name} failed on {spec}: {err}", file=sys.stderr, flush=True)
        row["load"] = (round(load0, 2), round(os.getloadavg()[0], 2))
    finally:
        for c in cands.values():
            c.close()
    for name in ("lmc",) + which:
        row[name] = res[name][0] if name in res else None
        row["cpu"][name] = res[name][1] if name in res else None
    if profile:
        got = profile_net(spec, sets)
        if isinstance(got, str):
            row["errors"]["dispatch_profile"] = got
            print(f"dispatch profile failed on {spec}: {got}", file=sys.stderr, flush=True)
        else:
            row["dispatches"] = got
    return row


def machine() -> dict:
    v = {"python": platform.python_version(), "cpu": _cpu_name(), "cores": os.cpu_count(),
         "date": time.strftime("%Y-%m-%d")}
    from importlib.metadata import PackageNotFoundError, version
    for key, dist in (("jax", "jax"), ("torch", "torch"), ("iree", "iree-base-compiler")):
        try:
            v[key] = version(dist)
        except PackageNotFoundError:
            pass
    return v


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fmt(v) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def ratio(a, b) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}"


def tv_best(r, compiled: bool):
    """(ms, format) of the faster memory format of torchvision's model, or (None, None)."""
    base = "tv_compile" if compiled else "tv"
    got = [(r[k], f) for k, f in ((base, "NCHW"), (base + "_cl", "channels_last")) if r.get(k)]
    return min(got) if got else (None, None)


def fmt_tv(r, compiled: bool) -> str:
    base = "tv_compile" if compiled else "tv"
    if base not in r and base + "_cl" not in r:       # not a torchvision net, or not run
        return "—"
    ms, f = tv_best(r, compiled)
    return "n/a" if ms is None else f"{ms:.1f} ({f})"


def _views(r):
    """The table lines of one net: as run, and with --avx2 the AVX2-restricted candidates."""
    yield {**r, "label": f"{r['net']} ({r['batch']})", "isa": "native"}
    if "lmc_avx2" in r:
        v = {k: x for k, x in r.items() if k not in TV_PEERS}
        v.update({k[:-5]: x for k, x in r.items() if k.endswith("_avx2")})
        v["cpu"] = {k[:-5]: x for k, x in r["cpu"].items() if k.endswith("_avx2")}
        v.pop("dispatches", None)                   # profiled as built for the host only
        yield {**v, "label": f"{r['net']} ({r['batch']}), AVX2", "isa": "avx2"}


def gflops(r, peak):
    """lmc's achieved GFLOP/s (train_step_flops over its wall time per step) and its % of `peak`."""
    if not r.get("lmc") or not r.get("train_flops"):
        return "n/a", "n/a"
    g = r["train_flops"] / (r["lmc"] * 1e-3) / 1e9
    return f"{g:.1f}", ("n/a" if not peak else f"{100 * g / peak:.1f}%")


def top5(r) -> str:
    d = r.get("dispatches")
    return "—" if not d else f"{100 * d['share']:.0f}% of {d['dispatches_per_step']:.0f}"


def cold_table(rows) -> str:
    """Cold start: lmc's cold iree-compile (empty LMC_CACHE) and first step, beside the first call
    (JIT compile included) of JAX and torch.compile, and lmc's total over the faster of those two."""
    lines = ["| net (batch) | lmc cold compile s | lmc first step s | lmc total s | JAX first call s | "
             "torch.compile first call s | lmc/best peer |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        for suf, label in (("", ""), ("_avx2", ", AVX2")):
            if "lmc" + suf not in r["first_call_s"] and "lmc" + suf not in r["errors"]:
                continue
            f = r["first_call_s"]
            comp = r.get("lmc_compile_s", {}).get("lmc" + suf)
            peers_ = [v for v in (f.get("jax" + suf), f.get("torch_compile" + suf)) if v]
            lines.append(f"| {r['net']} ({r['batch']}){label}{' (compile only)' if r.get('compile_only') else ''} | "
                         f"{fmt(comp) if comp is not None else ('n/a' if 'lmc' + suf in r['errors'] else 'cached')} | {fmt(r.get('lmc_first_step_s', {}).get('lmc' + suf))} | "
                         f"{fmt(f.get('lmc' + suf))} | {fmt(f.get('jax' + suf))} | {fmt(f.get('torch_compile' + suf))} | "
                         f"{ratio(f.get('lmc' + suf), min(peers_, default=None))} |")
    return "\n".join(lines)


def table(rows, peaks: dict | None = None) -> str:
    """peaks: {"native": GFLOP/s, "avx2": GFLOP/s} (measure_peak), each line against its ISA's."""
    peaks = peaks or {}
    rows = [r for r in rows if not r.get("compile_only")]
    prof = any(r.get("dispatches") for r in rows)
    lines = ["| net (batch) | lmc ms | JAX ms | PyTorch eager ms | torch.compile ms | torchvision eager ms | "
             "torchvision compile ms | lmc/JAX | lmc/best PyTorch | lmc CPU ms | lmc GFLOP/s | of sgemm peak | "
             + ("top-5 dispatches | " if prof else "") + "load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if prof else "")]
    for r in (v for row in rows for v in _views(row)):
        torch_best = min([v for v in (r.get("torch"), r.get("torch_compile"), tv_best(r, False)[0], tv_best(r, True)[0])
                          if v], default=None)
        lines.append(f"| {r['label']} | {fmt(r['lmc'])} | {fmt(r.get('jax'))} | {fmt(r.get('torch'))} | "
                     f"{fmt(r.get('torch_compile'))} | {fmt_tv(r, False)} | {fmt_tv(r, True)} | "
                     f"{ratio(r['lmc'], r.get('jax'))} | {ratio(r['lmc'], torch_best)} | "
                     f"{fmt(r['cpu'].get('lmc'))} | {' | '.join(gflops(r, peaks.get(r['isa'])))} | "
                     + (f"{top5(r)} | " if prof else "") + f"{r['load'][0]:.1f}–{r['load'][1]:.1f} |")
    return "\n".join(lines)


def results_md(rows, m, steps, peaks: dict | None = None) -> str:
    peaks = peaks or {}
    out = ["# Benchmark results", "",
           f"Train step (forward, loss, backward, optimizer update), ms per step, median of {steps} interleaved",
           "rounds (each a block of steps of every candidate in turn, each candidate in a process of its own) after 2 warm-up steps; "
           "regenerate with `make bench` (`python benchmarks/run.py --results benchmarks/RESULTS.md`).", "",
           f"- machine: {m['cpu']}, {m['cores']} cores; {m['date']}",
           f"- versions: Python {m['python']}, IREE {m.get('iree', '?')} (llvm-cpu, local-task), "
           f"JAX {m.get('jax', '?')}, PyTorch {m.get('torch', '?')}",
           "- single-precision matmul peak of these cores: "
           + (", ".join(f"{v:.0f} GFLOP/s" + (" (AVX2 kernels)" if k == "avx2" else "") for k, v in peaks.items())
              or "not measured")
           + " (NumPy/OpenBLAS sgemm 4096³, all cores, best of 3). `lmc GFLOP/s` is lmc's train-step FLOPs "
           "(3 × `lmc info`'s forward FLOPs: forward + backward, the optimizer update not counted) over its wall "
           "time per step; `of sgemm peak` its fraction of that peak (the AVX2 lines: of the AVX2 peak). The FLOPs "
           "are the direct convolution's: lmc's Winograd convs multiply 2.25–4× less, so a conv net's row can "
           "exceed 100%."
           + (" `top-5 dispatches`: the share of lmc's dispatch time per step spent in its 5 costliest "
              "dispatches, of the dispatches per step (`lmc bench --profile`'s profile of the fused @train_step, "
              "`--dispatch-profile`; on the host's ISA only, so the AVX2 lines have none)."
              if any(r.get("dispatches") for r in rows) else ""),
           "- lmc, JAX and PyTorch run the same net (built from lmc's primitive graph, benchmarks/peers.py), "
           "same batch, same optimizer; state stays on the device between steps in all of them.",
           "- torchvision columns: PyTorch running torchvision's own model (resnet18, `num_classes=10`) at the same "
           "batch and resolution, AdamW with the recipe's weight decay, label-smoothed cross-entropy — the model a "
           "user would write; NCHW and channels_last both timed in the same rounds, the faster shown.",
           "- `load` is the 1-minute load average before–after the measurement (the machine may be shared; "
           "wall times of all candidates are affected alike, `lmc CPU ms` is lmc's process CPU time per step).",
           "", table(rows, peaks), "",
           "Cold start (each candidate in a fresh process): lmc's iree-compile of the training module into an "
           "empty LMC_CACHE (lowering included; `cached` when run with --warm-cache and the module was cached) — "
           "a conv net's step as two modules compiled side by side (`LMC_SPLIT=auto`), its @forward module "
           "compiling beside one module or after two, as `lmc train` does — then its first step; JAX's and "
           "torch.compile's first call (tracing and JIT compile; torch.compile's FX graph cache may be warm). Compile-only rows are not timed per step.", "", cold_table(rows), ""]
    firsts = [f"{r['net']}: " + ", ".join(f"{k} {v:.1f} s" for k, v in r["first_call_s"].items()) for r in rows]
    out += ["First call of every candidate:", ""]
    out += [f"- {f}" for f in firsts]
    errs = [f"- {r['net']} / {k}: {v}" for r in rows for k, v in r["errors"].items()]
    if errs:
        out += ["", "Failures:", ""] + errs
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="interleaved rounds timed per net")
    ap.add_argument("--nets", nargs="*", help="subset, by spec stem (mnist_cnn) or path")
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile (slow to compile on CPU)")
    ap.add_argument("--lmc-forms", nargs="*", default=[],
                    help="also lmc with the dense dW rewritten (benchmarks/dense_forms.py forms), as candidates lmc+FORM")
    ap.add_argument("--lmc-env", nargs="*", default=[], metavar="KEY=VALUE",
                    help="also lmc with an environment switch set (e.g. LMC_INPLACE=off), as candidates lmc@KEY=VALUE")
    ap.add_argument("--lmc-only", action="store_true", help="no peers (with --lmc-forms: an lmc-only A/B)")
    ap.add_argument("--avx2", action="store_true",
                    help="also run every candidate restricted to AVX2 (emulates a Zen 3 class CPU's ISA; AVX2_ENV)")
    ap.add_argument("--warm-cache", action="store_true",
                    help="lmc compiles through the user's LMC_CACHE (default: a cold compile into an empty one)")
    ap.add_argument("--compile-only", action="store_true",
                    help="also the compile-only rows (COMPILE_ONLY: resnet50, efficientnet_v2_s, convnext_tiny, "
                         "swin_tiny): cold compile and first call, no timed steps")
    ap.add_argument("--dispatch-profile", action="store_true",
                    help="also profile lmc's step per dispatch (iree-profile) for the top-5 dispatches' share")
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    ap.add_argument("--results", type=Path, help="write the results table (Markdown) here")
    args = ap.parse_args()
    which = tuple(p for p in PEERS if not (p == "torch_compile" and args.no_torch_compile))
    which = (tuple(f"lmc+{f}" for f in args.lmc_forms) + tuple(f"lmc@{e}" for e in args.lmc_env)
             + (which if not args.lmc_only else ()))
    if args.avx2:
        which = which + ("lmc_avx2",) + tuple(p + "_avx2" for p in which)
    peaks = {"native": measure_peak()}
    if args.avx2:
        peaks["avx2"] = measure_peak(avx2=True)
    print("sgemm peak: " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in peaks.items()), file=sys.stderr, flush=True)
    rows = []
    todo = [(spec, sets, False) for spec, sets in NETS]
    todo += [(spec, sets, True) for spec, sets in COMPILE_ONLY
             if args.compile_only or (args.nets and Path(spec).stem in args.nets)]
    for spec, sets, compile_only in todo:
        if args.nets and spec not in args.nets and Path(spec).stem not in args.nets:
            continue
        row = run_net(spec, sets, args.steps, which, profile=args.dispatch_profile and not compile_only,
                      cold=not args.warm_cache, compile_only=compile_only)
        rows.append(row)
        if not compile_only:                        # the row's lines (host, and AVX2 with --avx2)
            print("\n".join(table([row], peaks).splitlines()[2:]), file=sys.stderr, flush=True)
        print("\n".join(cold_table([row]).splitlines()[2:]), file=sys.stderr, flush=True)
        if args.json:                               # after every net: a crash or ^C keeps what was measured
            args.json.write_text(json.dumps({"machine": machine(), "sgemm_peak_gflops": peaks, "rows": rows},
                                            indent=2))
        extra = [k for k in row if k.startswith(("lmc+", "lmc@"))]
        if extra:                                   # an lmc-variant A/B: wall (CPU) ms per step
            print("  " + ", ".join(f"{k} {row[k] or float('nan'):.2f} ({row['cpu'].get(k) or float('nan'):.2f})"
                                   for k in ["lmc", *extra]),
                  file=sys.stderr, flush=True)
    m = machine()
    print()
    print(table(rows, peaks))
    print()
    print(cold_table(rows))
    if args.json:
        args.json.write_text(json.dumps({"machine": m, "sgemm_peak_gflops": peaks, "rows": rows}, indent=2))
    if args.results:
        args.results.write_text(results_md(rows, m, args.steps, peaks))


if __name__ == "__main__":
    main()
