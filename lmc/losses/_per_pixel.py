"""What the five per-pixel (segmentation) kinds share (losses.md §1, §4): logits [B, NC, H, W],
labels [B, H, W] int32 — a class index per pixel, at the logits' resolution — and no soft-label
augmentation (mixup/cutmix/knn-mixup mix images, not masks).  The LM's head is the same shape
with W = 1: logits [B, V, T, 1], labels [B, T, 1].  Not a loss itself.

`correct` (the train loop's accuracy numerator, divided there by B) is Σ_b (correct pixels of
sample b)/(H·W): the batch's pixel accuracy times B, so `acc` reads as pixel accuracy."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from lmc.core.errors import DataError
from lmc.core.types import TensorType, f32, flt, i32
from lmc.losses import MASK, Loss, Rule


# the soft-Dice smoothing constant (losses.md §4.4: the seed's codegen uses 1.0)
DICE_SMOOTH = 1.0


class PerPixel(Loss):
    label_format = MASK
    logits_rank = 4
    logits_layout = "per-pixel logits [batch, classes, height, width]"
    rank_hint = None
    dataset_need = "has per-pixel labels and needs a per_pixel_* loss"
    # label_smoothing applies (to the one-hot target of a CE term)
    smoothing_ok: ClassVar[bool] = True
    # the oracle's net for the loss × optimizer grid: a conv to NC channels on a small image
    # (the logits [B, NC, H, W] then come from one 1×1 conv head, `oracle_head`)
    oracle_net: ClassVar = ([("conv2d", {"ic": 2, "oc": 3, "k_size": 3, "act": "relu"})], (2, 2, 4, 5))

    def labels(self, out):
        b, _, h, w = out.dims
        return i32(b, h, w)

    def rules(self, cfg, soft_aug):
        out = []
        if soft_aug:
            out.append(Rule(f"{self.kind} (per-pixel labels) cannot be combined with mixup/cutmix/knn-mixup",
                            "loss_kind"))
        if not self.smoothing_ok and cfg.label_smoothing != 0.0:
            out.append(Rule(f"{self.kind} requires label_smoothing = 0", "label_smoothing"))
        return out

    @staticmethod
    def oracle_head(out: TensorType, nc: int):
        """The layers the oracle appends to a body of output `out` to reach per-pixel logits
        (None: no per-pixel logits can follow a rank-2 body)."""
        if out.rank != 4:
            return None
        return [("conv2d", {"ic": out.dims[1], "oc": nc, "k_size": 1, "act": "identity"})]

    def context(self, logits, labels):
        b, nc, h, w = logits.dims
        n = b * h * w
        return {"b": b, "nc": nc, "n": n, "inv_n": flt(1.0 / n), "neg_inv_n": flt(-1.0 / n), "inv_hw": flt(1.0 / (h * w)),
                "pix": f32(b, h, w).mlir, "pix_mask": TensorType((b, h, w), "i1").mlir,
                "mask": TensorType(logits.dims, "i1").mlir, "ilogits": TensorType(logits.dims, "i32").mlir,
                "bc": f32(b, nc).mlir, "cv": f32(nc).mlir, "inv_k": flt(1.0 / nc), "smooth": flt(DICE_SMOOTH)}

    def fit_labels(self, y, num_classes, cfg):
        y = np.asarray(y)
        if y.ndim != 3:
            raise DataError(f"loss {self.kind} needs per-pixel labels [N, H, W] (a class index per pixel), "
                            f"but the dataset delivers labels of shape {list(y.shape)}",
                            hint="use a dataset with masks (pets, brats, an npz whose y is [N, H, W]) "
                                 "or a loss on class labels")
        return np.ascontiguousarray(y, np.int32)

    def draw_labels(self, rng, labels, logits):
        return rng.integers(0, logits.dims[1], labels.dims).astype(np.int32)

    @staticmethod
    def correct_reference(logits, labels):
        """Σ_b (pixels of sample b whose label logit is the max) / (H·W); `ambiguous` bounds the
        near-ties (f32 may reorder them) and the f32 rounding of the sums."""
        z = np.asarray(logits, np.float64)
        hw = z.shape[2] * z.shape[3]
        hit = (np.take_along_axis(z, np.asarray(labels, np.int64)[:, None], 1)[:, 0] >= z.max(axis=1))
        s = np.sort(z, axis=1)
        ties = int(np.sum(s[:, -1] - s[:, -2] < 1e-4 * (1 + np.abs(s[:, -1]))))
        return float(hit.sum()) / hw, ties / hw + 1e-5 * z.shape[0]


def log_softmax(xp, z):
    """log_softmax over the class axis (dim 1), max-shifted."""
    z = z - z.max(axis=1, keepdims=True)
    return z - xp.log(xp.exp(z).sum(axis=1, keepdims=True))


def one_hot(xp, labels, k, dtype):
    """[B, H, W] int → [B, K, H, W] 0/1."""
    return (labels[:, None] == xp.arange(k).reshape((1, k, 1, 1))).astype(dtype)


def dice_reference(xp, logits, labels):
    """1 − mean_c (2·Σp·y + s)/(Σp + Σy + s), sums over the whole batch (B, H, W)."""
    k = logits.shape[1]
    p = xp.exp(log_softmax(xp, logits))
    y = one_hot(xp, labels, k, logits.dtype)
    inter, ps, ys = ((p * y).sum(axis=(0, 2, 3)), p.sum(axis=(0, 2, 3)), y.sum(axis=(0, 2, 3)))
    return 1.0 - ((2 * inter + DICE_SMOOTH) / (ps + ys + DICE_SMOOTH)).mean()


def ce_pixels(xp, logits, labels, eps):
    """−Σ_c t·logp per pixel [B, H, W], t = (1−ε)·onehot + ε/K."""
    k = logits.shape[1]
    t = (1.0 - eps) * one_hot(xp, labels, k, logits.dtype) + eps / k
    return -(t * log_softmax(xp, logits)).sum(axis=1)
