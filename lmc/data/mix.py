"""Label mixing of one training batch (host side, in the Batcher's background thread):
mixup, cutmix and KNN-mixup (losses.md §3, the seed's TrainConfig docs).

Input: images x [B, C, H, W] and their soft targets t [B, K] (the loss's fitted labels: a
smoothed one-hot, or multi-hot targets), and a Generator drawn from
(seed, epoch, step).  Output: the mixed (x, t) and the λ actually used.  Every row of the
mixed t is a convex combination of two rows of t, so rows that summed to 1 still do.

- mixup:  λ ~ Beta(α, α), folded to λ ≥ ½ (the anchor image stays dominant);
          x = λ·x + (1−λ)·x[perm],  t = λ·t + (1−λ)·t[perm];  perm a random permutation.
- cutmix: λ ~ Beta(α, α); a box of ⌊H·√(1−λ)⌋ × ⌊W·√(1−λ)⌋ (≥ 1 pixel) centred uniformly,
          clipped to the image, pasted from the partner — one box for the whole batch;
          λ is then corrected to the pasted area: λ' = 1 − area/(H·W).
- knn_mixup: as mixup, but the partner of each image is its nearest *other* image of the
          batch in pixel L2 (ties: the lower index).

With both mixup and cutmix on, each batch takes one of them with probability ½ (timm's
`switch_prob`, the DeiT recipe) — the seed's priority would leave cutmix accepted and unused.
KNN-mixup excludes the other two (the check stage refuses the combination).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def fold(lam: float) -> float:
    """max(λ, 1 − λ): the seed's folding, keeping the anchor image dominant."""
    return max(lam, 1.0 - lam)


def mixup(x, t, lam: float, partner: np.ndarray):
    """x·λ + x[partner]·(1−λ) and the same for t."""
    return (lam * x + (1.0 - lam) * x[partner]).astype(x.dtype), \
        (lam * t + (1.0 - lam) * t[partner]).astype(t.dtype)


def cutmix_box(h: int, w: int, lam: float, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """The clipped box [y1, y2) × [x1, x2) for area fraction ≈ 1 − λ, centre uniform."""
    cut = np.sqrt(1.0 - lam)
    bh, bw = max(1, int(h * cut)), max(1, int(w * cut))
    cy, cx = int(rng.integers(0, h)), int(rng.integers(0, w))
    y1, y2 = max(cy - bh // 2, 0), min(cy - bh // 2 + bh, h)
    x1, x2 = max(cx - bw // 2, 0), min(cx - bw // 2 + bw, w)
    return y1, y2, x1, x2


def cutmix(x, t, box, partner: np.ndarray):
    """Paste the partner's box into each image; λ' = 1 − area/(H·W) weights the targets."""
    y1, y2, x1, x2 = box
    out = x.copy()
    out[:, :, y1:y2, x1:x2] = x[partner][:, :, y1:y2, x1:x2]
    lam = 1.0 - (y2 - y1) * (x2 - x1) / (x.shape[2] * x.shape[3])
    return out, (lam * t + (1.0 - lam) * t[partner]).astype(t.dtype), lam


def nearest_other(x: np.ndarray) -> np.ndarray:
    """Index of each row's nearest other row in L2 (over all pixels), ties to the lower index."""
    f = x.reshape(len(x), -1).astype(np.float64)
    sq = (f * f).sum(axis=1)
    d = sq[:, None] + sq[None, :] - 2.0 * (f @ f.T)
    np.fill_diagonal(d, np.inf)
    return np.argmin(d, axis=1)


@dataclass(frozen=True)
class Mixer:
    """The recipe's mixing: which of mixup / cutmix / knn_mixup are on, and their α."""
    mixup_alpha: float | None = None      # None: off
    cutmix_alpha: float | None = None
    knn_alpha: float | None = None

    @classmethod
    def from_config(cls, cfg) -> "Mixer | None":
        if cfg.use_knn_mixup:       # KNN-mixup takes precedence over mixup / CutMix (the Lean kit)
            return cls(None, None, cfg.knn_mixup_alpha)
        m = cls(cfg.mixup_alpha if cfg.use_mixup else None, cfg.cutmix_alpha if cfg.use_cutmix else None)
        return m if (m.mixup_alpha, m.cutmix_alpha, m.knn_alpha) != (None, None, None) else None

    def mode(self, rng: np.random.Generator) -> str:
        if self.knn_alpha is not None:
            return "knn_mixup"
        if self.mixup_alpha is not None and self.cutmix_alpha is not None:
            return "cutmix" if rng.random() < 0.5 else "mixup"
        return "mixup" if self.mixup_alpha is not None else "cutmix"

    def __call__(self, x: np.ndarray, t: np.ndarray, rng: np.random.Generator):
        """(x, t, λ, mode) for one batch."""
        mode = self.mode(rng)
        if mode == "knn_mixup":
            lam = fold(rng.beta(self.knn_alpha, self.knn_alpha))
            return (*mixup(x, t, lam, nearest_other(x)), lam, mode)
        partner = rng.permutation(len(x))
        if mode == "mixup":
            lam = fold(rng.beta(self.mixup_alpha, self.mixup_alpha))
            return (*mixup(x, t, lam, partner), lam, mode)
        box = cutmix_box(x.shape[2], x.shape[3], rng.beta(self.cutmix_alpha, self.cutmix_alpha), rng)
        xm, tm, lam = cutmix(x, t, box, partner)
        return xm, tm, lam, mode
