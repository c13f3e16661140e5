"""The recipe's rules between fields: the seed's mutual exclusions (losses.md §1's table), fields
that act only under a switch, the loss's own rules (Loss.rules / focal_rules, asked through its
registry entry) and the optimizers' (who reads which field: lmc/optim `fields_read`).  Every
problem is collected, located by `loc_of(field)`."""
from __future__ import annotations

from lmc.core.errors import MultiError, SpecError
from lmc.core.fields import did_you_mean
from lmc.data.kinds import dataset_class
from lmc.losses import BOXES, CLASS, FLOAT, MULTI_HOT, dataset_need, loss_for
from lmc.optim import fields_read, optimizer_fields, optimizer_names, selection
from lmc.spec.config import SELECT_METRICS, TRAIN_FIELDS, dataset_labels, effective_loss, mixup_mode


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


class _Rules:
    """One recipe's rule context: the recipe, where its fields were written, the dataset and the
    effective loss, and the problems found so far."""

    def __init__(self, cfg, loc_of, dataset):
        self.cfg, self.loc_of, self.errs = cfg, loc_of, []
        self.ds = getattr(dataset, "value", dataset)
        self.kind = effective_loss(cfg, self.ds)
        self.loss = loss_for(self.kind)

    def flag(self, name):     # the option that set `name` on the command line, else None
        at = self.loc_of(name)
        return at if at is not None and at.is_flag else None

    def err(self, msg, at, also=(), hint=None):
        for name in also:   # the other field of the rule, if an option set it: say which
            if self.flag(name):
                msg += f" ({name} set by {self.flag(name).flag_with(getattr(self.cfg, name))})"
        self.errs.append(SpecError(msg, self.loc_of(at), hint=hint))

    def fix(self, name, need, other, most):   # a hint when an option set either side of `other` <= `name`
        f, o = self.flag(name), self.flag(other)
        if not (f or o):
            return None
        up = f"pass {f.flag_with(need)} or more" if f else f"raise {name} to {need}"
        down = f"pass {o.flag_with(most)} or less" if o else f"lower {other}"
        return f"{up}, or {down}"


def _dataset(r: "_Rules") -> None:
    """The dataset kind's own rules (lmc/data/kinds: Kind.rules; val_every_epochs is imagenet's)."""
    cfg, err, ds = r.cfg, r.err, r.ds
    if ds is None:
        if cfg.val_every_epochs > 1:
            err("val_every_epochs is the ImageNet cadence (dataset: imagenet), not for dataset (none)",
                "val_every_epochs", hint="set eval_every_n_epochs, lmc's cadence for every dataset")
        return
    for rule in dataset_class(ds).rules(cfg):
        err(rule.message, rule.field, also=rule.also, hint=rule.hint)


def _focal(r: "_Rules") -> None:
    """Use_focal: the loss's own focal rules."""
    cfg, err, loss = r.cfg, r.err, r.loss
    for r in loss.focal_rules(cfg) if cfg.use_focal else []:
        err(r.message, r.field, also=r.also, hint=r.hint)


def _switches(r: "_Rules") -> None:
    """A field that acts only under a switch, set without it."""
    cfg, err = r.cfg, r.err
    for name, switches in DEPENDS.items():
        # a field may serve several switches (focal_gamma: also the anchor path's focal objectness)
        switch, *others = switches if isinstance(switches, tuple) else (switches,)
        if getattr(cfg, name) != TRAIN_FIELDS[name][1] and not any(getattr(cfg, s) for s in (switch, *others)):
            err(f"{name} has no effect without {switch}: true", name, also=(switch,),
                hint=f"set {switch}: true, or drop {name}")


