"""Training-time augmentations of one batch of images [B, C, H, W] (float32, normalized).

Each function works on the whole batch at once and takes its randomness from the Generator it
is given, so the Batcher can derive that Generator from (seed, epoch, step) alone and a
resumed run augments exactly as an uninterrupted one.  References: training.md §4 (cifar:
hflip; imagenette: random 224 crop of 256 + hflip; random erasing as timm/the reference).
"""
from __future__ import annotations

import math

import numpy as np


def crop(x: np.ndarray, top: np.ndarray, left: np.ndarray, h: int, w: int) -> np.ndarray:
    """Per-image window x[b, :, top[b]:top[b]+h, left[b]:left[b]+w].

    A loop over the batch of plain slice copies: for 32 x 3 x 256 x 256 it is ~15x faster than
    one fancy-index gather, which computes an index per element.
    """
    out = np.empty((x.shape[0], x.shape[1], h, w), dtype=x.dtype)
    for b, (t, l) in enumerate(zip(top.tolist(), left.tolist())):
        out[b] = x[b, :, t:t + h, l:l + w]
    return out


def center_crop(x: np.ndarray, h: int, w: int) -> np.ndarray:
    """The reference's no-augment path for stored-larger images (offset 16 for 256 -> 224)."""
    top, left = (x.shape[2] - h) // 2, (x.shape[3] - w) // 2
    return np.ascontiguousarray(x[:, :, top:top + h, left:left + w])


