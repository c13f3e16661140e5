"""A trained classifier ready for the trust tools: a checkpoint's weights (the region the run
scored, as `lmc eval --region auto`) and BN statistics uploaded to a compiled module, and the
validation split it is judged on."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmc.core.errors import TrustError
from lmc.core.fields import did_you_mean
from lmc.compile import compile_module, resolve_backend
from lmc.data.fit import load_data
from lmc.evaluate.checkpoint import EVAL_REGIONS
from lmc.lower.lowering import lower
from lmc.lower.options import LowerOptions
from lmc.run.checkpoint import load_init, load_region, read_tensors
from lmc.run.runtime import Module


@dataclass
class Model:
    net: object
    module: object
    P: list              # device arrays, `lmc info --params` order
    S: list              # BN running statistics, device arrays
    params: list         # the same parameters on the host
    x: np.ndarray        # validation inputs (the first --limit of them)
    y: np.ndarray        # validation labels (class ids)
    region: str
    what: str            # the checkpoint, for the log line
    bounds: tuple        # (lo, hi): the data range, min and max over the training and validation inputs

    @property
    def batch(self) -> int:
        return self.net.batch

    @property
    def num_classes(self) -> int:
        return self.net.num_classes

    def logits(self, xb: np.ndarray) -> np.ndarray:
        """@forward of one full batch (host copy)."""
        return host(self.module.forward(*self.P, *self.S, np.ascontiguousarray(xb, np.float32)))

    def input_grad(self, xb: np.ndarray, labels: np.ndarray, hp: np.ndarray):
        """(loss, dL/dx) of one batch from @input_grad (the module must have been built with it)."""
        loss, dx = self.module.input_grad(*self.P, *self.S, np.ascontiguousarray(xb, np.float32), labels, hp)
        return float(host(loss)), host(dx)


def host(a) -> np.ndarray:
    """A fresh host copy of a device array (a later call may reuse the buffer)."""
    return np.array(a.to_host() if hasattr(a, "to_host") else a, copy=True)


def check_classifier(net) -> None:
    """The trust tools judge top-1 of a classifier: the net must end in [batch, classes] logits."""
    if net.num_classes is None:
        raise TrustError(f"{net.spec.file}: the net's output is {list(net.output.type.dims)}, not classifier "
                         f"logits [batch, classes]", hint="the trust tools score top-1 of a classification head")


def load_weights(net, init: Path, region: str = "auto"):
    """(params, state, region, description) of a checkpoint for `net`, refused when it is of
    another spec (load_init names the first tensor that differs) or lacks BN statistics."""
    init = Path(init)
    if region not in EVAL_REGIONS or region == "swag":
        raise TrustError(f"--region {region!r}: expected one of auto, live, ema, swa"
                         + did_you_mean(region, ("auto", "live", "ema", "swa")))
    got = load_init(init, net)
    if net.state and got.state is None:
        raise TrustError(f"{init} has no BN running statistics, which the forward needs for this net",
                         hint="use an lmc checkpoint (RUN_DIR/last.npz), or a file that includes them")
    tensors, meta = read_tensors(init) if init.suffix == ".npz" else (None, None)
    if region == "auto":
        region = (meta or {}).get("eval_region", "live")
        if region == "swag":            # a SWAG run's final eval averages samples; score its mean
            region = "swa"
    params = got.params if region == "live" else load_region(init, net, region, tensors, meta)
    state = got.state or []
    return params, state, region, got.what


def load_model(net, init: Path, data, backend, chip, log, functions: str = "forward", region: str = "auto",
               limit: int | None = None, options: LowerOptions = LowerOptions()) -> Model:
    """Compile `functions` of `net` (forward, or input_grad: @input_grad + @forward) lowered with
    `options`, upload a checkpoint's weights, load the validation split (its first `limit`
    examples)."""
    check_classifier(net)
    if limit is not None and limit < 1:
        raise TrustError(f"--limit must be at least 1, got {limit}")
    if functions == "input_grad" and net.spec.train is None:
        raise TrustError(f"{net.spec.file}: the attack differentiates the recipe's loss, but the spec has no `train:`")
    params, state, region, what = load_weights(net, init, region)
    seed = net.spec.train.seed if net.spec.train is not None else 0
    ds = load_data(net, data, seed)
    x, y = ds.x_val, ds.y_val
    if limit is not None:
        x, y = x[:limit], y[:limit]
    if len(x) == 0:
        raise TrustError(f"{ds.name} has no validation examples to judge the net on")
    b = resolve_backend(backend)
    # the trust tools judge the per-example eval function: BN with the running statistics, whatever
    # train.running_bn says (batch statistics would make a row's output depend on its batch-mates)
    c = compile_module(lower(net, functions, backend=b, options=options, batch_stats=False), None, b, chip,
                       options=options)
    log(f"{'cached' if c.cached else 'compiled'} module for {b} (batch {net.batch}); {len(x):,} validation "
        f"examples of {ds.name}; {init} ({what}; {region} weights)")
    mod = Module(c.path, b)
    bounds = (float(min(ds.x_train.min(), ds.x_val.min())), float(max(ds.x_train.max(), ds.x_val.max())))
    return Model(net, mod, [mod.upload(a) for a in params], [mod.upload(a) for a in state], params,
                 np.asarray(x, np.float32), np.asarray(y), region, f"{init}", bounds)


def batches(n: int, batch: int):
    """(start, stop) of each static-size batch over n examples; the last may be short (padded)."""
    for s in range(0, n, batch):
        yield s, min(s + batch, n)


def pad(a: np.ndarray, batch: int) -> np.ndarray:
    """Zero-pad the leading dimension to `batch` rows (eval_batches' padding: never scored)."""
    if len(a) == batch:
        return a
    return np.concatenate([a, np.zeros((batch - len(a),) + a.shape[1:], a.dtype)])
