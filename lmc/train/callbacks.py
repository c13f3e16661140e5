"""The training loop's callbacks (Keras / Lightning style): everything a step or an epoch
triggers besides the step itself.

Input: the hooks of lmc.train.loop.fit, each with the Run (plan, device state, metrics log,
the shared results) and an event (StepEnd, Flushed, EpochEnd).
Output: what a run writes and says: metrics.jsonl records (step, epoch, eval, checkpoint,
diverged, interrupted), the progress bar and the epoch lines, checkpoints, SWA/SWAG averages,
spectral projections, evals and predictions.png; Interrupted on Ctrl-C, TrainError on a
non-finite loss or parameter.

Order matters and is the list's (`default_callbacks`): in a step, the projection comes before
the loss read-back, the read-back before a Ctrl-C's checkpoint; at an epoch's end, its record,
then SWA, then the eval (named in the epoch line), the line, the checkpoint, then a Ctrl-C;
at the end of training the SIGINT handler goes first, so the final projection, eval and save
run with the default one."""
from __future__ import annotations

import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmc.core.errors import TrainError
from lmc.evaluate.metrics import eval_format, save_predictions
from lmc.evaluate.score import EvalResult, evaluate, evaluate_swag
from lmc.lower.spectral import FINAL_CALLS
from lmc.lower.lowering import eval_batch_stats
from lmc.run.checkpoint import atomic_link
from lmc.run.rundir import BEST, epoch_checkpoint
from lmc.train.metrics_log import now
from lmc.train.options import Interrupted
from lmc.train.state import NonFinite, scalar, to_host

HOOKS = ("on_train_begin", "on_epoch_begin", "on_step_end", "on_flush", "on_batches_end", "on_epoch_end",
         "after_epoch", "on_train_end", "teardown")


@dataclass
class StepEnd:
    """One step run: its results still on the device (read back at the next flush)."""
    step: int                  # the global step (1-based)
    epoch: int                 # 0-based
    batch: int                 # the batch's index in its epoch
    lr: float
    loss: object
    correct: object
    end_of_epoch: bool


@dataclass
class Flushed:
    """The read-back losses and correct counts of the steps since the last flush."""
    losses: list
    corrects: list
    images_per_s: float


@dataclass
class EpochEnd:
    epoch: int                 # 0-based: the epoch just completed
    seconds: float             # its training time (steps only)
    steps: int                 # steps run in it by this process (fewer than bpe after a resume)
    line: str = ""             # the epoch's console line, built by EpochReport, extended by EvalCadence


class Callback:
    """Every hook does nothing; a callback overrides the ones it needs."""

    def on_train_begin(self, run): ...
    def on_epoch_begin(self, run, epoch: int): ...
    def on_step_end(self, run, step: StepEnd): ...
    def on_flush(self, run, flushed: Flushed): ...
    def on_batches_end(self, run): ...            # the epoch's batches done (or an error left them)
    def on_epoch_end(self, run, end: EpochEnd): ...
    def after_epoch(self, run, end: EpochEnd): ...
    def on_train_end(self, run): ...
    def teardown(self, run): ...                  # always, last, also after an error


class Callbacks:
    """The callbacks in their order: `cbs.on_step_end(run, step)` calls each one's hook."""

    def __init__(self, items):
        self.items = list(items)

    def __getattr__(self, hook):
        if hook not in HOOKS:
            raise AttributeError(hook)

        def call(*args):
            for cb in self.items:
                getattr(cb, hook)(*args)
        return call


# ------------------------------------------------------------------ shared by the callbacks
def diverged(run, what: str) -> TrainError:
    kept = (f"the last good checkpoint is {run.plan.ckpt_path} (step {run.last_ckpt_step})"
            if run.last_ckpt_step is not None else "no checkpoint had been written yet")
    return TrainError(f"training diverged: {what}; stopped, {kept}",
                      hint="lower train.learning_rate (or add warmup_epochs with cosine_decay)")


