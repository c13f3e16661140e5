"""`lmc attack`: projected gradient descent (Madry et al. 2018) on the validation split.

For each ε (ascending) and each restart: a uniform random start in the ε-ball (L∞: each
coordinate in [−ε, ε]; L2: a uniform point of the ball), then `steps` steps
  L∞: x ← x + α·sign(∇ₓL),   L2: x ← x + α·∇ₓL/‖∇ₓL‖₂  (per example),
each followed by the projection onto the ε-ball around the clean input and onto the data range
[lo, hi] (the min and max of the training and validation inputs).  ∇ₓL comes from the
module's hand-derived @input_grad (the recipe's loss; BN, if any, with batch statistics, as
in training); every candidate is scored with @forward (eval mode), like `lmc eval`.

An example counts as robust at ε when it is right on the clean input and on every candidate
found at ε and at every smaller ε of the sweep (the ε-ball contains the smaller balls, so an
adversarial example found there is one at ε too): robust accuracy never rises with ε.  At
ε = 0 the start and every step are 0, so the candidate is the clean input and the accuracy is
the clean accuracy exactly.  PGD finds adversarial examples, it proves nothing: its accuracy
is an upper bound on the true robust accuracy."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lmc.core.errors import TrustError
from lmc.core.fields import did_you_mean
from lmc.evaluate.interval import wilson95
from lmc.trust.model import Model, batches, pad
from lmc.evaluate.plot import save_percent_plot
from lmc.lower.lowering import abi

NORMS = ("linf", "l2")


@dataclass
class AttackResult:
    eps: float
    norm: str
    correct: int
    n: int
    robust: np.ndarray = field(repr=False)             # per-example: survived every candidate
    delta_norm: np.ndarray = field(repr=False)         # per-example ‖x_adv − x‖ of the first success (inf: none)

    def as_dict(self) -> dict:
        lo, hi = wilson95(self.correct, self.n)
        return {"eps": self.eps, "norm": self.norm, "correct": self.correct, "n": self.n,
                "top1": self.correct / self.n, "top1_ci": [lo, hi]}


def check_args(eps: list[float], norm: str, steps: int, step_size: float | None, restarts: int) -> None:
    if norm not in NORMS:
        raise TrustError(f"--norm {norm!r}: expected linf or l2{did_you_mean(norm, ('linf', 'l2'))}")
    if not eps:
        raise TrustError("--eps: give at least one radius, e.g. --eps 0,0.05,0.1")
    bad = [e for e in eps if not np.isfinite(e) or e < 0]
    if bad:
        raise TrustError(f"--eps: radii must be finite and ≥ 0, got {bad[0]:g}")
    if steps < 1:
        raise TrustError(f"--pgd-steps must be at least 1, got {steps}")
    if restarts < 1:
        raise TrustError(f"--restarts must be at least 1, got {restarts}")
    if step_size is not None and (not np.isfinite(step_size) or step_size <= 0):
        raise TrustError(f"--step-size must be > 0, got {step_size:g}")


def _norms(d: np.ndarray, norm: str) -> np.ndarray:
    flat = d.reshape(len(d), -1).astype(np.float64)
    return np.abs(flat).max(axis=1) if norm == "linf" else np.sqrt((flat ** 2).sum(axis=1))


def _rows(v, x: np.ndarray) -> np.ndarray:
    """A scalar or per-row vector shaped to broadcast against x's rows."""
    return np.broadcast_to(np.asarray(v, np.float64), (len(x),)).reshape((-1,) + (1,) * (x.ndim - 1))


def _start(rng, x: np.ndarray, eps, norm: str) -> np.ndarray:
    """A uniform random point of the ε-ball around each row of x (ε a scalar or one per row)."""
    e = _rows(eps, x)
    if not e.any():
        return np.zeros_like(x)
    if norm == "linf":
        return (rng.uniform(-1, 1, x.shape) * e).astype(np.float32)
    d = int(np.prod(x.shape[1:]))
    g = rng.standard_normal(x.shape)
    g /= _rows(np.maximum(_norms(g, "l2"), 1e-30), x)
    r = rng.uniform(0, 1, len(x)) ** (1.0 / d)
    return (g * _rows(r, x) * e).astype(np.float32)


