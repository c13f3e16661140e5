"""GPU check (issue 15, item 5): does every lowerable spec train the same on a GPU backend as
on llvm-cpu, and how fast is the step there next to JAX and PyTorch on the same GPU?

Two phases, because the machine with the GPU may have no `iree-compile` (its wheel is too big
to carry there; the runtime wheel is 15 MB):

  prepare  (needs iree-compile; no GPU)  lowers and compiles, for each case, the module for the
           backend under test (`--backend cuda --chip sm_80` by default: IREE 3.13 has no sm_90
           target, the sm_80 PTX is JIT-compiled by the driver on an H100/H200) and the llvm-cpu
           reference module (`--ref-chip x86-64-v3`: AVX2, runs on any x86-64 server), into
           DIR/vmfb/, and writes DIR/manifest.json.
  run      (needs the IREE runtime and the device; no compiler)  for each case: N train steps
           on the backend and N on llvm-cpu from the same initial parameters, optimizer state
           and batch (`lmc.bench.stepper`, seed 0), then compares the per-step losses and the
           final parameters and running state, times more steps on the backend, and, for the
           timing cases, times JAX and PyTorch (the same net from lmc's graph, and torchvision's
           own resnet18) on the GPU when they import there.  Writes DIR/report.md and
           DIR/report.json.
  all      prepare, then run (one machine with both).

Cases: every spec in specs/ that `lmc train` accepts ("check" cases, batch capped at --batch
so the CPU reference stays quick), plus the bench nets at batch 128 ("time" cases:
mnist_mlp, mnist_cnn, cifar_cnn_bn, resnet18 at 3×32×32).  A time budget (--budget-s) stops
the run phase before it overruns: cases are ordered cheapest first and the ones not reached
are listed as skipped, never silently dropped.

Tolerances (stated in the report):
  loss     |L_dev − L_ref| ≤ loss_rtol · max(1, |L_ref|) at every step (default 1e-3);
  params   ‖Δ_dev − Δ_ref‖₂ ≤ param_rtol · ‖Δ_ref‖₂ over all parameters and running state
           together, Δ = value after N steps − initial value (default 5e-2).  Relative to the
           *update*, not to the parameters (which barely move in N steps, so a parameter
           tolerance would pass anything); not element-wise, because Adam's first steps move
           each element by ≈ lr·sign(g), so an element whose gradient is at rounding level
           may legitimately move the other way on another backend.

    benchmarks/gpu_check.sh [all|prepare|run] [--dir build/gpu_check] [--backend cuda] ...
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TIME_NETS = [  # the bench nets (benchmarks/run.py NETS[:4]) at batch 128
    ("specs/mnist_mlp.yaml", ["train.batch_size=128"]),
    ("specs/mnist_cnn.yaml", ["train.batch_size=128"]),
    ("specs/cifar_cnn_bn.yaml", ["train.batch_size=128"]),
    ("specs/resnet18.yaml", ["train.batch_size=128", "input.height=32", "input.width=32"]),
]


def lowerable_specs() -> list[Path]:
    """specs/*.yaml whose whole train module renders (tests/test_compile_specs.py `lowerable`)."""
    from lmc.core.errors import LmcError
    from lmc.graph.infer import infer
    from lmc.check import check
    from lmc.spec.netspec import load_spec
    out = []
    for p in sorted((ROOT / "specs").glob("*.yaml")):
        try:
            net = infer(load_spec(p))
            if net.spec.train is not None and not (check(net).errors or check(net).fit or check(net).layers or check(net).train_step) and _accum(net) == 1:
                out.append(p)
        except LmcError:
            pass
    return out


def _accum(net) -> int:
    from lmc.lower.lowering import abi
    return abi(net).accum


def _net(spec: str, sets: list[str]):
    from lmc.graph.infer import infer
    from lmc.spec.netspec import load_spec
    return infer(load_spec(ROOT / spec, sets))


# ----------------------------------------------------------------------------- prepare

def cases(specs, batch: int, time_nets: bool) -> list[dict]:
    out = []
    for p in specs:
        rel = str(Path(p).resolve().relative_to(ROOT))
        net = _net(rel, [])
        sets = [f"train.batch_size={batch}"] if net.batch > batch else []
        out.append({"name": Path(p).stem, "kind": "check", "spec": rel, "sets": sets})
    if time_nets:
        out += [{"name": f"{Path(s).stem}@128", "kind": "time", "spec": s, "sets": sets} for s, sets in TIME_NETS]
    for c in out:
        net = _net(c["spec"], c["sets"])
        c["batch"], c["flops"] = net.batch, 3 * net.total_flops
    out.sort(key=lambda c: (c["kind"] == "time", c["flops"]))       # cheapest first, then timing
    return out


def prepare(args) -> dict:
    from lmc.compile import compile_module, compiler_version, find_compiler, flags
    from lmc.lower.lowering import lower
    from lmc.lower.options import LowerOptions
    options = LowerOptions.from_env()     # this script is a command line: the LMC_* switches
    d = Path(args.dir)
    (d / "vmfb").mkdir(parents=True, exist_ok=True)
    specs = [ROOT / s if not Path(s).is_absolute() else Path(s) for s in args.specs] if args.specs else lowerable_specs()
    todo = cases(specs, args.batch, not args.no_time)
    man = {"backend": args.backend, "chip": args.chip, "ref_chip": args.ref_chip,
           "flags": flags(args.backend, args.chip), "ref_flags": flags("llvm-cpu", args.ref_chip),
           "compiler": compiler_version(find_compiler()), "cases": []}
    t_all = time.perf_counter()
    for c in todo:
        net = _net(c["spec"], c["sets"])
        for role, backend, chip in (("dev", args.backend, args.chip), ("ref", "llvm-cpu", args.ref_chip)):
            t0 = time.perf_counter()
            try:
                comp = compile_module(lower(net, backend=backend, options=options), backend=backend, chip=chip,
                                      options=options)
            except Exception as e:                          # report it; the run phase lists it
                c.setdefault("compile_error", {})[role] = f"{type(e).__name__}: {str(e).strip()[:400]}"
                print(f"prepare: {c['name']} ({backend}): compile failed", file=sys.stderr, flush=True)
                continue
            dst = d / "vmfb" / f"{c['name'].replace('@', '_b')}.{role}.vmfb"
            dst.write_bytes(Path(comp.path).read_bytes())
            c[f"{role}_vmfb"] = str(dst.relative_to(d))
            c[f"{role}_compile_s"] = None if comp.cached else round(time.perf_counter() - t0, 1)
        print(f"prepare: {c['name']} (batch {c['batch']}) done", file=sys.stderr, flush=True)
        man["cases"].append(c)
    man["prepare_s"] = round(time.perf_counter() - t_all, 1)
    (d / "manifest.json").write_text(json.dumps(man, indent=1))
    return man


# ----------------------------------------------------------------------------- run

def _train(net, vmfb: Path, backend: str, steps: int, time_steps: int) -> dict:
    """N steps from lmc.bench's seed-0 initial state and batch; losses, final state, timings."""
    from lmc.train.bench import stepper
    from lmc.run.runtime import Module
    t0 = time.perf_counter()
    m = Module(vmfb, backend)
    load_s = time.perf_counter() - t0
    step, h = stepper(net, m)
    init = [_host(a).copy() for a in h["args"][:_n_state(net)]]
    losses, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        losses.append(h["loss"])
    final = [_host(a) for a in h["args"][:_n_state(net)]]
    timed = []
    for _ in range(time_steps):
        t0 = time.perf_counter()
        step()
        timed.append(time.perf_counter() - t0)
    return {"losses": losses, "init": init, "final": final, "load_s": load_s, "first_step_s": times[0],
            "step_ms": 1e3 * statistics.median(timed or times[1:] or times)}


def _host(a):
    """A device array's contents as numpy (uploaded arrays refuse an implicit np.asarray)."""
    import numpy as np
    return np.array(a.to_host() if hasattr(a, "to_host") else a)


def _n_state(net) -> int:
    """Parameters, then optimizer slots and EMA copies, then running state: the step's state."""
    from lmc.lower.lowering import abi
    a = abi(net)
    return len(a.params) + len(a.opt) + len(a.ema) + len(a.state)


def compare(net, dev: dict, ref: dict, loss_rtol: float, param_rtol: float) -> dict:
    """The report's verdict for one case (see the module docstring for the tolerances)."""
    import numpy as np
    from lmc.lower.lowering import abi
    a = abi(net)
    n_p = len(a.params)
    keep = list(range(n_p)) + list(range(_n_state(net) - len(a.state), _n_state(net)))   # params + running state
    names = [p.name for p in a.params] + [s.name for s in a.state]
    loss_err = max((abs(d - r) / max(1.0, abs(r)) for d, r in zip(dev["losses"], ref["losses"])), default=0.0)
    num = den = 0.0
    worst, worst_name = 0.0, None
    finite = all(np.isfinite(l) for l in dev["losses"]) and all(np.isfinite(dev["final"][i]).all() for i in keep)
    for i, name in zip(keep, names):
        dd = dev["final"][i].astype(np.float64) - ref["init"][i]
        dr = ref["final"][i].astype(np.float64) - ref["init"][i]
        e, r = float(((dd - dr) ** 2).sum()), float((dr ** 2).sum())
        num, den = num + e, den + r
        rel = (e ** 0.5) / max(r ** 0.5, 1e-30)
        if rel > worst and r > 0:
            worst, worst_name = rel, name
    upd_err = (num ** 0.5) / max(den ** 0.5, 1e-30)
    same_init = all(np.array_equal(dev["init"][i], ref["init"][i]) for i in keep)
    ok = bool(finite and same_init and loss_err <= loss_rtol and upd_err <= param_rtol)
    return {"ok": ok, "finite": bool(finite), "same_init": bool(same_init), "loss_rel_err": loss_err,
            "update_rel_err": upd_err, "worst_tensor": worst_name, "worst_tensor_rel_err": worst,
            "max_abs_param_diff": max(float(np.abs(dev["final"][i] - ref["final"][i]).max()) for i in keep)}


def _peer_worker(q, name: str, spec: str, sets: list[str], device: str, steps: int):
    """A peer in a process of its own (its allocator and threads stay out of lmc's process)."""
    try:
        import peers
        net = _net(spec, sets)
        if name == "jax":
            call = peers.jax_step(net)[0]
        elif name.startswith("tv"):
            call = peers.torchvision_step(net, compile="compile" in name, channels_last=name.endswith("_cl"),
                                          device=device)
        else:
            call = peers.torch_step(net, compile=name == "torch_compile", device=device)
        t0 = time.perf_counter()
        call()
        first = time.perf_counter() - t0
        med, _ = peers.time_calls(call, steps=steps, warmup=2)
        q.put(("ok", {"step_ms": 1e3 * med, "first_call_s": first}))
    except Exception as e:
        q.put(("error", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"))


def time_peers(c: dict, backend: str, steps: int, deadline: float, torch_compile: bool) -> dict:
    """JAX and PyTorch (eager; torch.compile with --torch-compile) on the GPU, each in a fresh
    process; n/a with the reason when a framework does not import or sees no GPU."""
    import multiprocessing as mp
    import peers
    out = {}
    if backend != "cuda":          # the peers' GPU builds here are CUDA ones
        dev = "cpu"
    else:
        dev = "cuda"
    names = ["jax", "torch"] + (["torch_compile"] if torch_compile else [])
    if Path(c["spec"]).stem in peers.TORCHVISION:
        names += ["tv", "tv_cl"] + (["tv_compile", "tv_compile_cl"] if torch_compile else [])
    ctx = mp.get_context("spawn")
    for name in names:
        left = deadline - time.perf_counter()
        if left < 20:
            out[name] = {"error": "skipped: time budget"}
            continue
        q = ctx.Queue()
        p = ctx.Process(target=_peer_worker, args=(q, name, c["spec"], c["sets"], dev, steps), daemon=True)
        p.start()
        try:
            status, val = q.get(timeout=min(left, 240))
        except Exception:
            status, val = "error", "timed out"
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
        out[name] = val if status == "ok" else {"error": val}
        if name == "jax" and status == "ok" and backend == "cuda":
            out[name]["device"] = "default JAX device"
    return out


def run(args) -> dict:
    os.environ.setdefault("LMC_CALLER_NICE", "0")          # many cores here; see lmc.runtime.yield_to_workers
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")    # JAX must not take the GPU's memory
    d = Path(args.dir)
    man = json.loads((d / "manifest.json").read_text())
    backend = man["backend"]
    t_start = time.perf_counter()
    deadline = t_start + args.budget_s
    rep = {"machine": _machine(backend), "backend": backend, "chip": man["chip"], "ref_chip": man["ref_chip"],
           "flags": man["flags"], "ref_flags": man["ref_flags"], "compiler": man["compiler"], "steps": args.steps,
           "loss_rtol": args.loss_rtol, "param_rtol": args.param_rtol, "budget_s": args.budget_s, "cases": []}
    only = set(args.only or [])
    for c in man["cases"]:
        if only and c["name"] not in only and Path(c["spec"]).stem not in only:
            continue
        r = {k: c[k] for k in ("name", "kind", "spec", "sets", "batch")}
        rep["cases"].append(r)
        if "compile_error" in c:
            r["status"], r["error"] = "compile error", c["compile_error"]
            continue
        if time.perf_counter() > deadline:
            r["status"] = "skipped (time budget)"
            continue
        try:
            net = _net(c["spec"], c["sets"])
            t_steps = args.time_steps if c["kind"] == "check" else max(args.time_steps, 10)
            dev = _train(net, d / c["dev_vmfb"], backend, args.steps, t_steps)
            r.update({"dev_step_ms": dev["step_ms"], "dev_load_s": dev["load_s"], "dev_first_step_s": dev["first_step_s"],
                      "dev_losses": dev["losses"]})
            ref = _train(net, d / c["ref_vmfb"], "llvm-cpu", args.steps, 0)
            r.update({"ref_step_ms": ref["step_ms"], "ref_losses": ref["losses"]})
            r.update(compare(net, dev, ref, args.loss_rtol, args.param_rtol))
            r["status"] = "pass" if r["ok"] else "FAIL"
            del dev, ref
            if c["kind"] == "time" and not args.no_peers:
                r["peers"] = time_peers(c, backend, args.peer_steps, deadline, args.torch_compile)
        except Exception as e:
            r["status"], r["error"] = "error", f"{type(e).__name__}: {str(e).strip()[:400]}"
            traceback.print_exc()
        print(f"run: {r['name']}: {r['status']}", file=sys.stderr, flush=True)
    rep["run_s"] = round(time.perf_counter() - t_start, 1)
    (d / "report.json").write_text(json.dumps(rep, indent=1, default=float))
    (d / "report.md").write_text(report_md(rep))
    return rep


def _machine(backend: str) -> dict:
    m = {"python": platform.python_version(), "host": platform.node(), "cores": os.cpu_count(),
         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import iree.runtime as rt
        m["drivers"] = rt.query_available_drivers()
    except Exception as e:
        m["drivers"] = f"n/a ({type(e).__name__})"
    if backend == "cuda":
        import subprocess
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            m["gpu"] = out.stdout.strip() or out.stderr.strip()[:200]
        except (OSError, subprocess.SubprocessError) as e:
            m["gpu"] = f"n/a ({e})"
    return m


def _f(v, nd=1) -> str:
    return "n/a" if v is None else f"{v:.{nd}f}"


def report_md(rep: dict) -> str:
    m = rep["machine"]
    lines = [f"# lmc GPU check: {rep['backend']} vs llvm-cpu", "",
             f"- machine: {m.get('gpu', rep['backend'])}; {m['cores']} cores; {m['date']}; IREE drivers {m['drivers']}",
             f"- compiler: {rep['compiler']}; backend flags `{' '.join(rep['flags'])}`; reference `{' '.join(rep['ref_flags'])}`",
             f"- {rep['steps']} train steps on each from the same initial state and batch (lmc.bench.stepper, seed 0, lr 1e-4)",
             f"- pass: every step's |ΔL| ≤ {rep['loss_rtol']:g}·max(1,|L|) and ‖Δθ_dev − Δθ_ref‖ ≤ {rep['param_rtol']:g}·‖Δθ_ref‖ "
             "(Δθ: the N-step update of all parameters and running state)",
             f"- run phase {rep['run_s']} s (budget {rep['budget_s']} s)", "",
             "| case | batch | status | loss rel err | update rel err | worst tensor | dev step ms | ref step ms | dev load s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rep["cases"]:
        worst = f"{r['worst_tensor']} ({r['worst_tensor_rel_err']:.1e})" if r.get("worst_tensor") else ""
        lines.append(f"| {r['name']} | {r['batch']} | {r['status']} | {_e(r.get('loss_rel_err'))} | "
                     f"{_e(r.get('update_rel_err'))} | {worst} | {_f(r.get('dev_step_ms'), 2)} | {_f(r.get('ref_step_ms'), 1)} | "
                     f"{_f(r.get('dev_load_s'), 2)} |")
    timed = [r for r in rep["cases"] if r.get("peers")]
    if timed:
        names = sorted({k for r in timed for k in r["peers"]}, key=["jax", "torch", "torch_compile", "tv", "tv_cl",
                                                                     "tv_compile", "tv_compile_cl"].index)
        lines += ["", f"Step time on the GPU, ms (median; peers: {', '.join(names)}; tv = torchvision's model, "
                  "_cl = channels_last):", "",
                  "| net | lmc | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for r in timed:
            cells = [_f(r["peers"][k]["step_ms"], 2) if k in r["peers"] and "step_ms" in r["peers"][k] else "n/a"
                     for k in names]
            lines.append(f"| {r['name']} | {_f(r.get('dev_step_ms'), 2)} | " + " | ".join(cells) + " |")
        errs = [f"- {r['name']} / {k}: {v['error']}" for r in timed for k, v in r["peers"].items() if "error" in v]
        if errs:
            lines += ["", "Peers not timed:", ""] + errs
    errs = [f"- {r['name']}: {r['error']}" for r in rep["cases"] if r.get("error")]
    if errs:
        lines += ["", "Errors:", ""] + errs
    n = {s: sum(r["status"] == s for r in rep["cases"]) for s in ("pass", "FAIL")}
    lines += ["", f"{n['pass']} pass, {n['FAIL']} fail, {len(rep['cases']) - n['pass'] - n['FAIL']} other "
              f"of {len(rep['cases'])} cases."]
    return "\n".join(lines) + "\n"


def _e(v) -> str:
    return "n/a" if v is None else f"{v:.1e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", nargs="?", default="all", choices=("all", "prepare", "run"))
    ap.add_argument("--dir", default=str(ROOT / "build" / "gpu_check"), help="where vmfbs, manifest and report go")
    ap.add_argument("--backend", default="cuda", choices=("cuda", "rocm", "llvm-cpu"), help="backend under test")
    ap.add_argument("--chip", default=None, help="its target (default: sm_80 for cuda, gfx1100 for rocm, host)")
    ap.add_argument("--ref-chip", default="x86-64-v3", help="llvm-cpu target of the reference (default AVX2)")
    ap.add_argument("--specs", nargs="*", help="spec paths (default: every lowerable spec)")
    ap.add_argument("--batch", type=int, default=8, help="batch cap of the check cases")
    ap.add_argument("--no-time", action="store_true", help="no batch-128 timing cases")
    ap.add_argument("--steps", type=int, default=3, help="compared train steps")
    ap.add_argument("--time-steps", type=int, default=5, help="extra timed steps on the backend (check cases)")
    ap.add_argument("--peer-steps", type=int, default=10, help="timed steps of each GPU peer")
    ap.add_argument("--no-peers", action="store_true", help="do not time JAX / PyTorch")
    ap.add_argument("--torch-compile", action="store_true", help="also time torch.compile (slow first call)")
    ap.add_argument("--only", nargs="*", help="run phase: only these cases (names or spec stems)")
    ap.add_argument("--loss-rtol", type=float, default=1e-3)
    ap.add_argument("--param-rtol", type=float, default=5e-2)
    ap.add_argument("--budget-s", type=float, default=480, help="run phase: stop starting cases after this")
    args = ap.parse_args(argv)
    if args.chip is None:
        args.chip = {"cuda": "sm_80", "rocm": "gfx1100", "llvm-cpu": "host"}[args.backend]
    if args.phase in ("all", "prepare"):
        prepare(args)
    if args.phase in ("all", "run"):
        rep = run(args)
        print((Path(args.dir) / "report.md").read_text())
        return 0 if all(r["status"] == "pass" for r in rep["cases"]) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