def save(run, complete: bool = False, path: Path | None = None, **record) -> Path:
    """RUN_DIR/last.npz of the current state — or `path` (keep_best's checkpoints) — (a
    collective under data-parallel ranks; rank 0 writes it and its `checkpoint` record, with
    `record`'s fields).  The metadata carries the model-selection state (run.selection)."""
    plan, st, pos = run.plan, run.state, run.state.pos
    target = plan.ckpt_path if path is None else path
    cfg, net = plan.cfg, plan.net
    meta = {"step": pos.step, "epoch": pos.epoch, "batch": pos.batch, "seed": cfg.seed,
            "shuffle": plan.opts.shuffle, "batch_size": net.batch, "steps_per_epoch": plan.bpe,
            "epochs": cfg.epochs, "loss": run.last_loss, "spec": net.spec.file,
            "name": net.spec.name, "complete": complete, "time": now(),
            "lr": plan.lr_at(max(pos.step, 1)), "swa_n": st.swa_n,
            "eval_region": st.eval_region(final=complete), "fp8": cfg.fp8.value, **(plan.provenance or {})}
    if run.selection:
        meta["selection"] = run.selection
    if plan.ds.vocab is not None:                 # a char-level text's vocabulary travels with the weights
        meta["vocab"] = plan.ds.vocab
    if plan.world.size > 1:
        meta.update(batch_size=plan.gbatch, ranks=plan.world.size, rank_batch=net.batch)
    try:
        st.save(target, meta, write=plan.world.rank == 0)   # rank 0 writes the run's files
    except NonFinite as e:
        run.metrics.write(kind="diverged", time=now(), step=pos.step, parameter=e.name)
        raise diverged(run, f"parameter {e.name} is not finite after step {pos.step}") from None
    if path is None:
        run.last_ckpt_step = pos.step
    if plan.world.rank == 0:
        run.metrics.write(kind="checkpoint", step=pos.step, epoch=pos.epoch + (1 if pos.batch else 0),
                          path=str(target), **record)
    return target


def run_eval(run, final: bool = False) -> EvalResult:
    """Score the validation split on the weights eval_region names; its `eval` record."""
    plan, st, pos = run.plan, run.state, run.state.pos
    region = st.eval_region(final)
    st.sync_ranks()
    ds, net = plan.ds, plan.net
    args = (ds.x_val, ds.y_val, net.batch, net.num_classes or 1)
    if region == "swag":
        r = evaluate_swag(st.module, to_host(st.A), to_host(st.Q), st.devs, st.S,
                          plan.cfg.swag_samples, plan.cfg.seed, *args, batch_stats=eval_batch_stats(net))
    else:
        weights = {"live": st.P, "ema": st.E, "swa": st.A}[region]
        r = evaluate(st.module, weights, st.S, *args, label_format=eval_format(ds.label_format, plan.abi.loss),
                     loss=plan.abi.loss, tta=plan.tta, world=plan.world, batch_stats=eval_batch_stats(net))
    r.region = region
    ep = pos.epoch + (1 if pos.batch else 0)
    run.metrics.write(kind="eval", step=pos.step, epoch=ep, region=region, **r.as_dict())
    run.last_eval = r
    run.last_eval_step = pos.step
    return r


# ------------------------------------------------------------------ the callbacks
class SigintHandler(Callback):
    """Ctrl-C while the loop runs: the first asks the run to stop at the end of the current step
    (Interrupt saves a checkpoint there); a second stops at once (KeyboardInterrupt, no
    checkpoint).  Installed for the loop only: the final eval and save have the default one."""

    def __init__(self):
        self.old = None

    def on_train_begin(self, run):
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, lambda signum, frame: self._on_sigint(run))

    @staticmethod
    def _on_sigint(run):
        stop = run.stop
        if stop.requested or stop.signalled:   # a second Ctrl-C: stop at once, no checkpoint
            raise KeyboardInterrupt
        if run.plan.world.size > 1:           # the ranks agree on the stop step in the next all-reduce
            stop.signalled = True
        else:
            stop.requested = True

    def on_train_end(self, run):
        self._restore()

    def teardown(self, run):
        self._restore()

    def _restore(self):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
            self.old = None


