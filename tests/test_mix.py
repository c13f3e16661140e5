"""Label mixing (lmc/data/mix.py) through the Batcher: mixup's targets are λ·t_a + (1−λ)·t_b and
still sum to 1, cutmix's box area matches its corrected λ, KNN-mixup pairs nearest neighbours,
every draw is a function of (seed, epoch, step), and bad combinations are refused."""
from __future__ import annotations

import numpy as np
import pytest

from lmc.data import Batcher, Dataset
from lmc.data import mix
from lmc.core.errors import DataError

K = 5


def smooth(y, eps=0.1):
    t = np.full((len(y), K), eps / K, np.float32)
    t[np.arange(len(y)), y] += 1.0 - eps
    return t


def images(n=32, c=2, h=9, w=7, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    y = rng.integers(0, K, n).astype(np.int32)
    return Dataset("t", x, y, x[:4], y[:4], num_classes=K)


def test_mixup_targets_are_the_convex_combination_of_the_pair():
    ds = images()
    x, t = ds.x_train[:8], smooth(ds.y_train[:8])
    rng = np.random.default_rng(3)
    xm, tm, lam, mode = mix.Mixer(mixup_alpha=0.8)(x, t, rng)
    assert mode == "mixup" and 0.5 <= lam <= 1.0
    perm = np.random.default_rng(3).permutation(8)          # the Mixer's first draw
    np.testing.assert_allclose(tm, lam * t + (1 - lam) * t[perm], rtol=1e-6)
    np.testing.assert_allclose(xm, lam * x + (1 - lam) * x[perm], rtol=1e-6)
    np.testing.assert_allclose(tm.sum(axis=1), 1.0, rtol=1e-6)


def test_cutmix_box_area_matches_the_corrected_lambda():
    ds = images(h=16, w=12)
    x, t = ds.x_train[:8], smooth(ds.y_train[:8], 0.0)
    seen = set()
    for seed in range(40):
        xm, tm, lam, mode = mix.Mixer(cutmix_alpha=1.0)(x, t, np.random.default_rng(seed))
        assert mode == "cutmix"
        changed = (xm != x).any(axis=(0, 1))                 # [H, W]: the pasted box (same for the batch)
        ys, xs = np.nonzero(changed)
        if len(ys):
            box = (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)
            assert changed.sum() == box                      # a rectangle
            assert lam == pytest.approx(1 - box / (16 * 12))
        seen.add(round(lam, 3))
        np.testing.assert_allclose(tm.sum(axis=1), 1.0, rtol=1e-6)
        # the weight on each image's own label is λ (or 1 where the partner has the same label)
        own = tm[np.arange(8), ds.y_train[:8]]
        assert np.all(own >= lam - 1e-6)
    assert len(seen) > 10


def test_knn_mixup_pairs_each_image_with_its_nearest_other():
    x = np.zeros((4, 1, 2, 2), np.float32)
    x[:, 0, 0, 0] = [0.0, 10.0, 0.5, 9.0]
    assert mix.nearest_other(x).tolist() == [2, 3, 0, 1]
    t = smooth(np.array([0, 1, 2, 3]), 0.0)
    _, tm, lam, mode = mix.Mixer(knn_alpha=1.0)(x, t, np.random.default_rng(0))
    assert mode == "knn_mixup"
    np.testing.assert_allclose(tm, lam * t + (1 - lam) * t[[2, 3, 0, 1]], rtol=1e-6)


def test_mixup_and_cutmix_together_switch_per_batch():
    m = mix.Mixer(mixup_alpha=0.8, cutmix_alpha=1.0)
    modes = [m.mode(np.random.default_rng(s)) for s in range(200)]
    assert 60 < modes.count("cutmix") < 140 and modes.count("mixup") + modes.count("cutmix") == 200


def test_batcher_mixes_deterministically_from_seed_epoch_step():
    ds = images()
    make = lambda: Batcher(ds, 8, seed=4, labels=smooth, mix=mix.Mixer(mixup_alpha=0.8, cutmix_alpha=1.0))
    a, b = make(), make()
    for step in range(3):
        xa, ta = a.batch(1, step)
        xb, tb = b.batch(1, step)
        assert np.array_equal(xa, xb) and np.array_equal(ta, tb)
    plain = Batcher(ds, 8, seed=4, labels=smooth)
    x0, t0 = plain.batch(1, 0)
    xm, tm = a.batch(1, 0)
    assert t0.shape == tm.shape == (8, K) and not np.array_equal(tm, t0)   # the mixing acted
    # resumed mid-epoch: the batches (and their mixing) of an uninterrupted run
    assert all(np.array_equal(p[1], q[1]) for p, q in zip(list(a.epoch(0, 2)), list(b.epoch(0))[2:]))


def test_cutmix_needs_images():
    flat = Dataset("f", np.zeros((10, 4), np.float32), np.zeros(10, np.int32), np.zeros((2, 4), np.float32),
                   np.zeros(2, np.int32), num_classes=K)
    with pytest.raises(DataError, match="cutmix pastes image boxes"):
        Batcher(flat, 4, seed=0, labels=smooth, mix=mix.Mixer(cutmix_alpha=1.0))
    Batcher(flat, 4, seed=0, labels=smooth, mix=mix.Mixer(mixup_alpha=1.0))      # mixup works on any input


# ---------------------------------------------------------------- RandAugment / AutoAugment / repeated aug

from lmc.data import policy as pol  # noqa: E402


def test_lite_randaugment_follows_the_seed_formulas():
    x = np.random.default_rng(0).uniform(0.1, 0.9, (64, 3, 4, 4)).astype(np.float32)
    y = pol.lite(x, 1, 9.0, np.random.default_rng(1))
    rng = np.random.default_rng(1)                     # replay the draws of the one op slot
    op = rng.integers(0, 5, 64)
    f = 1.0 + np.where(rng.random(64) < 0.5, -0.45, 0.45)
    for b in range(64):
        name = pol.LITE[op[b]]
        if name == "identity":
            want = x[b]
        elif name == "brightness":
            want = np.clip(x[b] * f[b], 0, 1)
        elif name == "contrast":
            want = np.clip(x[b].mean() + f[b] * (x[b] - x[b].mean()), 0, 1)
        elif name == "color":
            grey = 0.299 * x[b, 0] + 0.587 * x[b, 1] + 0.114 * x[b, 2]
            want = np.clip(grey + f[b] * (x[b] - grey), 0, 1)
        else:
            want = (x[b] - x[b].min()) / (x[b].max() - x[b].min())
        np.testing.assert_allclose(y[b], want, rtol=1e-5, atol=1e-6, err_msg=name)
    assert len(set(op.tolist())) == 5


@pytest.mark.parametrize("kind,c", [("rand", 1), ("rand", 3), ("auto", 3), ("auto", 1), ("lite", 2)])
def test_policies_change_images_keep_shape_and_replay(kind, c):
    ds = images(n=16, c=c, h=12, w=12)
    x = np.clip(ds.x_train * 0.2 + 0.5, 0, 1).astype(np.float32)
    p = pol.Policy(kind, n=2, m=9.0, mstd=0.5 if kind == "rand" else 0.0, inc=kind == "rand")
    a, b = p(x, np.random.default_rng(7)), p(x, np.random.default_rng(7))
    assert a.shape == x.shape and a.dtype == np.float32 and np.array_equal(a, b)
    assert (np.abs(a - x) > 1 / 255).any(axis=(1, 2, 3)).sum() >= 4          # most images altered
    assert a.min() >= 0 and a.max() <= 1


def test_policy_renormalizes_with_the_dataset_statistics():
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    u = np.random.default_rng(0).uniform(0, 1, (8, 3, 6, 6)).astype(np.float32)
    m, s = np.array(mean)[None, :, None, None], np.array(std)[None, :, None, None]
    x = ((u - m) / s).astype(np.float32)
    p = pol.Policy("lite", n=1, m=0.0, mean=mean, std=std)         # magnitude 0: every op but autocontrast is identity
    y = p(x, np.random.default_rng(3))
    same = np.isclose(y, x, atol=1e-5).all(axis=(1, 2, 3))
    assert same.sum() >= 4


def test_every_op_at_every_level_runs():
    img = pol._to_pil(np.random.default_rng(0).uniform(0, 1, (3, 9, 9)).astype(np.float32))
    rng = np.random.default_rng(0)
    for name in pol.RAND_OPS:
        for level in (0.0, 5.0, 10.0):
            for inc in (False, True):
                assert pol.OPS[name](img, pol.timm_arg(name, level, inc, img.size, rng)).size == img.size
        for level in range(10):
            assert pol.OPS[name](img, pol.tv_arg(name, level, img.size, rng)).size == img.size


def test_policies_refuse_what_pillow_cannot_take():
    four = images(n=8, c=4)
    cfg = type("C", (), dict(use_auto_augment=True, use_rand_augment=False))
    with pytest.raises(DataError, match="take 1- or 3-channel images, not 4"):
        pol.Policy.from_config(cfg, four)


def test_repeated_augmentation_puts_copies_in_a_row_and_keeps_the_epoch_length():
    ds = images(n=30)
    b = Batcher(ds, 6, seed=1, repeated=3)
    order = b.order(2)
    assert len(order) == 30 and b.steps_per_epoch == 5
    assert all(order[i] == order[i + 1] == order[i + 2] for i in range(0, 30, 3))
    assert len(set(order.tolist())) == 10


# ---------------------------------------------------------------- test-time augmentation

from lmc.data.batcher import TTA  # noqa: E402
from lmc.evaluate.score import evaluate  # noqa: E402


class _Cfg:
    def __init__(self, **kw):
        self.__dict__.update(dict(tta_samples=4, seed=0, augment=True, use_auto_augment=False,
                                  use_rand_augment=False), **kw)


class _SumModule:
    """forward(x) = per-class sums of x's first rows: a stand-in whose logits depend on the view."""

    def forward(self, x):
        return x.reshape(len(x), -1)[:, :K] * 10.0


def test_tta_averages_the_logits_of_its_views():
    ds = images(n=16, c=1, h=6, w=6)
    t = TTA(ds, _Cfg())
    v = [t.view(ds.x_val, 0, k) for k in range(4)]
    assert all(np.array_equal(a, t.view(ds.x_val, 0, k)) for k, a in enumerate(v))      # (seed, batch, view)
    assert not all(np.array_equal(v[0], b) for b in v[1:])
    plain = evaluate(_SumModule(), [], [], ds.x_val, ds.y_val, 4, K)
    avg = evaluate(_SumModule(), [], [], ds.x_val, ds.y_val, 4, K, tta=t)
    logits = sum(_SumModule().forward(t.view(ds.x_val, 0, k)) for k in range(4)) / 4
    assert avg.top1 == int((np.argmax(logits, 1) == ds.y_val).sum()) and avg.n == plain.n == 4
    with pytest.raises(DataError, match="no augmentation"):
        TTA(ds, _Cfg(augment=False))