def crop_offsets(n: int, size: tuple[int, int], h: int, w: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """random_crop's draws for n images of `size` (H, W): (top, left), uniform in [0, H-h] and
    [0, W-w] — also drawn alone for images cropped as they are decoded (lmc.data.imagenette)."""
    top = rng.integers(0, size[0] - h + 1, size=n)
    left = rng.integers(0, size[1] - w + 1, size=n)
    return top, left


def flips(n: int, rng: np.random.Generator) -> np.ndarray:
    """hflip's draw for n images: which to mirror (probability 1/2 each)."""
    return rng.random(n) < 0.5


def random_crop(x: np.ndarray, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly placed h x w window per image (offsets in [0, H-h] and [0, W-w])."""
    top, left = crop_offsets(x.shape[0], x.shape[2:], h, w, rng)
    return crop(x, top, left, h, w)


def pad_crop(x: np.ndarray, pad: int, rng: np.random.Generator) -> np.ndarray:
    """Zero-pad `pad` pixels on every side, then crop back to H x W at a random offset."""
    if pad <= 0:
        return x
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return random_crop(padded, x.shape[2], x.shape[3], rng)


def hflip(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mirror each image left-right with probability 1/2."""
    flip = flips(x.shape[0], rng)
    out = x.copy()                  # copy + masked assignment: ~4x faster than np.where here
    out[flip] = x[flip][:, :, :, ::-1]
    return out


def paired_hflip(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Mirror each image [C, H, W] and its mask [H, W] left-right together, probability 1/2."""
    flip = rng.random(x.shape[0]) < 0.5
    xo, yo = x.copy(), y.copy()
    xo[flip] = x[flip][:, :, :, ::-1]
    yo[flip] = y[flip][:, :, ::-1]
    return xo, yo


def random_erasing(x: np.ndarray, p: float, rng: np.random.Generator, attempts: int = 10) -> np.ndarray:
    """With probability p per image, replace a rectangle (all channels) by N(0, 1) noise.

    The rectangle has area U(0.02, 0.33)*H*W and log-uniform aspect ratio in [0.3, 3.3]; of up
    to `attempts` draws the first that fits inside the image is used (none fits: no erasing).
    """
    b, c, hgt, wid = x.shape
    erase = rng.random(b) < p
    area = rng.uniform(0.02, 0.33, size=(b, attempts)) * hgt * wid
    aspect = np.exp(rng.uniform(math.log(0.3), math.log(3.3), size=(b, attempts)))
    h = np.rint(np.sqrt(area * aspect)).astype(np.int64)
    w = np.rint(np.sqrt(area / aspect)).astype(np.int64)
    fits = (h < hgt) & (w < wid) & (h > 0) & (w > 0)
    first = fits.argmax(axis=1)                              # first fitting attempt
    chosen = erase & fits.any(axis=1)
    h, w = h[np.arange(b), first], w[np.arange(b), first]
    # Offsets are drawn for the whole batch at once; those of images not erased go unused.
    top = (rng.random(b) * (hgt - h + 1)).astype(np.int64)
    left = (rng.random(b) * (wid - w + 1)).astype(np.int64)
    out = x.copy()
    # Only the boxes are filled, image by image: drawing noise for whole images and masking
    # costs ~3x more on 224x224 batches.
    for i in np.flatnonzero(chosen).tolist():
        t, l, bh, bw = int(top[i]), int(left[i]), int(h[i]), int(w[i])
        out[i, :, t:t + bh, l:l + bw] = rng.standard_normal((c, bh, bw), dtype=np.float32)
    return out


# the box-label base pack's HSV gains (Ultralytics' hyp.scratch defaults, which the Lean kit's FPN
# path follows): each channel's gain is 1 + U(−1, 1)·g per image
HSV_GAINS = (0.015, 0.7, 0.4)


def hsv_jitter(x: np.ndarray, rng: np.random.Generator, mean=None, std=None,
               gains=HSV_GAINS) -> np.ndarray:
    """Per image, hue shifted by U(−1, 1)·gains[0] of the circle, saturation and value scaled by
    1 + U(−1, 1)·gains[1|2], on the image in [0, 1] (undone from the dataset's mean/std first and
    normalised back; values clipped to [0, 1] there).  A single-channel image has only value."""
    n, c = x.shape[:2]
    r = rng.uniform(-1.0, 1.0, (n, 3)) * np.asarray(gains)
    m = np.asarray(mean if mean is not None else (0.0,) * c, np.float32).reshape(1, c, 1, 1)
    s = np.asarray(std if std is not None else (1.0,) * c, np.float32).reshape(1, c, 1, 1)
    img = np.clip(x * s + m, 0.0, 1.0)
    if c != 3:
        out = np.clip(img * (1.0 + r[:, 2]).reshape(n, 1, 1, 1), 0.0, 1.0)
        return ((out - m) / s).astype(np.float32)
    red, green, blue = img[:, 0], img[:, 1], img[:, 2]
    v = img.max(axis=1)
    d = v - img.min(axis=1)
    sat = np.where(v > 0, d / np.maximum(v, 1e-12), 0.0)
    dd = np.maximum(d, 1e-12)
    h = np.where(v == red, (green - blue) / dd, np.where(v == green, 2.0 + (blue - red) / dd, 4.0 + (red - green) / dd))
    h = np.where(d > 0, (h / 6.0) % 1.0, 0.0)
    h = (h + r[:, 0].reshape(n, 1, 1)) % 1.0
    sat = np.clip(sat * (1.0 + r[:, 1]).reshape(n, 1, 1), 0.0, 1.0)
    v = np.clip(v * (1.0 + r[:, 2]).reshape(n, 1, 1), 0.0, 1.0)
    i = np.floor(h * 6.0).astype(np.int64) % 6
    f = h * 6.0 - np.floor(h * 6.0)
    p, q, t = v * (1 - sat), v * (1 - f * sat), v * (1 - (1 - f) * sat)
    rgb = np.stack([np.choose(i, [v, q, p, p, t, v]), np.choose(i, [t, v, v, q, p, p]),
                    np.choose(i, [p, p, t, v, v, q])], axis=1)
    return ((rgb - m) / s).astype(np.float32)


def boxes_hflip(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Mirror each image left-right with probability 1/2, its boxes with it.  y: box lists
    [N, M, 5] (class, cx, cy, w, h; class −1 unused: cx → 1 − cx), or single-box YOLO grid targets
    [N, 11 + K, gH, gW] (box0 x y w h c0, box1 x y w h c1, classes, mask last: the cells mirrored
    and each object cell's in-cell x offsets → 1 − x)."""
    flip = rng.random(x.shape[0]) < 0.5
    xo, yo = x.copy(), y.copy()
    xo[flip] = x[flip][:, :, :, ::-1]
    if y.ndim == 3:
        used = flip[:, None] & (y[:, :, 0] >= 0)
        yo[:, :, 1] = np.where(used, 1.0 - y[:, :, 1], y[:, :, 1])
        return xo, yo
    g = y[flip][:, :, :, ::-1].copy()
    obj = g[:, -1] > 0.5
    for ch in (0, 5):
        g[:, ch] = np.where(obj, 1.0 - g[:, ch], g[:, ch])
    yo[flip] = g
    return xo, yo
