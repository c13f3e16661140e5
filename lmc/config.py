"""The training recipe: `TrainConfig` (every field of the seed's TrainConfig, with the Lean
kit's defaults), `LossKind`, `DatasetKind`, and the seed's derived rules (effective loss and
optimizer, mutual exclusions)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .errors import Loc, SpecError
from .fields import Choice, OptimizerKind, coerce, show, snake

REQUIRED = object()


class DatasetKind(Choice):
    mnist = "mnist"
    cifar10 = "cifar10"
    imagenette = "imagenette"
    pets = "pets"
    imagenet = "imagenet"
    pets_det = "pets_det"
    brats = "brats"
    brats224 = "brats224"
    digits = "digits"          # embedded default: scikit-learn's bundled 8x8 digits
    npz = "npz"                # user arrays x, y (optional x_val, y_val)
    synthetic = "synthetic"    # seeded random data of the spec's shapes


_LOSS_KINDS = {
    # name: (parameter name, parameter type) or None
    "class_ce": None, "soft_label_ce": None, "per_pixel_ce": None, "per_pixel_dice": None,
    "per_pixel_dice_ce": None, "per_pixel_weighted_ce": ("weights", list[float]),
    "per_pixel_focal_ce": ("gamma", float), "float_target_mse": None, "yolov1_masked": None,
    "bce": None,
}


@dataclass(frozen=True)
class LossKind:
    """The primary loss.  Parameterized kinds are written as mappings:
    `per_pixel_weighted_ce: {weights: [1, 4, 4]}`, `per_pixel_focal_ce: {gamma: 2.0}`."""
    kind: str
    weights: tuple[float, ...] = ()
    gamma: float = 2.0

    @property
    def is_seg(self) -> bool:
        """The seed's LossKind.isSeg: the per-pixel (segmentation) kinds."""
        return self.kind.startswith("per_pixel_")

    @classmethod
    def parse(cls, value: Any, where: str) -> "LossKind":
        if isinstance(value, LossKind):
            return value
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
            raise SpecError(f"{where}: expected a loss kind ({', '.join(_LOSS_KINDS)}), got {show(value)}")
        name = snake(str(name).lstrip("."))      # the seed writes `.classCE`
        if name not in _LOSS_KINDS:
            raise SpecError(f"{where}: unknown loss kind {show(name)}; expected one of {', '.join(_LOSS_KINDS)}")
        param = _LOSS_KINDS[name]
        extra = set(args) - ({param[0]} if param else set())
        if extra:
            raise SpecError(f"{where}: loss '{name}' has no parameter {show(sorted(map(str, extra))[0])}")
        kw = {}
        if param:
            pname, ptype = param
            if pname not in args and name == "per_pixel_weighted_ce":
                raise SpecError(f"{where}: per_pixel_weighted_ce needs `weights: [w0, w1, ...]`")
            if pname in args:
                v = coerce(args[pname], ptype, f"{where}.{pname}")
                if pname == "weights" and (not v or any(w <= 0 for w in v)):
                    raise SpecError(f"{where}.weights: expected a non-empty list of positive numbers, got {list(v)}")
                if pname == "gamma" and v < 0:
                    raise SpecError(f"{where}.gamma: expected a number >= 0, got {v}")
                kw[pname] = v
        return cls(name, **kw)

    def __str__(self) -> str:
        if self.kind == "per_pixel_weighted_ce":
            return f"per_pixel_weighted_ce(weights={list(self.weights)})"
        if self.kind == "per_pixel_focal_ce":
            return f"per_pixel_focal_ce(gamma={self.gamma})"
        return self.kind


# (yaml name, type, default).  Order and defaults: the Lean kit's TrainConfig
# (../shared/reference/defaults.md); semantics: the seed docs and docs/spec.md.
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
    ("loss_kind", LossKind, LossKind("class_ce")),
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
TRAIN_FIELDS = {name: (t, d) for name, t, d in _FIELDS}
# Fields that are counts where 0 is meaningful ("off").
_ZERO_OK = {"seed", "warmup_epochs", "train_res", "swa_start_epoch", "checkpoint_every_n_epochs",
            "eval_every_n_epochs", "val_every_epochs", "rand_augment_n", "epochs"}
# Fields that must lie in [0, 1): at 1 a decay freezes its average, a drop rate divides by
# keep = 0, smoothing leaves no label, −log((1−π)/π) is infinite.
_UNIT = {"label_smoothing", "momentum", "rmsprop_decay", "drop_path", "dropout", "bn_momentum",
         "ema_decay", "det_prior_pi"}
# Probabilities, [0, 1]: "always" is a fine setting.
_PROB = {"random_erasing_prob", "fpn_affine_prob"}


def _make_config_class():
    ns = {"__annotations__": {}}
    for name, t, d in _FIELDS:
        ns["__annotations__"][name] = t
        if d is not REQUIRED:
            ns[name] = field(default=d)
    ns["__doc__"] = "The training recipe: every field of the seed's TrainConfig (78), snake_case."
    return dataclass(frozen=True)(type("TrainConfig", (), ns))


