"""lmc's Python API: the commands' stages as functions (docs/api.md).

    import lmc
    summary = lmc.train("specs/digits_mlp.yaml", epochs=3, out="runs/m")   # --set train.epochs=3
    m = lmc.load("runs/m")                  # the run's spec.yaml and newest checkpoint
    m.predict(x)                            # @forward outputs of an array [N, *input]
    m.predict(["a.png", "imgs/"])           # lmc predict's results, one dict per input
    m.evaluate()                            # lmc eval: the validation scores
    m.export("onnx", "m.onnx")              # lmc export

Each call runs the same stage functions as its command (`lmc train`, `lmc predict`, `lmc eval`),
so a result here is the command's.  Errors are LmcError (the commands print them as `error:`)."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

from lmc.check import load_net
from lmc.core.errors import LmcError
from lmc.evaluate.checkpoint import evaluate_checkpoint
from lmc.evaluate.predict import load_predictor, predict as run_predict
from lmc.export.run import export as run_export
from lmc.lower.options import LowerOptions
from lmc.run.rundir import require_init, spec_file
from lmc.spec.config import TRAIN_FIELDS
from lmc.train.options import TrainOptions
from lmc.train.trainer import train as run_training

__all__ = ["load", "train", "Model", "overrides"]


def overrides(fields: dict) -> list[str]:
    """Keyword overrides → `--set` items: a recipe field by its name (`epochs=3` →
    train.epochs=3), any other field by its dotted path, `__` standing for a dot
    (`layers__0__dense__fan_out=64`)."""
    out = []
    for k, v in fields.items():
        key = k.replace("__", ".")
        if "." not in key and key in TRAIN_FIELDS:
            key = "train." + key
        out.append(f"{key}={json.dumps(v) if not isinstance(v, str) else v}")
    return out


def train(spec, *, out=None, max_steps=None, init=None, resume=False, overwrite=False, backend=None, chip=None,
          data=None, sets=(), verbose=True, **fields):
    """`lmc train SPEC`: `fields` are overrides (see `overrides`), `sets` more `--set` items;
    returns the run's Summary (.out is the run directory: pass it to `load`)."""
    from rich.console import Console
    if "steps" in fields:      # `lmc train --steps` is `--max-steps` now: the same here
        raise LmcError("lmc.train(steps=N) is now max_steps=N (stop when the global step reaches N)")
    net = load_net(spec_file(spec), list(sets) + overrides(fields))
    opts = TrainOptions(backend=backend, chip=chip, data=None if data is None else Path(data),
                        out=None if out is None else Path(out), max_steps=max_steps,
                        init=None if init is None else require_init(None, init), resume=resume,
                        overwrite=overwrite, lower_options=LowerOptions.from_env())
    return run_training(net, opts, Console(stderr=True, highlight=False, quiet=not verbose))


class Model:
    """A trained net: its spec (TypedNet) and checkpoint; the compiled @forward is built on the
    first predict."""

    def __init__(self, net, init: Path, backend=None, chip=None, labels=None, options=None):
        self.net, self.init, self.backend, self.chip, self.labels = net, Path(init), backend, chip, labels
        self.options = options or LowerOptions.from_env()
        self._pred = None

    def __repr__(self):
        return f"lmc.Model({self.net.spec.name!r}, init={str(self.init)!r})"

    @property
    def predictor(self):
        if self._pred is None:
            self._pred = load_predictor(self.net, self.init, self.backend, self.chip, self.options, self.labels)
        return self._pred

    def predict(self, x, *, top_k: int = 5, out=None, tokens: int = 200, temperature: float = 0.0, seed: int = 0):
        """An array [N, *input] (or one example): the @forward outputs, as they are.  A list of
        paths (images, folders, .npy/.npz) or, for a language model, prompts: lmc predict's
        results (one dict per input; masks, boxes and images written under `out`)."""
        import numpy as np
        if isinstance(x, np.ndarray):
            a = x[None] if tuple(x.shape) == tuple(self.net.input.dims[1:]) else x
            return self.predictor.forward(a)
        items = [x] if isinstance(x, (str, Path)) else list(x)
        return run_predict(self.predictor, items, out, top_k, tokens, temperature, seed)

    def evaluate(self, data=None, region: str = "auto", log=None):
        """`lmc eval`: the validation split's scores (an EvalResult or the metrics' result;
        .as_dict() for numbers)."""
        return evaluate_checkpoint(self.net, self.init, None if data is None else Path(data), self.backend,
                                   self.chip, log or (lambda t: None), region, 0, self.options)

    def export(self, fmt: str, path):
        """`lmc export --format FMT -o PATH` (onnx, vmfb, safetensors)."""
        return run_export(self.net, self.init, fmt, Path(path), backend=self.backend, chip=self.chip)


class _TrainPackage(types.ModuleType):
    """`lmc.train` is also the training stage's package (lmc/train): calling it is `train` above,
    so `lmc.train(spec, …)` works whichever of the two `import lmc` resolved first."""

    def __call__(self, spec, **kw):
        return train(spec, **kw)


sys.modules["lmc.train"].__class__ = _TrainPackage


def load(run_or_spec, init=None, *, sets=(), batch=None, backend=None, chip=None, labels=None, **fields) -> Model:
    """A run directory (its spec.yaml and newest checkpoint; `init="RUN:best"` its best) or a
    spec with `init`; `batch` the compiled @forward's batch (default: the recipe's)."""
    net = load_net(spec_file(run_or_spec), list(sets) + overrides(fields), batch=batch)
    return Model(net, require_init(run_or_spec, init), backend, chip, labels)