class StepsStop(Callback):
    """The run stops when the global step reaches plan.stop_at (--max-steps, else the last step)."""

    def __init__(self):
        self.cut = False           # --max-steps stopped the loop inside an epoch

    def on_train_begin(self, run):
        step, stop_at = run.state.pos.step, run.plan.stop_at
        if step >= stop_at:
            run.plan.log(f"nothing to train: the run is at step {step} of {stop_at}")
            run.stop_training = True

    def on_step_end(self, run, step: StepEnd):
        if step.step >= run.plan.stop_at:
            run.stop_training = True
            self.cut = not step.end_of_epoch

    def on_train_end(self, run):
        if self.cut:
            pos, plan = run.state.pos, run.plan
            plan.log(f"stopped at step {pos.step} (epoch {pos.epoch + 1}, batch {pos.batch}/{plan.bpe}), "
                     f"--max-steps {plan.opts.max_steps}")


def project(state, cap: float, calls: int = 1):
    """train.spectral_cap: `calls` rounds of @spectral_project on the capped weights."""
    idx = {p.name: i for i, p in enumerate(state.net.params)}
    W = [state.P[idx[c.param.name]] for c in state.caps]
    cap = np.asarray(cap, np.float32)     # rank 0
    for _ in range(calls):
        out = list(state.module.spectral_project(*W, *state.U, cap))
        W, state.U = out[:len(W)], out[len(W):]
    state.P = list(state.P)
    for c, w in zip(state.caps, W):
        state.P[idx[c.param.name]] = w


class SpectralCap(Callback):
    """train.spectral_cap: a projection every spectral_every steps, and a last one with more
    power iterations when training completes."""

    def on_step_end(self, run, step: StepEnd):
        if step.step % run.plan.cfg.spectral_every == 0:
            project(run.state, run.plan.cfg.spectral_cap)

    def on_train_end(self, run):
        if run.clock.steps and run.state.pos.step >= run.plan.total:
            # spectral_cap's last projection, with more power iterations; scored again below
            project(run.state, run.plan.cfg.spectral_cap, FINAL_CALLS)
            run.last_eval_step = None


class MetricsFlush(Callback):
    """Losses stay on the device and are read back every `log_every` steps, at each epoch end,
    at the last step and on a stop request (a read waits for the queued work): each step's
    record in metrics.jsonl.  That read is where a non-finite loss is caught, so a NaN is
    detected at most `log_every` steps late, but named at its own step."""

    def __init__(self, log_every: int):
        self.log_every = log_every
        self.pending: list[StepEnd] = []
        self.t_window = time.perf_counter()

    def on_epoch_begin(self, run, epoch: int):
        self.pending = []
        self.t_window = time.perf_counter()

    def on_step_end(self, run, step: StepEnd):
        self.pending.append(step)
        if len(self.pending) >= self.log_every or step.end_of_epoch or run.stop_training or run.stop.requested:
            run.callbacks.on_flush(run, self.flush(run))

    def flush(self, run) -> Flushed | None:
        """Read back the queued losses (this waits for the device), check them, log them."""
        if not self.pending:
            return None
        ips = run.plan.gbatch * len(self.pending) / max(time.perf_counter() - self.t_window, 1e-9)
        B, counts = run.plan.gbatch, run.plan.abi.loss.counts_correct
        out = Flushed([], [], ips)
        for s in self.pending:
            loss, correct = scalar(s.loss), scalar(s.correct)
            if not math.isfinite(loss):
                self.pending = []
                run.metrics.write(kind="diverged", time=now(), step=s.step, epoch=s.epoch + 1, batch=s.batch,
                                  loss=str(loss))
                raise diverged(run, f"the loss is {loss} at step {s.step} (epoch {s.epoch + 1}, batch {s.batch + 1})")
            run.metrics.write(flush=False, kind="step", step=s.step, epoch=s.epoch + 1, batch=s.batch, loss=loss,
                              acc=correct / B if counts else None, lr=s.lr, images_per_s=round(ips, 1))
            out.losses.append(loss)
            out.corrects.append(correct)
            run.last_loss = loss
        run.metrics.flush()
        self.pending = []
        self.t_window = time.perf_counter()
        return out


