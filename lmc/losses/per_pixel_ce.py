"""per_pixel_ce (declared, not lowered yet): softmax cross-entropy per pixel over the class axis
of logits [B, NC, H, W] against int32 labels [B, H, W], label smoothing allowed (losses.md §1)."""
from __future__ import annotations

from . import register
from ._per_pixel import PerPixel


@register("per_pixel_ce")
class PerPixelCE(PerPixel):
    order = 2
