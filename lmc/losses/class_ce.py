"""class_ce: softmax cross-entropy on integer class labels, with label smoothing ε
(losses.md §2): t = (1−ε)·onehot(y) + ε/K;  loss = −Σ t·log_softmax(z) / B."""
from __future__ import annotations

import numpy as np

from ..types import TensorType, f32, i32
from . import CLASS, Loss, Rule, near_ties, register


@register("class_ce")
class ClassCE(Loss):
    order = 0
    default = True                # the seed's default loss_kind (config.effective_loss derives from it)
    label_format = CLASS
    accepts_focal = True          # a modifier of integer-label CE (the template does not have it yet: refused)
    hp = ("label_smoothing",)
    examples = [({}, [("", {}), ("ls0.1", {"label_smoothing": 0.1})])]

    def focal_rules(self, cfg):
        if cfg.label_smoothing != 0.0:
            return [Rule("use_focal requires label_smoothing = 0 (focal mixes poorly with smoothing)",
                         "label_smoothing", also=("use_focal",))]
        return []

    def refused(self, cfg):
        return ["use_focal"] if cfg.use_focal else []

    def labels(self, out):
        return i32(out.dims[0])

    def context(self, logits, labels):
        b, nc = logits.dims
        return {"b": b, "nc": nc, "inv_b": f"{1.0 / b:.9e}", "row": f32(b).mlir, "mask": TensorType(logits.dims, "i1").mlir,
                "row_mask": TensorType((b,), "i1").mlir}

    def fit_labels(self, y, num_classes, cfg):
        return np.ascontiguousarray(y, np.int32)

    def draw_labels(self, rng, labels, logits):
        return rng.integers(0, logits.dims[1], labels.dims).astype(np.int32)

    @staticmethod
    def reference(xp, logits, labels, label_smoothing=0.0):
        k = logits.shape[1]
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        hot = (labels[:, None] == xp.arange(k)[None, :]).astype(logp.dtype)
        t = (1.0 - label_smoothing) * hot + label_smoothing / k
        return -(t * logp).sum() / logits.shape[0]

    @staticmethod
    def correct_reference(logits, labels):
        """Rows whose label logit is the max."""
        return int((np.argmax(logits, axis=1) == labels).sum()), near_ties(logits)
