"""What the five per-pixel (segmentation) kinds share (losses.md §1): logits [B, NC, H, W],
labels [B, H, W] int32 — a class index per pixel, at the logits' resolution — and no soft-label
augmentation (mixup/cutmix/knn-mixup mix images, not masks).  Not a loss itself."""
from __future__ import annotations

from typing import ClassVar

from ..types import i32
from . import MASK, Loss, Rule


class PerPixel(Loss):
    label_format = MASK
    logits_rank = 4
    logits_layout = "per-pixel logits [batch, classes, height, width]"
    rank_hint = None
    dataset_need = "has per-pixel labels and needs a per_pixel_* loss"
    # label_smoothing applies (to the one-hot target of a CE term)
    smoothing_ok: ClassVar[bool] = True

    def labels(self, out):
        b, _, h, w = out.dims
        return i32(b, h, w)

    def rules(self, cfg, soft_aug):
        out = []
        if soft_aug:
            out.append(Rule(f"{self.kind} (per-pixel labels) cannot be combined with mixup/cutmix/knn-mixup",
                            "loss_kind"))
        if not self.smoothing_ok and cfg.label_smoothing != 0.0:
            out.append(Rule(f"{self.kind} requires label_smoothing = 0", "label_smoothing"))
        return out