def throughput(spec, examples_per_s: float) -> str:
    """`1,234 img/s`, `56,789 tok/s` (token inputs: a text dataset's examples are seq_len tokens
    each) or `99 ex/s` (feature vectors): the unit a user of that kind of net reads."""
    ds = getattr(spec.dataset, "value", spec.dataset)
    if ds == "text":
        return f"{examples_per_s * spec.input[0]:,.0f} tok/s"
    return f"{examples_per_s:,.0f} {'img/s' if len(spec.input) == 3 else 'ex/s'}"


class EpochReport(Callback):
    """Each epoch's `epoch` record and console line: the mean loss (and train accuracy) of its
    steps, lr, images/s, seconds (data-parallel: the all-reduce's share)."""

    def __init__(self):
        self.loss, self.correct, self.n = 0.0, 0.0, 0
        self.reduce_mark = 0.0         # the world's all-reduce seconds at the last epoch end

    def on_epoch_begin(self, run, epoch: int):
        self.loss, self.correct, self.n = 0.0, 0.0, 0
        if run.state.pos.batch and run.plan.resumed is not None:
            # a run resumed mid-epoch: the epoch's mean includes the steps logged before
            for rec in run.metrics.kept:
                if rec.get("kind") == "step" and rec.get("epoch") == epoch + 1:
                    self.loss += rec["loss"]
                    self.correct += rec["acc"] * run.plan.gbatch
                    self.n += 1

    def on_flush(self, run, flushed: Flushed):
        for loss, correct in zip(flushed.losses, flushed.corrects):
            self.loss += loss
            self.correct += correct
            self.n += 1

    def on_epoch_end(self, run, end: EpochEnd):
        plan, world, e, dt = run.plan, run.plan.world, end.epoch, end.seconds
        mean = self.loss / max(self.n, 1)
        acc = self.correct / max(self.n * plan.gbatch, 1)
        # a regression loss counts nothing (Loss.counts_correct): no accuracy to report
        counts = plan.abi.loss.counts_correct
        ips = plan.gbatch * end.steps / dt if dt > 0 else 0.0
        dp = {}
        if world.size > 1:     # host time in the gradient all-reduce (copies, reduction, waits)
            dp = {"allreduce_seconds": round(world.reduce_seconds - self.reduce_mark, 3)}
            self.reduce_mark = world.reduce_seconds
        step = run.state.pos.step
        run.metrics.write(kind="epoch", step=step, epoch=e + 1, loss=mean, acc=acc if counts else None,
                          lr=plan.lr_at(step), images_per_s=round(ips, 1), seconds=round(dt, 3), **dp)
        end.line = (f"epoch {e + 1}/{plan.cfg.epochs}: loss {mean + 0.0:.4f}, " +
                    (f"train acc {100 * acc:.2f}%, " if counts else "") +
                    f"lr {plan.lr_at(step):.3g}, {throughput(plan.net.spec, ips)}, {dt:.1f}s")
        if dp:
            end.line += f" ({dp['allreduce_seconds']:.2f}s all-reduce)"

    def after_epoch(self, run, end: EpochEnd):
        run.plan.log(end.line)


