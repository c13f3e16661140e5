"""soft_label_ce: cross-entropy against soft targets t [B, K] (rows sum to 1: mixup/cutmix
output, or one-hot labels with the smoothing already in t):  loss = −Σ t·log_softmax(z) / B."""
from __future__ import annotations

import numpy as np

from lmc.losses import SOFT, Loss, near_ties, register, row_types


@register("soft_label_ce")
class SoftLabelCE(Loss):
    known_as = ("categorical_crossentropy", "soft_cross_entropy")
    order = 1
    label_format = SOFT
    oracle_grid = True
    examples = [({"loss_kind": "soft_label_ce"}, [("", {})])]

    def labels(self, out):
        return out

    def context(self, logits, labels):
        b, _ = logits.dims
        return {"b": b, "inv_b": f"{1.0 / b:.9e}", **row_types(logits)}

    def fit_labels(self, y, num_classes, cfg):
        """Integer labels become one-hot targets with label smoothing applied here:
        t = (1−ε)·onehot + ε/K (the targets are what the template sees; it adds nothing)."""
        eps = cfg.label_smoothing
        t = np.full((len(y), num_classes), eps / num_classes, np.float32)
        t[np.arange(len(y)), np.asarray(y, np.int64)] += 1.0 - eps
        return t

    def draw_labels(self, rng, labels, logits):
        return rng.dirichlet(np.ones(labels.dims[1]), labels.dims[0]).astype(np.float32)

    @staticmethod
    def reference(xp, logits, labels):
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        return -(labels * logp).sum() / logits.shape[0]

    @staticmethod
    def correct_reference(logits, labels):
        """Rows whose arg-max logit holds the row's largest target."""
        t = np.asarray(labels)
        top = np.argmax(logits, axis=1)
        return int((t[np.arange(len(t)), top] >= t.max(axis=1)).sum()), near_ties(logits)