def _fpn_affine(r: "_Rules") -> None:
    """The FPN detector's box affine."""
    cfg, err = r.cfg, r.err
    if cfg.fpn_affine_prob and not cfg.fpn_scales:
        err("fpn_affine_prob moves the boxes of the FPN detector path (fpn_scales), which encodes its targets "
            "after augmentation; the single-box and anchor paths' grid targets hold one box per cell",
            "fpn_affine_prob", also=("fpn_scales",), hint="set fpn_scales (with an fpn_detect head), or drop fpn_affine_*")
    if cfg.fpn_affine_prob and not (cfg.fpn_affine_scale or cfg.fpn_affine_translate):
        err("fpn_affine_prob with fpn_affine_scale and fpn_affine_translate both 0 would change nothing",
            "fpn_affine_prob", hint="set fpn_affine_scale and/or fpn_affine_translate")


def _yolo_fields(r: "_Rules") -> None:
    """The YOLOv1 loss's options under another loss."""
    cfg, err, kind, loss = r.cfg, r.err, r.kind, r.loss
    if loss.label_format != BOXES:            # the YOLO loss is the one of box targets
        for name in YOLO_FIELDS:
            if getattr(cfg, name) != TRAIN_FIELDS[name][1]:
                err(f"{name} is a YOLOv1-loss option, but the loss is {kind.kind}", name,
                    hint="set use_yolov1: true (with a detection head), or drop it")


def _optimizer_fields(r: "_Rules") -> None:
    """A field no selected optimizer reads (lmc/optim hp_values)."""
    cfg, err = r.cfg, r.err
    chosen, by = selection(cfg)
    reads = fields_read(chosen, cfg)
    for name in optimizer_fields():
        if getattr(cfg, name) != TRAIN_FIELDS[name][1] and name not in reads:
            users = sorted(o for o in optimizer_names() if name in fields_read(o, cfg))
            err(f"{name} is read by {', '.join(users)}, not by the optimizer {chosen} ({by})", name, also=(by,),
                hint=f"drop {name}, or choose an optimizer that uses it")


def _schedule(r: "_Rules") -> None:
    """Warm-up needs a schedule."""
    cfg, err = r.cfg, r.err
    if cfg.warmup_epochs > 0 and not (cfg.cosine_decay or cfg.exp_lr_decay_rate > 0):
        err("warmup_epochs needs a schedule (cosine_decay or exp_lr_decay_rate): the constant schedule has "
            "no warm-up (the Lean kit's IREE path silently ignores it there)", "warmup_epochs", hint="set cosine_decay: true")


def _exclusions(r: "_Rules") -> None:
    """Switches that exclude or require each other."""
    cfg, err = r.cfg, r.err
    if cfg.use_tta and cfg.use_swag:
        err("use_tta with use_swag: SWAG's eval already averages logits (over weight samples); TTA's views "
            "of it are not implemented", "use_tta", also=("use_swag",))
    if cfg.use_auto_augment and cfg.use_rand_augment:
        err("use_auto_augment and use_rand_augment are exclusive (AutoAugment subsumes the colour RandAugment)",
            "use_rand_augment", also=("use_auto_augment",))
    # use_knn_mixup beside use_mixup / use_cutmix: KNN-mixup takes precedence (the Lean kit's
    # field doc; config.mixup_mode, data.mix.Mixer), so switching it off A/Bs the recipe's mixing
    if cfg.use_swag and not cfg.use_swa:
        err("use_swag requires use_swa: true", "use_swag", also=("use_swa",))
    # use_yolov1 asks for the box targets: a loss given explicitly must consume them


def _loss(r: "_Rules") -> None:
    """The loss against use_yolov1, its own rules (Loss.rules), the dataset's labels."""
    cfg, err, ds, kind, loss = r.cfg, r.err, r.ds, r.kind, r.loss
    if cfg.use_yolov1 and loss.label_format != BOXES:
        err(f"use_yolov1 conflicts with loss_kind {kind}", "loss_kind")
    for r in loss.rules(cfg, soft_aug=mixup_mode(cfg) is not None):
        err(r.message, r.field, also=r.also, hint=r.hint)
    # added (seed DatasetKind): a dataset of masks or boxes needs a loss that consumes them
    fmt = dataset_labels(ds)
    if fmt != CLASS and loss.label_format != fmt:
        err(f"dataset {ds} {dataset_need(fmt)}, not {kind}", "loss_kind")


