"""DDPM (Ho et al. 2020) on the host, as the Lean kit's diffusion demos do it: the noise schedule,
the noised training pairs, and the ancestral sampler's arithmetic.  Pure numpy.

Schedule: the cosine ᾱ of Nichol & Dhariwal (s = 0.008), the Lean kit's:
ᾱ_t = cos²(((t/T)+s)/(1+s)·π/2) / cos²(s/(1+s)·π/2), clipped to [1e-4, 0.9999], t = 0..T−1.

Training pairs: per image t ~ U{0..T−1} and ε ~ N(0, I); the net's input is the noised image
x_t = √ᾱ_t·x₀ + √(1−ᾱ_t)·ε with one more channel filled with t/T (what `time_cond_add` reads),
and the target is ε (a float-target MSE on the noise).  The training split's pairs are drawn per
batch (`Noising`, the Dataset's `draw`), from (run seed, epoch, step) alone; the validation
split's are drawn once from a fixed seed, so every run is scored on the same pairs.

digits_ddpm: the embedded 8×8 digits scaled to [−1, 1] (2·x/16 − 1), T = 1000.

Sampling (`Ancestral`): x ~ N(0, I) at the last step, then down the S timesteps
τ = round(linspace(T−1, 0, S)) (S = T: every step; fewer: Nichol & Dhariwal's respacing, the
betas recomputed between the kept steps, β_i = 1 − ᾱ_{τ_i}/ᾱ_{τ_{i+1}} ≤ 0.999): the net's
ε̂ gives x̂₀ = (x − √(1−ᾱ)·ε̂)/√ᾱ, clipped to the data range [−1, 1] (Ho et al.'s sampler),
and x ← the posterior mean √ᾱ'·β/(1−ᾱ)·x̂₀ + √(1−β)·(1−ᾱ')/(1−ᾱ)·x plus √β̃·z with the
posterior variance β̃ = β·(1−ᾱ')/(1−ᾱ) (ᾱ' the next kept step's); the last step (ᾱ' = 1)
gives x̂₀ itself."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmc.core.errors import DataError
from lmc.data import digits
from lmc.data.dataset import Dataset
from lmc.losses import FLOAT

COSINE_S = 0.008
ABAR_MIN, ABAR_MAX = 1e-4, 0.9999
BETA_MAX = 0.999
DIGITS_T = 1000
VAL_SEED = 7304              # the validation pairs' fixed draw
VAL_COPIES = 4               # noised pairs per validation image


@dataclass(frozen=True)
class Schedule:
    """A diffusion's noise schedule: `timesteps` T and its ᾱ_t (the cosine schedule);
    `low, high`: the data range the images are scaled to (the sampler clips x̂₀ to it)."""
    timesteps: int
    low: float = -1.0
    high: float = 1.0

    @property
    def alpha_bar(self) -> np.ndarray:
        """ᾱ_t for t = 0..T−1 (float64)."""
        t = np.arange(self.timesteps, dtype=np.float64) / self.timesteps
        f = np.cos((t + COSINE_S) / (1 + COSINE_S) * np.pi / 2) ** 2
        f0 = np.cos(COSINE_S / (1 + COSINE_S) * np.pi / 2) ** 2
        return np.clip(f / f0, ABAR_MIN, ABAR_MAX)

    def noised(self, x0: np.ndarray, t: np.ndarray, eps: np.ndarray) -> np.ndarray:
        """The net's input for images x0 [B, C, H, W] at timesteps t [B] with noise eps:
        [x_t, t/T] as [B, C+1, H, W] float32."""
        a = self.alpha_bar[t].reshape(-1, 1, 1, 1)
        xt = np.sqrt(a) * x0 + np.sqrt(1.0 - a) * eps
        return with_time(xt, t / self.timesteps)


def with_time(x: np.ndarray, s) -> np.ndarray:
    """x [B, C, H, W] with one more channel filled with s (a scalar or [B]): float32 [B, C+1, H, W]."""
    b, _, h, w = x.shape
    tc = np.broadcast_to(np.asarray(s, np.float64).reshape(-1, 1, 1, 1), (b, 1, h, w))
    return np.ascontiguousarray(np.concatenate([x, tc], axis=1), dtype=np.float32)


class Noising:
    """A diffusion dataset's per-batch draw (Dataset.draw): the stored clean images x [B, C+1, H, W]
    (time channel 0) → ([x_t, t/T], ε) with t ~ U{0..T−1} and ε ~ N(0, I) drawn from `rng`."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule

    def __call__(self, x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        x0 = x[:, :-1].astype(np.float64)
        t = rng.integers(0, self.schedule.timesteps, len(x))
        eps = rng.standard_normal(x0.shape)
        return self.schedule.noised(x0, t, eps), eps.astype(np.float32)


def diffusion_dataset(name: str, x_train: np.ndarray, x_val: np.ndarray, schedule: Schedule, source: str) -> Dataset:
    """A Dataset of clean images [N, C, H, W] (in the schedule's data range) for noise prediction:
    the training split stores them with a zero time channel and zero targets (Noising draws the
    pairs per batch), the validation split VAL_COPIES fixed noised pairs per image."""
    rng = np.random.default_rng(VAL_SEED)
    v0 = np.repeat(x_val.astype(np.float64), VAL_COPIES, axis=0)
    t = rng.integers(0, schedule.timesteps, len(v0))
    eps = rng.standard_normal(v0.shape)
    return Dataset(name, with_time(x_train, 0.0), np.zeros(x_train.shape, np.float32),
                   schedule.noised(v0, t, eps), eps.astype(np.float32), num_classes=1, label_format=FLOAT,
                   sources={a: source for a in ("x_train", "y_train", "x_val", "y_val")}, draw=Noising(schedule))


def load_digits(input_shape: tuple[int, ...], schedule: Schedule) -> Dataset:
    """digits_ddpm: the embedded digits in [−1, 1]; the spec's input is [image, t/T] (2, 8, 8)."""
    if tuple(input_shape) != (2, 8, 8):
        raise DataError(f"digits_ddpm feeds the noised 8x8 digit and a channel holding t/T: the spec's input "
                        f"must be {{channels: 2, height: 8, width: 8}}, got {list(input_shape)}",
                        hint="see specs/ddpm_digits.yaml")
    base = digits.load()
    lo, hi = schedule.low, schedule.high
    scale = lambda x: (lo + (hi - lo) * x).astype(np.float32)      # noqa: E731  ([0, 1] → [low, high])
    return diffusion_dataset("digits_ddpm", scale(base.x_train), scale(base.x_val), schedule,
                             "lmc.data.diffusion (embedded digits, noised)")


class Ancestral:
    """The ancestral sampler over `steps` of the schedule's timesteps (see the module doc):
    `times[i]` is the timestep the net is told at step i (descending), `step(i, x, eps, z)` the
    next x from the current x, the net's ε̂ and a standard normal draw z (all float64 arrays)."""

    def __init__(self, schedule: Schedule, steps: int, clip: bool = True):
        T = schedule.timesteps
        if not 1 <= steps <= T:
            raise DataError(f"--steps {steps}: the diffusion has {T} timesteps; sample with 1 to {T} of them")
        self.schedule, self.clip = schedule, clip
        self.times = np.round(np.linspace(T - 1, 0, steps)).astype(np.int64)
        ab = schedule.alpha_bar
        self.abar = ab[self.times]
        self.abar_next = np.concatenate([self.abar[1:], [1.0]])        # the step after (ᾱ' of the doc)
        self.beta = np.minimum(1.0 - self.abar / self.abar_next, BETA_MAX)

    def __len__(self):
        return len(self.times)

    def step(self, i: int, x: np.ndarray, eps: np.ndarray, z: np.ndarray) -> np.ndarray:
        a, an, b = self.abar[i], self.abar_next[i], self.beta[i]
        x0 = (x - np.sqrt(1.0 - a) * eps) / np.sqrt(a)
        if self.clip:
            x0 = np.clip(x0, self.schedule.low, self.schedule.high)
        if i == len(self.times) - 1:          # ᾱ' = 1: the posterior is the point x̂₀
            return x0
        mean = np.sqrt(an) * b / (1.0 - a) * x0 + np.sqrt(1.0 - b) * (1.0 - an) / (1.0 - a) * x
        return mean + np.sqrt(b * (1.0 - an) / (1.0 - a)) * z
