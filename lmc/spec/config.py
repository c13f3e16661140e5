"""The training recipe: `TrainConfig` (every field of the seed's TrainConfig, with the Lean
kit's defaults), `LossKind`, `DatasetKind`, and the seed's derived rules (effective loss and
optimizer, mutual exclusions)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from lmc.core.errors import Loc, MultiError, SpecError
from lmc.core.fields import Choice, OptimizerKind, coerce, show, snake
from lmc.core.types import TensorType
from lmc.losses import BOXES, CLASS, FLOAT, MASK, all_losses, dataset_need, default_loss, loss_class, loss_for
from lmc.optim import OPTIMIZER_FIELDS, fields_read, selection

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
    digits_seg = "digits_seg"          # embedded: 32x32 canvases of 1-3 digits, per-pixel labels
    digits_denoise = "digits_denoise"  # embedded: noisy 16x16 digits, the clean image as target
    digits_det = "digits_det"          # embedded: 64x64 mosaics of digits with YOLO box targets
    text = "text"              # a UTF-8 file as byte windows (LMs); no path: the embedded corpus


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
            raise SpecError(f"{where}: unknown loss kind {show(name)}; expected one of {kinds}")
        return cls(name, *loss_class(name).parse_params(args, where))

    def __str__(self) -> str:
        return loss_class(self.kind).describe(self.values)


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
]
TRAIN_FIELDS = {name: (t, d) for name, t, d in _FIELDS + _LMC_FIELDS}
# Fields that are counts where 0 is meaningful ("off").
_ZERO_OK = {"seed", "warmup_epochs", "train_res", "swa_start_epoch", "checkpoint_every_n_epochs",
            "eval_every_n_epochs", "val_every_epochs", "rand_augment_n", "epochs"}
# Fields that must lie in [0, 1): at 1 a decay freezes its average, a drop rate divides by
# keep = 0, smoothing leaves no label, −log((1−π)/π) is infinite.
_UNIT = {"label_smoothing", "momentum", "rmsprop_decay", "drop_path", "dropout", "bn_momentum",
         "ema_decay", "det_prior_pi"}
# Probabilities, [0, 1]: "always" is a fine setting (and test_crop_ratio, a share: 1 = no crop).
_PROB = {"random_erasing_prob", "fpn_affine_prob", "test_crop_ratio"}
# Fields that only act under a switch: set (to a non-default value) with the switch off they
# would be accepted and do nothing, so check_rules refuses them, naming the switch.
DEPENDS = {
    "mixup_alpha": "use_mixup", "cutmix_alpha": "use_cutmix", "knn_mixup_alpha": "use_knn_mixup",
    "random_erasing_prob": "random_erasing", "focal_gamma": ("use_focal", "anchors", "fpn_scales"), "ema_decay": "use_ema",
    "swa_start_epoch": "use_swa", "swag_k": "use_swag", "swag_samples": "use_swag", "tta_samples": "use_tta",
    "rand_augment_n": "use_rand_augment", "rand_augment_m": "use_rand_augment",
    "rand_augment_geometric": "use_rand_augment", "rand_augment_mstd": "rand_augment_geometric",
    "rand_augment_inc": "rand_augment_geometric", "spectral_every": "spectral_cap",
    "exp_lr_decay_epochs": "exp_lr_decay_rate", "fpn_affine_wh_thr_px": "fpn_affine_prob",
    "fpn_affine_area_thr": "fpn_affine_prob", "fpn_affine_scale": "fpn_affine_prob",
    "fpn_affine_translate": "fpn_affine_prob",
}


# Options of the YOLOv1 loss (the box-target loss in lmc/losses): refused under any other loss.
YOLO_FIELDS = ("use_diou_box", "anchors", "fpn_scales", "yolo_cls_weights", "yolo_cls_focal_gamma",
               "fpn_affine_prob", "fpn_affine_scale", "fpn_affine_translate")


def _make_config_class():
    ns = {"__annotations__": {}}
    for name, t, d in _FIELDS + _LMC_FIELDS:
        ns["__annotations__"][name] = t
        if d is not REQUIRED:
            ns[name] = field(default=d)
    ns["__doc__"] = ("The training recipe: every field of the seed's TrainConfig (78), snake_case, then "
                     "lmc's own (_LMC_FIELDS).")
    return dataclass(frozen=True)(type("TrainConfig", (), ns))


TrainConfig = _make_config_class()


def parse_train(data: Any, locs: dict, file: str, path: tuple = ("train",), dataset=None) -> "TrainConfig":
    """YAML `train:` mapping → TrainConfig, every field checked; all errors reported at once.
    `dataset` (the spec's DatasetKind, if any) takes part in the loss rules."""
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
                what = "a ratio" if name == "test_crop_ratio" else "a probability"
                raise SpecError(f"train.{name}: expected {what} in [0, 1], got {v}")
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


# The label format each dataset delivers (losses.md §1; seed DatasetKind): a per-pixel mask for the
# segmentation sets, YOLO box targets for pets_det, a class index per sample for the rest.
DATASET_LABELS = {"pets": MASK, "brats": MASK, "brats224": MASK, "pets_det": BOXES,
                  "digits_seg": MASK, "digits_denoise": FLOAT, "digits_det": BOXES}


def dataset_labels(dataset) -> str:
    """The label format `dataset` (a DatasetKind, its name or None) delivers."""
    return DATASET_LABELS.get(getattr(dataset, "value", dataset), CLASS)


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


def check_rules(cfg, loc_of, dataset=None) -> None:
    """The seed's mutual-exclusion rules (losses.md §1's table); `loc_of(field)` locates the
    offending field.  `dataset` (a DatasetKind or its name) enables the rules that need it."""
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
    kind = effective_loss(cfg, ds)
    loss = loss_for(kind)
    if cfg.val_every_epochs > 1:        # the seed's ImageNet-streaming cadence (N <= 1: the default)
        if ds != "imagenet":
            err(f"val_every_epochs is the ImageNet cadence (dataset: imagenet), not for dataset {ds or '(none)'}",
                "val_every_epochs", hint="set eval_every_n_epochs, lmc's cadence for every dataset")
        elif cfg.eval_every_n_epochs != TRAIN_FIELDS["eval_every_n_epochs"][1]:
            err("val_every_epochs and eval_every_n_epochs are two cadences for one evaluation: set one",
                "val_every_epochs", also=("eval_every_n_epochs",))
    for r in loss.focal_rules(cfg) if cfg.use_focal else []:
        err(r.message, r.field, also=r.also, hint=r.hint)
    for name, switches in DEPENDS.items():
        # a field may serve several switches (focal_gamma: also the anchor path's focal objectness)
        switch, *others = switches if isinstance(switches, tuple) else (switches,)
        if getattr(cfg, name) != TRAIN_FIELDS[name][1] and not any(getattr(cfg, s) for s in (switch, *others)):
            err(f"{name} has no effect without {switch}: true", name, also=(switch,),
                hint=f"set {switch}: true, or drop {name}")
    if cfg.fpn_affine_prob and not cfg.fpn_scales:
        err("fpn_affine_prob moves the boxes of the FPN detector path (fpn_scales), which encodes its targets "
            "after augmentation; the single-box and anchor paths' grid targets hold one box per cell",
            "fpn_affine_prob", also=("fpn_scales",), hint="set fpn_scales (with an fpn_detect head), or drop fpn_affine_*")
    if cfg.fpn_affine_prob and not (cfg.fpn_affine_scale or cfg.fpn_affine_translate):
        err("fpn_affine_prob with fpn_affine_scale and fpn_affine_translate both 0 would change nothing",
            "fpn_affine_prob", hint="set fpn_affine_scale and/or fpn_affine_translate")
    if loss.label_format != BOXES:            # the YOLO loss is the one of box targets
        for name in YOLO_FIELDS:
            if getattr(cfg, name) != TRAIN_FIELDS[name][1]:
                err(f"{name} is a YOLOv1-loss option, but the loss is {kind.kind}", name,
                    hint="set use_yolov1: true (with a detection head), or drop it")
    chosen, by = selection(cfg)
    reads = fields_read(chosen, cfg)
    for name in OPTIMIZER_FIELDS:
        if getattr(cfg, name) != TRAIN_FIELDS[name][1] and name not in reads:
            users = sorted(o for o in ("sgd", "rmsprop", "muon", "adam", "lamb", "shampoo") if name in fields_read(o, cfg))
            err(f"{name} is read by {', '.join(users)}, not by the optimizer {chosen} ({by})", name, also=(by,),
                hint=f"drop {name}, or choose an optimizer that uses it")
    if cfg.warmup_epochs > 0 and not (cfg.cosine_decay or cfg.exp_lr_decay_rate > 0):
        err("warmup_epochs needs a schedule (cosine_decay or exp_lr_decay_rate): the constant schedule has "
            "no warm-up (the seed's IREE path ignores it there)", "warmup_epochs", hint="set cosine_decay: true")
    if cfg.use_tta and cfg.use_swag:
        err("use_tta with use_swag: SWAG's eval already averages logits (over weight samples); TTA's views "
            "of it are not implemented", "use_tta", also=("use_swag",))
    if cfg.use_auto_augment and cfg.use_rand_augment:
        err("use_auto_augment and use_rand_augment are exclusive (AutoAugment subsumes the colour RandAugment)",
            "use_rand_augment", also=("use_auto_augment",))
    for other in ("use_mixup", "use_cutmix"):
        if cfg.use_knn_mixup and getattr(cfg, other):
            err(f"use_knn_mixup excludes {other} (KNN-mixup replaces the random partner; the seed lets it "
                f"take precedence, which would leave {other} accepted and unused)", other,
                also=("use_knn_mixup",), hint=f"drop {other} or use_knn_mixup")
    if cfg.use_swag and not cfg.use_swa:
        err("use_swag requires use_swa: true", "use_swag", also=("use_swa",))
    # use_yolov1 asks for the box targets: a loss given explicitly must consume them
    if cfg.use_yolov1 and loss.label_format != BOXES:
        err(f"use_yolov1 conflicts with loss_kind {kind}", "loss_kind")
    for r in loss.rules(cfg, soft_aug=mixup_mode(cfg) is not None):
        err(r.message, r.field, also=r.also, hint=r.hint)
    # added (seed DatasetKind): a dataset of masks or boxes needs a loss that consumes them
    fmt = dataset_labels(ds)
    if fmt != CLASS and loss.label_format != fmt:
        err(f"dataset {ds} {dataset_need(fmt)}, not {kind}", "loss_kind")
    if cfg.use_muon and cfg.use_shampoo:
        err("use_muon and use_shampoo are exclusive", "use_shampoo", also=("use_muon",))
    for flag_name in ("use_muon", "use_shampoo"):
        chosen = flag_name.removeprefix("use_")
        if getattr(cfg, flag_name) and cfg.optimizer.value not in ("sgd", "adam", chosen):
            err(f"{flag_name} conflicts with optimizer: {cfg.optimizer.value} ({flag_name} selects {chosen}, "
                f"with AdamW for the other tensors)", flag_name, also=("optimizer",),
                hint=f"drop {flag_name}, or set optimizer: {chosen}")
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
    """Rules that need the net: the loss's parameters against the class count
    (Loss.check_classes), the head prior's length.  With the output's dims the loss's logits
    layout is checked first (Loss.check_output: e.g. a per-pixel loss needs [B, NC, H, W], where
    NC is then the class count; the one definition of that rule, lower.abi asks it through here)."""
    loss = loss_for(effective_loss(cfg, dataset), cfg)
    if output_dims is not None:
        why = loss.check_output(TensorType(tuple(output_dims)))
        if why:
            by = "use_yolov1" if cfg.use_yolov1 and cfg.loss_kind == TRAIN_FIELDS["loss_kind"][1] else None
            raise SpecError(f"{by}: {why}" if by else why, loc_of(by or "loss_kind"), hint=loss.rank_hint)
        if loss.is_seg:          # per-pixel logits [B, NC, H, W] carry the class count in dim 1
            num_classes = output_dims[1]
    why = loss.check_classes(num_classes)
    if why:
        raise SpecError(why, loc_of("loss_kind"))
    if cfg.head_prior_bias and num_classes and len(cfg.head_prior_bias) != num_classes:
        raise SpecError(f"head_prior_bias has {len(cfg.head_prior_bias)} values but the net has "
                        f"{num_classes} classes", loc_of("head_prior_bias"))


def config_dict(cfg) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
