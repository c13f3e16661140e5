"""The training recipe: `TrainConfig` (every field of the seed's TrainConfig, with the Lean
kit's defaults), `LossKind`, `DatasetKind`, and the seed's derivations (the effective loss, the
mixing mode).  The rules that refuse a combination of fields live in the check stage
(lmc/check/recipe.py)."""
from __future__ import annotations

from difflib import get_close_matches
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from lmc.core.errors import Loc, MultiError, SpecError
from lmc.core.fields import Choice, coerce, did_you_mean, show, snake
from lmc.data.kinds import all_datasets, label_format
from lmc.losses import BOXES, CLASS, FLOAT, MASK, MULTI_HOT, all_losses, default_loss, loss_class, suggest_loss
from lmc.optim import declared_fields, optimizer_aliases, optimizer_names

REQUIRED = object()


# The dataset kinds, one member per module of the dataset registry (lmc/data/kinds/), in the
# seed's order: each module says what its kind is and delivers.
DatasetKind = Choice("DatasetKind", [(name, name) for name in all_datasets()], module=__name__)


# `train.optimizer`'s values: every optimizer of the registry (lmc/optim), made from it as
# LossKind's are from the losses', so a new optimizer is one module and one template.
OptimizerKind = Choice("OptimizerKind", [(n, n) for n in optimizer_names()])
OptimizerKind._choice_aliases = optimizer_aliases()     # `adamw` is adam (its decay is decoupled)


