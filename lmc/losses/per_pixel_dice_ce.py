"""per_pixel_dice_ce (declared, not lowered yet): Dice + per-pixel CE on logits [B, NC, H, W]
against int32 labels [B, H, W]; label smoothing applies to the CE half only (losses.md §1)."""
from __future__ import annotations

from . import register
from ._per_pixel import PerPixel


@register("per_pixel_dice_ce")
class PerPixelDiceCE(PerPixel):
    order = 4