def _optimizer_flags(r: "_Rules") -> None:
    """The seed's Muon/Shampoo booleans against `optimizer`."""
    cfg, err = r.cfg, r.err
    if cfg.use_muon and cfg.use_shampoo:
        err("use_muon and use_shampoo are exclusive", "use_shampoo", also=("use_muon",))
    for flag_name in ("use_muon", "use_shampoo"):
        chosen = flag_name.removeprefix("use_")
        if getattr(cfg, flag_name) and cfg.optimizer.value not in ("sgd", "adam", chosen):
            err(f"{flag_name} conflicts with optimizer: {cfg.optimizer.value} ({flag_name} selects {chosen}, "
                f"with AdamW for the other tensors)", flag_name, also=("optimizer",),
                hint=f"drop {flag_name}, or set optimizer: {chosen}")


def _bf16(r: "_Rules") -> None:
    """Bf16_conv without bf16."""
    cfg, err = r.cfg, r.err
    if cfg.bf16_conv and not cfg.bf16:
        err("bf16_conv is only meaningful with bf16: true", "bf16_conv", also=("bf16",))


def _counts(r: "_Rules") -> None:
    """Epoch counts that must fit in `epochs`."""
    cfg, err, fix = r.cfg, r.err, r.fix
    if cfg.warmup_epochs > cfg.epochs:
        err(f"warmup_epochs ({cfg.warmup_epochs}) exceeds epochs ({cfg.epochs})", "warmup_epochs",
            also=("epochs",), hint=fix("epochs", cfg.warmup_epochs, "warmup_epochs", cfg.epochs))
    if cfg.use_swa and cfg.swa_start_epoch >= max(cfg.epochs, 1):
        err(f"swa_start_epoch ({cfg.swa_start_epoch}) must be < epochs ({cfg.epochs})", "swa_start_epoch",
            also=("epochs",), hint=fix("epochs", cfg.swa_start_epoch + 1, "swa_start_epoch",
                                         max(cfg.epochs, 1) - 1))


def _selection(r: "_Rules") -> None:
    """keep_best / early_stop follow a metric the evals report, and need evals to follow."""
    cfg, err = r.cfg, r.err
    for name in ("keep_best", "early_stop"):
        sel = getattr(cfg, name)
        if sel is None:
            continue
        every = cfg.val_every_epochs if cfg.val_every_epochs > 1 else cfg.eval_every_n_epochs
        if not every:
            err(f"{name} follows the validation evals, and eval_every_n_epochs is 0 (one eval, at the end)",
                name, also=("eval_every_n_epochs",), hint="set train.eval_every_n_epochs: 1 (an eval every epoch)")
        if r.ds is None:
            continue       # the data's labels decide (checked at the first eval)
        fmt = dataset_labels(r.ds)
        fmt = MULTI_HOT if fmt == FLOAT and r.loss.label_format == MULTI_HOT else fmt
        have = SELECT_METRICS.get(fmt, ())
        if have and sel.metric not in have:
            err(f"{name}.metric {sel.metric!r}: the evals of this spec ({fmt} labels) report "
                f"{', '.join(have)}{did_you_mean(sel.metric, have)}", name)


RULES = (_dataset, _focal, _switches, _fpn_affine, _yolo_fields, _optimizer_fields, _schedule, _exclusions,
         _loss, _optimizer_flags, _bf16, _counts, _selection)


def problems(cfg, loc_of, dataset=None) -> list[SpecError]:
    """Every rule of RULES, in order; every problem found.  `loc_of(field)` locates the
    offending field; `dataset` (a DatasetKind or its name) enables the rules that need it."""
    r = _Rules(cfg, loc_of, dataset)
    for rule in RULES:
        rule(r)
    return r.errs


def check_rules(cfg, loc_of, dataset=None) -> None:
    """`problems`, raised: the first alone, or all of them."""
    errs = problems(cfg, loc_of, dataset)
    if errs:
        raise errs[0] if len(errs) == 1 else MultiError(errs)
