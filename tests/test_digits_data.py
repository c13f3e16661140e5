"""The embedded digits are scikit-learn's load_digits, value for value, without needing it."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from lmc.data import digits


def test_the_embedded_digits_are_load_digits():
    sk = pytest.importorskip("sklearn.datasets")
    b = sk.load_digits()
    images, target = digits.images_and_labels()
    assert images.shape == (1797, 8, 8) and target.shape == (1797,)
    assert np.array_equal(images.astype(np.float64), b.images)
    assert np.array_equal(target.astype(np.int64), b.target)
    # the training data is what the scikit-learn loader made: x/16 in float32
    ds = digits.load()
    x = (b.images.astype(np.float32) / np.float32(16.0))[:, None]
    assert np.array_equal(np.concatenate([ds.x_train, ds.x_val]).tobytes(),
                          np.concatenate([x[i] for i in digits.holdout(1797, digits.N_TEST, digits.SPLIT_SEED)]).tobytes())


def test_loading_digits_does_not_import_sklearn():
    code = "import sys; from lmc.data import digits; digits.load(); print('sklearn' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
