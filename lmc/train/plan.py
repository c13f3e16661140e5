"""The plan of a training run: everything `lmc train` decides and loads once, before the first step.

Input: a TypedNet with a `train:` recipe, TrainOptions and the console.
Output: a TrainJob (the checks that come before anything is loaded: what the launching process
of `--nproc N` runs too), then a TrainPlan (backend, world, ABI, data, batcher, step counts,
the compiled module loaded on this rank's device) and its Start (the initial host tensors and
position); `open_metrics` then starts metrics.jsonl.

Order, as the errors must come: refuse what will not run (lmc.check: every refusal at once,
the data-parallel ones included) → option checks → lower (a refusal costs no loading) → the resumed checkpoint → load data → batcher and step counts → the resumed
checkpoint's consistency checks → initial tensors (init, bootstrap, head and detector priors,
--init, or the checkpoint; a bad --init file fails before compiling) → compile (cached) → load
the module.  abi(...) is computed once (TrainJob.abi) and the net lowered once."""
from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, fields
from pathlib import Path

from lmc._version import __version__
from lmc.compile import (DEFAULT_CHIP, Pending, compile_training, compiler_version, find_compiler,
                         resolve_backend)
from lmc.check import check, load_net
from lmc.core.errors import LmcError, TrainError
from lmc.data import Batcher
from lmc.data.batcher import TTA
from lmc.data.fit import load_data
from lmc.data.kinds import dataset_class
from lmc.data.mix import Mixer
from lmc.data.policy import Policy
from lmc.graph.init import apply_det_prior, apply_head_prior, init_tensors
from lmc.evaluate.metrics import require_coco
from lmc.losses import BOXES
from lmc.losses.boxes import BoxAffine
from lmc.lower.lowering import abi, lower, lower_train
from lmc.run import dist
from lmc.run.checkpoint import apply_bootstrap, atomic_write, load_checkpoint, load_init, net_hash
from lmc.run.rundir import CHECKPOINT, RUN_FILE, RUN_FORMAT, SPEC_FILE, data_differences, read_run_info, saved_spec
from lmc.run.runtime import Module, check_device, training_module
from lmc.spec.netspec import resolved_data, resolved_yaml
from lmc.train.tboard import require_tensorboard
from lmc.train.metrics_log import MetricsLog, NoMetrics, now
from lmc.train.options import METRICS, VOCAB_FILE, TrainOptions
from lmc.train.schedule import schedule_name
from lmc.train.state import region_names
from lmc.train.steps import Stop, StepStrategy, choose, lr_at


@dataclass
class TrainJob:
    """What to train, on which world, into which run directory: checked before anything loads."""
    net: object
    opts: TrainOptions
    console: object
    world: object              # lmc.run.dist: Single unless a launcher started ranks
    abi: object                # lmc.lower.lowering.Abi of this world size
    out: Path

    @property
    def cfg(self):
        return self.net.spec.train

    @property
    def gbatch(self) -> int:
        """Examples per step, all ranks together."""
        return self.net.batch * self.world.size

    @property
    def ckpt_path(self) -> Path:
        return self.out / CHECKPOINT

    def log(self, text: str):
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def warn(self, text: str):
        self.console.print("warning: " + text, style="yellow", markup=False, highlight=False, soft_wrap=True)

    def fit_labels(self, y):
        """The data pipeline's labels → the loss's label tensor (class ids, soft targets, …)."""
        return self.abi.loss.fit_labels(y, self.net.num_classes or 1, self.cfg)


def check_job(net, opts: TrainOptions, console) -> TrainJob:
    """Refuse what will not run, before touching data or the compiler (the refusals first)."""
    world = dist.current(opts.dist_timeout)      # Single unless a launcher started ranks
    # the launching process (`--nproc N`, one process yet) checks what its ranks will
    W = world.size if world.size > 1 else opts.nproc
    check(net, W).raise_all()          # every refusal, before any data is read or compiled
    a = abi(net, W, opts.dist_overlap, opts.lower_options.split)
    if world.size > 1 and world.rank != 0:       # rank 0 speaks and writes for the run
        from rich.console import Console
        console = Console(quiet=True)
    out = Path(opts.out) if opts.out else Path("runs") / net.spec.name
    _check_options(opts, out)
    _check_environment(opts, a, world, launcher=world.size == 1 and opts.nproc > 1)
    return TrainJob(net, opts, console, world, a, out)


