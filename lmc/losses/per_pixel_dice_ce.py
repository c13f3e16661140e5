"""per_pixel_dice_ce: per-pixel CE + batch soft Dice on logits [B, NC, H, W]
against int32 labels [B, H, W]; label smoothing applies to the CE half only (Dice uses the raw
one-hot).  loss = −Σ t·logp / N + 1 − (1/K) Σ_c D_c; the output gradient is the sum of the two losses' gradients."""
from __future__ import annotations

from lmc.losses import register
from lmc.losses._per_pixel import PerPixel, ce_pixels, dice_reference


@register("per_pixel_dice_ce")
class PerPixelDiceCE(PerPixel):
    batch_mean = False              # its Dice term is batch-wide
    order = 4
    hp = ("label_smoothing",)
    examples = [({"loss_kind": "per_pixel_dice_ce"}, [("", {}), ("ls0.1", {"label_smoothing": 0.1})])]

    @staticmethod
    def reference(xp, logits, labels, label_smoothing=0.0):
        return ce_pixels(xp, logits, labels, label_smoothing).mean() + dice_reference(xp, logits, labels)
