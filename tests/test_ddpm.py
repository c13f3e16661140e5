"""DDPM on the embedded digits (lmc/data/diffusion.py, dataset digits_ddpm, `lmc sample` for a
diffusion spec): the schedule and the noised pairs, the ancestral sampler's arithmetic against
data whose optimal noise prediction is known in closed form, the grid PNG, the command line's
refusals; [slow] ddpm_digits trained a few steps through `lmc train` and sampled."""
from __future__ import annotations

import numpy as np
import pytest

from lmc.core.errors import DataError
from lmc.data import Batcher, load_dataset
from lmc.data.diffusion import Ancestral, Schedule, load_digits
from lmc.data.kinds import all_datasets
from lmc.evaluate.diffusion import save_grid
from tests.cli_run import run

SPEC = "specs/ddpm_digits.yaml"


def test_cosine_schedule_is_the_lean_kits():
    ab = Schedule(1000).alpha_bar
    assert ab.shape == (1000,) and np.all(np.diff(ab) <= 0)
    assert ab[0] == pytest.approx(0.9999) and ab[-1] == pytest.approx(1e-4)       # the clip
    t = 500 / 1000
    want = np.cos((t + 0.008) / 1.008 * np.pi / 2) ** 2 / np.cos(0.008 / 1.008 * np.pi / 2) ** 2
    assert ab[500] == pytest.approx(want, rel=1e-12)


def test_training_pairs_are_noised_digits_with_their_noise_drawn_per_batch():
    ds = load_dataset("digits_ddpm", None, (2, 8, 8), None)
    sched = all_datasets()["digits_ddpm"].schedule
    x0 = ds.x_train[:, :1]
    assert x0.min() == -1.0 and x0.max() == 1.0 and not ds.x_train[:, 1].any()
    b = Batcher(ds, 16, seed=3, shuffle=False)
    x, eps = b.batch(0, 0)
    t = np.round(x[:, 1, 0, 0] * sched.timesteps).astype(int)
    assert np.all(x[:, 1] == x[:, 1, :1, :1]) and np.all((0 <= t) & (t < sched.timesteps))
    a = sched.alpha_bar[t].reshape(-1, 1, 1, 1)
    np.testing.assert_allclose(x[:, :1], np.sqrt(a) * x0[:16] + np.sqrt(1 - a) * eps, atol=1e-5)
    assert abs(float(eps.std()) - 1) < 0.15
    again, _ = b.batch(0, 0)
    other, _ = b.batch(0, 1)
    seed4, _ = Batcher(ds, 16, seed=4, shuffle=False).batch(0, 0)
    assert np.array_equal(x, again) and not np.array_equal(x[:, 1], other[:, 1]) and not np.array_equal(x, seed4)
    # validation: fixed pairs, the same for every run
    assert np.array_equal(ds.y_val, load_dataset("digits_ddpm", None, (2, 8, 8), None, seed=9).y_val)
    assert len(ds.x_val) == 4 * 360


def test_digits_ddpm_refuses_an_input_without_the_time_channel():
    with pytest.raises(DataError, match=r"channels: 2, height: 8, width: 8.*got \[1, 8, 8\]"):
        load_digits((1, 8, 8), Schedule(1000))


def _sample(steps, mu, sig, n=4000, seed=0):
    """The sampler driven by the exact noise prediction for data N(mu, sig²):
    E[ε | x_t] = √(1−ᾱ)(x_t − √ᾱ·mu)/(ᾱ·sig² + 1 − ᾱ)."""
    s = Schedule(1000)
    sm = Ancestral(s, steps, clip=False)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, 1, 1))
    for i, t in enumerate(sm.times):
        a = s.alpha_bar[t]
        x = sm.step(i, x, np.sqrt(1 - a) * (x - np.sqrt(a) * mu) / (a * sig ** 2 + 1 - a), rng.standard_normal(x.shape))
    return x