@dataclass(frozen=True, init=False)
class LossKind:
    """The primary loss: a kind declared in lmc/losses (which also owns its parameters) and the
    values of those parameters, in the loss's order.  Parameterized kinds are written as
    mappings, `<kind>: {<parameter>: value}`; `LossKind(kind, *values)` builds one directly
    (a missing value takes the parameter's default) and `.<parameter>` reads a value."""
    kind: str
    values: tuple = ()

    def __init__(self, kind: str, *values):
        params = loss_class(kind).params
        if len(values) > len(params):
            raise TypeError(f"lmc bug: loss {kind} takes {len(params)} parameters, got {len(values)}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "values", tuple(values) + tuple(p.default for p in params[len(values):]))

    def __getattr__(self, name: str):
        if not name.startswith("_") and "kind" in self.__dict__:
            for p, v in zip(loss_class(self.kind).params, self.values):
                if p.name == name:
                    return v
        raise AttributeError(f"loss {self.__dict__.get('kind')!r} has no parameter {name!r}")

    @property
    def is_seg(self) -> bool:
        """The seed's LossKind.isSeg (declared by the loss: it consumes per-pixel masks)."""
        return loss_class(self.kind).is_seg

    @classmethod
    def parse(cls, value: Any, where: str) -> "LossKind":
        if isinstance(value, LossKind):
            return value
        kinds = ", ".join(all_losses())
        args: dict = {}
        if isinstance(value, dict) and len(value) == 1:
            (name, args), = value.items()
            if args is None:
                args = {}
            if not isinstance(args, dict):
                raise SpecError(f"{where}: parameters of loss '{name}' must be a mapping, got {show(args)}")
        elif isinstance(value, str):
            name = value
        else:
            raise SpecError(f"{where}: expected a loss kind ({kinds}), got {show(value)}")
        name = snake(str(name).lstrip("."))      # the seed writes Lean constructors, `.camelCase`
        if name not in all_losses():
            close = suggest_loss(name)
            raise SpecError(f"{where}: unknown loss kind {show(name)}"
                            + (f"; did you mean '{close}'?" if close else "") + f" (expected one of {kinds})")
        return cls(name, *loss_class(name).parse_params(args, where))

    def __str__(self) -> str:
        return loss_class(self.kind).describe(self.values)


# The validation metrics model selection (keep_best, early_stop) can follow, by the label format
# the eval scores (lmc/evaluate: EvalResult and the results of metrics.py); the lower-is-better ones.
SELECT_METRICS = {CLASS: ("top1", "top5", "loss", "perplexity"), MULTI_HOT: ("top1",), MASK: ("miou", "pixel_acc"),
                  FLOAT: ("mse", "psnr"), BOXES: ("map50", "map")}
LOWER_IS_BETTER = ("loss", "perplexity", "mse")


def _selection_args(cls, value, where, ints=(), floats=()) -> dict:
    """A `{metric, mode, …}` mapping's values, typed (metric: a name; mode: max, min or auto)."""
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping {{metric: top1, mode: max, …}}, got {show(value)}")
    known = ("metric", "mode") + ints + floats
    out = {}
    for k, v in value.items():
        name = snake(str(k))
        if name not in known:
            raise SpecError(f"{where}: unknown field {show(k)}; expected {', '.join(known)}{did_you_mean(k, known)}")
        if name == "metric":
            out[name] = coerce(v, str, f"{where}.metric")
        elif name == "mode":
            if v not in ("max", "min", "auto"):
                raise SpecError(f"{where}.mode: expected max, min or auto, got {show(v)}{did_you_mean(v, ('max', 'min', 'auto'))}")
            out[name] = v
        elif name in ints:
            out[name] = coerce(v, int, f"{where}.{name}")
        else:
            out[name] = coerce(v, float, f"{where}.{name}")
            if out[name] < 0:
                raise SpecError(f"{where}.{name}: expected a number >= 0, got {out[name]}")
    return out


@dataclass(frozen=True)
class _Selection:
    metric: str = "top1"
    mode: str = "auto"       # auto: min for a loss-like metric (LOWER_IS_BETTER), else max

    @property
    def lower_is_better(self) -> bool:
        return self.mode == "min" or (self.mode == "auto" and self.metric in LOWER_IS_BETTER)

    def better(self, value: float, than: float | None, min_delta: float = 0.0) -> bool:
        """`value` improves on `than` by more than min_delta (any value beats None)."""
        if than is None:
            return True
        return value < than - min_delta if self.lower_is_better else value > than + min_delta


@dataclass(frozen=True)
class KeepBest(_Selection):
    """train.keep_best: {metric, mode, k}: the k best checkpoints by a validation metric
    (RUN/best-epoch-N.npz), RUN/best.npz the best of them."""
    k: int = 1

    @classmethod
    def parse(cls, value, where):
        return value if isinstance(value, cls) else cls(**_selection_args(cls, value, where, ints=("k",)))

    def __str__(self):
        return f"{{metric: {self.metric}, mode: {self.mode}, k: {self.k}}}"


@dataclass(frozen=True)
class EarlyStop(_Selection):
    """train.early_stop: {metric, mode, patience, min_delta}: training stops after `patience`
    evals in a row without an improvement of more than min_delta on the best so far."""
    patience: int = 5
    min_delta: float = 0.0

    @classmethod
    def parse(cls, value, where):
        return value if isinstance(value, cls) else cls(**_selection_args(cls, value, where, ints=("patience",),
                                                                             floats=("min_delta",)))

    def __str__(self):
        return f"{{metric: {self.metric}, mode: {self.mode}, patience: {self.patience}, min_delta: {self.min_delta:g}}}"


# (yaml name, type, default).  Order and defaults: the Lean kit's TrainConfig
# (the Lean kit's TrainConfig); semantics: the kit's docs and docs/spec.md.
_FIELDS: list[tuple[str, Any, Any]] = [
    ("learning_rate", float, REQUIRED),
    ("batch_size", int, REQUIRED),
    ("epochs", int, REQUIRED),
    ("seed", int, 314159),
    ("momentum", float, 0.0),
    ("use_adam", bool, False),
    ("optimizer", OptimizerKind, OptimizerKind.sgd),
    ("use_muon", bool, False),
    ("use_shampoo", bool, False),
    ("rmsprop_decay", float, 0.9),
    ("rmsprop_eps", float, 1e-3),
    ("weight_decay", float, 0.0),
    ("cosine_decay", bool, False),
    ("warmup_epochs", int, 0),
    ("augment", bool, False),
    ("label_smoothing", float, 0.0),
    ("use_focal", bool, False),
    ("focal_gamma", float, 2.0),
    ("use_diou_box", bool, False),
    ("anchors", list[tuple[float, float]], ()),
    ("fpn_scales", list[tuple[int, list[tuple[float, float]]]], ()),
    ("yolo_cls_weights", list[float], ()),
    ("head_prior_bias", list[float], ()),
    ("det_prior_pi", float, 0.0),
    ("use_mixup", bool, False),
    ("mixup_alpha", float, 0.8),
    ("use_cutmix", bool, False),
    ("cutmix_alpha", float, 1.0),
    ("use_knn_mixup", bool, False),
    ("knn_mixup_alpha", float, 1.0),
    ("random_erasing", bool, False),
    ("random_erasing_prob", float, 0.25),
    ("use_rand_augment", bool, False),
    ("rand_augment_n", int, 2),
    ("rand_augment_m", float, 9.0),
    ("rand_augment_geometric", bool, False),
    ("rand_augment_mstd", float, 0.0),
    ("rand_augment_inc", bool, False),
    ("use_auto_augment", bool, False),
    ("repeated_aug", int, 1),
    ("train_res", int, 0),
    ("test_crop_ratio", float, 0.0),
    ("drop_path", float, 0.0),
    ("wd_exclude_norm_bias", bool, False),
    ("val_every_epochs", int, 1),
    ("grad_accum_steps", int, 1),
    ("use_ema", bool, False),
    ("ema_decay", float, 0.9999),
    ("use_swa", bool, False),
    ("swa_start_epoch", int, 0),
    ("use_swag", bool, False),
    ("swag_k", int, 20),
    ("swag_samples", int, 30),
    ("use_tta", bool, False),
    ("tta_samples", int, 5),
    ("use_yolov1", bool, False),
    ("loss_kind", LossKind, LossKind(default_loss())),
    ("bootstrap_backbone", tuple[str, int] | None, None),
    ("bootstrap_backbone_range", tuple[str, int, int, int] | None, None),
    ("checkpoint_every_n_epochs", int, 10),
    ("eval_every_n_epochs", int, 10),
    ("bf16", bool, False),
    ("bf16_conv", bool, False),
    ("running_bn", bool, False),
    ("vit_init", bool, False),
    ("exp_lr_decay_rate", float, 0.0),
    ("exp_lr_decay_epochs", float, 1.0),
    ("dropout", float, 0.0),
    ("grad_clip_norm", float, 0.0),
    ("head_lr_mult", float, 1.0),
    ("bn_momentum", float, 0.99),
    ("cnx_init", bool, False),
    ("fpn_affine_scale", float, 0.0),
    ("fpn_affine_translate", float, 0.0),
    ("fpn_affine_prob", float, 0.0),
    ("fpn_affine_wh_thr_px", float, 1.0),   # no default in the seed; Ultralytics' 2 px is called wrong there
    ("fpn_affine_area_thr", float, 0.1),    # Ultralytics' value; the seed states none
    ("yolo_cls_focal_gamma", float, 0.0),
]


class Fp8Format(Choice):
    off = "off"
    e4m3 = "e4m3"      # float8 E4M3 (ml_dtypes.float8_e4m3fn): weights per column/channel, input per tensor

    @classmethod
    def parse(cls, value, where):
        if value is False:      # YAML 1.1 reads a bare `off` (and `false`, `no`) as false
            return cls.off
        return super().parse(value, where)


# lmc's own recipe fields beyond the seed's TrainConfig: the trust tools' training knobs
# (docs/trust.md) and data-parallel training's (docs/distributed.md), after the seed's 78 in
# TrainConfig.
_LMC_FIELDS: list[tuple[str, Any, Any]] = [
    ("gaussian_noise_sigma", float, 0.0),   # N(0, σ²) added to every training batch (smoothing)
    ("spectral_cap", float, 0.0),           # project weights onto ‖W‖₂ ≤ c; 0 = off
    ("spectral_every", int, 1),             # ... after every K steps (and at the end)
    ("fp8", Fp8Format, Fp8Format.off),
    ("sync_bn", bool, False),               # data-parallel: batch statistics over all ranks (refused)
    ("keep_best", KeepBest | None, None),   # model selection: the k best checkpoints by a val metric
    ("early_stop", EarlyStop | None, None),  # stop after `patience` evals without improvement
]
# the fields registry entries declare (an optimizer's own hyperparameters: lmc/optim), after
_DECLARED = declared_fields()
_REGISTRY_FIELDS: list[tuple[str, Any, Any]] = [(f.name, f.type, f.default) for f in _DECLARED]
TRAIN_FIELDS = {name: (t, d) for name, t, d in _FIELDS + _LMC_FIELDS + _REGISTRY_FIELDS}
# Fields that are counts where 0 is meaningful ("off").
_ZERO_OK = {"seed", "warmup_epochs", "train_res", "swa_start_epoch", "checkpoint_every_n_epochs",
            "eval_every_n_epochs", "val_every_epochs", "rand_augment_n", "epochs"}
# Fields that must lie in [0, 1): at 1 a decay freezes its average, a drop rate divides by
# keep = 0, smoothing leaves no label, −log((1−π)/π) is infinite.
_UNIT = {"label_smoothing", "momentum", "rmsprop_decay", "drop_path", "dropout", "bn_momentum",
         "ema_decay", "det_prior_pi"} | {f.name for f in _DECLARED if f.range == "unit"}
# Probabilities, [0, 1]: "always" is a fine setting (and test_crop_ratio, a share: 1 = no crop).
_PROB = {"random_erasing_prob", "fpn_affine_prob", "test_crop_ratio"} | {
    f.name for f in _DECLARED if f.range == "prob"}


def _make_config_class():
    ns = {"__annotations__": {}}
    for name, t, d in _FIELDS + _LMC_FIELDS + _REGISTRY_FIELDS:
        ns["__annotations__"][name] = t
        if d is not REQUIRED:
            ns[name] = field(default=d)
    ns["__doc__"] = ("The training recipe: every field of the seed's TrainConfig (78), snake_case, then "
                     "lmc's own (_LMC_FIELDS), then those registry entries declare (_REGISTRY_FIELDS).")
    return dataclass(frozen=True)(type("TrainConfig", (), ns))


TrainConfig = _make_config_class()


def parse_train(data: Any, locs: dict, file: str, path: tuple = ("train",)) -> "TrainConfig":
    """YAML `train:` mapping → TrainConfig, every field's type and range checked; all errors
    reported at once.  The rules between fields (and against the dataset and the net) are the
    check stage's (lmc/check)."""
    loc = locs.get(path, Loc(file))
    if not isinstance(data, dict):
        raise SpecError(f"`train` must be a mapping of recipe fields, got {type(data).__name__}", loc)
    errors, values, orig = [], {}, {}
    for key, value in data.items():
        name = snake(key)
        kloc = locs.get(path + (key,), loc)
        if name not in TRAIN_FIELDS:
            close = get_close_matches(name, TRAIN_FIELDS, 1)
            errors.append(SpecError(f"unknown train field '{key}'" + (f"; did you mean '{close[0]}'?" if close else ""), kloc))
            continue
        if name in orig:
            errors.append(SpecError(f"train: '{key}' repeats '{orig[name]}' (the same field in another spelling)", kloc))
            continue
        orig[name] = key
        t, _ = TRAIN_FIELDS[name]
        try:
            v = coerce(value, t, f"train.{name}", allow_zero=name in _ZERO_OK)
            if name in _UNIT and not 0.0 <= v < 1.0:
                raise SpecError(f"train.{name}: expected a number in [0, 1), got {v}")
            if name in _PROB and not 0.0 <= v <= 1.0:
                what = "a ratio" if name == "test_crop_ratio" else "a probability"
                raise SpecError(f"train.{name}: expected {what} in [0, 1], got {v}")
            if t is float and v < 0:
                raise SpecError(f"train.{name}: expected a number >= 0, got {v}")
            values[name] = v
        except SpecError as e:
            errors.append(e.located(kloc))
    missing = [(name, t) for name, (t, d) in TRAIN_FIELDS.items()
               if d is REQUIRED and name not in values and name not in orig]
    if missing and loc.is_flag:
        # the spec has no `train:`; an option (--epochs, --set train.x=…) made one: blame the spec
        need = ", ".join(f"{n}: …" for n, _ in missing)
        errors.append(SpecError(f"the spec has no `train:` section ({loc.file} sets only what it names)",
                                Loc(file), hint=f"add train: {{{need}}} to {file}"))
    else:
        for name, t in missing:
            errors.append(SpecError(f"train.{name} is required ({'a number' if t is float else 'an integer'})", loc))
    if errors:
        raise errors[0] if len(errors) == 1 else MultiError(errors)
    return TrainConfig(**values)


def dataset_labels(dataset) -> str:
    """The label format `dataset` (a DatasetKind, its name or None) delivers (losses.md §1; seed
    DatasetKind), as its module in lmc/data/kinds declares it: a per-pixel mask for the
    segmentation sets, YOLO box targets for pets_det, a class index per sample for most."""
    return label_format(getattr(dataset, "value", dataset))


def effective_loss(cfg, dataset=None) -> LossKind:
    """The seed's derivation (losses.md §1): an explicit loss_kind wins; one left at class_ce is
    derived from use_yolov1 or a pets_det dataset (yolov1_masked), a segmentation dataset
    (per_pixel_ce), then use_mixup/use_cutmix/use_knn_mixup (soft_label_ce)."""
    ds = getattr(dataset, "value", dataset)
    if cfg.loss_kind.kind != "class_ce":
        return cfg.loss_kind
    if cfg.use_yolov1 or dataset_labels(ds) == BOXES:
        return LossKind("yolov1_masked")
    if dataset_labels(ds) == MASK:
        return LossKind("per_pixel_ce")
    if mixup_mode(cfg):
        return LossKind("soft_label_ce")
    return cfg.loss_kind


def mixup_mode(cfg) -> str | None:
    """The soft-label augmentation of the recipe (data/mix.py): knn_mixup, mixup, cutmix, or
    "mixup|cutmix" (both on: each batch takes one with probability ½, as timm's DeiT recipe)."""
    if cfg.use_knn_mixup:
        return "knn_mixup"
    on = [m for m in ("mixup", "cutmix") if getattr(cfg, "use_" + m)]
    return "|".join(on) or None


def config_dict(cfg) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