def project(x_adv: np.ndarray, x: np.ndarray, eps: float, norm: str, lo: float, hi: float) -> np.ndarray:
    """Onto the ε-ball around x, then onto [lo, hi].  The clip keeps an L2 point in the ball:
    x itself lies in the box, so clipping only moves each coordinate towards x's."""
    d = x_adv - x
    e = _rows(eps, x)
    if norm == "linf":
        d = np.clip(d, -e, e)
    else:
        n = _rows(_norms(d, "l2"), x)
        d = d * np.where(n > e, e / np.maximum(n, 1e-30), 1.0)
    return np.clip(x + d, lo, hi).astype(np.float32)


def pgd_batch(m: Model, x: np.ndarray, labels: np.ndarray, eps, norm: str, steps: int, alpha, rng,
              hp: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """One restart of PGD on one full batch: candidates within ε (scalar or per row) of x that
    raise the loss of `labels` (the loss's label tensor)."""
    lo, hi = bounds
    a = _rows(alpha, x)
    xa = project(x + _start(rng, x, eps, norm), x, eps, norm, lo, hi)
    for _ in range(steps if np.any(np.asarray(eps) > 0) else 0):
        _, g = m.input_grad(xa, labels, hp)
        if norm == "linf":
            step = np.sign(g)
        else:
            step = g / _rows(np.maximum(_norms(g, "l2"), 1e-30), g)
        xa = project(xa + a * step, x, eps, norm, lo, hi)
    return xa


def clean_correct(m: Model) -> np.ndarray:
    """Per-example top-1 correctness of the clean validation inputs (uint8)."""
    out = []
    for s, e in batches(len(m.x), m.batch):
        logits = m.logits(pad(m.x[s:e], m.batch))[:e - s]
        out.append(np.argmax(logits, axis=1) == m.y[s:e])
    return np.concatenate(out).astype(np.uint8)


def pgd(m: Model, eps_list: list[float], norm: str = "linf", steps: int = 10, step_size: float | None = None,
        restarts: int = 1, seed: int = 0, bounds: tuple[float, float] | None = None, log=None) -> tuple[np.ndarray, list[AttackResult]]:
    """Clean correctness and one AttackResult per ε (in the order given)."""
    check_args(eps_list, norm, steps, step_size, restarts)
    cfg = m.net.spec.train
    a = abi(m.net)
    hp = a.hp_vector(cfg, 0.0, 1)
    bounds = bounds if bounds is not None else m.bounds
    clean = clean_correct(m)
    n = len(m.x)
    robust = clean.astype(bool)
    first = np.full(n, np.inf)                 # ‖δ‖ of the first adversarial example found
    out = {}
    for k, eps in enumerate(sorted(set(eps_list))):
        alpha = step_size if step_size is not None else 2.5 * eps / steps
        for r in range(restarts):
            rng = np.random.default_rng([seed, k, r])
            for s, e in batches(n, m.batch):
                x = pad(m.x[s:e], m.batch)
                labels = a.loss.fit_labels(pad(m.y[s:e], m.batch), m.num_classes, cfg)
                xa = pgd_batch(m, x, labels, eps, norm, steps, alpha, rng, hp, bounds)
                pred = np.argmax(m.logits(xa)[:e - s], axis=1)
                broke = (pred != m.y[s:e]) & robust[s:e]
                first[s:e] = np.where(broke, _norms((xa - x)[:e - s], norm), first[s:e])
                robust[s:e] &= ~broke
        out[eps] = AttackResult(eps, norm, int(robust.sum()), n, robust.astype(np.uint8).copy(), first.copy())
        if log:
            log(f"ε = {eps:g} ({norm}): top-1 {100 * out[eps].correct / n:.2f}% ({out[eps].correct}/{n})")
    return clean, [out[e] for e in eps_list]


def plot_attack(clean: np.ndarray, results: list[AttackResult], path, title: str):
    """Robust top-1 vs ε with the 95% Wilson interval (matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rs = sorted(results, key=lambda r: r.eps)
    eps = [r.eps for r in rs]
    acc = [100 * r.correct / r.n for r in rs]
    ci = [wilson95(r.correct, r.n) for r in rs]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot(eps, acc, "o-", label=f"PGD ({rs[0].norm})")
    ax.fill_between(eps, [100 * l for l, _ in ci], [100 * h for _, h in ci], alpha=0.2, label="95% Wilson")
    ax.axhline(100 * clean.mean(), color="gray", ls="--", lw=0.8, label="clean")
    return save_percent_plot(fig, ax, "ε", "top-1 (%)", title, path)
