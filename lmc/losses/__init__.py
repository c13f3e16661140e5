"""The loss registry: one module per loss kind, each a `Loss` subclass that owns everything the
lowering, the trainer and the tests need to know about it — the label tensor it takes given the
net's output, its template context, the runtime hyperparameters it reads (they become entries
of the hp vector), what it counts as `correct`, the labels the data pipeline must hand it, and a
float64 reference written against an array namespace `xp` (NumPy or jax.numpy, like
`Prim.reference`).  Its template `templates/losses/<name>.mlir.j2` holds one function:

    @<name>_<sig>(logits, labels, hp...) -> (loss: tensor<f32>, dlogits, correct: tensor<f32>)

`loss` is the batch mean, `dlogits` its gradient (hand-derived), `correct` the metric count.
A loss kind that parses (config.LossKind) but has no module here is refused by `lmc render`
and `lmc train` as not implemented yet.  Modules are discovered automatically."""
from __future__ import annotations

import importlib
import pkgutil
from typing import ClassVar

import numpy as np

from ..errors import NotImplementedKind, SpecError
from ..types import TensorType

LOSSES: dict[str, type] = {}


def register(name: str):
    def deco(cls):
        if name in LOSSES:
            raise RuntimeError(f"loss {name!r} registered twice")
        cls.name = name
        LOSSES[name] = cls
        return cls
    return deco


class Loss:
    name: ClassVar[str]
    # runtime hyperparameters the template takes after (logits, labels), in this order; each is
    # a TrainConfig field name (its value is read by hp_values) and an entry of the hp vector
    hp: ClassVar[tuple[str, ...]] = ()
    # the logits' rank this loss needs, and the hint when the net ends otherwise
    logits_rank: ClassVar[int] = 2
    rank_hint: ClassVar[str] = "end the net with global_avg_pool or flatten, then dense"
    # the whole-step oracle's recipes for it: [(train fields, [(variant, runtime overrides)])]
    examples: ClassVar[list] = []

    def __init__(self, kind):
        self.kind = kind              # the config.LossKind (carries weights / gamma)

    def check_output(self, out: TensorType) -> str | None:
        """Why a net with this output cannot use the loss (None when it can)."""
        if out.rank != self.logits_rank:
            return (f"{self.kind} needs logits [batch, classes], but the net's output is {list(out.dims)}")
        return None

    def refused(self, cfg) -> list[str]:
        """Recipe fields that modify this loss but are not implemented yet (refused, never
        ignored): `lmc render` and `lmc train` stop with `not implemented yet: <field>`."""
        return []

    def labels(self, out: TensorType) -> TensorType:
        """The label tensor of @train_step for logits of type `out`."""
        raise NotImplementedError

    def context(self, logits: TensorType, labels: TensorType) -> dict:
        """Template variables (every number computed here, never in the template)."""
        return {}

    def hp_values(self, cfg) -> dict[str, float]:
        return {h: float(getattr(cfg, h)) for h in self.hp}

    def fit_labels(self, y: np.ndarray, num_classes: int, cfg) -> np.ndarray:
        """Labels as the data pipeline delivers them (int class ids [N]) → this loss's labels."""
        raise NotImplementedError

    def draw_labels(self, rng, labels: TensorType, logits: TensorType) -> np.ndarray:
        """Random labels of the right kind (tests, benchmarks)."""
        raise NotImplementedError

    @staticmethod
    def reference(xp, logits, labels, **hp):
        """The batch-mean loss in float64 (NumPy or jax.numpy)."""
        raise NotImplementedError

    @staticmethod
    def correct_reference(logits: np.ndarray, labels: np.ndarray) -> tuple[int, int]:
        """(count, ambiguous): the metric as the template counts it, in NumPy; `ambiguous`
        counts rows whose top two logits are so close that f32 rounding may reorder them."""
        raise NotImplementedError


def near_ties(z: np.ndarray) -> int:
    s = np.sort(z, axis=1)
    return int(np.sum(s[:, -1] - s[:, -2] < 1e-4 * (1 + np.abs(s[:, -1]))))


_loaded = False


def all_losses() -> dict[str, type]:
    global _loaded
    if not _loaded:
        _loaded = True
        for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if not m.name.startswith("_"):
                importlib.import_module(f"{__name__}.{m.name}")
    return dict(LOSSES)


def make_loss(kind) -> Loss:
    """The registered loss for a config.LossKind, or a clear refusal."""
    losses = all_losses()
    if kind.kind not in losses:
        raise NotImplementedKind(f"not implemented yet: loss {kind}",
                                 hint=f"lowered losses: {', '.join(sorted(losses))}")
    return losses[kind.kind](kind)


def check_output(kind, out_dims, loc=None) -> None:
    """The output-vs-loss rule for a registered loss (a SpecError at `loc`)."""
    losses = all_losses()
    if kind.kind in losses:
        why = losses[kind.kind](kind).check_output(TensorType(tuple(out_dims)))
        if why:
            raise SpecError(why, loc, hint=losses[kind.kind].rank_hint)
