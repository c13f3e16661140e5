"""Embedded segmentation, detection and denoising demos built from scikit-learn's 8x8 digits
(nothing is downloaded; every canvas is drawn from a fixed seed, so the data never changes).

digits_seg:     32x32 canvases holding 1-3 digits, each scaled 1.5-2.5x (12-20 px) and placed
                at random (later digits are drawn over earlier ones); x [N, 1, 32, 32] in
                [0, 1], y [N, 32, 32] int32: 0 background, 1 + d where digit d's scaled
                intensity is >= INK (11 classes).
digits_det:     64x64 mosaics of 1-4 digits (12-20 px, at most one centre per 8x8-pixel cell),
                y = YOLOv1 targets [N, 10 + 10 + 1, 8, 8] (the YOLO loss's label layout, see
                its module in lmc/losses): per object cell x, y (centre offset in the cell),
                w, h (of the ink's tight box, image-relative), confidence 1, box1 zero, the
                class one-hot, and the cell mask last.
digits_denoise: the embedded digits upscaled to 16x16; x = clean + N(0, NOISE²) noise, clipped
                to [0, 1]; y = the clean image, float32 [N, 1, 16, 16] (a float regression target).

Train canvases use only the digits of the embedded train split and validation canvases only
the test split (digits.load's fixed holdout), so no digit image is seen on both sides."""
from __future__ import annotations

import numpy as np

from lmc.data.dataset import Dataset
from lmc.losses import BOXES, FLOAT, MASK
from lmc.data import digits

SEG_SIZE = 32
SEG_CLASSES = 11             # background + 10 digits
INK = 0.35                   # a pixel belongs to a digit where its intensity reaches this
SEG_N_TRAIN, SEG_N_VAL = 3000, 500
SEG_SEED = 7301
DENOISE_SIZE = 16
NOISE = 0.3
DENOISE_SEED = 7302
DET_SIZE, DET_GRID = 64, 8
DET_N_TRAIN, DET_N_VAL = 3000, 500
DET_SEED = 7303


def _digits():
    return digits.load()


def _resize(img: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of one [h, w] float image to [size, size] (Pillow, float mode)."""
    from PIL import Image
    return np.asarray(Image.fromarray(img.astype(np.float32), mode="F").resize((size, size), Image.BILINEAR),
                      np.float32)


def seg_canvases(images: np.ndarray, labels: np.ndarray, n: int, rng: np.random.Generator):
    """n canvases of SEG_SIZE² with 1-3 digits drawn from (images [M, 8, 8] in [0, 1], labels)."""
    x = np.zeros((n, 1, SEG_SIZE, SEG_SIZE), np.float32)
    y = np.zeros((n, SEG_SIZE, SEG_SIZE), np.int32)
    for i in range(n):
        for _ in range(rng.integers(1, 4)):
            j = rng.integers(len(images))
            size = int(rng.integers(12, 21))
            d = np.clip(_resize(images[j], size), 0.0, 1.0)
            r, c = rng.integers(0, SEG_SIZE - size + 1, 2)
            win = (slice(r, r + size), slice(c, c + size))
            ink = d >= INK
            x[i, 0][win] = np.where(ink, d, np.maximum(x[i, 0][win], d))
            y[i][win] = np.where(ink, 1 + labels[j], y[i][win])
    return x, y


def _embedded(name, make, seed, n_train, n_val, num_classes, label_format, what) -> Dataset:
    """A dataset built from the embedded digits' train and validation splits by `make`."""
    base = _digits()
    rng = np.random.default_rng(seed)
    xt, yt = make(base.x_train[:, 0], base.y_train, n_train, rng)
    xv, yv = make(base.x_val[:, 0], base.y_val, n_val, rng)
    src = f"lmc.data.digits_seg (embedded digits{what})"
    return Dataset(name, xt, yt, xv, yv, num_classes=num_classes, label_format=label_format,
                   sources={a: src for a in ("x_train", "y_train", "x_val", "y_val")})


def load_seg() -> Dataset:
    return _embedded("digits_seg", seg_canvases, SEG_SEED, SEG_N_TRAIN, SEG_N_VAL, SEG_CLASSES, MASK, "")


def load_denoise() -> Dataset:
    base = _digits()
    rng = np.random.default_rng(DENOISE_SEED)

    def make(x):
        clean = np.stack([np.clip(_resize(im, DENOISE_SIZE), 0.0, 1.0) for im in x[:, 0]])[:, None]
        noisy = np.clip(clean + NOISE * rng.standard_normal(clean.shape), 0.0, 1.0).astype(np.float32)
        return noisy, clean.astype(np.float32)

    xt, yt = make(base.x_train)
    xv, yv = make(base.x_val)
    src = "lmc.data.digits_seg (embedded digits, denoising)"
    return Dataset("digits_denoise", xt, yt, xv, yv, num_classes=1, label_format=FLOAT,
                   sources={a: src for a in ("x_train", "y_train", "x_val", "y_val")})


def det_canvases(images: np.ndarray, labels: np.ndarray, n: int, rng: np.random.Generator):
    """n mosaics of DET_SIZE² with 1-4 digits; YOLO targets [n, 21, DET_GRID, DET_GRID]."""
    g, cell = DET_GRID, DET_SIZE // DET_GRID
    x = np.zeros((n, 1, DET_SIZE, DET_SIZE), np.float32)
    y = np.zeros((n, 21, g, g), np.float32)
    for i in range(n):
        placed = []                                   # ink boxes (y0, x0, y1, x1) of this canvas
        for _ in range(rng.integers(1, 5)):
            for _try in range(20):
                j = rng.integers(len(images))
                size = int(rng.integers(12, 21))
                d = np.clip(_resize(images[j], size), 0.0, 1.0)
                ink = np.argwhere(d >= INK)
                if not len(ink):
                    break
                r, c = rng.integers(0, DET_SIZE - size + 1, 2)
                y0, x0 = r + ink[:, 0].min(), c + ink[:, 1].min()
                y1, x1 = r + ink[:, 0].max() + 1, c + ink[:, 1].max() + 1
                gi, gj = int((y0 + y1) / 2 // cell), int((x0 + x1) / 2 // cell)
                # no two centres in one cell (YOLOv1 has one box per cell), no overlap
                if y[i, 20, gi, gj] or any(not (y1 <= a0 or a1 <= y0 or x1 <= b0 or b1 <= x0)
                                           for a0, b0, a1, b1 in placed):
                    continue
                x[i, 0, r:r + size, c:c + size] = np.maximum(x[i, 0, r:r + size, c:c + size], d)
                placed.append((y0, x0, y1, x1))
                y[i, 0, gi, gj] = (x0 + x1) / 2 / cell - gj
                y[i, 1, gi, gj] = (y0 + y1) / 2 / cell - gi
                y[i, 2, gi, gj] = (x1 - x0) / DET_SIZE
                y[i, 3, gi, gj] = (y1 - y0) / DET_SIZE
                y[i, 4, gi, gj] = 1.0
                y[i, 10 + labels[j], gi, gj] = 1.0
                y[i, 20, gi, gj] = 1.0
                break
    return x, y


def load_det() -> Dataset:
    return _embedded("digits_det", det_canvases, DET_SEED, DET_N_TRAIN, DET_N_VAL, 10, BOXES, ", detection")
