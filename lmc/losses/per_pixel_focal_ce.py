"""per_pixel_focal_ce: per-pixel focal CE on logits [B, NC, H, W] against int32 labels [B, H, W],
N = B·H·W:  q = max(1 − p_t, 1e-12),  loss = −(1/N) Σ q^γ·log p_t, with the
exact gradient (the focal factor is not detached); γ = 0 is per_pixel_ce.
Written `loss_kind: {per_pixel_focal_ce: {gamma: 2.0}}` (γ >= 0, default 2).  γ reaches the
module as a runtime hyperparameter (hp entry `gamma`): one compiled step serves every γ."""
from __future__ import annotations

from lmc.losses import Param, register
from lmc.losses._per_pixel import PerPixel, log_softmax, one_hot

Q_FLOOR = 1e-12


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
    hp = ("gamma",)
    examples = [({"loss_kind": "per_pixel_focal_ce"},
                 [("", {}), ("g0", {"loss_kind": "{per_pixel_focal_ce: {gamma: 0}}"}),
                  ("g0.5", {"loss_kind": "{per_pixel_focal_ce: {gamma: 0.5}}"})])]

    def context(self, logits, labels):
        return {**super().context(logits, labels), "q_floor": f"{Q_FLOOR:.9e}"}

    def hp_values(self, cfg):
        return {"gamma": float(self.kind.gamma)}

    @staticmethod
    def reference(xp, logits, labels, gamma=2.0):
        b, k, h, w = logits.shape
        logpt = (log_softmax(xp, logits) * one_hot(xp, labels, k, logits.dtype)).sum(axis=1)
        q = xp.maximum(1.0 - xp.exp(logpt), Q_FLOOR)
        return -(q ** gamma * logpt).sum() / (b * h * w)
