"""Scoring on the validation split (training.md §7): `@forward` with the running BN statistics,
in static-size batches whose padded tail rows are never scored; top-1 (and top-5 when the head
has more than 5 classes) with a 95% Wilson interval."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lmc.data import eval_batches
from lmc.core.errors import EvalError
from lmc.evaluate.interval import wilson95
from lmc.evaluate.metrics import scorer

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
    region: str = "live"         # which weights were scored: live, ema, swa, swag
    nll: float | None = None     # Σ −log p(label) over the scored rows (tokens for per-position heads: an LM)
    per_token: bool = False      # scored per position (an LM): the loss is per token, with its perplexity
    masks: list = field(default_factory=list, repr=False)   # per-batch top-1 correctness (correct_mask)

    def correct(self) -> np.ndarray:
        """The per-example top-1 correctness bitmap (uint8, validation order; sum = top1)."""
        return np.concatenate(self.masks) if self.masks else np.zeros(0, np.uint8)

    def as_dict(self) -> dict:
        out = {"n": self.n, "top1": self.top1 / self.n if self.n else None}
        out["top1_lo"], out["top1_hi"] = wilson95(self.top1, self.n)
        if self.top5 is not None:
            out["top5"] = self.top5 / self.n if self.n else None
            out["top5_lo"], out["top5_hi"] = wilson95(self.top5, self.n)
        if self.nll is not None and self.n:
            out["loss"] = self.nll / self.n          # the validation cross-entropy (no label smoothing)
            if self.per_token:
                out["perplexity"] = math.exp(self.nll / self.n)
        return out

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        lo, hi = wilson95(self.top1, self.n)
        s = f"top-1 {100 * self.top1 / self.n:.2f}% ({self.top1}/{self.n}, 95% CI {100 * lo:.2f}–{100 * hi:.2f})"
        if self.top5 is not None:
            lo5, hi5 = wilson95(self.top5, self.n)
            s += f", top-5 {100 * self.top5 / self.n:.2f}% (95% CI {100 * lo5:.2f}–{100 * hi5:.2f})"
        if self.per_token and self.nll is not None:
            s = f"per-token {s}; loss {self.nll / self.n:.4f} nats, perplexity {math.exp(self.nll / self.n):.3f}"
        return s


def correct_mask(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-row top-1 correctness as uint8 (argmax, the first maximal index wins: count_correct's
    rule, so mask.sum() == count_correct(logits, labels, 1))."""
    return (np.argmax(logits, axis=1) == labels.astype(np.int64)).astype(np.uint8)


def _per_position(logits: np.ndarray, y: np.ndarray):
    """Per-position logits [n, V, T, 1] (an LM head) with labels [n, T, 1] → one row per token:
    [n·T, V] and [n·T]; class logits [n, V] pass through."""
    if logits.ndim <= 2:
        return logits, y
    v = logits.shape[1]
    return np.moveaxis(logits, 1, -1).reshape(-1, v), y.reshape(-1)


def _nll(logits: np.ndarray, y: np.ndarray) -> float:
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y.astype(np.int64)].sum())


def _score(res: EvalResult, logits: np.ndarray, y: np.ndarray) -> None:
    if logits.ndim > 2:                       # per-token scores (accuracy, loss, perplexity)
        logits, y = _per_position(logits, y)
        res.per_token = True
    res.nll = (res.nll or 0.0) + _nll(logits, y)      # the validation loss (cross-entropy)
    res.n += len(y)
    m = correct_mask(logits, y)
    res.top1 += int(m.sum())
    res.masks.append(m)
    if res.top5 is not None:
        res.top5 += count_correct(logits, y, 5)


