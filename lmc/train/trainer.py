"""`lmc train`: TypedNet + dataset → a trained run directory.

Input: a TypedNet with a `train:` recipe and TrainOptions (backend, data, run directory, …).
Output: RUN_DIR/last.npz (checkpoint, lmc/checkpoint.py) and RUN_DIR/metrics.jsonl.

Flow: refuse what will not run (`refusals`: unlowered layers, loss, optimizer, recipe
switches) → lower → load data → compile (cached) → load the module on the backend's device →
initialize (lmc/init.py; bootstrap; --init) or restore (--resume) → upload parameters,
optimizer state and BN statistics once → per step: lr from the schedule, one `@train_step` call
whose results (device arrays) are fed straight back; nothing comes to the host per step except
what the next call needs.  Losses stay on the device and are read back every `log_every` steps
and at each epoch end (a read waits for the queued work); that read is where non-finite losses
are caught, so a NaN is detected at most `log_every` steps late, but named at its own step.

Resume: the data order and augmentation of (epoch, batch) depend only on (seed, epoch, batch)
(lmc.data.Batcher) and the lr only on the global step, so restarting from a checkpoint's
(step, epoch, batch) with its parameters, optimizer state and BN statistics repeats exactly the
computation an uninterrupted run would have done."""
from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np

from lmc.run.checkpoint import (apply_bootstrap, atomic_write, load_checkpoint, load_init, net_hash,
    save_checkpoint)
from lmc.core.errors import TrainError
from lmc.data.fit import load_data
from lmc.evaluate.score import EvalResult, evaluate, evaluate_swag
from lmc.evaluate.metrics import eval_format, save_predictions
from lmc.check import check
from lmc.graph.init import apply_det_prior, apply_head_prior, init_tensors
from lmc.train.schedule import learning_rate, schedule_name
from lmc.compile import compile_module, resolve_backend
from lmc.data import Batcher
from lmc.data.batcher import TTA
from lmc.data.mix import Mixer
from lmc.data.policy import Policy
from lmc.losses.boxes import BoxAffine
from lmc.lower.lowering import abi, lower
from lmc.lower.spectral import FINAL_CALLS, capped, initial_u
from lmc.run import dist
from lmc.run.dist import check_same, shard
from lmc.run.runtime import Module
from lmc.train.fp8 import project, project_params, weight_axes
from lmc.train.masks import draw
from lmc.train.metrics_log import MetricsLog, NoMetrics, now as _now
from lmc.train.options import CHECKPOINT, METRICS, VOCAB_FILE, Interrupted, Summary, TrainOptions

__all__ = ["Trainer", "train", "TrainOptions", "Summary", "Interrupted"]

# data-parallel ranks compare their parameters and optimizer state bit for bit this often (and
# at every eval and checkpoint)
CHECK_EVERY = 100


def _to_host(arrays) -> list[np.ndarray]:
    """Fresh host copies of device arrays (a read waits for the work that produces them)."""
    return [np.array(a.to_host() if hasattr(a, "to_host") else a, dtype=np.float32, copy=True) for a in arrays]


def _scalar(v) -> float:
    """A loss or count as a float: a device scalar read back, or a host number."""
    return float(v.to_host() if hasattr(v, "to_host") else v)


