"""The embedded default dataset: the 8x8 handwritten digits (1,797 images, 10 classes, pixel
values 0..16), shipped inside lmc as `digits_8x8.npz` (45 KB), so nothing is ever downloaded.

Provenance and licence: the test set of the UCI "Optical Recognition of Handwritten Digits"
data set (E. Alpaydin, C. Kaynak, 1998; https://doi.org/10.24432/C50P49), licensed CC BY 4.0 —
the same 1,797 images scikit-learn ships as `sklearn.datasets.load_digits`, stored here as
uint8 images and labels; they are value-for-value those of load_digits (tests/test_digits_data.py
compares them where scikit-learn is installed).

Values are scaled x/16 to [0, 1] and shaped [N, 1, 8, 8] (load_dataset flattens to [N, 64] for a
flat spec input).  The split is fixed — 1,437 train / 360 test by `split.holdout` with
SPLIT_SEED, independent of the run's seed — so the test set never changes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmc.data.dataset import Dataset
from lmc.data.split import holdout

SPLIT_SEED = 20240
N_TEST = 360
FILE = Path(__file__).with_name("digits_8x8.npz")


def images_and_labels() -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [1797, 8, 8] in 0..16, labels uint8 [1797]), in load_digits' order."""
    with np.load(FILE, allow_pickle=False) as f:
        return f["images"], f["target"]


def load() -> Dataset:
    images, target = images_and_labels()
    x = (images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = target.astype(np.int32)
    train, test = holdout(len(x), N_TEST, SPLIT_SEED)
    source = f"embedded digits ({FILE.name})"
    return Dataset("digits", x[train], y[train], x[test], y[test], num_classes=10,
                   sources={a: source for a in ("x_train", "y_train", "x_val", "y_val")})
