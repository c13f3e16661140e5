"""`lmc train`: TypedNet + dataset → a trained run directory.

Input: a TypedNet with a `train:` recipe and TrainOptions (backend, data, run directory, …).
Output: RUN_DIR/last.npz (checkpoint, lmc/run/checkpoint.py) and RUN_DIR/metrics.jsonl; a Summary.

Flow: refuse what will not run (lmc.check: unlowered layers, loss, optimizer, recipe
switches) → lower → load data → compile (cached) → load the module on the backend's device →
initialize (lmc/graph/init.py; bootstrap; --init) or restore (--resume) — lmc.train.plan → upload
parameters, optimizer state and BN statistics once (lmc.train.state) → per step
(lmc.train.loop): lr from the schedule, one step-strategy call (lmc.train.steps: @train_step,
or @grad_step/@apply_step) whose results (device arrays) are fed straight back; nothing comes
to the host per step except what the next call needs.  Losses stay on the device and are read
back every `log_every` steps and at each epoch end (lmc.train.callbacks.MetricsFlush); that
read is where non-finite losses are caught, so a NaN is detected at most `log_every` steps
late, but named at its own step.  Evals, checkpoints, SWA, spectral projections and Ctrl-C
are callbacks of the loop.

Resume: the data order and augmentation of (epoch, batch) depend only on (seed, epoch, batch)
(lmc.data.Batcher) and the lr only on the global step, so restarting from a checkpoint's
(step, epoch, batch) with its parameters, optimizer state and BN statistics repeats exactly the
computation an uninterrupted run would have done."""
from __future__ import annotations

import time

from lmc.train.callbacks import default_callbacks
from lmc.train.loop import Run, fit
from lmc.train.metrics_log import now
from lmc.train.options import Interrupted, Summary, TrainOptions
from lmc.train.plan import TrainJob, build_plan, check_job, open_metrics
from lmc.train.state import DeviceState

__all__ = ["train", "train_job", "check_job", "TrainOptions", "Summary", "Interrupted"]


def train(net, opts: TrainOptions, console) -> Summary:
    """Train `net` per its recipe and `opts`; progress and log lines go to `console` (stderr)."""
    return train_job(check_job(net, opts, console))[0]


def train_job(job: TrainJob) -> tuple[Summary, DeviceState]:
    """Train a checked job (lmc.train.plan.check_job); the Summary and the final device state."""
    t_start = time.perf_counter()
    metrics = plan = None
    try:
        plan, start = build_plan(job)
        state = DeviceState.upload(plan, start)
        metrics = open_metrics(plan, start)
        run = Run(plan, state, metrics, default_callbacks(plan, state), last_loss=start.last_loss,
                  last_ckpt_step=start.step if plan.resumed is not None else None)
        try:
            fit(run, plan.step_strategy(run.stop))
        finally:
            run.callbacks.teardown(run)
        return _summary(run, t_start), state
    finally:
        if metrics is not None:
            metrics.close()
        if plan is not None:
            plan.ds.close()        # a streamed dataset's decoding threads or processes


def _summary(run: Run, t_start: float) -> Summary:
    """The `end` record and the Summary of a finished run."""
    plan, pos, clock, world = run.plan, run.state.pos, run.clock, run.plan.world
    dp = {"allreduce_seconds": round(world.reduce_seconds, 3)} if world.size > 1 else {}
    run.metrics.write(kind="end", time=now(), step=pos.step, loss=run.last_loss,
                      train_seconds=round(clock.seconds, 3), **dp)
    ips = plan.gbatch * clock.steps / clock.seconds if clock.seconds else 0.0
    return Summary(plan.out, pos.step, pos.epoch, run.last_loss, run.last_eval,
                   time.perf_counter() - t_start, clock.seconds, clock.steps, ips, plan.ckpt_path,
                   clock.cpu, rank=world.rank)