def _check_environment(opts: TrainOptions, a, world, launcher: bool) -> None:
    """What this machine must have for the run, checked before any compile or data load: the
    backend's device, and the optional packages the run will reach for (tensorboardX for
    --tensorboard, mpi4py for --nproc, pycocotools when the net is scored by detection mAP)."""
    backend = resolve_backend(opts.backend)
    if not launcher:            # the launching process makes no device: each rank checks its own
        check_device(backend, _device(world, backend))
    if opts.tensorboard is not None:
        require_tensorboard()
    if launcher:
        dist.require_mpi()
    if a.loss.label_format == BOXES:
        require_coco()


def _check_options(opts: TrainOptions, out: Path):
    if opts.resume and opts.init:
        raise TrainError("--resume and --init exclude each other: --resume continues the run in --out, "
                         "--init starts a new one from given parameters")
    if opts.progress_every < 0:
        raise TrainError(f"--progress-every must be >= 0 seconds (0: no progress lines), got {opts.progress_every:g}")
    if opts.max_steps is not None and opts.max_steps < 1:
        raise TrainError(f"--max-steps must be at least 1, got {opts.max_steps}")
    if not opts.resume and not opts.overwrite and (out / CHECKPOINT).exists():
        raise TrainError(f"{out} already holds a run",
                         hint="continue it with --resume, replace it with --overwrite, or choose another --out")


@dataclass
class Start:
    """The initial host tensors and position: fresh (init, bootstrap, priors, --init) or the
    resumed checkpoint's."""
    params: list
    opt: list
    state: list
    regions: dict              # region → {param name: array}: the checkpoint's, else empty
    swa_n: int = 0
    step: int = 0
    epoch: int = 0
    batch: int = 0
    last_loss: float | None = None


@dataclass
class TrainPlan(TrainJob):
    """A TrainJob resolved: the backend, the data and its batcher, the step counts and the
    loaded module.  Nothing in it changes while training."""
    backend: str
    resumed: dict | None       # the resumed checkpoint's metadata (None: a new run)
    ds: object
    tta: object
    batcher: Batcher
    bpe: int                   # optimizer-complete steps per epoch
    total: int
    stop_at: int               # min(total, --max-steps)
    module: Module
    provenance: dict = None    # the sets, backend, chip, versions: in run.json and every checkpoint

    def lr_at(self, step: int) -> float:
        return lr_at(self.cfg, self.abi.accum, self.bpe, step)

    @property
    def eval_every(self) -> int:
        """The in-run eval cadence in epochs (0: final only), as the dataset kind says (Kind.eval_every)."""
        ds = self.net.spec.dataset
        return dataset_class(getattr(ds, "value", ds)).eval_every(self.cfg) if ds is not None else \
            self.cfg.eval_every_n_epochs

    def step_strategy(self, stop: Stop) -> StepStrategy:
        return choose(self.net, self.cfg, self.abi, self.world, stop)


