"""per_pixel_weighted_ce: per-pixel CE with a weight per true class, weighted mean
(PyTorch's CrossEntropyLoss(weight=w, reduction='mean')), on logits [B, NC, H, W] against int32
labels [B, H, W]:  ω_k = w[y_k],  loss = Σ_k ω_k·CE_k / Σ_k ω_k — invariant to the scale of w;
smoothing applies to the target t (the weight stays the true class's).
Written `loss_kind: {per_pixel_weighted_ce: {weights: [1, 4, 4]}}`, one weight per class, each > 0."""
from __future__ import annotations

from lmc.core.types import flt
from lmc.losses import Param, register
from lmc.losses._per_pixel import PerPixel, ce_pixels


def _positive(v):
    if not v or any(w <= 0 for w in v):
        return f"expected a non-empty list of positive numbers, got {list(v)}"
    return None


@register("per_pixel_weighted_ce")
class PerPixelWeightedCE(PerPixel):
    batch_mean = False              # Σ w_y·CE / Σ w_y over the batch
    order = 5
    params = (Param("weights", list[float], (), example="[w0, w1, ...]", check=_positive),)
    hp = ("label_smoothing",)
    examples = [({"loss_kind": "{per_pixel_weighted_ce: {weights: [1, 4, 0.5]}}"},
                 [("", {}), ("ls0.1", {"label_smoothing": 0.1})]),
                # a scaled copy of w is the same loss (Σω·CE/Σω)
                ({"loss_kind": "{per_pixel_weighted_ce: {weights: [10, 40, 5]}}"}, [("", {})])]

    def check_classes(self, num_classes):
        w = self.kind.weights
        if num_classes and len(w) != num_classes:
            return f"{self.name} has {len(w)} weights but the net has {num_classes} classes"
        return None

    def context(self, logits, labels):
        # the weights are the loss kind's own values (part of the kind, like its name), not a
        # runtime hyperparameter: a module is compiled for one set of weights
        return {**super().context(logits, labels),
                "weights": "[" + ", ".join(flt(w) for w in self.kind.weights) + "]"}

    def reference(self, xp, logits, labels, label_smoothing=0.0):
        w = xp.asarray(self.kind.weights, logits.dtype)[labels]
        return (w * ce_pixels(xp, logits, labels, label_smoothing)).sum() / w.sum()
