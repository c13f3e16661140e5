"""`lmc bench`: how fast a spec's compiled train step and forward run (Caffe's `caffe time`).

Measures compile time (cold, then cached), module load time, the train step (median and
spread over N steps after warm-up, state device-resident: each step's outputs are the next
step's inputs, exactly as `lmc train` runs), the forward (eval) function, images/s, achieved
GFLOP/s (train_step_flops: forward + backward ≈ 3× the forward FLOPs of `lmc info`), on
llvm-cpu that rate as a fraction of the machine's measured single-precision matmul peak
(sgemm_peak_gflops), and peak host memory."""
from __future__ import annotations

import tempfile
import resource
import statistics
import time
from pathlib import Path

import numpy as np

from lmc.compile import compile_module, compile_training, resolve_backend
from lmc.core.errors import RunError, TrainError
from lmc.graph.infer import TypedNet
from lmc.lower.lowering import abi, lower, lower_train
from lmc.lower.options import LowerOptions
from lmc.run.runtime import Module, train_function, training_module
from lmc.train.masks import draw


class DeviceMissing(TrainError):
    """The module compiled but there is no device to run it on; .partial has the compile numbers."""

    def __init__(self, message, hint=None, partial=None):
        super().__init__(message, hint=hint)
        self.partial = partial or {}


def _initial(net: TypedNet, rng):
    a = abi(net)
    ps = [(rng.standard_normal(p.type.dims) * (0.05 if p.type.rank > 1 else 0.0) +
           (1.0 if p.init == "ones" else 0.0)).astype(np.float32) for p in a.params]
    opt = a.initial_opt() + [p.copy() for p in ps[:len(a.ema)]]      # O then E (EMA starts at θ)
    st = [np.full(s.type.dims, 1.0 if s.init == "ones" else 0.0, np.float32) for s in a.state]
    x = rng.standard_normal(a.x.dims).astype(np.float32)
    y = a.loss.draw_labels(rng, a.labels, a.logits)
    return ps, opt, st, x, y


def train_step_flops(net: TypedNet) -> int:
    """FLOPs of one train step as lmc counts them: `lmc info`'s forward FLOPs (2 per
    multiply-add of every matmul/conv, the primitives' documented counts for the rest) times 3
    — the forward, and a backward of about twice the forward (dx and dW, each one matmul of
    the forward's size per matmul).  The convention of PyTorch's FLOP counters and of
    "6·params·tokens"; it slightly overcounts (the first layer needs no dx) and leaves out the
    optimizer update (a few FLOPs per parameter, O(params) against O(batch·params))."""
    return 3 * net.total_flops


