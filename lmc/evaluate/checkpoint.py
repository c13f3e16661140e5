"""`lmc eval`: a checkpoint's weights scored on the validation split."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from lmc.core.errors import EvalError, LmcError
from lmc.core.fields import did_you_mean
from lmc.evaluate.score import EvalResult, evaluate, evaluate_swag
from lmc.evaluate.metrics import eval_format
from lmc.data.fit import load_data
from lmc.run.checkpoint import load_init, load_region, read_tensors
from lmc.compile import compile_module, resolve_backend
from lmc.data.batcher import TTA
from lmc.evaluate.recalibrate import recalibrate_bn
from lmc.graph.init import init_tensors
from lmc.lower.lowering import abi, eval_batch_stats, lower, lower_train
from lmc.lower.options import LowerOptions
from lmc.run.runtime import Module, check_device, training_module


EVAL_REGIONS = ("auto", "live", "ema", "swa", "swag")


def evaluate_checkpoint(net, init: Path, data: Path | None, backend: str | None, chip: str | None, log,
                        region: str = "auto", recalibrate: int = 0,
                        options: LowerOptions = LowerOptions(), batch_stats: bool = False,
                        limit: int | None = None) -> EvalResult:
    """`lmc eval`: score a checkpoint's parameters and BN statistics on the validation split.
    region: live (the trained weights), ema, swa, swag (samples around the SWA mean, as the
    run's final eval), or auto — the weights the run's own eval scored at that checkpoint.
    recalibrate N > 0: the BN statistics re-estimated from N training batches first
    (lmc/evaluate/recalibrate.py).  options: the lowering's spellings — those `lmc train` used,
    for the cache hit below.  batch_stats: BN normalised with each eval batch's own statistics
    whatever train.running_bn says (the Lean kit's LEAN_MLIR_EVAL_BATCHSTATS diagnostic: how far
    the running statistics are from the batches'); with running_bn false that is the recipe's eval.
    limit: score only the first N validation examples."""
    _check_args(net, region, recalibrate, batch_stats)
    if limit is not None and limit < 1:
        raise EvalError(f"--limit must be at least 1, got {limit}")
    b = resolve_backend(backend)
    check_device(b)                   # before reading weights or data, and before compiling
    stats = batch_stats or eval_batch_stats(net)
    w = _weights(net, Path(init), region, recalibrate, stats)
    seed = net.spec.train.seed if net.spec.train is not None else 0
    ds = load_data(net, data, seed)
    if limit is not None:
        ds = dataclasses.replace(ds, x_val=ds.x_val[:limit], y_val=ds.y_val[:limit])
    if w.meta is not None and w.meta.get("vocab") != ds.vocab:
        raise EvalError(f"{init} was trained on another character vocabulary than this text's "
                         f"(token ids would mean other characters)", hint="score it on the corpus it was trained on")
    # the @forward module `lmc train` compiled beside its train module: a cache hit after training
    c = compile_module(lower(net, "forward", backend=b, options=options, batch_stats=stats), None, b, chip,
                       options=options)
    log(f"{'cached' if c.cached else 'compiled'} module for {b} (batch {net.batch}); scoring {len(ds.x_val):,} "
        f"validation examples of {ds.name} with {init} ({w.got.what}; {w.region} weights)")
    a = _train_abi(net, options.split)
    if recalibrate:                 # the train step too (its BN statistics), as `lmc train` compiled it
        texts = _train_modules(net, a, b, options)
        if texts is None:
            raise EvalError("--recalibrate needs the spec's train step, which does not lower for this recipe")
        ts = [compile_module(text, None, b, chip, options=options).path for text in texts]
        mod = training_module(ts, b, forward=lambda: c.path)
        S = recalibrate_bn(mod, net, a, w.got.params, recalibrate, ds, log)
    else:
        mod = Module(c.path, b)
        state = w.got.state if w.got.state is not None else init_tensors(net, 0)[1] if stats else []
        S = [mod.upload(x) for x in state]     # under batch statistics, arguments @forward does not read
    args = (ds.x_val, ds.y_val, net.batch, net.num_classes or 1)
    if w.region == "swag":
        cfg = net.spec.train
        return evaluate_swag(mod, w.mean, w.sq, w.devs, S, cfg.swag_samples, cfg.seed, *args, batch_stats=stats)
    eloss = a.loss if a is not None else None     # the recipe's loss decides how float targets are scored
    tta = TTA(ds, net.spec.train) if net.spec.train is not None and net.spec.train.use_tta else None
    r = evaluate(mod, [mod.upload(x) for x in w.params], S, *args, label_format=eval_format(ds.label_format, eloss),
                 loss=eloss, tta=tta, batch_stats=stats)
    r.region = w.region
    return r


def _check_args(net, region: str, recalibrate: int, batch_stats: bool = False) -> None:
    if region not in EVAL_REGIONS:
        raise EvalError(f"--region {region!r}: expected one of {', '.join(EVAL_REGIONS)}{did_you_mean(region, EVAL_REGIONS)}")
    if batch_stats and not net.state:
        raise EvalError("--batch-stats: the net has no batch norm, so there are no batch statistics to evaluate with")
    if recalibrate and batch_stats:
        raise EvalError("--batch-stats evaluates with each batch's own statistics: --recalibrate's running "
                        "statistics would not be read")
    if recalibrate and eval_batch_stats(net):
        raise EvalError("--recalibrate: this recipe evaluates with each batch's own BN statistics "
                        "(train.running_bn false), so re-estimated running statistics would not be read",
                        hint="set train.running_bn: true (--set running_bn=true) to score with running statistics")
    if recalibrate:
        if recalibrate < 0:
            raise EvalError(f"--recalibrate must be at least 1 batch, got {recalibrate}")
        if not net.state:
            raise EvalError("--recalibrate: the net has no BN running statistics to re-estimate")
        if net.spec.train is None:
            raise EvalError("--recalibrate runs the train step in train mode: the spec needs its `train:` recipe")


@dataclass
class _Weights:
    got: object                 # lmc.run.checkpoint's loaded --init (params, state, what)
    meta: dict | None
    region: str
    params: list
    mean: list | None = None    # swag: the SWA mean, mean of squares, the deviations
    sq: list | None = None
    devs: list | None = None


def _weights(net, init: Path, region: str, recalibrate: int, batch_stats: bool = False) -> _Weights:
    """The checkpoint's weights of `region` (auto: the region the run's own eval scored)."""
    got = load_init(init, net)
    if net.state and got.state is None and not recalibrate and not batch_stats:
        raise EvalError(f"{init} has no BN running statistics, which eval needs for this net",
                         hint="score an lmc checkpoint (RUN_DIR/last.npz), or a file that includes them, "
                              "or re-estimate them with --recalibrate N (N training batches)")
    tensors, meta = read_tensors(init) if init.suffix == ".npz" else (None, None)
    if region == "auto":
        region = (meta or {}).get("eval_region", "live")
    w = _Weights(got, meta, region, got.params)

    def part(r):
        return load_region(init, net, r, tensors, meta)

    if region in ("ema", "swa"):
        w.params = part(region)
    elif region == "swag":
        if net.spec.train is None:
            raise EvalError("--region swag draws swag_samples weight vectors: the spec needs its `train:` recipe")
        w.mean, w.sq, dev = part("swa"), part("swa_sq"), part("swag_dev")
        w.devs = [[d[i] for d in dev] for i in range(dev[0].shape[0])]
    return w


def _train_abi(net, split: str = "off"):
    """The recipe's ABI (split: LowerOptions.split, the halves `lmc train` ran), None where it
    has no training functions that build."""
    if net.spec.train is None:
        return None
    try:
        return abi(net, halves=split)
    except LmcError:
        return None


def _train_modules(net, a, backend: str, options: LowerOptions) -> list[str] | None:
    """The training functions' module(s) as `lmc train` compiled them (cache hits after
    training), None where they do not lower for this recipe."""
    if a is None:
        return None
    try:
        return lower_train(net, a, backend, options=options)
    except LmcError:
        return None
