"""float_target_mse (declared, not lowered yet): mean squared error against an f32 target of the
net output's own shape (diffusion, autoencoders; the seed reserves it, losses.md §1)."""
from __future__ import annotations

from . import FLOAT, Loss, register


@register("float_target_mse")
class FloatTargetMSE(Loss):
    order = 7
    label_format = FLOAT
    logits_rank = None            # any output: the target has its shape

    def labels(self, out):
        return out