TrainConfig = _make_config_class()


def parse_train(data: Any, locs: dict, file: str, path: tuple = ("train",), dataset=None) -> "TrainConfig":
    """YAML `train:` mapping → TrainConfig, every field checked; all errors reported at once.
    `dataset` (the spec's DatasetKind, if any) takes part in the loss rules."""
    from .errors import MultiError
    loc = locs.get(path, Loc(file))
    if not isinstance(data, dict):
        raise SpecError(f"`train` must be a mapping of recipe fields, got {type(data).__name__}", loc)
    errors, values, orig = [], {}, {}
    for key, value in data.items():
        name = snake(key)
        kloc = locs.get(path + (key,), loc)
        if name not in TRAIN_FIELDS:
            from difflib import get_close_matches
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
                raise SpecError(f"train.{name}: expected a probability in [0, 1], got {v}")
            if t is float and v < 0:
                raise SpecError(f"train.{name}: expected a number >= 0, got {v}")
            values[name] = v
        except SpecError as e:
            errors.append(e.located(kloc))
    for name, (t, d) in TRAIN_FIELDS.items():
        if d is REQUIRED and name not in values and name not in orig:
            errors.append(SpecError(f"train.{name} is required ({'a number' if t is float else 'an integer'})", loc))
    if errors:
        raise errors[0] if len(errors) == 1 else MultiError(errors)
    cfg = TrainConfig(**values)
    check_rules(cfg, lambda name: locs.get(path + (orig.get(name, name),), loc), dataset)
    return cfg


# Datasets whose label record is a per-pixel mask rather than one class index (losses.md §1).
SEG_DATASETS = frozenset({"pets", "brats", "brats224"})


def effective_loss(cfg, dataset=None) -> LossKind:
    """The seed's derivation (losses.md §1): an explicit loss_kind wins; one left at class_ce is
    derived from use_yolov1 or a pets_det dataset (yolov1_masked), a segmentation dataset
    (per_pixel_ce), then use_mixup/use_cutmix/use_knn_mixup (soft_label_ce)."""
    ds = getattr(dataset, "value", dataset)
    if cfg.loss_kind.kind != "class_ce":
        return cfg.loss_kind
    if cfg.use_yolov1 or ds == "pets_det":
        return LossKind("yolov1_masked")
    if ds in SEG_DATASETS:
        return LossKind("per_pixel_ce")
    if cfg.use_mixup or cfg.use_cutmix or cfg.use_knn_mixup:
        return LossKind("soft_label_ce")
    return cfg.loss_kind


def effective_optimizer(cfg) -> OptimizerKind:
    """`optimizer` left at sgd with `use_adam: true` means Adam (the older boolean wins)."""
    if cfg.optimizer == OptimizerKind.sgd and cfg.use_adam:
        return OptimizerKind.adam
    return cfg.optimizer


def mixup_mode(cfg) -> str | None:
    """Which soft-label augmentation a batch gets: exactly one, by the reference's priority
    KNN-mixup > mixup > cutmix (losses.md §3), so knn-mixup wins over mixup and mixup over cutmix."""
    if cfg.use_knn_mixup:
        return "knn_mixup"
    if cfg.use_mixup:
        return "mixup"
    if cfg.use_cutmix:
        return "cutmix"
    return None