class Trainer:
    def __init__(self, net, opts: TrainOptions, console):
        self.net, self.opts, self.console = net, opts, console
        self.cfg = net.spec.train
        self.world = dist.current(opts.dist_timeout)      # Single unless a launcher started ranks
        # the launching process (`--nproc N`, one process yet) checks what its ranks will
        W = self.world.size if self.world.size > 1 else opts.nproc
        check(net, W).raise_all()          # every refusal, before any data is read or compiled
        self.abi = abi(net, W)
        self.gbatch = net.batch * self.world.size          # examples per step, all ranks together
        if self.world.size > 1:
            if self.world.rank != 0:                      # rank 0 speaks and writes for the run
                from rich.console import Console
                self.console = Console(quiet=True)
        self.out = Path(opts.out) if opts.out else Path("runs") / net.spec.name
        self.ckpt_path = self.out / CHECKPOINT
        if opts.resume and opts.init:
            raise TrainError("--resume and --init exclude each other: --resume continues the run in --out, "
                             "--init starts a new one from given parameters")
        if opts.steps is not None and opts.steps < 1:
            raise TrainError(f"--steps must be at least 1, got {opts.steps}")
        if not opts.resume and not opts.overwrite and self.ckpt_path.exists():
            raise TrainError(f"{self.out} already holds a run",
                             hint="continue it with --resume, replace it with --overwrite, or choose another --out")
        self.stop_requested = False
        self._sigint = False               # data-parallel: Ctrl-C seen here, agreed at the next step
        self.last_loss: float | None = None
        self.last_ckpt_step: int | None = None

    def log(self, text: str):
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def warn(self, text: str):
        self.console.print("warning: " + text, style="yellow", markup=False, highlight=False, soft_wrap=True)

    # ------------------------------------------------------------------ setup
    def setup(self):
        net, cfg, opts = self.net, self.cfg, self.opts
        self.backend = resolve_backend(opts.backend)
        W = self.world.size
        text = lower(net, backend=self.backend, world=W, the_abi=self.abi)   # before the data: a refusal costs no loading
        self.resumed = None
        if opts.resume:
            if not self.ckpt_path.exists():
                raise TrainError(f"--resume: no checkpoint to resume in {self.out} ({self.ckpt_path} does not exist)")
            self.resumed = load_checkpoint(self.ckpt_path, net, self.abi.opt_keys, self.regions())
        self.ds = load_data(net, opts.data, cfg.seed, opts.stream)
        if self.resumed is not None and self.resumed.meta.get("vocab") != self.ds.vocab:
            raise TrainError(f"--resume: the text's character vocabulary differs from the one {self.ckpt_path} "
                             f"was trained on (token ids would mean other characters)",
                             hint="resume on the same corpus, or start a new run")
        self.abi.loss.check_data(self.ds, self.abi.labels, self.fit)
        self.tta = TTA(self.ds, cfg) if cfg.use_tta else None
        erasing = cfg.random_erasing_prob if cfg.random_erasing else 0.0
        # data-parallel: every rank prepares the global batch (the single-process stream of a
        # batch of W·batch_size) and keeps its slice (lmc/dist.py shard)
        self.batcher = Batcher(self.ds, self.gbatch, seed=cfg.seed, shuffle=opts.shuffle,
                               augment=cfg.augment, random_erasing=erasing, labels=self.fit,
                               mix=Mixer.from_config(cfg), policy=Policy.from_config(cfg, self.ds),
                               repeated=cfg.repeated_aug, boxes=BoxAffine.from_config(cfg))
        k = self.abi.accum
        # with k-step accumulation an epoch is whole cycles of k micro-batches (the remainder
        # is dropped like the batch remainder: one optimizer batch is k·batch_size examples)
        self.bpe = self.batcher.steps_per_epoch // k * k
        if self.bpe == 0:
            raise TrainError(f"grad_accum_steps {k} × batch {self.gbatch} = {k * self.gbatch} examples per "
                             f"optimizer step, but the training split has {len(self.ds.x_train):,}",
                             hint="lower train.grad_accum_steps or train.batch_size")
        self.total = cfg.epochs * self.bpe
        self.stop_at = min(self.total, opts.steps) if opts.steps else self.total
        if self.resumed is not None:
            m = self.resumed.meta
            for key, now in (("batch_size", self.gbatch), ("steps_per_epoch", self.bpe)):
                if m.get(key) != now:
                    what = "global batch (ranks × batch_size)" if key == "batch_size" else key
                    raise TrainError(f"--resume: the checkpoint was trained with {what} {m.get(key)}, now {now}; "
                                     f"the data position would not mean the same batches",
                                     hint="resume with the same global batch (--nproc × train.batch_size) and dataset")
            if m.get("ranks", 1) != W and net.state:
                self.warn(f"the checkpoint was trained on {m.get('ranks', 1)} rank(s), this run has {W}: the BN "
                          f"batch statistics are now over {net.batch} examples per rank")
            if m.get("fp8", "off") != cfg.fp8.value:
                raise TrainError(f"--resume: the checkpoint was trained with fp8 {m.get('fp8', 'off')}, this "
                                 f"recipe has fp8 {cfg.fp8.value}", hint="resume with the recipe the run was started with")
            for key, now in (("seed", cfg.seed), ("shuffle", opts.shuffle)):
                if m.get(key) != now:
                    self.warn(f"the checkpoint used {key}={m.get(key)}, this run {key}={now}: "
                             f"the resumed run will not repeat the uninterrupted one")
        opt = "+".join(sorted({o.name for o in self.abi.optimizers.values()}))
        if cfg.warmup_epochs and schedule_name(cfg) == "constant":
            self.warn("warmup_epochs is ignored with a constant lr (as the reference); "
                     "set cosine_decay or exp_lr_decay_rate")
        self.log(f"{net.spec.name}: {net.total_params:,} parameters, batch {net.batch}, {self.bpe} steps/epoch "
                 f"× {cfg.epochs} epochs ({self.total:,} steps); {opt}, lr {cfg.learning_rate:g} "
                 f"{schedule_name(cfg)}; dataset {self.ds.name} ({len(self.ds.x_train):,} train, "
                 f"{len(self.ds.x_val):,} val); backend {self.backend}; run dir {self.out}")
        if W > 1:
            self.log(f"data-parallel: {W} ranks × batch {net.batch} = global batch {self.gbatch} per step "
                     f"(train.batch_size is per rank; change it with --set train.batch_size=…); gradients "
                     f"summed by MPI all-reduce, BN statistics per rank, averaged at each eval and checkpoint")
        # initial tensors on the host, before compiling: a bad --init file fails fast
        if self.resumed is not None:
            params, opt_state, state = self.resumed.params, self.resumed.opt, self.resumed.state
            m = self.resumed.meta
            self.step, self.epoch, self.batch = int(m["step"]), int(m["epoch"]), int(m["batch"])
            self.last_loss = m.get("loss")
            self.last_ckpt_step = self.step
            self.log(f"resuming {self.ckpt_path} at step {self.step} (epoch {self.epoch + 1}, batch {self.batch})")
        else:
            params, state = init_tensors(net, cfg.seed)
            # the reference's order (training.md §1): bootstrap, head prior, detector prior
            for note in (apply_bootstrap(params, state, net, cfg) + apply_head_prior(params, net, cfg)
                         + apply_det_prior(params, net, cfg)):
                self.log(note)
            if opts.init is not None:
                got = load_init(Path(opts.init), net)
                params = got.params
                if got.state is not None:
                    state = got.state
                elif net.state:
                    self.log(f"note: {opts.init} has no BN statistics; they start at mean 0, variance 1")
                self.log(f"initialized from {opts.init}: {got.what}")
            opt_state = self.abi.initial_opt()
            self.step, self.epoch, self.batch = 0, 0, 0
        t0 = time.time()
        c = compile_module(text, None, self.backend, opts.chip)
        self.log(f"{'cached' if c.cached else 'compiled'} module in {time.time() - t0:.1f}s: {c.path}")
        self.module = Module(c.path, self.backend, device=self._device())
        up = self.module.upload
        self.P = [up(a) for a in params]
        self.O = [up(a) for a in opt_state]
        self.S = [up(a) for a in state]
        self._setup_regions(params)
        self.metrics = (MetricsLog(self.out / METRICS, self.step if self.resumed is not None else None,
                                 self.opts.tensorboard) if self.world.rank == 0 else NoMetrics())
        # data-parallel: which process is which rank (`lmc train --nproc` names a dead one by it)
        dp = {"pids": self.world.allgather(os.getpid())} if self.world.size > 1 else {}
        if self.resumed is None:
            self.metrics.write(kind="header", time=_now(), spec=net.spec.file, name=net.spec.name, **dp,
                               net_hash=net_hash(net), total_params=net.total_params, batch_size=net.batch,
                               global_batch=self.gbatch,
                               steps_per_epoch=self.bpe, epochs=cfg.epochs, optimizer=opt, ranks=W,
                               schedule=schedule_name(cfg), learning_rate=cfg.learning_rate, seed=cfg.seed,
                               shuffle=opts.shuffle, dataset=self.ds.name, n_train=len(self.ds.x_train),
                               n_val=len(self.ds.x_val), backend=self.backend)
            if self.ds.vocab is not None and self.world.rank == 0:
                body = json.dumps({"vocab": "char", "chars": list(self.ds.vocab)}, ensure_ascii=False)
                atomic_write(self.out / VOCAB_FILE, lambda f: f.write(body.encode("utf-8")))
        else:
            self.metrics.write(kind="resume", time=_now(), step=self.step, epoch=self.epoch + 1, batch=self.batch,
                               **dp)

    # ------------------------------------------------------------------ averaged / accumulated weights
    def _device(self) -> str | None:
        """This rank's device of --devices (LMC_DEVICES, one per local rank), else the default."""
        devs = [d for d in os.environ.get("LMC_DEVICES", "").split(",") if d]
        if not devs:
            return None
        if self.backend == "llvm-cpu":
            raise TrainError("--devices names GPU devices; on llvm-cpu the ranks share the machine's cores",
                             hint="drop --devices, or train with --backend cuda/rocm")
        w = self.world
        if w.local_rank >= len(devs):
            raise TrainError(f"--devices {','.join(devs)}: {len(devs)} device(s) for {w.local_size} ranks on this machine",
                             hint="name one device per rank")
        return devs[w.local_rank]

    def regions(self) -> list[str]:
        """The per-parameter regions this recipe keeps next to the live weights (checkpoint.REGIONS)."""
        cfg = self.cfg
        out = []
        if cfg.use_ema:
            out.append("ema")
        if cfg.use_swa:
            out.append("swa")
        if cfg.use_swag:
            out += ["swa_sq", "swag_dev"]
        if self.abi.accum > 1:
            out.append("grad_acc")
        if cfg.spectral_cap > 0:
            out.append("spectral_u")
        return out

    def _setup_regions(self, params):
        """Device arrays of the regions: EMA starts at θ₀, SWA/SWAG means at 0 with no snapshot,
        accumulators at 0 — or all of them as the checkpoint left them."""
        up = self.module.upload
        names = [p.name for p in self.net.params]
        got = self.resumed.regions if self.resumed is not None else {}
        zeros = [np.zeros(p.type.dims, np.float32) for p in self.net.params]

        def region(r, default):
            return [got[r][n] for n in names] if r in got else default

        self.E = [up(a) for a in region("ema", params)] if self.cfg.use_ema else []
        self.A = [up(a) for a in region("swa", zeros)] if self.cfg.use_swa else []
        self.Q = [up(a) for a in region("swa_sq", zeros)] if self.cfg.use_swag else []
        # the accumulators: k-step accumulation keeps them in checkpoints; data-parallel steps
        # without accumulation pass zeros (which @apply_step hands back)
        self.G = [up(a) for a in region("grad_acc", zeros)] if self.abi.split else []
        self.swa_n = int(self.resumed.meta.get("swa_n", 0)) if self.resumed is not None else 0
        # spectral_cap: the capped weights' power-iteration vectors (warm starts)
        self.caps, self.U = [], []
        if self.cfg.spectral_cap > 0:
            self.caps = capped(self.net)
            U = ([got["spectral_u"][c.param.name] for c in self.caps] if "spectral_u" in got
                 else initial_u(self.caps, self.cfg.seed))
            self.U = [up(a) for a in U]
        # SWAG's last K deviations θ − swa, host side (only sampling at eval reads them)
        self.devs = []
        if self.cfg.use_swag and "swag_dev" in got:
            d = [got["swag_dev"][n] for n in names]
            self.devs = [[a[i] for a in d] for i in range(d[0].shape[0])]

    def host_regions(self) -> dict:
        names = [p.name for p in self.net.params]
        out = {}
        for r, arrays in (("ema", self.E), ("swa", self.A), ("swa_sq", self.Q), ("grad_acc", self.G)):
            if r in self.regions():
                # a mid-cycle accumulator differs per rank: its rank mean, which every rank of
                # a resumed run starts from, sums to the same total (exact up to rounding)
                host = (self.world.mean_arrays(arrays) if r == "grad_acc" and self.world.size > 1
                        else _to_host(arrays))
                out[r] = dict(zip(names, host))
        if self.caps:
            out["spectral_u"] = {c.param.name: u for c, u in zip(self.caps, _to_host(self.U))}
        if self.cfg.use_swag:
            out["swag_dev"] = {n: (np.stack([d[i] for d in self.devs]) if self.devs else
                                   np.zeros((0,) + p.type.dims, np.float32))
                               for i, (n, p) in enumerate(zip(names, self.net.params))}
        return out

    def project(self, calls: int = 1):
        """train.spectral_cap: `calls` rounds of @spectral_project on the capped weights."""
        idx = {p.name: i for i, p in enumerate(self.net.params)}
        W = [self.P[idx[c.param.name]] for c in self.caps]
        cap = np.asarray(self.cfg.spectral_cap, np.float32)     # rank 0
        for _ in range(calls):
            out = list(self.module.spectral_project(*W, *self.U, cap))
            W, self.U = out[:len(W)], out[len(W):]
        self.P = list(self.P)
        for c, w in zip(self.caps, W):
            self.P[idx[c.param.name]] = w

    def swa_update(self):
        """End of an epoch ≥ swa_start_epoch: swa ← swa + (θ − swa)/(n + 1) (and SWAG's mean of
        squares); SWAG keeps the last swag_k deviations θ − swa."""
        w = np.asarray(1.0 / (self.swa_n + 1), np.float32)      # rank 0 (upload would make it [1])
        out = self.module.average(*self.A, *self.Q, *self.P, w)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        n = len(self.P)
        self.A, self.Q = out[:n], out[n:]
        self.swa_n += 1
        if self.cfg.use_swag:
            self.devs.append([p - a for p, a in zip(_to_host(self.P), _to_host(self.A))])
            self.devs = self.devs[-self.cfg.swag_k:]

    def eval_region(self, final: bool) -> str:
        """What an eval scores (the seed's rule): the EMA weights when use_ema; else, at the end
        of training, the SWA mean (SWAG: samples around it) once it has a snapshot; else live."""
        if self.cfg.use_ema:
            return "ema"
        if self.cfg.use_swa and final and self.swa_n > 0:
            return "swag" if self.cfg.use_swag else "swa"
        return "live"

    # ------------------------------------------------------------------ pieces
    def sync_ranks(self):
        """Data-parallel: the BN running statistics become the ranks' mean (so every rank
        evaluates and saves the same model), and parameters and optimizer state are checked to
        be bit-identical across ranks.  A collective: every rank calls it at the same step."""
        if self.world.size == 1:
            return
        if self.S:
            self.S = [self.module.upload(a) for a in self.world.mean_arrays(self.S)]
        check_same(self.world, "parameters and optimizer state", _to_host(self.P) + _to_host(self.O), self.step)

    def save(self, complete: bool = False) -> Path:
        self.sync_ranks()
        params, opt, state = _to_host(self.P), _to_host(self.O), _to_host(self.S)
        for name, a in zip([p.name for p in self.net.params] + [s.name for s in self.net.state], params + state):
            if not np.isfinite(a).all():
                self.metrics.write(kind="diverged", time=_now(), step=self.step, parameter=name)
                raise self._nan_error(f"parameter {name} is not finite after step {self.step}")
        meta = {"step": self.step, "epoch": self.epoch, "batch": self.batch, "seed": self.cfg.seed,
                "shuffle": self.opts.shuffle, "batch_size": self.net.batch, "steps_per_epoch": self.bpe,
                "epochs": self.cfg.epochs, "loss": self.last_loss, "spec": self.net.spec.file,
                "name": self.net.spec.name, "complete": complete, "time": _now(),
                "lr": self.lr_at(max(self.step, 1)), "swa_n": self.swa_n,
                "eval_region": self.eval_region(final=complete), "fp8": self.cfg.fp8.value}
        if self.ds.vocab is not None:                 # a char-level text's vocabulary travels with the weights
            meta["vocab"] = self.ds.vocab
        if self.world.size > 1:
            meta.update(batch_size=self.gbatch, ranks=self.world.size, rank_batch=self.net.batch)
        regions = self.host_regions()                 # a collective under data-parallel ranks
        self.last_ckpt_step = self.step
        if self.world.rank != 0:                      # rank 0 writes the run's files
            return self.ckpt_path
        save_checkpoint(self.ckpt_path, self.net, self.abi.opt_keys, params, opt, state, meta, regions)
        self.metrics.write(kind="checkpoint", step=self.step, epoch=self.epoch + (1 if self.batch else 0),
                           path=str(self.ckpt_path))
        return self.ckpt_path

    def _nan_error(self, what: str) -> TrainError:
        kept = (f"the last good checkpoint is {self.ckpt_path} (step {self.last_ckpt_step})"
                if self.last_ckpt_step is not None else "no checkpoint had been written yet")
        return TrainError(f"training diverged: {what}; stopped, {kept}",
                          hint="lower train.learning_rate (or add warmup_epochs with cosine_decay)")

    def run_eval(self, final: bool = False) -> EvalResult:
        region = self.eval_region(final)
        self.sync_ranks()
        args = (self.ds.x_val, self.ds.y_val, self.net.batch, self.net.num_classes or 1)
        if region == "swag":
            r = evaluate_swag(self.module, _to_host(self.A), _to_host(self.Q), self.devs, self.S,
                              self.cfg.swag_samples, self.cfg.seed, *args)
        else:
            weights = {"live": self.P, "ema": self.E, "swa": self.A}[region]
            r = evaluate(self.module, weights, self.S, *args, label_format=eval_format(self.ds.label_format, self.abi.loss),
                         loss=self.abi.loss, tta=self.tta, world=self.world)
        r.region = region
        ep = self.epoch + (1 if self.batch else 0)
        self.metrics.write(kind="eval", step=self.step, epoch=ep, region=region, **r.as_dict())
        self.last_eval = r
        self.last_eval_step = self.step
        return r

    def _flush(self):
        """Read back the queued losses (this waits for the device), check them, log them."""
        if not self.pending:
            return
        now = time.perf_counter()
        ips = self.gbatch * len(self.pending) / max(now - self.t_window, 1e-9)
        B = self.gbatch
        for step, ep, b, lr, loss_d, corr_d in self.pending:
            loss = _scalar(loss_d)
            correct = _scalar(corr_d)
            if not math.isfinite(loss):
                self.pending = []
                self.metrics.write(kind="diverged", time=_now(), step=step, epoch=ep + 1, batch=b, loss=str(loss))
                raise self._nan_error(f"the loss is {loss} at step {step} (epoch {ep + 1}, batch {b + 1})")
            self.metrics.write(flush=False, kind="step", step=step, epoch=ep + 1, batch=b, loss=loss,
                               acc=correct / B if self.abi.loss.counts_correct else None, lr=lr,
                               images_per_s=round(ips, 1))
            self.ep_loss += loss
            self.ep_correct += correct
            self.ep_n += 1
            self.last_loss = loss
        self.metrics.flush()
        self.pending = []
        self.t_window = time.perf_counter()
        self.ips = ips

    # ------------------------------------------------------------------ the loop
    def run(self) -> Summary:
        t_start = time.perf_counter()
        self.metrics = None
        try:
            return self._run(t_start)
        finally:
            if self.metrics is not None:
                self.metrics.close()

    def _run(self, t_start: float) -> Summary:
        self.setup()
        self.last_eval, self.last_eval_step = None, None
        self.train_seconds, self.steps_run, self.train_cpu = 0.0, 0, 0.0
        self.reduce_epoch = 0.0
        if self.step >= self.stop_at:
            self.log(f"nothing to train: the run is at step {self.step} of {self.stop_at}")
        old = None
        if threading.current_thread() is threading.main_thread():
            old = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            self._epochs()
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)
        if self.caps and self.steps_run and self.step >= self.total:
            # spectral_cap's last projection, with more power iterations; scored again below
            self.project(FINAL_CALLS)
            self.last_eval_step = None
        # always end with an eval and a checkpoint of the final state (unless just done)
        final_region = self.eval_region(final=True)
        if self.last_eval_step != self.step or self.last_eval is None or \
                getattr(self.last_eval, "region", "live") != final_region:
            r = self.run_eval(final=True)
            self.log(f"final eval: {r.describe()}")
        # segmentation / detection / regression: a picture of the first validation predictions
        if self.world.rank == 0 and save_predictions(self.last_eval, self.out / "predictions.png"):
            self.log(f"wrote {self.out / 'predictions.png'}")
        self.save(complete=self.step >= self.total)
        dp = {"allreduce_seconds": round(self.world.reduce_seconds, 3)} if self.world.size > 1 else {}
        self.metrics.write(kind="end", time=_now(), step=self.step, loss=self.last_loss,
                           train_seconds=round(self.train_seconds, 3), **dp)
        ips = self.gbatch * self.steps_run / self.train_seconds if self.train_seconds else 0.0
        return Summary(self.out, self.step, self.epoch, self.last_loss, self.last_eval,
                       time.perf_counter() - t_start, self.train_seconds, self.steps_run, ips, self.ckpt_path,
                       self.train_cpu, rank=self.world.rank)

    def lr_at(self, step: int) -> float:
        """The lr of the optimizer update that micro-batch `step` (1-based) contributes to: the
        schedule at the update's last micro-batch (every step when not accumulating)."""
        k = self.abi.accum
        return learning_rate(self.cfg, -(-step // k) * k, self.bpe)

    def fit(self, y):
        """The data pipeline's labels → the loss's label tensor (class ids, soft targets, …)."""
        return self.abi.loss.fit_labels(y, self.net.num_classes or 1, self.cfg)

    def noised(self, x):
        """train.gaussian_noise_sigma σ > 0: x + N(0, σ²I), host side, every batch (randomized
        smoothing's matched noise, lmc certify); drawn from (seed, step), so a resumed run
        draws what the uninterrupted one did."""
        sigma = self.cfg.gaussian_noise_sigma
        if not sigma:
            return x
        rng = np.random.default_rng([self.cfg.seed, 0x6A55, self.step])
        return (x + np.float32(sigma) * rng.standard_normal(x.shape, dtype=np.float32)).astype(np.float32)

    def _fp8_step(self, x, y, lr):
        """train.fp8 (lmc/trust/fp8.py): the step on E4M3-projected weights and input, its update
        folded into the f32 master (self.P holds the master between steps)."""
        if not hasattr(self, "_fp8_axes"):
            self._fp8_axes = weight_axes(self.net)
        master = _to_host(self.P)
        q = project_params(self.net, master, self._fp8_axes)
        up = self.module.upload
        self.P = [up(a) for a in q]
        loss, correct = self._fused_step(project(np.asarray(x, np.float32), None), y, lr)
        self.P = [up(m + (o - p)) for m, o, p in zip(master, _to_host(self.P), q)]
        return loss, correct

    def step_masks(self) -> list[np.ndarray]:
        """The dropout / drop-path masks of the current batch (lmc/masks.py), from (seed, epoch,
        batch): a resumed run draws the same."""
        return draw(self.abi.masks, self.cfg, self.cfg.seed, self.epoch, self.batch,
                    self.world.rank, self.world.size)

    def _fused_step(self, x, y, lr):
        hp = self.abi.hp_vector(self.cfg, lr, self.step)
        nP, nO, nE = len(self.P), len(self.O), len(self.E)
        out = self.module.train_step(*self.P, *self.O, *self.E, *self.S, x, y, hp, *self.step_masks())
        # results are device arrays: feed them straight back, no host copy
        self.P, self.O, self.E = out[:nP], out[nP:nP + nO], out[nP + nO:nP + nO + nE]
        self.S = out[nP + nO + nE:-2]
        return out[-2], out[-1]

    def _micro_step(self, x, y, lr):
        """Micro-batch `self.step` of a k-cycle: add its gradient into G; after the k-th, apply
        the update (t = the update's number) and zero G.  Data-parallel ranks: the micro-batch is
        this rank's slice of the global batch, and every micro-step ends in one all-reduce —
        of the accumulators (bucketed) before an update, with the loss, the correct count and
        the stop flag riding along — so @apply_step (grad_scale 1/(k·ranks)) sees the global
        sum.  Returns the (global batch's) loss and correct count."""
        w, k = self.world, self.abi.accum
        hp = self.abi.hp_vector(self.cfg, lr, -(-self.step // k))
        nP, nS = len(self.P), len(self.S)
        out = self.module.grad_step(*self.P, *self.S, *self.G, shard(x, w.rank, w.size), shard(y, w.rank, w.size),
                                    hp, *self.step_masks())
        self.G, self.S = out[:nP], out[nP:nP + nS]
        loss, correct = out[-2], out[-1]
        update = self.step % k == 0
        G = self.G
        if w.size > 1:
            w.step = self.step
            summed, ext = w.sum_buffers(self.G if update else [],
                                        np.array([_scalar(loss), _scalar(correct), float(self._sigint)]))
            G = [self.module.upload(g) for g in summed]
            loss, correct = ext[0] / w.size, ext[1]
            if ext[2] > 0:
                self.stop_requested = True
        if update:
            nO, nE = len(self.O), len(self.E)
            res = self.module.apply_step(*self.P, *self.O, *self.E, *G, hp)
            self.P, self.O = res[:nP], res[nP:nP + nO]
            self.E, self.G = res[nP + nO:nP + nO + nE], res[nP + nO + nE:]
            if w.size > 1 and self.step % CHECK_EVERY == 0:
                check_same(w, "parameters", _to_host(self.P), self.step)
        return loss, correct

    def _on_sigint(self, signum, frame):
        if self.stop_requested or self._sigint:    # a second Ctrl-C: stop at once, no checkpoint
            raise KeyboardInterrupt
        if self.world.size > 1:           # the ranks agree on the stop step in the next all-reduce
            self._sigint = True
        else:
            self.stop_requested = True

    def _interrupt(self):
        self._flush()
        path = self.save()
        self.metrics.write(kind="interrupted", time=_now(), step=self.step)
        raise Interrupted(f"interrupted at step {self.step} (epoch {self.epoch + 1}, batch {self.batch}); "
                          f"checkpoint saved to {path}.  Continue with: lmc train {self.net.spec.file} "
                          f"--resume --out {self.out}" + (f" --nproc {self.world.size}" if self.world.size > 1 else ""))

    def _epochs(self):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeRemainingColumn)
        cfg = self.cfg
        step_fn = self._micro_step if self.abi.split else self._fused_step
        if cfg.fp8.value != "off":
            step_fn = self._fp8_step
        console = self.console
        while self.step < self.stop_at and self.epoch < cfg.epochs:
            e = self.epoch
            self.pending = []
            self.ep_loss, self.ep_correct, self.ep_n = 0.0, 0.0, 0
            if self.batch and self.resumed is not None:
                # a run resumed mid-epoch: the epoch's mean includes the steps logged before
                for rec in self.metrics.kept:
                    if rec.get("kind") == "step" and rec.get("epoch") == e + 1:
                        self.ep_loss += rec["loss"]
                        self.ep_correct += rec["acc"] * self.gbatch
                        self.ep_n += 1
            self.ips = 0.0
            progress = Progress(TextColumn(f"epoch {e + 1}/{cfg.epochs}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[ips]} img/s"),
                                TimeRemainingColumn(), console=console, transient=True,
                                disable=console is None or not console.is_terminal)
            task = progress.add_task("", total=self.bpe, completed=self.batch, loss="…", ips="…")
            t_epoch, cpu_epoch = time.perf_counter(), time.process_time()
            steps_epoch = 0
            it = self.batcher.epoch(e, self.batch)
            self.t_window = time.perf_counter()
            with progress:
                try:
                    for x, y in it:
                        self.step += 1
                        lr = self.lr_at(self.step)
                        x = self.noised(x)
                        if self.abi.loss.host_labels:     # labels made from this batch's predictions (DETR's matching)
                            y = self.abi.loss.prepare_labels(y, lambda: self.module.forward(*self.P, *self.S, x))
                        loss_d, corr_d = step_fn(x, y, lr)
                        if self.caps and self.step % cfg.spectral_every == 0:
                            self.project()
                        self.pending.append((self.step, e, self.batch, lr, loss_d, corr_d))
                        self.batch += 1
                        steps_epoch += 1
                        end_of_epoch = self.batch == self.bpe
                        if len(self.pending) >= self.opts.log_every or end_of_epoch or \
                                self.step >= self.stop_at or self.stop_requested:
                            self._flush()
                            progress.update(task, completed=self.batch, loss=f"{self.last_loss + 0.0:.4f}",
                                            ips=f"{self.ips:,.0f}")
                        if self.stop_requested and not end_of_epoch:   # at an epoch end: after its eval
                            self.train_seconds += time.perf_counter() - t_epoch
                            self.train_cpu += time.process_time() - cpu_epoch
                            self.steps_run += steps_epoch
                            self._interrupt()
                        if self.step >= self.stop_at or end_of_epoch:
                            break
                finally:
                    it.close()
            dt = time.perf_counter() - t_epoch
            self.train_seconds += dt
            self.train_cpu += time.process_time() - cpu_epoch
            self.steps_run += steps_epoch
            if self.batch < self.bpe:        # stopped by --steps inside the epoch
                self.log(f"stopped at step {self.step} (epoch {e + 1}, batch {self.batch}/{self.bpe}), --steps {self.opts.steps}")
                return
            self.epoch, self.batch = e + 1, 0
            mean = self.ep_loss / max(self.ep_n, 1)
            acc = self.ep_correct / max(self.ep_n * self.gbatch, 1)
            # a regression loss counts nothing (Loss.counts_correct): no accuracy to report
            counts = self.abi.loss.counts_correct
            ips = self.gbatch * steps_epoch / dt if dt > 0 else 0.0
            dp = {}
            if self.world.size > 1:     # host time in the gradient all-reduce (copies, reduction, waits)
                dp = {"allreduce_seconds": round(self.world.reduce_seconds - self.reduce_epoch, 3)}
                self.reduce_epoch = self.world.reduce_seconds
            self.metrics.write(kind="epoch", step=self.step, epoch=e + 1, loss=mean, acc=acc if counts else None,
                               lr=self.lr_at(self.step), images_per_s=round(ips, 1),
                               seconds=round(dt, 3), **dp)
            line = (f"epoch {e + 1}/{cfg.epochs}: loss {mean + 0.0:.4f}, " + (f"train acc {100 * acc:.2f}%, " if counts else "") +
                    f"lr {self.lr_at(self.step):.3g}, {ips:,.0f} img/s, {dt:.1f}s")
            if dp:
                line += f" ({dp['allreduce_seconds']:.2f}s all-reduce)"
            n = e + 1
            if cfg.use_swa and e >= cfg.swa_start_epoch:
                self.swa_update()
            # val_every_epochs (imagenet only, config.check_rules) is that dataset's cadence
            every = cfg.val_every_epochs if cfg.val_every_epochs > 1 else cfg.eval_every_n_epochs
            if (every and n % every == 0) or n == cfg.epochs:
                line += f"; val {self.run_eval().describe()}"
            self.log(line)
            if (cfg.checkpoint_every_n_epochs and n % cfg.checkpoint_every_n_epochs == 0) and n != cfg.epochs:
                self.save()
            if self.stop_requested and self.step < self.stop_at and self.epoch < cfg.epochs:
                self._interrupt()


def train(net, opts: TrainOptions, console) -> Summary:
    """Train `net` per its recipe and `opts`; progress and log lines go to `console` (stderr)."""
    return Trainer(net, opts, console).run()


