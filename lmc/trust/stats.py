"""The statistics behind the trust tools, all from scipy.stats: McNemar's paired test on two
correctness bitmaps, the one-sided Clopper–Pearson lower bound for randomized smoothing, and
the Wilson interval (lmc.evaluate.wilson95, the one `lmc eval` prints)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmc.core.arrays import read_npy
from lmc.core.errors import TrustError
from lmc.evaluate.interval import wilson95
from lmc.run.checkpoint import atomic_write


@dataclass
class McNemar:
    n: int
    correct_a: int
    correct_b: int
    b: int            # A right, B wrong
    c: int            # A wrong, B right
    p_exact: float    # two-sided exact binomial test of b ~ Bin(b + c, ½)
    p_chi2: float     # continuity-corrected χ²(1): (|b − c| − 1)² / (b + c)
    chi2: float

    def as_dict(self) -> dict:
        return {"n": self.n, "acc_a": self.correct_a / self.n, "acc_b": self.correct_b / self.n,
                "acc_a_ci": list(wilson95(self.correct_a, self.n)), "acc_b_ci": list(wilson95(self.correct_b, self.n)),
                "correct_a": self.correct_a, "correct_b": self.correct_b,
                "b": self.b, "c": self.c, "chi2": self.chi2, "p_exact": self.p_exact, "p_chi2": self.p_chi2}


def mcnemar(a: np.ndarray, b: np.ndarray) -> McNemar:
    """McNemar's test on paired per-example correctness (1 = right).  Only the discordant pairs
    carry information: under H0 (equal accuracy) each is A-right/B-wrong with probability ½.
    With no discordant pair both p-values are 1."""
    a = np.asarray(a).astype(bool)
    b_ = np.asarray(b).astype(bool)
    if a.shape != b_.shape:
        raise TrustError(f"the bitmaps have different lengths ({a.size:,} vs {b_.size:,}): a paired test needs "
                       f"the same examples in the same order",
                       hint="dump both with `lmc eval --dump-correct` on the same spec's validation split")
    from scipy import stats
    nb = int((a & ~b_).sum())
    nc = int((~a & b_).sum())
    d = nb + nc
    if d == 0:
        p_exact, p_chi2, chi2 = 1.0, 1.0, 0.0
    else:
        p_exact = float(stats.binomtest(nb, d, 0.5, alternative="two-sided").pvalue)
        chi2 = max(abs(nb - nc) - 1, 0) ** 2 / d
        p_chi2 = float(stats.chi2.sf(chi2, 1))
    return McNemar(int(a.size), int(a.sum()), int(b_.sum()), nb, nc, p_exact, p_chi2, float(chi2))


def load_bitmap(path: Path) -> np.ndarray:
    """A correctness bitmap written by `lmc eval --dump-correct`: a 1-D .npy of 0/1 values."""
    path = Path(path)
    a = read_npy(path, TrustError, "bitmap file (.npy, from lmc eval --dump-correct)")
    if a.ndim != 1 or a.size == 0:
        raise TrustError(f"{path}: expected a non-empty 1-D bitmap (one 0/1 entry per example), got shape {list(a.shape)}")
    if not np.isin(a, (0, 1)).all():
        raise TrustError(f"{path}: expected 0/1 entries (per-example correctness), found other values",
                       hint="write bitmaps with `lmc eval --dump-correct FILE.npy`")
    return a.astype(np.uint8)


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided (1 − α) Clopper–Pearson lower confidence bound on a binomial proportion after
    k successes in n trials: the α quantile of Beta(k, n − k + 1); 0 when k = 0."""
    if k <= 0:
        return 0.0
    from scipy import stats
    return float(stats.beta.ppf(alpha, k, n - k + 1))


def save_bitmap(path: Path, mask: np.ndarray) -> None:
    """Write a correctness bitmap (uint8 .npy) atomically."""
    atomic_write(Path(path), lambda f: np.save(f, np.asarray(mask, np.uint8), allow_pickle=False))
