"""bce (declared, not lowered yet): sigmoid binary cross-entropy per class on logits [B, NC]
against f32 multi-hot targets [B, NC] (JAX-only in the Lean kit, losses.md §1)."""
from __future__ import annotations

from . import MULTI_HOT, Loss, register


@register("bce")
class BCE(Loss):
    order = 9
    label_format = MULTI_HOT

    def labels(self, out):
        return out
