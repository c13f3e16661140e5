"""Validation metrics beyond top-1 (losses.md §9, training.md §7), chosen by what the dataset's
labels are (Dataset.label_format):

- per-pixel masks: a confusion matrix over every validation pixel → pixel accuracy, per-class
  IoU_c = TP/(row + col − TP) (classes absent from both labels and predictions are left out of
  the mean), mIoU; and region Dice for unions of classes (BraTS: WT = {1,2,3}, TC = {2,3},
  ET = {3}): Dice_R = 2|R_gt ∩ R_pred|/(|R_gt| + |R_pred|), 1.0 when R is absent everywhere.
- float targets: MSE over every element and PSNR = 10·log10(peak²/MSE), peak 1 (the targets are
  images in [0, 1]), from the dataset's overall MSE.

Each result has `n`, `region`, `as_dict()` (JSONL, `lmc eval --json`) and `describe()` (the
epoch line), as EvalResult does."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SegResult:
    num_classes: int
    regions: dict = field(default_factory=dict)        # name → class ids (region Dice)
    n: int = 0                                           # images
    conf: np.ndarray | None = None                       # [K, K] int64: rows true, cols predicted
    region: str = "live"

    def add(self, logits: np.ndarray, labels: np.ndarray) -> None:
        """logits [B, K, H, W], labels [B, H, W]; the first maximal class wins ties.  K is the
        logits' (the count the caller passes is the head's, None for per-pixel logits)."""
        k = self.num_classes = logits.shape[1]
        pred = np.argmax(logits, axis=1).astype(np.int64)
        y = labels.astype(np.int64)
        c = np.bincount((y * k + pred).ravel(), minlength=k * k).reshape(k, k)
        self.conf = c if self.conf is None else self.conf + c
        self.n += len(labels)

    def iou(self) -> list[float | None]:
        c = self.conf if self.conf is not None else np.zeros((self.num_classes,) * 2, np.int64)
        tp = np.diag(c).astype(np.float64)
        union = c.sum(0) + c.sum(1) - tp
        return [float(t / u) if u > 0 else None for t, u in zip(tp, union)]

    def miou(self) -> float | None:
        present = [v for v in self.iou() if v is not None]
        return float(np.mean(present)) if present else None

    def pixel_acc(self) -> float | None:
        total = int(self.conf.sum()) if self.conf is not None else 0
        return float(np.trace(self.conf)) / total if total else None

    def dice(self, classes) -> float:
        c = self.conf
        idx = list(classes)
        inter = c[np.ix_(idx, idx)].sum()
        gt, pr = c[idx, :].sum(), c[:, idx].sum()
        return 1.0 if gt + pr == 0 else float(2 * inter / (gt + pr))

    def as_dict(self) -> dict:
        out = {"n": self.n, "pixel_acc": self.pixel_acc(), "miou": self.miou(), "iou": self.iou()}
        if self.conf is not None:
            out.update({f"dice_{r}": self.dice(cl) for r, cl in self.regions.items()})
        return out

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        s = f"pixel acc {100 * self.pixel_acc():.2f}%, mIoU {self.miou():.4f} ({self.num_classes} classes, {self.n} images)"
        if self.regions:
            s += ", Dice " + ", ".join(f"{r} {self.dice(cl):.4f}" for r, cl in self.regions.items())
        return s


PSNR_PEAK = 1.0


@dataclass
class RegressionResult:
    n: int = 0                  # examples
    sse: float = 0.0
    count: int = 0              # elements
    region: str = "live"

    def add(self, out: np.ndarray, target: np.ndarray) -> None:
        d = out.astype(np.float64) - target.astype(np.float64)
        self.sse += float(np.sum(d * d))
        self.count += d.size
        self.n += len(target)

    def mse(self) -> float | None:
        return self.sse / self.count if self.count else None

    def psnr(self) -> float | None:
        m = self.mse()
        if m is None:
            return None
        return math.inf if m == 0 else 10.0 * math.log10(PSNR_PEAK ** 2 / m)

    def as_dict(self) -> dict:
        return {"n": self.n, "mse": self.mse(), "psnr": self.psnr()}

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        return f"MSE {self.mse():.5f}, PSNR {self.psnr():.2f} dB (peak 1; {self.n} examples)"


def scorer(label_format: str, num_classes: int, regions: dict | None = None):
    """The result that scores labels of `label_format` (None: class ids, EvalResult's top-1)."""
    from .losses import FLOAT, MASK, MULTI_HOT
    if label_format == MULTI_HOT:
        return MultiHotResult()
    if label_format == MASK:
        return SegResult(num_classes, dict(regions or {}))
    if label_format == FLOAT:
        return RegressionResult()
    return None


def eval_format(dataset_format: str, loss) -> str:
    """What the validation labels are scored as: the dataset's format, except that float
    targets [N, NC] consumed by a multi-hot loss are scored as multi-hot."""
    from .losses import FLOAT
    if dataset_format == FLOAT and loss is not None:
        return loss.label_format
    return dataset_format


@dataclass
class MultiHotResult:
    """Multi-hot / soft targets [N, NC]: top-1 = rows whose arg-max logit holds the row's
    largest target (the multi-hot loss template's `correct`), with its 95% Wilson interval."""
    n: int = 0
    top1: int = 0
    region: str = "live"

    def add(self, logits: np.ndarray, targets: np.ndarray) -> None:
        top = np.argmax(logits, axis=1)
        self.top1 += int((targets[np.arange(len(targets)), top] >= targets.max(axis=1)).sum())
        self.n += len(targets)

    def as_dict(self) -> dict:
        from .evaluate import wilson95
        lo, hi = wilson95(self.top1, self.n)
        return {"n": self.n, "top1": self.top1 / self.n if self.n else None, "top1_lo": lo, "top1_hi": hi}

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        return f"top-1 (a largest target) {100 * self.top1 / self.n:.2f}% ({self.top1}/{self.n})"