class ProgressBar(Callback):
    """The epoch's rich progress bar (a terminal only; transient), updated at each flush."""

    def __init__(self):
        self.bar, self.task = None, None

    def on_epoch_begin(self, run, epoch: int):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeRemainingColumn)
        console = run.plan.console
        self.bar = Progress(TextColumn(f"epoch {epoch + 1}/{run.plan.cfg.epochs}"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
                            TextColumn("{task.fields[ips]}"), TimeRemainingColumn(), console=console,
                            transient=True, disable=console is None or not console.is_terminal)
        self.task = self.bar.add_task("", total=run.plan.bpe, completed=run.state.pos.batch, loss="…", ips="…")
        self.bar.start()

    def on_flush(self, run, flushed: Flushed):
        if self.bar is not None:
            self.bar.update(self.task, completed=run.state.pos.batch, loss=f"{run.last_loss + 0.0:.4f}",
                            ips=throughput(run.plan.net.spec, flushed.images_per_s))

    def on_batches_end(self, run):
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class ProgressLines(Callback):
    """Without a terminal (nohup, Slurm, CI logs) there is no progress bar: a line every `every`
    seconds instead (at the next flush after it), with the step, the loss, the throughput and the
    time left.  `every` 0: none."""

    def __init__(self, every: float, clock=time.monotonic):
        self.every, self.clock = every, clock
        self.t0 = self.last = None
        self.step0 = 0

    def _active(self, run) -> bool:
        console = run.plan.console
        return self.every > 0 and console is not None and not console.is_terminal and not console.quiet

    def on_train_begin(self, run):
        self.t0 = self.last = self.clock()
        self.step0 = run.state.pos.step

    def on_flush(self, run, flushed: Flushed):
        if not self._active(run) or self.t0 is None:
            return
        now_ = self.clock()
        if now_ - self.last < self.every:
            return
        self.last = now_
        plan, pos = run.plan, run.state.pos
        done = pos.step - self.step0
        rate = done / (now_ - self.t0) if now_ > self.t0 else 0.0
        left = (plan.stop_at - pos.step) / rate if rate > 0 else float("nan")
        eta = "?" if left != left else time.strftime("%H:%M:%S", time.gmtime(left)) if left < 86400 else f"{left / 3600:.0f}h"
        loss = f"{run.last_loss + 0.0:.4f}" if run.last_loss is not None else "n/a"
        plan.log(f"step {pos.step}/{plan.stop_at} (epoch {pos.epoch + 1}/{plan.cfg.epochs}, batch {pos.batch}/{plan.bpe}): "
                 f"loss {loss}, {throughput(plan.net.spec, flushed.images_per_s)}, ETA {eta}")


class SwaUpdate(Callback):
    """train.use_swa: at the end of an epoch ≥ swa_start_epoch, swa ← swa + (θ − swa)/(n + 1)
    (and SWAG's mean of squares); SWAG keeps the last swag_k deviations θ − swa."""

    def on_epoch_end(self, run, end: EpochEnd):
        if end.epoch < run.plan.cfg.swa_start_epoch:
            return
        st, cfg = run.state, run.plan.cfg
        w = np.asarray(1.0 / (st.swa_n + 1), np.float32)      # rank 0 (upload would make it [1])
        out = st.module.average(*st.A, *st.Q, *st.P, w)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        n = len(st.P)
        st.A, st.Q = out[:n], out[n:]
        st.swa_n += 1
        if cfg.use_swag:
            st.devs.append([p - a for p, a in zip(to_host(st.P), to_host(st.A))])
            st.devs = st.devs[-cfg.swag_k:]


class EvalCadence(Callback):
    """An eval every eval_every_n_epochs (val_every_epochs) and after the last epoch, named in
    the epoch's line; at the end of training a final eval of the final weights unless just
    done, and predictions.png (segmentation / detection / regression)."""

    def on_epoch_end(self, run, end: EpochEnd):
        cfg, n = run.plan.cfg, end.epoch + 1
        # the dataset kind's cadence: eval_every_n_epochs, or imagenet's val_every_epochs
        every = run.plan.eval_every
        if (every and n % every == 0) or n == cfg.epochs:
            end.line += f"; val {run_eval(run).describe()}"

    def on_train_end(self, run):
        plan = run.plan
        # always end with an eval of the final state (unless just done)
        final_region = run.state.eval_region(final=True)
        if run.last_eval_step != run.state.pos.step or run.last_eval is None or \
                getattr(run.last_eval, "region", "live") != final_region:
            r = run_eval(run, final=True)
            plan.log(f"final eval: {r.describe()}")
        # segmentation / detection / regression: a picture of the first validation predictions
        if plan.world.rank == 0 and save_predictions(run.last_eval, plan.out / "predictions.png"):
            plan.log(f"wrote {plan.out / 'predictions.png'}")


class CheckpointCadence(Callback):
    """A checkpoint every checkpoint_every_n_epochs, kept as the numbered snapshot
    RUN/epoch-N.npz (as the Lean kit keeps `_params_eN.bin`) besides RUN/last.npz, and one of the
    final state at the end of training (complete once the last step ran, or an early stop);
    the last epoch's snapshot is that final checkpoint."""

    def __init__(self):
        self.snapshot = None           # the last epoch's number, when it is a snapshot epoch

    def after_epoch(self, run, end: EpochEnd):
        cfg, n = run.plan.cfg, end.epoch + 1
        if not (cfg.checkpoint_every_n_epochs and n % cfg.checkpoint_every_n_epochs == 0):
            return
        if n == cfg.epochs or run.stop_training:
            self.snapshot = n          # the final save below is this epoch's state
            return
        self._snap(run, save(run), n)

    def on_train_end(self, run):
        pos = run.state.pos
        path = save(run, complete=pos.step >= run.plan.total or run.stopped_early)
        if self.snapshot is not None and pos.batch == 0 and pos.epoch == self.snapshot:
            self._snap(run, path, self.snapshot)

    @staticmethod
    def _snap(run, path: Path, n: int):
        if run.plan.world.rank == 0:
            atomic_link(path, run.plan.out / epoch_checkpoint(n))


def _metric(run, sel, field: str) -> float:
    """The value of `sel.metric` in the epoch's eval, refused naming the field when the eval
    does not report it (data whose labels the check stage could not know)."""
    d = run.last_eval.as_dict()
    v = d.get(sel.metric)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        have = ", ".join(k for k, x in d.items() if isinstance(x, (int, float)) and k != "n")
        raise TrainError(f"train.{field}.metric {sel.metric!r}: this run's evals report {have}")
    return float(v)


def _evaluated(run) -> bool:
    """An eval scored the state at the end of this epoch (EvalCadence)."""
    return run.last_eval is not None and run.last_eval_step == run.state.pos.step


class KeepBest(Callback):
    """train.keep_best: after each eval, a checkpoint of the state when its metric is among the
    k best so far (RUN/best-epoch-N.npz; the others beyond k are deleted), RUN/best.npz the best
    (ties keep the earlier).  The ranking travels in every checkpoint's metadata, so a resumed
    run keeps the same files."""

    def on_train_begin(self, run):
        got = ((run.plan.resumed or {}).get("selection") or {}).get("keep_best")
        run.selection["keep_best"] = [list(x) for x in got] if got else []

    def on_epoch_end(self, run, end: EpochEnd):
        if not _evaluated(run):
            return
        sel, kept = run.plan.cfg.keep_best, run.selection["keep_best"]
        v, n = _metric(run, sel, "keep_best"), end.epoch + 1
        rank = sum(1 for value, _ in kept if not sel.better(v, value))     # earlier ties stay ahead
        if rank >= sel.k:
            return
        out = run.plan.out
        kept.insert(rank, [v, n])
        path = save(run, path=out / f"best-epoch-{n}.npz", best=sel.metric, value=v)
        for _, e in kept[sel.k:]:
            f = out / f"best-epoch-{e}.npz"
            if run.plan.world.rank == 0 and f.exists() and e != n:
                f.unlink()
        del kept[sel.k:]
        if rank == 0:
            if run.plan.world.rank == 0:
                atomic_link(path, out / BEST)
            end.line += f"; best {sel.metric} {v:.4g}: {out / BEST}"


class EarlyStop(Callback):
    """train.early_stop: after each eval, training stops once `patience` evals in a row have not
    improved on the best so far by more than min_delta (the final eval and checkpoint follow);
    its count travels in every checkpoint's metadata."""

    def on_train_begin(self, run):
        got = ((run.plan.resumed or {}).get("selection") or {}).get("early_stop")
        run.selection["early_stop"] = dict(got) if got else {"best": None, "best_epoch": None, "bad": 0,
                                                              "stopped": False}
        if run.selection["early_stop"]["stopped"]:
            run.plan.log(f"nothing to train: the run stopped early at epoch {run.state.pos.epoch} (train.early_stop)")
            run.stop_training = run.stopped_early = True

    def on_epoch_end(self, run, end: EpochEnd):
        if not _evaluated(run):
            return
        sel, st = run.plan.cfg.early_stop, run.selection["early_stop"]
        v = _metric(run, sel, "early_stop")
        if sel.better(v, st["best"], sel.min_delta):
            st.update(best=v, best_epoch=end.epoch + 1, bad=0)
            return
        st["bad"] += 1
        if st["bad"] >= sel.patience and end.epoch + 1 < run.plan.cfg.epochs:
            st["stopped"] = True
            run.stop_training = run.stopped_early = True
            run.metrics.write(kind="early_stop", step=run.state.pos.step, epoch=end.epoch + 1, metric=sel.metric,
                              best=st["best"], best_epoch=st["best_epoch"], patience=sel.patience)
            end.line += (f"; early stop: {sel.metric} has not improved on {st['best']:.4g} (epoch "
                         f"{st['best_epoch']}) by more than {sel.min_delta:g} in {sel.patience} evals")


class Interrupt(Callback):
    """A Ctrl-C request acted on at the end of its step — on an epoch's last step, after that
    epoch's eval and checkpoint: the queued losses logged, a checkpoint saved, an `interrupted`
    record, then Interrupted (with the command that continues the run)."""

    def __init__(self, flusher: MetricsFlush):
        self.flusher = flusher

    def on_step_end(self, run, step: StepEnd):
        if run.stop.requested and not step.end_of_epoch:   # at an epoch end: after its eval
            self.interrupt(run)

    def after_epoch(self, run, end: EpochEnd):
        if run.stop.requested and not run.stop_training and run.state.pos.epoch < run.plan.cfg.epochs:
            self.interrupt(run)

    def interrupt(self, run):
        plan, pos = run.plan, run.state.pos
        self.flusher.flush(run)
        path = save(run)
        run.metrics.write(kind="interrupted", time=now(), step=pos.step)
        raise Interrupted(f"interrupted at step {pos.step} (epoch {pos.epoch + 1}, batch {pos.batch}); "
                          f"checkpoint saved to {path}.  Continue with: lmc train {plan.net.spec.file} "
                          f"--resume --out {plan.out}" + (f" --nproc {plan.world.size}" if plan.world.size > 1 else ""))


def default_callbacks(plan, state) -> Callbacks:
    """The callbacks of `lmc train`, in the order their hooks must run."""
    flusher = MetricsFlush(plan.opts.log_every)
    items = [SigintHandler(), StepsStop()]
    if state.caps:
        items.append(SpectralCap())
    items += [flusher, EpochReport(), ProgressBar(), ProgressLines(plan.opts.progress_every)]
    if plan.cfg.use_swa:
        items.append(SwaUpdate())
    items.append(EvalCadence())
    if plan.cfg.early_stop is not None:
        items.append(EarlyStop())
    if plan.cfg.keep_best is not None:
        items.append(KeepBest())
    items += [CheckpointCadence(), Interrupt(flusher)]
    return Callbacks(items)