def check_rules(cfg, loc_of, dataset=None) -> None:
    """The seed's mutual-exclusion rules (losses.md §1's table); `loc_of(field)` locates the
    offending field.  `dataset` (a DatasetKind or its name) enables the rules that need it."""
    from .errors import MultiError
    errs = []

    def flag(name):     # the option that set `name` on the command line, else None
        at = loc_of(name)
        return at if at is not None and at.is_flag else None

    def err(msg, at, also=(), hint=None):
        for name in also:   # the other field of the rule, if an option set it: say which
            if flag(name):
                msg += f" ({name} set by {flag(name).flag_with(getattr(cfg, name))})"
        errs.append(SpecError(msg, loc_of(at), hint=hint))

    def fix(name, need, other, most):   # a hint when an option set either side of `other` <= `name`
        f, o = flag(name), flag(other)
        if not (f or o):
            return None
        up = f"pass {f.flag_with(need)} or more" if f else f"raise {name} to {need}"
        down = f"pass {o.flag_with(most)} or less" if o else f"lower {other}"
        return f"{up}, or {down}"

    ds = getattr(dataset, "value", dataset)
    loss = effective_loss(cfg, ds)
    soft_aug = cfg.use_mixup or cfg.use_cutmix or cfg.use_knn_mixup
    if cfg.use_focal:
        # focal is a modifier of integer-label CE; on yolov1_masked it switches objectness to focal BCE
        if loss.kind not in ("class_ce", "yolov1_masked"):
            hint = "; for segmentation use loss_kind: {per_pixel_focal_ce: {gamma: 2}}" if loss.is_seg else ""
            err(f"use_focal needs integer labels (class_ce), but the loss is {loss}{hint}", "use_focal")
        if cfg.label_smoothing != 0.0 and loss.kind == "class_ce":
            err("use_focal requires label_smoothing = 0 (focal mixes poorly with smoothing)", "label_smoothing",
                also=("use_focal",))
    if cfg.use_swag and not cfg.use_swa:
        err("use_swag requires use_swa: true", "use_swag", also=("use_swa",))
    if cfg.use_yolov1 and cfg.loss_kind.kind not in ("class_ce", "yolov1_masked"):
        err(f"use_yolov1 conflicts with loss_kind {cfg.loss_kind}", "loss_kind")
    if loss.kind == "yolov1_masked" and soft_aug:
        err("yolov1_masked (use_yolov1) cannot be combined with mixup/cutmix/knn-mixup", "use_yolov1")
    # added (losses.md §1): the yolo target is a box tensor; there is nothing to smooth
    if loss.kind == "yolov1_masked" and cfg.label_smoothing != 0.0:
        err("yolov1_masked (use_yolov1) requires label_smoothing = 0", "label_smoothing")
    if loss.is_seg and soft_aug:
        err(f"{loss} (per-pixel labels) cannot be combined with mixup/cutmix/knn-mixup", "loss_kind")
    # added (losses.md §1): focal already reweights by confidence, and Dice alone has no
    # one-hot target to smooth (per_pixel_dice_ce smooths its CE half only)
    if loss.kind in ("per_pixel_focal_ce", "per_pixel_dice") and cfg.label_smoothing != 0.0:
        err(f"{loss} requires label_smoothing = 0", "label_smoothing")
    # added (seed DatasetKind): pets_det carries YOLO targets, the seg datasets per-pixel masks
    if ds == "pets_det" and loss.kind != "yolov1_masked":
        err(f"dataset pets_det needs the yolov1_masked loss (use_yolov1: true), not {loss}", "loss_kind")
    if ds in SEG_DATASETS and not loss.is_seg:
        err(f"dataset {ds} has per-pixel labels and needs a per_pixel_* loss, not {loss}", "loss_kind")
    if cfg.use_muon and cfg.use_shampoo:
        err("use_muon and use_shampoo are exclusive", "use_shampoo", also=("use_muon",))
    if cfg.bf16_conv and not cfg.bf16:
        err("bf16_conv is only meaningful with bf16: true", "bf16_conv", also=("bf16",))
    if cfg.warmup_epochs > cfg.epochs:
        err(f"warmup_epochs ({cfg.warmup_epochs}) exceeds epochs ({cfg.epochs})", "warmup_epochs",
            also=("epochs",), hint=fix("epochs", cfg.warmup_epochs, "warmup_epochs", cfg.epochs))
    if cfg.use_swa and cfg.swa_start_epoch >= max(cfg.epochs, 1):
        err(f"swa_start_epoch ({cfg.swa_start_epoch}) must be < epochs ({cfg.epochs})", "swa_start_epoch",
            also=("epochs",), hint=fix("epochs", cfg.swa_start_epoch + 1, "swa_start_epoch",
                                         max(cfg.epochs, 1) - 1))
    if errs:
        raise errs[0] if len(errs) == 1 else MultiError(errs)


def check_against_net(cfg, num_classes: int | None, loc_of, output_dims: tuple | None = None,
                      dataset=None) -> None:
    """Rules that need the net: weighted-CE weights length = class count, head prior length.
    With the output's dims the label layout is checked too: a per-pixel loss needs logits
    [B, NC, H, W] (NC = the class count), class_ce / soft_label_ce / bce need [B, NC]."""
    loss = effective_loss(cfg, dataset)
    if output_dims is not None:
        rank = len(output_dims)
        if loss.is_seg:
            if rank != 4:
                raise SpecError(f"{loss} needs per-pixel logits [batch, classes, height, width], but the "
                                f"net's output is {list(output_dims)}", loc_of("loss_kind"))
            num_classes = output_dims[1]
        elif loss.kind in ("class_ce", "soft_label_ce", "bce") and rank != 2:
            raise SpecError(f"{loss} needs logits [batch, classes], but the net's output is {list(output_dims)}",
                            loc_of("loss_kind"),
                            hint="end the net with global_avg_pool or flatten, then dense")
    if loss.kind == "per_pixel_weighted_ce" and num_classes and len(loss.weights) != num_classes:
        raise SpecError(f"per_pixel_weighted_ce has {len(loss.weights)} weights but the net has "
                        f"{num_classes} classes", loc_of("loss_kind"))
    if cfg.head_prior_bias and num_classes and len(cfg.head_prior_bias) != num_classes:
        raise SpecError(f"head_prior_bias has {len(cfg.head_prior_bias)} values but the net has "
                        f"{num_classes} classes", loc_of("head_prior_bias"))


def config_dict(cfg) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
