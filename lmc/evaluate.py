"""Scoring on the validation split (training.md §7): `@forward` with the running BN statistics,
in static-size batches whose padded tail rows are never scored; top-1 (and top-5 when the head
has more than 5 classes) with a 95% Wilson interval."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .data import eval_batches

Z95 = 1.96


def wilson95(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion c/n, as fractions in [0, 1]:
    centre = (p̂ + z²/2n)/(1 + z²/n), half-width = z·√(p̂(1−p̂)/n + z²/4n²)/(1 + z²/n)."""
    if n <= 0:
        return (0.0, 1.0)
    p = correct / n
    d = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, centre - half), min(1.0, centre + half))


def count_correct(logits: np.ndarray, labels: np.ndarray, k: int) -> int:
    """Rows whose label is in the top k.  k = 1: argmax, the first maximal index wins (the
    reference); k > 1: rank = number of logits strictly greater than the label's, correct iff
    rank < k (ties count in the label's favour, as the reference's top-5)."""
    labels = labels.astype(np.int64)
    if k == 1:
        return int((np.argmax(logits, axis=1) == labels).sum())
    true = logits[np.arange(len(labels)), labels]
    rank = (logits > true[:, None]).sum(axis=1)
    return int((rank < k).sum())


@dataclass
class EvalResult:
    n: int
    top1: int
    top5: int | None = None      # None when the head has ≤ 5 classes

    def as_dict(self) -> dict:
        out = {"n": self.n, "top1": self.top1 / self.n if self.n else None}
        out["top1_lo"], out["top1_hi"] = wilson95(self.top1, self.n)
        if self.top5 is not None:
            out["top5"] = self.top5 / self.n if self.n else None
            out["top5_lo"], out["top5_hi"] = wilson95(self.top5, self.n)
        return out

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        lo, hi = wilson95(self.top1, self.n)
        s = f"top-1 {100 * self.top1 / self.n:.2f}% ({self.top1}/{self.n}, 95% CI {100 * lo:.2f}–{100 * hi:.2f})"
        if self.top5 is not None:
            lo5, hi5 = wilson95(self.top5, self.n)
            s += f", top-5 {100 * self.top5 / self.n:.2f}% (95% CI {100 * lo5:.2f}–{100 * hi5:.2f})"
        return s


def evaluate(module, params, state, x: np.ndarray, y: np.ndarray, batch: int, num_classes: int) -> EvalResult:
    """Score (x, y) with module.forward(*params, *state, xb); params/state may be device arrays."""
    res = EvalResult(0, 0, 0 if num_classes > 5 else None)
    for xb, yb, n in eval_batches(x, y, batch):
        logits = np.asarray(module.forward(*params, *state, np.ascontiguousarray(xb, np.float32)))[:n]
        yv = yb[:n]
        res.n += n
        res.top1 += count_correct(logits, yv, 1)
        if res.top5 is not None:
            res.top5 += count_correct(logits, yv, 5)
    return res
