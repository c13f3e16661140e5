"""What the training loop cannot do yet, or cannot do with data-parallel ranks: recipe switches
lmc train does not implement (sync_bn), the combinations the fp8 and spectral-cap passes do not
support, and results that would depend on the rank count."""
from __future__ import annotations

from lmc.core.errors import NotImplementedKind, SpecError
from lmc.losses import make_loss
from lmc.spec.config import TRAIN_FIELDS, effective_loss

# Recipe switches the loop (or the lowering) does not implement yet; a spec that turns one on
# is refused instead of silently training without it.
UNSUPPORTED = ("sync_bn",)


def no_recipe(spec) -> SpecError:
    """A spec without `train:` is valid (info, render --function forward, eval of a checkpoint),
    but there is nothing to train it with."""
    return SpecError(f"{spec.file}: the spec has no `train:` recipe",
                     hint="add train: {learning_rate: …, batch_size: …, epochs: …}")


def recipe_refusals(cfg) -> list:
    """The first of what the loop refuses in `cfg`, located at the recipe by the caller."""
    on = [f for f in UNSUPPORTED if getattr(cfg, f) != TRAIN_FIELDS[f][1]]
    if on:
        return [NotImplementedKind(f"not implemented yet in lmc train: {', '.join('train.' + f for f in on)}",
                                   hint="remove these fields from the recipe (or set them to their defaults)")]
    if cfg.fp8.value != "off":
        with_ = [f for f, on in (("use_ema", cfg.use_ema), ("use_swa", cfg.use_swa),
                                  ("grad_accum_steps > 1", cfg.grad_accum_steps > 1),
                                  ("spectral_cap", cfg.spectral_cap > 0)) if on]
        if with_:
            return [NotImplementedKind(f"not implemented yet: train.fp8 with {', '.join(with_)}")]
    if cfg.spectral_cap > 0 and cfg.grad_accum_steps > 1:
        return [NotImplementedKind("not implemented yet: train.spectral_cap with grad_accum_steps > 1")]
    if cfg.exp_lr_decay_rate > 0 and cfg.exp_lr_decay_epochs <= 0:
        return [SpecError("train.exp_lr_decay_epochs must be > 0 with exp_lr_decay_rate > 0")]
    return []


def check_recipe(cfg) -> None:
    """`recipe_refusals`, raised (the first)."""
    errs = recipe_refusals(cfg)
    if errs:
        raise errs[0]


def dist_refusals(net, world: int) -> list:
    """What data-parallel training refuses: results that would depend on the rank count."""
    cfg = net.spec.train
    loss = make_loss(effective_loss(cfg, net.spec.dataset), cfg)
    why = []
    if not loss.batch_mean:
        why.append(f"loss {loss.kind}: its batch value is not a mean of per-example terms (a ratio over the "
                   f"batch, or a batch-wide statistic), so the mean of the ranks' gradients is not the global "
                   f"batch's")
    if cfg.fp8.value != "off":
        why.append("train.fp8 (the projected step is the fused @train_step)")
    if not why:
        return []
    return [NotImplementedKind(f"not implemented yet with {world} data-parallel ranks: " + "; ".join(why),
                               hint="train with one process (no --nproc)")]
