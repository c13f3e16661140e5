"""Learning-rate schedules (optimizers.md §7): the lr of global step s (1-based), per step.

With bpE steps per epoch, ws = warmup_epochs·bpE warmup steps and S = epochs·bpE steps:
  exponential (exp_lr_decay_rate r > 0; wins over cosine):
      base·s/ws while s ≤ ws, then base·r^((e − warmup_epochs)/exp_lr_decay_epochs), e = (s − 1)/bpE
  cosine (cosine_decay):
      base·s/ws while s ≤ ws, then base·½·(1 + cos(π·min((s − ws)/(S − ws), 1)))
  constant: base.  warmup_epochs is ignored here, as on the reference's IREE path (§7.1).
S comes from the recipe's epochs, so `--max-steps` (stopping early) never changes the lr of a step."""
from __future__ import annotations

import math


def schedule_name(cfg) -> str:
    if cfg.exp_lr_decay_rate > 0:
        return "exponential"
    return "cosine" if cfg.cosine_decay else "constant"


def learning_rate(cfg, step: int, steps_per_epoch: int) -> float:
    """The lr for global step `step` (1-based; step 1 is the first update)."""
    base = cfg.learning_rate
    kind = schedule_name(cfg)
    if kind == "constant":
        return base
    ws = cfg.warmup_epochs * steps_per_epoch
    if ws > 0 and step <= ws:
        return base * step / ws
    if kind == "exponential":
        epoch = (step - 1) / steps_per_epoch
        return base * cfg.exp_lr_decay_rate ** ((epoch - cfg.warmup_epochs) / cfg.exp_lr_decay_epochs)
    total = cfg.epochs * steps_per_epoch
    frac = min((step - ws) / max(total - ws, 1), 1.0)
    return base * 0.5 * (1.0 + math.cos(math.pi * frac))