def build_plan(job: TrainJob) -> tuple[TrainPlan, Start]:
    """Lower, read the resumed checkpoint, load the data, count the steps, make the initial
    tensors, compile and load the module — in the order their errors must come (the compiles
    run in the background from the start, their errors reported where they were before)."""
    cfg = job.cfg
    backend = resolve_backend(job.opts.backend)
    # before the data: a refusal costs no loading.  The modules compile in the background while
    # the data loads: the training functions (what the first step waits for: one module, or an
    # Abi.halves net's two side by side) and @forward (evals, and the module `lmc eval` / `lmc
    # predict` compile too: theirs is then a cache hit)
    opts = job.opts.lower_options
    texts = lower_train(job.net, job.abi, backend, job.world.size, opts)
    fwd_text = lower(job.net, "forward", backend=backend, options=opts)
    t0 = time.time()
    train, fwd = compile_training(texts, fwd_text, backend, job.opts.chip, opts)
    try:
        resumed = _read_resume(job, backend)
        ds = _load_data(job, resumed)
        tta = TTA(ds, cfg) if cfg.use_tta else None
        batcher = _batcher(job, ds)
        bpe, total, stop_at = _step_counts(job, batcher, ds)
        if resumed is not None:
            _check_resume(job, resumed.meta, bpe)
        _announce(job, backend, ds, bpe, total)
        # initial tensors on the host, before the module is loaded: a bad --init file fails fast
        start = _resumed_start(job, resumed) if resumed is not None else _initial_start(job)
        module = _load_module(job, train, fwd, t0, backend)
    except BaseException:
        for pend in [*train, fwd]:
            pend.cancel()
        raise
    base = {f.name: getattr(job, f.name) for f in fields(TrainJob)}
    plan = TrainPlan(**base, backend=backend, resumed=None if resumed is None else resumed.meta, ds=ds,
                     tta=tta, batcher=batcher, bpe=bpe, total=total, stop_at=stop_at, module=module,
                     provenance=_provenance(job, backend))
    return plan, start


def _provenance(job: TrainJob, backend: str) -> dict:
    """What a run records of how it was made (run.json, every checkpoint's metadata)."""
    chip = job.opts.chip or os.environ.get("IREE_CHIP") or DEFAULT_CHIP.get(backend)
    return {"source_spec": job.net.spec.file, "sets": list(job.net.spec.overrides), "backend": backend,
            "chip": chip, "lmc_version": __version__, "iree_version": compiler_version(find_compiler())}


def _read_resume(job: TrainJob, backend: str):
    if not job.opts.resume:
        return None
    if not job.ckpt_path.exists():
        raise TrainError(f"--resume: no checkpoint to resume in {job.out} ({job.ckpt_path} does not exist)")
    _check_resume_spec(job, backend)
    return load_checkpoint(job.ckpt_path, job.net, job.abi.opt_keys, region_names(job.cfg, job.abi.accum))


def _check_resume_spec(job: TrainJob, backend: str):
    """--resume against what the run recorded (run.json, spec.yaml): another backend, or a spec
    whose tensors (parameters, BN statistics, optimizer state, kept averages) differ from the
    saved one's, is refused naming the difference."""
    info = read_run_info(job.out)
    if info is not None and info.get("backend") not in (None, backend):
        raise TrainError(f"--resume: {job.out} was trained on backend {info['backend']} (chip {info.get('chip')}), "
                         f"this run would use {backend}; a resumed run is bit-exact only on the backend it ran on",
                         hint=f"resume with --backend {info['backend']}, or start a new run with --init {job.ckpt_path}")
    text = saved_spec(job.out)
    if text is None:
        return
    saved = load_net(job.out / SPEC_FILE, text=text, batch=job.net.batch)
    try:
        saved_abi = abi(saved, job.world.size)
    except LmcError:
        saved_abi = None
    same_net = net_hash(saved) == net_hash(job.net)
    same_opt = saved_abi is not None and saved_abi.opt_keys == job.abi.opt_keys and \
        region_names(saved.spec.train, saved_abi.accum) == region_names(job.cfg, job.abi.accum)
    if same_net and same_opt:
        return
    have, now_ = resolved_data(saved.spec), resolved_data(job.net.spec)
    diffs = [d for d in data_differences(have, now_) if (d.split(".")[0] == "train") != (not same_net)]
    diffs = diffs or data_differences(have, now_)
    what = "the net's tensors" if not same_net else "the optimizer state or the averages it keeps"
    shown = "; ".join(f"{d}: {_at(have, d)} in {job.out / SPEC_FILE}, {_at(now_, d)} now" for d in diffs[:4])
    raise TrainError(f"--resume: the spec differs from the one {job.out} was trained with in {what}: {shown}",
                     hint=f"resume with `lmc train {job.out} --resume` (its saved spec), or start a new run "
                          f"with --init {job.ckpt_path}")


