"""The loss registry: one module per loss kind of the seed's LossKind, each a `Loss` subclass
that owns everything the recipe checks, the lowering, the trainer and the tests need to know
about it — its parameters (`{gamma: 2}`), the label format it consumes, which recipe switches it
combines with (`rules`), the net output it needs (`check_output`), the label tensor it takes
given the net's output, its template context, the runtime hyperparameters it reads (they become
entries of the hp vector), what it counts as `correct`, the labels the data pipeline must hand
it (and, for a loss whose labels depend on the predictions, the host-side step that makes them:
`prepare_labels`), and a float64 reference written against an array namespace `xp` (NumPy or jax.numpy, like
`Prim.reference`; a term the hand-derived gradient treats as a constant is wrapped in
`detach(xp, v)`, which is `xp.stop_gradient` where the namespace has one — the test oracle's
jax.numpy gets it from tests/conftest.py, so lmc itself never imports JAX).  Its template `templates/losses/<name>.mlir.j2` holds one function:

    @<name>_<sig>(logits, labels, hp...) -> (loss: tensor<f32>, dlogits, correct: tensor<f32>)

`loss` is the batch mean, `dlogits` its gradient (hand-derived), `correct` the metric count.

Declared and lowered: every kind the seed names has a module, so parsing and the recipe rules
(spec.config.LossKind, the check stage's recipe and net rules) ask the loss itself.  A kind is
*lowered* exactly when its template `templates/losses/<name>.mlir.j2` exists (one rule, read at
registration: `Loss.lowered`); a declared kind without one is refused by `lmc render` and
`lmc train` as not implemented yet (`make_loss`).  Modules are discovered automatically; no
loss name appears outside its own module (config.effective_loss, the seed's derivation, aside)."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np

from lmc.core.errors import DataError, NotImplementedKind, SpecError
from lmc.core.fields import coerce, did_you_mean, show
from lmc.core.registry import discover, registrar
from lmc.core.render import TEMPLATES
from lmc.core.types import TensorType

# The label formats a loss consumes (and a dataset delivers: its lmc/data/kinds module's label_format).
CLASS = "class ids"         # int class index per sample
SOFT = "soft"               # f32 target distribution per sample (rows sum to 1)
MULTI_HOT = "multi-hot"     # f32 0/1 per class and sample
MASK = "mask"               # int class index per pixel
BOXES = "boxes"             # YOLO box targets
FLOAT = "float"             # f32 regression target of the output's shape

LOSSES: dict[str, type] = {}


def suggest_loss(name: str) -> str | None:
    """The loss kind closest to an unknown `name`: by spelling, or by what other libraries call it."""
    losses = all_losses()
    close = difflib.get_close_matches(name, list(losses), 1, 0.6)
    if close:
        return close[0]
    return next((k for k, cls in losses.items() if name in cls.known_as), None)


def _derive(cls):
    cls.lowered = (TEMPLATES / "losses" / f"{cls.name}.mlir.j2").is_file()
    cls.is_seg = cls.label_format == MASK     # the seed's LossKind.isSeg


register = registrar(LOSSES, "loss", on_register=_derive)


@dataclass(frozen=True)
class Param:
    """A loss parameter, written `loss_kind: {<loss>: {<name>: value}}`."""
    name: str
    type: Any                                   # a fields.coerce type hint
    default: Any = None
    example: str | None = None                  # set: required, and the missing-error shows this
    check: Callable[[Any], str | None] | None = None   # value → why it is invalid (None: fine)


class Rule(NamedTuple):
    """A recipe combination a loss refuses: the message, the field it is reported at, the other
    fields of the rule (named when an option set them) and a hint."""
    message: str
    field: str
    also: tuple[str, ...] = ()
    hint: str | None = None


class Loss:
    name: ClassVar[str]
    lowered: ClassVar[bool]           # set by register: the template exists
    is_seg: ClassVar[bool]            # set by register: the label format is MASK
    # the seed's LossKind order (the order `expected one of ...` lists the kinds)
    order: ClassVar[int]
    # the seed's default loss_kind (exactly one kind says so)
    default: ClassVar[bool] = False
    params: ClassVar[tuple[Param, ...]] = ()
    label_format: ClassVar[str] = CLASS
    # use_focal modifies this loss (it is not refused by the recipe rules)
    accepts_focal: ClassVar[bool] = False
    # a single detection grid head [batch, channels, gH, gW]: the spec's det_stride is checked against it
    grid_head: ClassVar[bool] = False
    # for a loss of the same label format under use_focal: what to write instead
    instead_of_focal: ClassVar[str | None] = None
    # a dataset delivering this loss's label format, given another loss: "dataset <ds> <this>, not <loss>"
    dataset_need: ClassVar[str | None] = None
    # runtime hyperparameters the template takes after (logits, labels), in this order; each is
    # a TrainConfig field name (its value is read by hp_values) and an entry of the hp vector
    hp: ClassVar[tuple[str, ...]] = ()
    # the logits' rank this loss needs (None: any), their layout as the error says it, and the
    # hint when the net ends otherwise
    logits_rank: ClassVar[int | None] = 2
    logits_layout: ClassVar[str] = "logits [batch, classes]"
    rank_hint: ClassVar[str | None] = "end the net with global_avg_pool or flatten, then dense"
    # the whole-step oracle's recipes for it: [(train fields, [(variant, runtime overrides)])]
    examples: ClassVar[list] = []
    # the template's `correct` is a count of right predictions (False: a regression, always 0)
    counts_correct: ClassVar[bool] = True
    # the batch's loss is the mean of per-example terms of fixed weight, so the mean of equal
    # shards' gradients is the batch's gradient (data-parallel ranks, lmc/run/dist.py); False for
    # a ratio over the batch (weighted CE's Σw·CE/Σw) or a batch-wide statistic (soft Dice)
    batch_mean: ClassVar[bool] = True
    # the oracle's net for the loss × optimizer grid, (layers, input dims) before the head
    # (None: the optimizer's grid net)
    oracle_net: ClassVar[tuple | None] = None
    # the oracle's default run crosses this loss's first example with every optimizer (the
    # classifier losses); other loss cases meet one optimizer each, the rest under -m slow
    oracle_grid: ClassVar[bool] = False
    # the step's labels need the net's current predictions (prepare_labels: DETR's matching);
    # the trainer then runs @forward on each batch and hands its outputs over
    host_labels: ClassVar[bool] = False
    # what other libraries call this loss: an unknown `loss_kind` of one of these names is
    # answered "did you mean '<this kind>'?" (not accepted: the kinds are the Lean kit's names)
    known_as: ClassVar[tuple[str, ...]] = ()

    @staticmethod
    def oracle_head(out: TensorType, nc: int) -> list | None:
        """The layers the oracle appends to a body of output `out` so the net ends as this loss
        needs, with `nc` classes (None: this loss cannot follow such a body): flatten, dense."""
        head = [("flatten", {})] if out.rank > 2 else []
        return head + [("dense", {"fan_in": out.size // out.dims[0], "fan_out": nc})]

    def __init__(self, kind, cfg=None):
        self.kind = kind              # the config.LossKind (carries the parameter values)
        self.cfg = cfg                # the recipe (TrainConfig) it is lowered for, where known:
                                      # structural switches of the loss (use_focal) are read here

    @classmethod
    def parse_params(cls, args: dict, where: str) -> tuple:
        """`{name: value}` from the YAML mapping → the parameter values in declaration order."""
        extra = set(args) - {p.name for p in cls.params}
        if extra:
            bad, names = sorted(map(str, extra))[0], [p.name for p in cls.params]
            raise SpecError(f"{where}: loss '{cls.name}' has no parameter {show(bad)}{did_you_mean(bad, names)}"
                            + (f" (parameters: {', '.join(names)})" if names else " (it takes none)"))
        values = []
        for p in cls.params:
            if p.name not in args:
                if p.example is not None:
                    raise SpecError(f"{where}: {cls.name} needs `{p.name}: {p.example}`")
                values.append(p.default)
                continue
            v = coerce(args[p.name], p.type, f"{where}.{p.name}")
            why = p.check(v) if p.check else None
            if why:
                raise SpecError(f"{where}.{p.name}: {why}")
            values.append(v)
        return tuple(values)

    @classmethod
    def describe(cls, values: tuple) -> str:
        """The kind as messages name it: `per_pixel_focal_ce(gamma=2.0)`, `class_ce`."""
        if not cls.params:
            return cls.name
        shown = (f"{p.name}={list(v) if isinstance(v, tuple) else v}" for p, v in zip(cls.params, values))
        return f"{cls.name}({', '.join(shown)})"

    def focal_rules(self, cfg) -> list[Rule]:
        """Under use_focal: focal modifies integer-label CE (and yolo's objectness); elsewhere it is
        refused, naming the losses it modifies and, where one exists, the kind to use instead."""
        if self.accepts_focal:
            return []
        takes = ", ".join(n for n, c in all_losses().items() if c.accepts_focal and c.label_format == CLASS)
        instead = next((c.instead_of_focal for c in all_losses().values()
                        if c.instead_of_focal and c.label_format == self.label_format), None)
        return [Rule(f"use_focal needs integer labels ({takes}), but the loss is {self.kind}"
                     + (f"; {instead}" if instead else ""), "use_focal")]

    def rules(self, cfg, soft_aug: bool) -> list[Rule]:
        """The recipe combinations this loss refuses (`soft_aug`: mixup, cutmix or knn-mixup is on)."""
        return []

    def check_output(self, out: TensorType) -> str | None:
        """Why a net with this output cannot use the loss (None when it can); `rank_hint` goes with it."""
        if self.logits_rank is not None and out.rank != self.logits_rank:
            return f"{self.kind} needs {self.logits_layout}, but the net's output is {list(out.dims)}"
        return None

    def check_classes(self, num_classes: int | None) -> str | None:
        """Why the loss's parameters do not fit a net of `num_classes` classes (None: they do)."""
        return None

    def refused(self, cfg) -> list[str]:
        """Recipe fields that modify this loss but are not implemented yet (refused, never
        ignored): `lmc render` and `lmc train` stop with `not implemented yet: <field>`."""
        return []

    def labels(self, out: TensorType) -> TensorType:
        """The label tensor of @train_step for logits of type `out`."""
        raise NotImplementedError(f"lmc bug: loss {self.name} has no label ABI")

    def context(self, logits: TensorType, labels: TensorType) -> dict:
        """Template variables (every number computed here, never in the template)."""
        return {}

    def hp_values(self, cfg) -> dict[str, float]:
        return {h: float(getattr(cfg, h)) for h in self.hp}

    def fit_labels(self, y: np.ndarray, num_classes: int, cfg) -> np.ndarray:
        """Labels as the data pipeline delivers them (int class ids [N]) → this loss's labels."""
        raise NotImplementedError

    def prepare_labels(self, y: np.ndarray, predict: Callable[[], np.ndarray]) -> np.ndarray:
        """The step's labels from the batch's fitted labels `y`, where `host_labels` says they
        depend on the predictions: `predict()` runs @forward on the batch (the same x the step
        takes) and returns the net's output.  The default: y as is."""
        return y

    def check_data(self, ds, labels: TensorType, fit) -> None:
        """Refuse a dataset whose labels, fitted (`fit`), are not the step's label tensor
        `labels` per example (e.g. masks at another resolution than the logits), or whose images
        the batcher would augment without moving labels that live in image space."""
        cfg = self.cfg
        if ds.label_format != CLASS and cfg is not None:
            # masks follow their image through paired flips (the batcher's `augment` for masks),
            spatial = ("random_erasing", "use_rand_augment", "use_auto_augment")
            # and boxes through HSV jitter + paired flips (the box-label base pack)
            on = [f for f in (spatial if ds.label_format in (MASK, BOXES) else ("augment",) + spatial) if getattr(cfg, f)]
            if on:
                raise NotImplementedKind(f"not implemented yet: train.{on[0]} with {ds.label_format} labels "
                                         f"(the image would move and its labels would not)",
                                         hint=f"turn train.{on[0]} off for this dataset")
        if not len(ds.y_train):
            return
        got = fit(ds.y_train[:1])
        if tuple(got.shape[1:]) != labels.dims[1:]:
            raise DataError(f"{ds.source('y_train')}: the labels are {ds.label_format} of shape "
                            f"{list(ds.y_train.shape[1:])} per example, which loss {self.kind} takes as "
                            f"{list(got.shape[1:])}, but the net's train step needs {list(labels.dims[1:])}",
                            hint="make the net's output match the labels (e.g. per-pixel logits at the masks' "
                                 "resolution), or use other data")

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


def row_types(logits: TensorType) -> dict:
    """The template types of a [B, K] classifier loss: a per-row value, the logits' and the
    rows' boolean masks (class_ce, soft_label_ce, bce)."""
    b = logits.dims[0]
    return {"row": TensorType((b,)).mlir, "mask": TensorType(logits.dims, "i1").mlir,
            "row_mask": TensorType((b,), "i1").mlir}


def detach(xp, v):
    """v as a constant of the gradient: `xp.stop_gradient(v)` where xp has it (the oracle's
    jax.numpy, tests/conftest.py), else v (NumPy has no gradient to stop)."""
    stop = getattr(xp, "stop_gradient", None)
    return v if stop is None else stop(v)


def near_ties(z: np.ndarray) -> int:
    s = np.sort(z, axis=1)
    return int(np.sum(s[:, -1] - s[:, -2] < 1e-4 * (1 + np.abs(s[:, -1]))))


def all_losses() -> dict[str, type]:
    """Every declared loss kind, in the seed's order."""
    if discover(__name__, __path__):
        orders = sorted(c.order for c in LOSSES.values())
        if orders != list(range(len(LOSSES))):
            raise RuntimeError(f"lmc bug: loss orders {orders} are not 0..{len(LOSSES) - 1}")
    return dict(sorted(LOSSES.items(), key=lambda kv: kv[1].order))


def default_loss() -> str:
    """The kind `loss_kind` defaults to (the one declaring `default = True`)."""
    (name,) = [n for n, c in all_losses().items() if c.default]
    return name


def lowered_losses() -> dict[str, type]:
    """The declared kinds that have a template (what `lmc render` and `lmc train` accept)."""
    return {n: c for n, c in all_losses().items() if c.lowered}


def loss_class(name: str) -> type:
    losses = all_losses()
    if name not in losses:
        raise RuntimeError(f"lmc bug: no loss module declares {name!r}")
    return losses[name]


def loss_for(kind, cfg=None) -> Loss:
    """The declared loss for a config.LossKind (lowered or not: for the recipe rules)."""
    return loss_class(kind.kind)(kind, cfg)


def make_loss(kind, cfg=None) -> Loss:
    """The lowered loss for a config.LossKind (for the recipe `cfg`, whose structural switches
    such as use_focal shape the template), or a clear refusal."""
    loss = loss_for(kind, cfg)
    if not loss.lowered:
        raise NotImplementedKind(f"not implemented yet: loss {kind}",
                                 hint=f"lowered losses: {', '.join(sorted(lowered_losses()))}")
    return loss


def dataset_need(label_format: str) -> str | None:
    """What a dataset delivering `label_format` needs, as the loss consuming it says it."""
    return next((c.dataset_need for c in all_losses().values()
                 if c.label_format == label_format and c.dataset_need), None)
