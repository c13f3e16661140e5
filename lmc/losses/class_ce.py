"""class_ce: softmax cross-entropy on integer class labels, with label smoothing ε:
t = (1−ε)·onehot(y) + ε/K;  loss = −Σ t·log_softmax(z) / B.
With use_focal (label_smoothing must be 0): q = max(1 − p_y, 1e-7),
loss = −(1/B) Σ q^γ·log p_y, γ = focal_gamma (a runtime hyperparameter), exact gradient."""
from __future__ import annotations

import numpy as np

from lmc.core.types import i32
from lmc.losses import CLASS, Loss, Rule, near_ties, register, row_types

Q_FLOOR = 1e-7          # the focal factor's floor (losses.md §2.1)


@register("class_ce")
class ClassCE(Loss):
    known_as = ("cross_entropy", "ce", "softmax_cross_entropy", "sparse_categorical_crossentropy", "nll")
    order = 0
    oracle_grid = True
    default = True                # the seed's default loss_kind (config.effective_loss derives from it)
    label_format = CLASS
    accepts_focal = True          # use_focal modifies it (the template's focal branch)
    hp = ("label_smoothing",)
    examples = [({}, [("", {}), ("ls0.1", {"label_smoothing": 0.1})]),
                ({"use_focal": True}, [("", {}), ("g0", {"focal_gamma": 0.0}), ("g0.5", {"focal_gamma": 0.5})])]

    def __init__(self, kind, cfg=None):
        super().__init__(kind, cfg)
        self.focal = bool(cfg is not None and cfg.use_focal)
        if self.focal:
            self.hp = ("label_smoothing", "focal_gamma")

    def focal_rules(self, cfg):
        if cfg.label_smoothing != 0.0:
            return [Rule("use_focal requires label_smoothing = 0 (focal mixes poorly with smoothing)",
                         "label_smoothing", also=("use_focal",))]
        return []

    def labels(self, out):
        return i32(out.dims[0])

    def context(self, logits, labels):
        b, nc = logits.dims
        return {"b": b, "nc": nc, "inv_b": f"{1.0 / b:.9e}", **row_types(logits), "focal": self.focal,
                "q_floor": f"{Q_FLOOR:.9e}"}

    def fit_labels(self, y, num_classes, cfg):
        return np.ascontiguousarray(y, np.int32)

    def draw_labels(self, rng, labels, logits):
        return rng.integers(0, logits.dims[1], labels.dims).astype(np.int32)

    @staticmethod
    def reference(xp, logits, labels, label_smoothing=0.0, focal_gamma=None):
        """focal_gamma given: the focal loss (use_focal; the rules keep label_smoothing at 0)."""
        k = logits.shape[1]
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        hot = (labels[:, None] == xp.arange(k)[None, :]).astype(logp.dtype)
        if focal_gamma is not None:
            lpy = (hot * logp).sum(axis=1)
            q = xp.maximum(1.0 - xp.exp(lpy), Q_FLOOR)
            return -(q ** focal_gamma * lpy).sum() / logits.shape[0]
        t = (1.0 - label_smoothing) * hot + label_smoothing / k
        return -(t * logp).sum() / logits.shape[0]

    @staticmethod
    def correct_reference(logits, labels):
        """Rows whose label logit is the max."""
        return int((np.argmax(logits, axis=1) == labels).sum()), near_ties(logits)
