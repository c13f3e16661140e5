"""The embedded default dataset: scikit-learn's 8x8 handwritten digits (load_digits).

The data ships inside scikit-learn (1,797 images, 10 classes, pixel values 0..16), so nothing
is ever downloaded.  Values are scaled x/16 to [0, 1] and shaped [N, 1, 8, 8] (load_dataset
flattens to [N, 64] for a flat spec input).  The split is fixed — 1,437 train / 360 test by
`split.holdout` with SPLIT_SEED, independent of the run's seed — so the test set never changes.
"""
from __future__ import annotations

import numpy as np

from lmc.data.dataset import Dataset
from lmc.data.split import holdout

SPLIT_SEED = 20240
N_TEST = 360


def load() -> Dataset:
    from sklearn.datasets import load_digits   # imported here: it is slow and only this loader needs it

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = bunch.target.astype(np.int32)
    train, test = holdout(len(x), N_TEST, SPLIT_SEED)
    source = "sklearn.datasets.load_digits"
    return Dataset("digits", x[train], y[train], x[test], y[test], num_classes=10,
                   sources={a: source for a in ("x_train", "y_train", "x_val", "y_val")})
