"""per_pixel_focal_ce (declared, not lowered yet): per-pixel focal CE −(1−p_t)^γ·log p_t on logits
[B, NC, H, W] against int32 labels [B, H, W]; γ = 0 is per_pixel_ce (losses.md §1).
Written `loss_kind: {per_pixel_focal_ce: {gamma: 2.0}}` (γ >= 0, default 2)."""
from __future__ import annotations

from . import Param, register
from ._per_pixel import PerPixel


def _non_negative(v):
    return f"expected a number >= 0, got {v}" if v < 0 else None


@register("per_pixel_focal_ce")
class PerPixelFocalCE(PerPixel):
    order = 6
    params = (Param("gamma", float, 2.0, check=_non_negative),)
    # use_focal does not modify per-pixel losses: this kind is the per-pixel focal loss
    instead_of_focal = "for segmentation use loss_kind: {per_pixel_focal_ce: {gamma: 2}}"
    # added (losses.md §1): focal already reweights by confidence
    smoothing_ok = False
