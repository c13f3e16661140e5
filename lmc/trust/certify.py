"""`lmc certify`: randomized smoothing (Cohen, Rosenfeld & Kolter 2019, CERTIFY).

The smoothed classifier g(x) = argmax_c P[f(x + η) = c], η ~ N(0, σ²I), f the net's @forward
(eval mode).  Per example: the top class ĉ of n0 noisy forwards (selection), then n fresh ones
count k votes for ĉ (estimation); p_A ≥ the one-sided (1 − α) Clopper–Pearson lower bound
(scipy.stats.beta.ppf(α, k, n − k + 1)); when p_A > ½, g is certified to return ĉ within the
L2 radius σ·Φ⁻¹(p_A) (scipy.stats.norm.ppf), else abstain (pred −1).  With probability ≥ 1 − α
per example the certificate is right.  The radius is capped at σ·Φ⁻¹(α^(1/n)) (a unanimous vote).
Certified accuracy at r: the share of examples certified to their true label at radius ≥ r.
Noise is not clipped to the data range (the theorem is about the Gaussian itself)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmc.core.errors import TrustError
from lmc.trust.model import Model, pad
from lmc.trust.stats import clopper_pearson_lower
from lmc.evaluate.plot import save_percent_plot


@dataclass
class Cert:
    index: int
    label: int
    pred: int          # −1: abstain
    count: int         # votes for the selected class among the n estimation draws
    pA_lower: float
    radius: float      # 0 when abstaining

    @property
    def correct(self) -> bool:
        return self.pred == self.label

    def as_dict(self) -> dict:
        return {"index": self.index, "label": self.label, "pred": self.pred, "count": self.count,
                "pA_lower": self.pA_lower, "radius": self.radius, "correct": self.correct}


def check_args(sigma: float, n0: int, n: int, alpha: float, radii: list[float]) -> None:
    if not np.isfinite(sigma) or sigma <= 0:
        raise TrustError(f"--sigma must be > 0, got {sigma:g}")
    if n0 < 1:
        raise TrustError(f"--n0 must be at least 1, got {n0}")
    if n < n0:
        raise TrustError(f"--n ({n}) must be at least --n0 ({n0}): the estimate needs more draws than the selection")
    if not 0 < alpha < 0.5:
        raise TrustError(f"--alpha must be in (0, 0.5), got {alpha:g}")
    if any(not np.isfinite(r) or r < 0 for r in radii):
        raise TrustError("--radii must be finite and ≥ 0")


def _votes(m: Model, x: np.ndarray, sigma: float, count: int, rng) -> np.ndarray:
    """Class counts of @forward over `count` draws of x + N(0, σ²I), in full batches."""
    votes = np.zeros(m.num_classes, np.int64)
    left = count
    while left > 0:
        k = min(left, m.batch)
        xb = x[None] + np.float32(sigma) * rng.standard_normal((k,) + x.shape, dtype=np.float32)
        pred = np.argmax(m.logits(pad(xb.astype(np.float32), m.batch))[:k], axis=1)
        votes += np.bincount(pred, minlength=m.num_classes)
        left -= k
    return votes


def certify(m: Model, sigma: float, n0: int = 100, n: int = 10000, alpha: float = 0.001, seed: int = 0,
            log=None) -> list[Cert]:
    from scipy import stats
    out = []
    for i in range(len(m.x)):
        rng = np.random.default_rng([seed, 0xCE47, i])        # per example: --limit keeps the others' draws
        c = int(np.argmax(_votes(m, m.x[i], sigma, n0, rng)))  # ties: the lowest class, as argmax
        k = int(_votes(m, m.x[i], sigma, n, rng)[c])
        p = clopper_pearson_lower(k, n, alpha)
        if p > 0.5:
            out.append(Cert(i, int(m.y[i]), c, k, p, float(sigma * stats.norm.ppf(p))))
        else:
            out.append(Cert(i, int(m.y[i]), -1, k, p, 0.0))
        if log and (i + 1) % 100 == 0:
            log(f"certified {i + 1}/{len(m.x)}")
    return out


def certified_accuracy(certs: list[Cert], radii: list[float]) -> list[dict]:
    """Per radius r: the share of examples certified to their label with radius ≥ r (r = 0
    counts every correct, non-abstaining prediction: the smoothed classifier's accuracy)."""
    n = len(certs)
    return [{"radius": r, "top1": sum(c.correct and c.radius >= r for c in certs) / n,
             "correct": sum(c.correct and c.radius >= r for c in certs), "n": n} for r in radii]


def radius_cap(sigma: float, n: int, alpha: float) -> float:
    """The largest radius n draws can certify: a unanimous vote gives p_A = α^(1/n)."""
    from scipy import stats
    return float(sigma * stats.norm.ppf(alpha ** (1.0 / n)))


def plot_certified(curves: dict, path, title: str, cap: float | None = None):
    """Certified top-1 vs L2 radius, one line per label: curves = {label: (radii, right)} with
    each example's certified radius and whether it is certified to its label (matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for label, (radii, right) in curves.items():
        radii, right = np.asarray(radii, np.float64), np.asarray(right, bool)
        top = max(float(radii.max(initial=0.0)), 1e-3) * 1.05
        grid = np.linspace(0.0, top, 200)
        ax.plot(grid, [100 * np.mean(right & (radii >= r)) for r in grid], label=label)
    if cap is not None:
        ax.axvline(cap, color="gray", ls="--", lw=0.8, label=f"largest certifiable radius {cap:.3g}")
    return save_percent_plot(fig, ax, "L2 radius", "certified top-1 (%)", title, path)
