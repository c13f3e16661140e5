"""per_pixel_dice: soft Dice over the whole batch, per class, averaged, on logits
[B, NC, H, W] against int32 labels [B, H, W], with the raw one-hot and smooth s = 1:
loss = 1 − (1/K) Σ_c (2·Σ p_c·y_c + s) / (Σ p_c + Σ y_c + s).  A class absent from the batch
and not predicted scores 1."""
from __future__ import annotations

from lmc.losses import register
from lmc.losses._per_pixel import PerPixel, dice_reference


@register("per_pixel_dice")
class PerPixelDice(PerPixel):
    batch_mean = False              # soft Dice of the whole batch
    order = 3
    # added (losses.md §1): Dice alone has no one-hot target to smooth
    smoothing_ok = False
    examples = [({"loss_kind": "per_pixel_dice"}, [("", {})])]

    @staticmethod
    def reference(xp, logits, labels):
        return dice_reference(xp, logits, labels)
