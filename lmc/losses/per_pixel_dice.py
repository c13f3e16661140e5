"""per_pixel_dice (declared, not lowered yet): soft Dice over the batch, per class, averaged, on
logits [B, NC, H, W] against int32 labels [B, H, W] (losses.md §1)."""
from __future__ import annotations

from . import register
from ._per_pixel import PerPixel


@register("per_pixel_dice")
class PerPixelDice(PerPixel):
    order = 3
    # added (losses.md §1): Dice alone has no one-hot target to smooth
    smoothing_ok = False