def _at(data, dotted: str):
    node = data
    for k in dotted.split("."):
        if isinstance(node, list) and k.isdigit() and int(k) < len(node):
            node = node[int(k)]
        elif isinstance(node, dict) and k in node:
            node = node[k]
        else:
            return "(absent)"
    return json.dumps(node) if not isinstance(node, str) else node


def _load_data(job: TrainJob, resumed):
    ds = load_data(job.net, job.opts.data, job.cfg.seed, job.opts.stream, job.opts.loader_workers)
    if resumed is not None and resumed.meta.get("vocab") != ds.vocab:
        raise TrainError(f"--resume: the text's character vocabulary differs from the one {job.ckpt_path} "
                         f"was trained on (token ids would mean other characters)",
                         hint="resume on the same corpus, or start a new run")
    job.abi.loss.check_data(ds, job.abi.labels, job.fit_labels)
    return ds


def _batcher(job: TrainJob, ds) -> Batcher:
    cfg = job.cfg
    erasing = cfg.random_erasing_prob if cfg.random_erasing else 0.0
    # data-parallel: every rank prepares the global batch (the single-process stream of a
    # batch of W·batch_size) and keeps its slice (lmc/run/dist.py shard)
    return Batcher(ds, job.gbatch, seed=cfg.seed, shuffle=job.opts.shuffle,
                   augment=cfg.augment, random_erasing=erasing, labels=job.fit_labels,
                   mix=Mixer.from_config(cfg), policy=Policy.from_config(cfg, ds),
                   repeated=cfg.repeated_aug, boxes=BoxAffine.from_config(cfg))


def _step_counts(job: TrainJob, batcher: Batcher, ds) -> tuple[int, int, int]:
    """(steps per epoch, total steps, the step to stop at)."""
    k = job.abi.accum
    # with k-step accumulation an epoch is whole cycles of k micro-batches (the remainder
    # is dropped like the batch remainder: one optimizer batch is k·batch_size examples)
    bpe = batcher.steps_per_epoch // k * k
    if bpe == 0:
        raise TrainError(f"grad_accum_steps {k} × batch {job.gbatch} = {k * job.gbatch} examples per "
                         f"optimizer step, but the training split has {len(ds.x_train):,}",
                         hint="lower train.grad_accum_steps or train.batch_size")
    total = job.cfg.epochs * bpe
    stop_at = min(total, job.opts.max_steps) if job.opts.max_steps else total
    return bpe, total, stop_at


def _check_resume(job: TrainJob, m: dict, bpe: int):
    """The resumed checkpoint against this run: what would change the data position is refused,
    what would only change the numbers is warned of."""
    cfg, W = job.cfg, job.world.size
    for key, now_ in (("batch_size", job.gbatch), ("steps_per_epoch", bpe)):
        if m.get(key) != now_:
            what = "global batch (ranks × batch_size)" if key == "batch_size" else key
            raise TrainError(f"--resume: the checkpoint was trained with {what} {m.get(key)}, now {now_}; "
                             f"the data position would not mean the same batches",
                             hint="resume with the same global batch (--nproc × train.batch_size) and dataset")
    if m.get("ranks", 1) != W and job.net.state:
        job.warn(f"the checkpoint was trained on {m.get('ranks', 1)} rank(s), this run has {W}: the BN "
                 f"batch statistics are now over {job.net.batch} examples per rank")
    if m.get("fp8", "off") != cfg.fp8.value:
        raise TrainError(f"--resume: the checkpoint was trained with fp8 {m.get('fp8', 'off')}, this "
                         f"recipe has fp8 {cfg.fp8.value}", hint="resume with the recipe the run was started with")
    for key, now_ in (("seed", cfg.seed), ("shuffle", job.opts.shuffle)):
        if m.get(key) != now_:
            job.warn(f"the checkpoint used {key}={m.get(key)}, this run {key}={now_}: "
                     f"the resumed run will not repeat the uninterrupted one")


def _optimizer_names(job: TrainJob) -> str:
    return "+".join(sorted({o.name for o in job.abi.optimizers.values()}))


