"""`lmc sample` for a diffusion spec: images drawn by ancestral DDPM sampling through the compiled
@forward, and the PNG grid they are shown in.

Input: a spec whose dataset kind is a diffusion (its `schedule`: digits_ddpm), whose net takes
[x_t, t/T] and predicts the noise with the input image's shape, and the run's weights (those its
own eval scored: EMA under use_ema).  The sampler (lmc.data.diffusion.Ancestral) starts from
N(0, I) drawn from `seed` and runs `steps` of the schedule's timesteps, each one call of the
forward on all n images (in batches of the module's static size).  Output: the images
[n, C, H, W] mapped from the schedule's data range back to [0, 1] (the dataset's pixel scale,
what a classifier of the same images reads)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmc.core.errors import EvalError
from lmc.data.diffusion import Ancestral, Schedule, with_time
from lmc.data.kinds import all_datasets
from lmc.evaluate.plot import png_target
from lmc.evaluate.predict import load_predictor
from lmc.lower.options import LowerOptions

MAX_IMAGES = 4096


def schedule_of(net) -> Schedule | None:
    """The noise schedule of the spec's diffusion dataset, None when it is not one."""
    kind = all_datasets().get(net.spec.dataset.value) if net.spec.dataset is not None else None
    return kind.schedule if kind is not None else None


def check_diffusion(net) -> Schedule:
    """The schedule, once the net is known to fit it: input [C+1, H, W], output [C, H, W]."""
    sched = schedule_of(net)
    if sched is None:
        raise EvalError("lmc bug: check_diffusion on a spec without a diffusion dataset")
    inp, out = net.input.dims[1:], net.output.type.dims[1:]
    if len(inp) != 3 or tuple(out) != (inp[0] - 1, *inp[1:]):
        raise EvalError(f"lmc sample draws images with a noise predictor: the output must be the input image "
                        f"without its t/T channel, {[inp[0] - 1, *inp[1:]] if len(inp) == 3 else '[C, H, W]'}, "
                        f"but the net maps {list(inp)} to {list(out)}")
    return sched


def sample_images(net, init: Path, n: int, steps: int | None, seed: int, backend: str | None = None,
                  chip: str | None = None, options: LowerOptions = LowerOptions(), log=None) -> np.ndarray:
    """n images [n, C, H, W] in [0, 1] by `steps` ancestral steps (None: every timestep)."""
    sched = check_diffusion(net)
    if not 1 <= n <= MAX_IMAGES:
        raise EvalError(f"--n {n}: draw 1 to {MAX_IMAGES} images")
    sampler = Ancestral(sched, sched.timesteps if steps is None else steps)
    pred = load_predictor(net, init, backend, chip, options)
    c, h, w = net.output.type.dims[1:]
    rng = np.random.default_rng([seed % 2**64, 0xD1F])
    x = rng.standard_normal((n, c, h, w))
    for i, t in enumerate(sampler.times):
        eps = pred.forward(with_time(x, t / sched.timesteps)).astype(np.float64)
        x = sampler.step(i, x, eps, rng.standard_normal(x.shape))
        if log is not None and (i + 1) % max(1, len(sampler) // 4) == 0:
            log(f"step {i + 1}/{len(sampler)} (t = {t})")
    x = (np.clip(x, sched.low, sched.high) - sched.low) / (sched.high - sched.low)
    return x.astype(np.float32)


def write_samples(net, init: Path, n: int, steps: int | None, seed: int, plot: Path | None, npy: Path | None,
                  backend: str | None = None, chip: str | None = None, options: LowerOptions = LowerOptions(),
                  log=None) -> list[str]:
    """`lmc sample` of a diffusion spec: n images drawn (sample_images), written as a PNG grid to
    `plot` (None: samples.png beside the checkpoint, never overwriting one: plot.png_target) and,
    when `npy` is given, as an array; returns the lines that say what was written."""
    if npy is not None and Path(npy).suffix != ".npy":
        raise EvalError(f"--npy {npy}: expected a .npy file name")
    x = sample_images(net, init, n, steps, seed, backend, chip, options, log)
    path, said = png_target(plot, Path(init).with_name("samples.png"))
    rows, cols = save_grid(x, path)
    lines = [f"{said} ({len(x)} images, {rows}x{cols})"]
    if npy is not None:
        where, said = png_target(npy, npy)
        save_array(where, x)
        lines.append(said)
    return lines


def save_grid(images: np.ndarray, path: Path, scale: int = 4, gap: int = 2) -> tuple[int, int]:
    """A PNG of images [n, C, H, W] in [0, 1] (C = 1 grey, 3 RGB) in a near-square grid, each
    pixel scale×scale, gap pixels of mid grey between them; returns (rows, columns)."""
    from PIL import Image
    n, c, h, w = images.shape
    if c not in (1, 3):
        raise EvalError(f"a grid draws grey or RGB images, not {c} channels")
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    hh, ww = h * scale, w * scale
    canvas = np.full((rows * (hh + gap) + gap, cols * (ww + gap) + gap, 3), 128, np.uint8)
    px = np.round(np.clip(images, 0.0, 1.0) * 255).astype(np.uint8)
    px = np.repeat(np.repeat(px, scale, axis=2), scale, axis=3)          # [n, C, hh, ww]
    for k in range(n):
        r, q = divmod(k, cols)
        y0, x0 = gap + r * (hh + gap), gap + q * (ww + gap)
        canvas[y0:y0 + hh, x0:x0 + ww] = px[k].transpose(1, 2, 0)          # grey broadcasts to RGB
    try:
        Image.fromarray(canvas, "RGB").save(path)
    except OSError as e:
        raise EvalError(f"cannot write {path}: {e.strerror or e}") from None
    return rows, cols


def save_array(path: Path, images: np.ndarray) -> None:
    """The images as a .npy array (float32 [n, C, H, W] in [0, 1])."""
    try:
        np.save(path, np.ascontiguousarray(images, np.float32), allow_pickle=False)
    except OSError as e:
        raise EvalError(f"cannot write {path}: {e.strerror or e}") from None