def _logits(module, params, state, x, y, batch: int, tta=None, world=None):
    """(xb, yb, n, logits of the n real rows) for every eval batch, in order.  Data-parallel
    `world`: rank r computes batches r, r + N, … and the logits are gathered, so every rank
    scores all of them, identically."""
    def one(i, xb, n):
        if tta is None:
            return np.asarray(module.forward(*params, *state, np.ascontiguousarray(xb, np.float32)))[:n]
        # float64 sums copy each result before the next call reuses its buffer
        return sum(np.asarray(module.forward(*params, *state, tta.view(xb, i, k)))[:n].astype(np.float64)
                   for k in range(tta.samples)) / tta.samples

    if world is None or world.size == 1:
        for i, (xb, yb, n) in enumerate(eval_batches(x, y, batch)):
            yield xb, yb, n, one(i, xb, n)
        return
    # copies: a result may alias a device buffer the next call reuses
    mine = {i: one(i, xb, n).copy() for i, (xb, yb, n) in enumerate(eval_batches(x, y, batch))
            if i % world.size == world.rank}
    got = {}
    for part in world.allgather(mine):
        got.update(part)
    for i, (xb, yb, n) in enumerate(eval_batches(x, y, batch)):
        yield xb, yb, n, got[i]


def evaluate(module, params, state, x: np.ndarray, y: np.ndarray, batch: int, num_classes: int,
             label_format: str = "class ids", regions: dict | None = None, loss=None, tta=None, world=None):
    """Score (x, y) with module.forward(*params, *state, xb); params/state may be device arrays.
    Labels other than class ids are scored by lmc/evaluate/metrics.py: per-pixel masks (pixel accuracy,
    IoU, region Dice over `regions`), float targets (MSE, PSNR), box targets (mAP, decoded by
    the recipe's `loss`).  tta: a data.TTA — each batch's logits are the mean over its
    `samples` augmented views (class ids only).  world: data-parallel ranks share the batches
    (_logits); the result is the same on every rank and equal to one process's."""
    other = scorer(label_format, num_classes, regions, loss)
    if other is not None and tta is not None:
        raise EvalError("use_tta averages classifier logits; this spec's labels are scored by other metrics")
    if other is not None:
        for xb, yb, n, logits in _logits(module, params, state, x, y, batch, world=world):
            other.add(logits, yb[:n], xb[:n])
        return other
    res = EvalResult(0, 0, 0 if num_classes > 5 else None)
    for xb, yb, n, logits in _logits(module, params, state, x, y, batch, tta, world):
        _score(res, logits, yb[:n])
    return res


def swag_sample(mean, sq, devs, rng) -> list[np.ndarray]:
    """One SWAG weight vector (Maddox et al. 2019; optimizers.md §8):
    θ = swa + (1/√2)·√max(E[θ²] − swa², 0) ⊙ z₁ + (1/√(2(K−1)))·Σ_k D_k·z₂,k,  z ~ N(0, I),
    D_k the last K deviations θ_k − swa; with K < 2 the low-rank term is left out (its scale
    1/√(K−1) is undefined), leaving the diagonal Gaussian."""
    k = len(devs)
    z2 = rng.standard_normal(k) if k >= 2 else None
    out = []
    for i, (m, q) in enumerate(zip(mean, sq)):
        var = np.maximum(q.astype(np.float64) - m.astype(np.float64) ** 2, 0.0)
        theta = m + np.sqrt(var) * rng.standard_normal(m.shape) / np.sqrt(2.0)
        if z2 is not None:
            low = sum(z2[j] * devs[j][i].astype(np.float64) for j in range(k))
            theta = theta + low / np.sqrt(2.0 * (k - 1))
        out.append(theta.astype(np.float32))
    return out


def evaluate_swag(module, mean, sq, devs, state, samples: int, seed: int, x, y, batch: int,
                  num_classes: int) -> EvalResult:
    """SWAG's Bayesian model average: `samples` weight vectors drawn by swag_sample (seeded),
    each scored on every batch; the logits are averaged over the samples, then scored."""
    rng = np.random.default_rng([seed, 0x5A6])
    total = None
    for _ in range(samples):
        P = [module.upload(a) for a in swag_sample(mean, sq, devs, rng)]
        # np.array copies: np.asarray of a result may alias a device buffer the next call reuses
        logits = np.concatenate([np.asarray(module.forward(*P, *state, np.ascontiguousarray(xb, np.float32)))[:n].copy()
                                 for xb, _, n in eval_batches(x, y, batch)])
        total = logits.astype(np.float64) if total is None else total + logits
    res = EvalResult(0, 0, 0 if num_classes > 5 else None, region="swag")
    _score(res, total / samples, np.asarray(y))
    return res
