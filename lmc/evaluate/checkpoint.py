"""`lmc eval`: a checkpoint's weights scored on the validation split."""
from __future__ import annotations

from pathlib import Path

from lmc.core.errors import EvalError, LmcError
from lmc.evaluate.score import EvalResult, evaluate, evaluate_swag
from lmc.evaluate.metrics import eval_format
from lmc.data.fit import load_data
from lmc.run.checkpoint import load_init, load_region, read_tensors
from lmc.compile import compile_module, resolve_backend
from lmc.data.batcher import TTA
from lmc.evaluate.recalibrate import recalibrate_bn
from lmc.lower.lowering import abi, lower
from lmc.lower.options import LowerOptions
from lmc.run.runtime import Module


EVAL_REGIONS = ("auto", "live", "ema", "swa", "swag")


def evaluate_checkpoint(net, init: Path, data: Path | None, backend: str | None, chip: str | None, log,
                        region: str = "auto", recalibrate: int = 0,
                        options: LowerOptions = LowerOptions()) -> EvalResult:
    """`lmc eval`: score a checkpoint's parameters and BN statistics on the validation split.
    region: live (the trained weights), ema, swa, swag (samples around the SWA mean, as the
    run's final eval), or auto — the weights the run's own eval scored at that checkpoint.
    recalibrate N > 0: the BN statistics re-estimated from N training batches first
    (lmc/evaluate/recalibrate.py).  options: the lowering's spellings — those `lmc train` used,
    for the cache hit below."""
    if region not in EVAL_REGIONS:
        raise EvalError(f"--region {region!r}: expected one of {', '.join(EVAL_REGIONS)}")
    if recalibrate:
        if recalibrate < 0:
            raise EvalError(f"--recalibrate must be at least 1 batch, got {recalibrate}")
        if not net.state:
            raise EvalError("--recalibrate: the net has no BN running statistics to re-estimate")
        if net.spec.train is None:
            raise EvalError("--recalibrate runs the train step in train mode: the spec needs its `train:` recipe")
    got = load_init(Path(init), net)
    if net.state and got.state is None and not recalibrate:
        raise EvalError(f"{init} has no BN running statistics, which eval needs for this net",
                         hint="score an lmc checkpoint (RUN_DIR/last.npz), or a file that includes them, "
                              "or re-estimate them with --recalibrate N (N training batches)")
    tensors, meta = read_tensors(Path(init)) if Path(init).suffix == ".npz" else (None, None)
    if region == "auto":
        region = (meta or {}).get("eval_region", "live")

    def part(r):
        return load_region(Path(init), net, r, tensors, meta)

    params = got.params
    if region in ("ema", "swa"):
        params = part(region)
    elif region == "swag":
        if net.spec.train is None:
            raise EvalError("--region swag draws swag_samples weight vectors: the spec needs its `train:` recipe")
        mean, sq, dev = part("swa"), part("swa_sq"), part("swag_dev")
        devs = [[d[i] for d in dev] for i in range(dev[0].shape[0])]
    seed = net.spec.train.seed if net.spec.train is not None else 0
    ds = load_data(net, data, seed)
    if meta is not None and meta.get("vocab") != ds.vocab:
        raise EvalError(f"{init} was trained on another character vocabulary than this text's "
                         f"(token ids would mean other characters)", hint="score it on the corpus it was trained on")
    b = resolve_backend(backend)
    text = None
    if net.spec.train is not None:
        # the whole module, as `lmc train` compiled it: a cache hit after training
        try:
            text = lower(net, backend=b, options=options)
        except LmcError:
            text = None
    c = compile_module(text or lower(net, "forward", backend=b, options=options), None, b, chip, options=options)
    log(f"{'cached' if c.cached else 'compiled'} module for {b} (batch {net.batch}); scoring {len(ds.x_val):,} "
        f"validation examples of {ds.name} with {init} ({got.what}; {region} weights)")
    mod = Module(c.path, b)
    if recalibrate:
        if text is None:
            raise EvalError("--recalibrate needs the spec's train step, which does not lower for this recipe")
        S = recalibrate_bn(mod, net, got.params, recalibrate, ds, log)
    else:
        S = [mod.upload(a) for a in (got.state or [])]
    args = (ds.x_val, ds.y_val, net.batch, net.num_classes or 1)
    if region == "swag":
        cfg = net.spec.train
        return evaluate_swag(mod, mean, sq, devs, S, cfg.swag_samples, cfg.seed, *args)
    try:                                   # the recipe's loss decides how float targets are scored
        eloss = abi(net).loss if net.spec.train is not None else None
    except LmcError:
        eloss = None
    tta = TTA(ds, net.spec.train) if net.spec.train is not None and net.spec.train.use_tta else None
    r = evaluate(mod, [mod.upload(a) for a in params], S, *args, label_format=eval_format(ds.label_format, eloss),
                 loss=eloss, tta=tta)
    r.region = region
    return r