def sgemm_peak_gflops(n: int = 4096, reps: int = 3) -> float:
    """The machine's single-precision matmul peak as NumPy's BLAS (OpenBLAS, all cores) reaches
    it: the best of `reps` n×n×n float32 matmuls after one warm-up, GFLOP/s (2·n³ FLOPs each).
    What "fast" is measured against: a train step cannot beat dense sgemm on the same cores."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    np.matmul(a, b, out=c)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def stepper(net: TypedNet, m: Module, lr: float = 1e-4, seed: int = 0, a=None, queued: bool = False):
    """One train step of `m` as a zero-argument callable, state device-resident exactly as
    `lmc train` runs it: each step's outputs are the next step's inputs, the batch and one hp
    vector per step are uploaded beforehand, and the call waits for the step by reading back
    the loss.  queued: the call reads back the previous step's loss instead, after queuing its
    own (a module compiled with LowerOptions.invocation async: `lmc train` reads its losses
    back every few steps, so the next step is queued when one ends); `step.finish()` waits for
    the last one (the end of a timed block).  Returns (step, holder); holder["args"] is the
    current argument list and holder["loss"] the last loss read (a float).  a: the module's ABI
    (default abi(net): one @train_step; an Abi.halves one runs the two halves, as `lmc train`
    does)."""
    ps, opt, st, x, y = _initial(net, np.random.default_rng(seed))
    up = m.upload
    state = [up(v) for v in ps + opt + st]
    n_state = len(state)
    a = abi(net) if a is None else a
    train_step = train_function(a, m)
    if a.accum > 1:
        raise TrainError("lmc bench times the fused @train_step; this recipe accumulates gradients "
                         f"(grad_accum_steps {a.accum}): bench it with --set train.grad_accum_steps=1")
    hps = [up(a.hp_vector(net.spec.train, lr, s + 1)) for s in range(64)]
    data = [up(x), up(y)]
    masks = [up(mk) for mk in draw(a.masks, net.spec.train, seed, 0, 0)]     # dropout / drop path: one draw
    holder = {"args": state + data + [hps[0]] + masks, "t": 0, "loss": None, "pending": None}

    def finish():
        if holder["pending"] is not None:       # waits for that step (reads back one scalar)
            holder["loss"], holder["pending"] = float(np.asarray(holder["pending"])), None

    def step():
        out = train_step(*holder["args"])
        holder["t"] += 1
        holder["args"] = list(out[:n_state]) + data + [hps[holder["t"] % len(hps)]] + masks
        finish()                                # the previous step's, if one is pending
        holder["pending"] = out[-2]
        if not queued:
            finish()
    step.finish = finish
    return step, holder


def _compile_all(texts: list[str], fwd_text: str, backend: str, chip: str | None, options: LowerOptions,
                 cdir: Path | None = None):
    """(the training functions' modules, seconds until the last of them compiled, @forward's
    module), all compiled side by side as `lmc train` does; cdir: the cache (default: the user's)."""
    t0 = time.perf_counter()
    train, fwd = compile_training(texts, fwd_text, backend, chip, options, cdir)
    try:
        cs = [p.result() for p in train]
        return cs, time.perf_counter() - t0, fwd.result()
    finally:
        for p in [*train, fwd]:     # only where a compile failed: they are done otherwise
            p.cancel()


def bench(net: TypedNet, backend: str | None = None, chip: str | None = None, steps: int = 20,
          warmup: int = 3, forward: bool = True, cold: bool = False,
          options: LowerOptions = LowerOptions(), peak: bool = False) -> dict:
    """cold=True compiles once into an empty temporary cache, so the cold time is measured
    even when the module is already cached.  options: the lowering's spellings measured (in the
    result as `lower_options`: a number means little without them).  peak=True (llvm-cpu only)
    also measures sgemm_peak_gflops after the steps and reports train_gflops as its fraction."""
    backend = resolve_backend(backend)
    # compile_s: the wait for the training functions' module(s) (what the first step waits for)
    a = abi(net, halves=options.split)
    texts = lower_train(net, a, backend, options=options)
    args = (texts, lower(net, "forward", backend=backend, options=options), backend, chip, options)
    if cold:
        with tempfile.TemporaryDirectory() as tmp:
            _, compile_s, _ = _compile_all(*args, cdir=Path(tmp))
        cs, _, f = _compile_all(*args)
    else:
        cs, compile_s, f = _compile_all(*args)
    t0 = time.perf_counter()
    for text in texts:                       # the cached path: hash + copy
        compile_module(text, backend=backend, chip=chip, options=options)
    cached_s = time.perf_counter() - t0
    compiled = {"name": net.spec.name, "backend": backend, "batch": net.batch, "lower_options": options.as_dict(),
                "train_modules": len(cs),
                "compile_s": round(compile_s, 3) if (cold or not all(c.cached for c in cs)) else None,
                "compile_cached_s": round(cached_s, 4), "vmfb_bytes": sum(Path(c.path).stat().st_size for c in cs),
                "forward_vmfb_bytes": Path(f.path).stat().st_size}
    t0 = time.perf_counter()
    try:
        m = training_module([c.path for c in cs], backend, forward=lambda: f.path)
    except RunError as e:             # no such device here: the compile numbers still stand
        raise DeviceMissing(e.message, hint=e.hint, partial=compiled) from None
    load_s = time.perf_counter() - t0
    step, state = stepper(net, m, a=a, queued=options.queued)
    times = []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        step()
        if s == warmup + steps - 1:
            step.finish()                   # the last step's wait is the last step's time
        dt = time.perf_counter() - t0
        if s >= warmup:
            times.append(dt)
    res = {
        **compiled, "load_s": round(load_s, 4),
        "step_ms_median": 1e3 * statistics.median(times),
        "step_ms_min": 1e3 * min(times), "step_ms_max": 1e3 * max(times),
        "step_ms_iqr": 1e3 * (np.percentile(times, 75) - np.percentile(times, 25)),
        "timed_steps": steps,
    }
    med = statistics.median(times)
    res["images_per_s"] = net.batch / med
    res["train_flops"] = train_step_flops(net)
    res["train_gflops"] = res["train_flops"] / med / 1e9
    if forward:
        a = abi(net)
        n_p, n_s = len(a.params), len(a.state)
        st = state["args"]
        fargs = st[:n_p] + st[len(st) - 3 - n_s:len(st) - 3] + [st[-3]]
        ft = []
        for s in range(warmup + steps):
            t0 = time.perf_counter()
            np.asarray(m.forward(*fargs))[:1]
            if s >= warmup:
                ft.append(time.perf_counter() - t0)
        res["forward_ms_median"] = 1e3 * statistics.median(ft)
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res["params"] = net.total_params
    res["forward_flops"] = net.total_flops
    if peak and backend == "llvm-cpu":      # after peak_rss_mb (its 3 × 64 MiB are not the step's); a
        # GPU step measured against the host's sgemm would mean nothing
        res["sgemm_peak_gflops"] = sgemm_peak_gflops()
        res["peak_fraction"] = res["train_gflops"] / res["sgemm_peak_gflops"]
    return res