def _announce(job: TrainJob, backend: str, ds, bpe: int, total: int):
    cfg, net, W = job.cfg, job.net, job.world.size
    if cfg.warmup_epochs and schedule_name(cfg) == "constant":
        job.warn("warmup_epochs is ignored with a constant lr (as the reference); "
                 "set cosine_decay or exp_lr_decay_rate")
    job.log(f"{net.spec.name}: {net.total_params:,} parameters, batch {net.batch}, {bpe} steps/epoch "
            f"× {cfg.epochs} epochs ({total:,} steps); {_optimizer_names(job)}, lr {cfg.learning_rate:g} "
            f"{schedule_name(cfg)}; dataset {ds.name} ({len(ds.x_train):,} train, "
            f"{len(ds.x_val):,} val); backend {backend}; run dir {job.out}")
    if W > 1:
        job.log(f"data-parallel: {W} ranks × batch {net.batch} = global batch {job.gbatch} per step "
                f"(train.batch_size is per rank; change it with --set train.batch_size=…); gradients "
                f"summed by MPI all-reduce, BN statistics per rank, averaged at each eval and checkpoint")


def _resumed_start(job: TrainJob, resumed) -> Start:
    m = resumed.meta
    s = Start(resumed.params, resumed.opt, resumed.state, resumed.regions, int(m.get("swa_n", 0)),
              int(m["step"]), int(m["epoch"]), int(m["batch"]), m.get("loss"))
    job.log(f"resuming {job.ckpt_path} at step {s.step} (epoch {s.epoch + 1}, batch {s.batch})")
    return s


def _initial_start(job: TrainJob) -> Start:
    net, cfg, init = job.net, job.cfg, job.opts.init
    params, state = init_tensors(net, cfg.seed)
    # the reference's order (training.md §1): bootstrap, head prior, detector prior
    for note in (apply_bootstrap(params, state, net, cfg) + apply_head_prior(params, net, cfg)
                 + apply_det_prior(params, net, cfg)):
        job.log(note)
    if init is not None:
        got = load_init(Path(init), net)
        params = got.params
        if got.state is not None:
            state = got.state
        elif net.state:
            job.log(f"note: {init} has no BN statistics; they start at mean 0, variance 1")
        job.log(f"initialized from {init}: {got.what}")
    return Start(params, job.abi.initial_opt(), state, {})


def _compiling(job: TrainJob, backend: str):
    """While iree-compile runs: a spinner with the elapsed time on a terminal (transient), else
    one plain line, so a cold compile of a deep net (minutes) is not mistaken for a hang."""
    what = f"compiling {job.net.spec.name} for {backend} (iree-compile)"
    if job.console.quiet:
        return contextlib.nullcontext()
    if not job.console.is_terminal:
        job.log(f"{what}...")
        return contextlib.nullcontext()
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    return Progress(SpinnerColumn(), TextColumn(what), TimeElapsedColumn(), console=job.console, transient=True)


def _load_module(job: TrainJob, train: list[Pending], fwd: Pending, t0: float, backend: str) -> Module:
    """The training functions' module(s) once their compiles are done (the spinner while they
    are not), @train_early's module (Abi.halves) beside the first, @forward's loaded at the
    first eval."""
    if not all(p.done() for p in train):
        with _compiling(job, backend):
            for p in train:
                p.wait()
    cs = [p.result() for p in train]
    what = "cached" if all(c.cached for c in cs) else "compiled"
    job.log(f"{what} {'module' if len(cs) == 1 else f'{len(cs)} modules'} in {time.time() - t0:.1f}s: "
            + ", ".join(str(c.path) for c in cs))
    return training_module([c.path for c in cs], backend, _device(job.world, backend), lambda: fwd.result().path)


def _device(world, backend: str) -> str | None:
    """This rank's device of --devices (LMC_DEVICES, one per local rank), else the default."""
    devs = [d for d in os.environ.get("LMC_DEVICES", "").split(",") if d]
    if not devs:
        return None
    if backend == "llvm-cpu":
        raise TrainError("--devices names GPU devices; on llvm-cpu the ranks share the machine's cores",
                         hint="drop --devices, or train with --backend cuda/rocm")
    if world.local_rank >= len(devs):
        raise TrainError(f"--devices {','.join(devs)}: {len(devs)} device(s) for {world.local_size} ranks on this machine",
                         hint="name one device per rank")
    return devs[world.local_rank]


