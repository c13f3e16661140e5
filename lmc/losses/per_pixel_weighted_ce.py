"""per_pixel_weighted_ce (declared, not lowered yet): per-pixel CE with a weight per true class,
weighted mean, on logits [B, NC, H, W] against int32 labels [B, H, W] (losses.md §1).
Written `loss_kind: {per_pixel_weighted_ce: {weights: [1, 4, 4]}}`, one weight per class, each > 0."""
from __future__ import annotations

from . import Param, register
from ._per_pixel import PerPixel


def _positive(v):
    if not v or any(w <= 0 for w in v):
        return f"expected a non-empty list of positive numbers, got {list(v)}"
    return None


@register("per_pixel_weighted_ce")
class PerPixelWeightedCE(PerPixel):
    order = 5
    params = (Param("weights", list[float], (), example="[w0, w1, ...]", check=_positive),)

    def check_classes(self, num_classes):
        w = self.kind.weights
        if num_classes and len(w) != num_classes:
            return f"{self.name} has {len(w)} weights but the net has {num_classes} classes"
        return None
