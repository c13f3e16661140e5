"""The training loop: epochs of batches, one step-strategy call each, the callbacks around them.

Input: a Run (the plan, the device state, the metrics log, the callbacks, the stop flags) and
the step strategy (lmc.train.steps).
Output: the state trained in place and the run's shared results (last loss, last eval, the
training clock).  The loop knows nothing of logging, evals, checkpoints or SWA: the callbacks
(lmc.train.callbacks) do those at its hooks, and StepsStop sets `stop_training`.

Resume: the data order and augmentation of (epoch, batch) depend only on (seed, epoch, batch)
(lmc.data.Batcher) and the lr only on the global step, so restarting from a checkpoint's
(step, epoch, batch) with its parameters, optimizer state and BN statistics repeats exactly the
computation an uninterrupted run would have done."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from lmc.train.callbacks import Callbacks, EpochEnd, StepEnd
from lmc.train.steps import Stop


@dataclass
class Clock:
    """The training steps' time (no compile, data loading, eval or checkpoint)."""
    seconds: float = 0.0
    cpu: float = 0.0           # process CPU time (all threads)
    steps: int = 0             # steps run by this process

    def add(self, t0: float, cpu0: float, steps: int) -> float:
        dt = time.perf_counter() - t0
        self.seconds += dt
        self.cpu += time.process_time() - cpu0
        self.steps += steps
        return dt


@dataclass
class Run:
    """What the loop and the callbacks share while training."""
    plan: object               # lmc.train.plan.TrainPlan
    state: object              # lmc.train.state.DeviceState (its .pos: step, epoch, batch)
    metrics: object            # lmc.train.metrics_log.MetricsLog (NoMetrics off rank 0)
    callbacks: Callbacks
    stop: Stop = field(default_factory=Stop)
    stop_training: bool = False           # the global step reached plan.stop_at
    last_loss: float | None = None
    last_ckpt_step: int | None = None
    last_eval: object = None              # lmc.evaluate.score.EvalResult
    last_eval_step: int | None = None
    clock: Clock = field(default_factory=Clock)
    stopped_early: bool = False           # train.early_stop ended the run before its last epoch
    selection: dict = field(default_factory=dict)   # keep_best / early_stop state (in checkpoints)


def fit(run: Run, step_fn) -> None:
    """Train from the state's position until stop_training or the last epoch."""
    pos, cbs = run.state.pos, run.callbacks
    cbs.on_train_begin(run)
    while not run.stop_training and pos.epoch < run.plan.cfg.epochs:
        end = _epoch(run, step_fn)
        if end is None:            # stopped inside the epoch (--max-steps)
            break
        cbs.on_epoch_end(run, end)
        cbs.after_epoch(run, end)
    cbs.on_train_end(run)


def _epoch(run: Run, step_fn) -> EpochEnd | None:
    """The rest of the current epoch (all of it but after a mid-epoch resume); None when it
    stopped before the epoch's end."""
    plan, state, cbs = run.plan, run.state, run.callbacks
    pos, e = state.pos, state.pos.epoch
    t0, cpu0, steps, it = time.perf_counter(), time.process_time(), 0, None
    try:
        cbs.on_epoch_begin(run, e)
        t0, cpu0 = time.perf_counter(), time.process_time()
        it = plan.batcher.epoch(e, pos.batch)
        for x, y in it:
            pos.step += 1
            lr = plan.lr_at(pos.step)
            loss, correct = step_fn(state, x, y, lr)
            done = StepEnd(pos.step, e, pos.batch, lr, loss, correct, end_of_epoch=pos.batch + 1 == plan.bpe)
            pos.batch += 1
            steps += 1
            cbs.on_step_end(run, done)
            if run.stop_training or done.end_of_epoch:
                break
    finally:
        if it is not None:
            it.close()
        cbs.on_batches_end(run)
        dt = run.clock.add(t0, cpu0, steps)
    if pos.batch < plan.bpe:
        return None
    pos.epoch, pos.batch = e + 1, 0
    return EpochEnd(e, dt, steps)