def test_ancestral_sampling_with_the_exact_noise_draws_the_data_distribution():
    x = _sample(1000, 0.3, 0.2)
    assert x.mean() == pytest.approx(0.3, abs=0.01) and x.std() == pytest.approx(0.2, rel=0.04)


@pytest.mark.parametrize("steps", [1, 7, 1000])
def test_respaced_sampling_lands_on_a_point_mass(steps):
    # data = one point: the exact ε̂ gives x̂₀ = the point at every step, whatever the spacing
    x = _sample(steps, 0.5, 0.0, n=50)
    np.testing.assert_allclose(x, 0.5, atol=1e-6)


def test_sampler_steps_are_the_schedules():
    sm = Ancestral(Schedule(1000), 10)
    assert sm.times[0] == 999 and sm.times[-1] == 0 and len(set(sm.times)) == 10
    with pytest.raises(DataError, match="1 to 1000"):
        Ancestral(Schedule(1000), 1001)


def test_grid_png(tmp_path):
    from PIL import Image
    imgs = np.zeros((5, 1, 8, 8), np.float32)
    imgs[2] = 1.0
    rows, cols = save_grid(imgs, tmp_path / "g.png", scale=2, gap=1)
    assert (rows, cols) == (2, 3)
    a = np.asarray(Image.open(tmp_path / "g.png"))
    assert a.shape == (2 * 17 + 1, 3 * 17 + 1, 3)
    assert a[1, 1].tolist() == [0, 0, 0] and a[1, 1 + 2 * 17].tolist() == [255, 255, 255]   # images 0 and 2
    assert a[0, 0].tolist() == [128, 128, 128]                                            # the gap


def test_sample_refuses_the_other_familys_options():
    r = run("sample", SPEC, "--init", "nowhere.npz", "--prompt", "hi", "--tokens", "3")
    assert r.exit_code == 2 and "--prompt, --tokens: for a language model, but ddpm_digits is a diffusion spec" in r.output
    r = run("sample", "specs/tiny_gpt.yaml", "--init", "nowhere.npz", "--n", "4")
    assert r.exit_code == 2 and "--n: for a diffusion spec" in r.output and "tiny-gpt is sampled as a language model" in r.output


def test_sample_refuses_bad_image_options():
    r = run("sample", SPEC, "--init", "nowhere.npz", "--steps", "5000")
    assert r.exit_code == 2 and "--steps 5000" in r.output and "1 to 1000" in r.output
    r = run("sample", SPEC, "--init", "nowhere.npz", "--n", "0")
    assert r.exit_code == 2 and "--n 0" in r.output
    r = run("sample", SPEC, "--init", "nowhere.npz", "--npy", "x.png")
    assert r.exit_code == 2 and "expected a .npy" in r.output


@pytest.mark.slow
@pytest.mark.iree
def test_ddpm_digits_trains_and_samples(tmp_path):
    pytest.importorskip("iree.runtime")
    out = tmp_path / "run"
    r = run("train", SPEC, "--max-steps", "4", "--out", out)
    assert r.exit_code == 0, r.output
    r = run("sample", out, "--n", "6", "--steps", "5", "--npy", tmp_path / "a.npy", "--seed", "1")
    assert r.exit_code == 0, r.output
    assert (out / "samples.png").is_file() and f"wrote {out / 'samples.png'} (6 images, 2x3)" in r.output
    a = np.load(tmp_path / "a.npy")
    assert a.shape == (6, 1, 8, 8) and a.dtype == np.float32 and 0 <= a.min() and a.max() <= 1
    r = run("sample", out, "--n", "6", "--steps", "5", "--npy", tmp_path / "b.npy", "--seed", "1")
    assert r.exit_code == 0 and f"{out / 'samples-2.png'}" in r.output      # the first grid is kept
    assert np.array_equal(a, np.load(tmp_path / "b.npy"))                 # same seed, same images
