"""The embedded float-target sets of the coordinate and structure demos: image_coords (an RGBA
picture as pixel coordinates → (alpha, r, g, b), specs/nerf_image.yaml) and chain_structure
(noisy pairwise distances of a random chain → its canonical coordinates, specs/chain_fold.yaml)."""
from __future__ import annotations

import numpy as np
import pytest

from lmc.data import chains, coord_image, load_dataset
from lmc.losses import FLOAT


def test_image_coords_splits_pixels_not_views():
    ds = load_dataset("image_coords", None, (3,), None)
    n = coord_image.SIZE ** 2 * coord_image.VIEWS
    assert ds.label_format == FLOAT and ds.x_train.dtype == ds.y_train.dtype == np.float32
    assert len(ds.x_train) + len(ds.x_val) == n and len(ds.x_val) == n // coord_image.VAL_FRACTION
    assert ds.y_train.shape[1:] == (4,) and 0.0 <= ds.y_train.min() and ds.y_train.max() <= 1.0
    # a held-out pixel position is held out in every view: no (u, v) is on both sides
    pos = lambda x: {(round(float(u), 5), round(float(v), 5)) for u, v in x[:, :2]}
    assert not pos(ds.x_train) & pos(ds.x_val)
    assert len(pos(ds.x_val)) * coord_image.VIEWS == len(ds.x_val)
    assert sorted(np.unique(ds.x_train[:, 2]).round(4)) == pytest.approx([-1.0, -1 / 3, 1 / 3, 1.0], abs=1e-4)
    again = load_dataset("image_coords", None, (3,), None, seed=5)      # fixed data, whatever the seed
    assert np.array_equal(again.x_val, ds.x_val) and np.array_equal(again.y_val, ds.y_val)


def test_image_coords_opacity_is_view_independent_and_colour_is_not():
    x, y = coord_image.picture()
    assert np.array_equal(y[0, ..., 0], y[1, ..., 0])                 # alpha: the same in every view
    assert np.abs(y[0, ..., 1:] - y[2, ..., 1:]).max() > 0.1           # colour: shaded per view
    assert 0.2 < y[..., 0].mean() < 0.8                                # a shape, not a blank canvas


def test_chain_structure_targets_are_the_canonical_chain_of_the_measured_distances():
    ds = load_dataset("chain_structure", None, (chains.MEASUREMENTS, chains.RESIDUES, chains.RESIDUES), None)
    assert ds.label_format == FLOAT and ds.x_train.shape[1:] == (4, 16, 16) and ds.y_train.shape[1:] == (48,)
    p = ds.y_val.reshape(-1, chains.RESIDUES, 3).astype(np.float64)
    assert np.allclose(np.linalg.norm(p[:, 1:] - p[:, :-1], axis=-1), 1.0, atol=1e-5)    # unit bonds
    assert np.allclose(p[:, 0], 0, atol=1e-6) and np.allclose(p[:, 1, 1:], 0, atol=1e-5)
    assert np.allclose(p[:, 2, 2], 0, atol=1e-5) and (p[:, 2, 1] > 0).all() and (p[:, 3, 2] >= 0).all()
    # the inputs are the chain's distances (÷ SCALE) plus independent noise of std NOISE per measurement
    err = ds.x_val * chains.SCALE - chains.distances(p)[:, None]
    assert abs(err.std() - chains.NOISE) < 0.01 and abs(err.mean()) < 0.01
    assert not np.allclose(ds.x_val[:, 0], ds.x_val[:, 1])


def test_canonical_frame_removes_rotation_translation_and_reflection():
    rng = np.random.default_rng(3)
    p = chains.chains(5, rng)
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))           # a random orthogonal map (maybe a mirror)
    moved = p @ q.T + rng.standard_normal(3)
    assert np.allclose(chains.canonical(moved), p, atol=1e-9)
    assert np.allclose(chains.canonical(moved * [1, 1, -1]), p, atol=1e-9)
