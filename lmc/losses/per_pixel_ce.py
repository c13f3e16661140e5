"""per_pixel_ce: softmax cross-entropy per pixel over the class axis of logits [B, NC, H, W]
against int32 labels [B, H, W], label smoothing allowed, N = B·H·W:
t = (1−ε)·onehot(y) + ε/K;  loss = −Σ t·log_softmax(z) / N.  The LM's per-token CE is the same
loss on logits [B, V, T, 1] and labels [B, T, 1]."""
from __future__ import annotations

from lmc.losses import register
from lmc.losses._per_pixel import PerPixel, ce_pixels


@register("per_pixel_ce")
class PerPixelCE(PerPixel):
    order = 2
    hp = ("label_smoothing",)
    # the grid runs it on the LM's layout, logits [B, V, T, 1] (the layer cases on images)
    oracle_net = ([("conv2d", {"ic": 2, "oc": 3, "k_size": 3, "act": "relu"})], (2, 2, 5, 1))
    examples = [({"loss_kind": "per_pixel_ce"}, [("", {}), ("ls0.1", {"label_smoothing": 0.1})])]

    @staticmethod
    def reference(xp, logits, labels, label_smoothing=0.0):
        return ce_pixels(xp, logits, labels, label_smoothing).mean()
