"""Synthetic data for smoke tests: nothing is read, everything is drawn from the run's seed.

x ~ N(0, 1) of the spec's input shape plus `signal` times a random per-class pattern, labels
uniform in [0, num_classes).  With signal > 0 the classes are separable, so a short training
run shows a falling loss; signal=0 gives pure noise (only memorization can lower the loss).
"""
from __future__ import annotations

import numpy as np

from lmc.data.dataset import Dataset

DEFAULT_CLASSES = 10


def load(input_shape: tuple[int, ...], num_classes: int | None, *, seed: int,
         n_train: int = 1024, n_val: int = 256, signal: float = 1.0) -> Dataset:
    k = num_classes or DEFAULT_CLASSES
    shape = tuple(int(d) for d in input_shape)
    rng = np.random.default_rng([seed % 2**64, 0x5E7])
    patterns = rng.standard_normal((k, *shape), dtype=np.float32)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, k, size=n).astype(np.int32)
        x = rng.standard_normal((n, *shape), dtype=np.float32) + np.float32(signal) * patterns[y]
        return x, y

    x_train, y_train = draw(n_train)
    x_val, y_val = draw(n_val)
    return Dataset("synthetic", x_train, y_train, x_val, y_val, num_classes=k,
                   sources={a: f"synthetic(seed={seed})" for a in ("x_train", "y_train", "x_val", "y_val")})