def open_metrics(plan: TrainPlan, start: Start):
    """metrics.jsonl (rank 0; the others log nothing): a new run's header (and its vocabulary
    file), or a resumed run's `resume` record after the lines it keeps."""
    net, cfg, opts, W = plan.net, plan.cfg, plan.opts, plan.world.size
    metrics = (MetricsLog(plan.out / METRICS, start.step if plan.resumed is not None else None,
                          opts.tensorboard) if plan.world.rank == 0 else NoMetrics())
    # data-parallel: which process is which rank (`lmc train --nproc` names a dead one by it)
    dp = {"pids": plan.world.allgather(os.getpid())} if W > 1 else {}
    if plan.resumed is not None:
        metrics.write(kind="resume", time=now(), step=start.step, epoch=start.epoch + 1, batch=start.batch, **dp)
        if plan.world.rank == 0:
            _note_resume(plan, start)
        return metrics
    metrics.write(kind="header", time=now(), spec=net.spec.file, name=net.spec.name, **dp,
                  net_hash=net_hash(net), total_params=net.total_params, batch_size=net.batch,
                  global_batch=plan.gbatch,
                  steps_per_epoch=plan.bpe, epochs=cfg.epochs, optimizer=_optimizer_names(plan), ranks=W,
                  schedule=schedule_name(cfg), learning_rate=cfg.learning_rate, seed=cfg.seed,
                  shuffle=opts.shuffle, dataset=plan.ds.name, n_train=len(plan.ds.x_train),
                  n_val=len(plan.ds.x_val), backend=plan.backend)
    if plan.ds.vocab is not None and plan.world.rank == 0:
        body = json.dumps({"vocab": "char", "chars": list(plan.ds.vocab)}, ensure_ascii=False)
        atomic_write(plan.out / VOCAB_FILE, lambda f: f.write(body.encode("utf-8")))
    if plan.world.rank == 0:
        write_run_files(plan)
    return metrics


def _note_resume(plan: TrainPlan, start: Start) -> None:
    """A resumed run's spec (same tensors; another epoch count or lr is allowed) becomes
    RUN/spec.yaml, and run.json lists the resume."""
    text = resolved_yaml(plan.net.spec)
    if text != saved_spec(plan.out):
        atomic_write(plan.out / SPEC_FILE, lambda f: f.write(text.encode("utf-8")))
    info = read_run_info(plan.out)
    if info is not None:
        info.setdefault("resumes", []).append({"time": now(), "step": start.step, **plan.provenance})
        body = json.dumps(info, indent=2, ensure_ascii=False) + "\n"
        atomic_write(plan.out / RUN_FILE, lambda f: f.write(body.encode("utf-8")))


def write_run_files(plan: TrainPlan) -> None:
    """RUN/spec.yaml (the spec as trained) and RUN/run.json (how: lmc/run/rundir.py)."""
    net, ds = plan.net, plan.ds
    spec_text = resolved_yaml(net.spec)
    atomic_write(plan.out / SPEC_FILE, lambda f: f.write(spec_text.encode("utf-8")))
    path = plan.opts.data if plan.opts.data is not None else net.spec.dataset_path
    info = {"format": RUN_FORMAT, "version": 1, "name": net.spec.name, "created": now(), **plan.provenance,
            "net_hash": net_hash(net), "ranks": plan.world.size,
            "dataset": {"kind": net.spec.dataset.value if net.spec.dataset is not None else None,
                        "name": ds.name, "path": None if path is None else str(path),
                        "n_train": len(ds.x_train), "n_val": len(ds.x_val),
                        "label_format": ds.label_format, "vocab": ds.vocab}}
    body = json.dumps(info, indent=2, ensure_ascii=False) + "\n"
    atomic_write(plan.out / RUN_FILE, lambda f: f.write(body.encode("utf-8")))
