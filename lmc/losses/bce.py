"""bce: sigmoid binary cross-entropy per class on logits [B, NC] against f32 multi-hot targets
[B, NC] (timm's BinaryCrossEntropy): the mean over B×C (not the mean over B of a
class sum):  loss = mean_{b,c} [softplus(z) − t·z]  (= t·softplus(−z) + (1−t)·softplus(z));
output gradient (σ(z) − t)/(B·C).  Hard labels become one-hot targets smoothed t·(1−ε) + ε/NC on the host;
soft targets are used as given.  (The Lean kit has it in JAX only; lmc lowers it.)"""
from __future__ import annotations

import numpy as np

from lmc.core.types import flt
from lmc.losses import MULTI_HOT, Loss, near_ties, register, row_types


@register("bce")
class BCE(Loss):
    known_as = ("binary_cross_entropy", "bce_with_logits", "binary_crossentropy")
    order = 9
    label_format = MULTI_HOT
    examples = [({"loss_kind": "bce"}, [("", {})])]

    def labels(self, out):
        return out

    def context(self, logits, labels):
        b, nc = logits.dims
        return {"inv_bc": flt(1.0 / (b * nc)), **row_types(logits)}

    def fit_labels(self, y, num_classes, cfg):
        """Integer labels → one-hot targets smoothed here: t = onehot·(1−ε) + ε/NC."""
        eps = cfg.label_smoothing
        y = np.asarray(y)
        if y.ndim == 2:                          # already multi-hot / soft targets: as given
            return np.ascontiguousarray(y, np.float32)
        t = np.zeros((len(y), num_classes), np.float32)
        t[np.arange(len(y)), y.astype(np.int64)] = 1.0
        return (t * (1.0 - eps) + eps / num_classes).astype(np.float32)

    def draw_labels(self, rng, labels, logits):
        # multi-hot rows with some soft entries (mixed targets are used as given)
        t = (rng.random(labels.dims) < 0.4).astype(np.float32)
        return np.where(rng.random(labels.dims) < 0.3, rng.random(labels.dims), t).astype(np.float32)

    @staticmethod
    def reference(xp, logits, labels):
        sp = xp.maximum(logits, 0.0) + xp.log1p(xp.exp(-xp.abs(logits)))
        return (sp - labels * logits).mean()

    @staticmethod
    def correct_reference(logits, labels):
        """Rows whose arg-max logit holds the row's largest target."""
        t = np.asarray(labels)
        top = np.argmax(logits, axis=1)
        return int((t[np.arange(len(t)), top] >= t.max(axis=1)).sum()), near_ties(logits)
