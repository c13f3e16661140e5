"""Per-image augmentation policies of one training batch [B, C, H, W] (host side, after the
crop/flip and before random erasing and mixing): RandAugment (the seed's colour "lite" set, or
timm's full geometric sampler) and AutoAugment (the ImageNet policy, 25 sub-policies).

Images are float32 and normalized; each op sees them de-normalized to [0, 1] (the dataset's
mean/std, or none for datasets already in [0, 1]) and they are re-normalized at the end.
- The lite set follows the seed's formulas on floats (training.md §4): per image, N ops drawn
  uniformly from {identity, brightness, contrast, color, autocontrast}, factor
  f = 1 ± min(M/10, 1)·0.5 with a random sign; brightness x·f, contrast mean + f·(x − mean)
  (per-image mean over all channels), color = lerp toward grey (0.299R + 0.587G + 0.114B),
  autocontrast = per-image min/max stretch; clamped to [0, 1] after each op.
- The geometric sampler and AutoAugment use Pillow's own operations on the 8-bit image (as
  timm and torchvision do): 1- or 3-channel images only (mode L or RGB); geometric fill =
  the grey 128 of timm.
  RandAugment (timm `rand-mM[-mstdS][-inc1]`): per image N ops drawn with replacement from 15,
  each applied with probability ½; magnitude M, or N(M, mstd) clipped to [0, 10] per op.
  AutoAugment: one of the 25 sub-policies uniformly per image; each of its two ops applied with
  its probability at its level (torchvision's 10 magnitude bins).
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

from lmc.core.errors import DataError

LITE = ("identity", "brightness", "contrast", "color", "autocontrast")
GREY = (0.299, 0.587, 0.114)
FILL = 128


# ---------------------------------------------------------------- the seed's lite set (floats)

def lite(x: np.ndarray, n: int, m: float, rng: np.random.Generator) -> np.ndarray:
    """The colour-only RandAugment of the seed on images in [0, 1]."""
    b = len(x)
    strength = min(m / 10.0, 1.0) * 0.5
    x = x.astype(np.float32, copy=True)
    for _ in range(n):
        op = rng.integers(0, len(LITE), b)
        f = (1.0 + np.where(rng.random(b) < 0.5, -strength, strength)).astype(np.float32)[:, None, None, None]
        for k, name in enumerate(LITE[1:], start=1):
            sel = op == k
            if not sel.any():
                continue
            xs, fs = x[sel], f[sel]
            if name == "brightness":
                xs = xs * fs
            elif name == "contrast":
                mean = xs.mean(axis=(1, 2, 3), keepdims=True)
                xs = mean + fs * (xs - mean)
            elif name == "color":
                if xs.shape[1] == 3:
                    grey = np.tensordot(np.asarray(GREY, np.float32), xs, axes=([0], [1]))[:, None]
                    xs = grey + fs * (xs - grey)
            else:   # autocontrast
                lo = xs.min(axis=(1, 2, 3), keepdims=True)
                hi = xs.max(axis=(1, 2, 3), keepdims=True)
                xs = np.where(hi > lo, (xs - lo) / np.maximum(hi - lo, 1e-12), xs)
            x[sel] = np.clip(xs, 0.0, 1.0)
    return x


# ---------------------------------------------------------------- Pillow ops (8-bit images)

def _affine(img, coeffs):
    return img.transform(img.size, Image.AFFINE, coeffs, resample=Image.NEAREST, fillcolor=_fill(img))


def _fill(img):
    return FILL if img.mode == "L" else (FILL,) * 3


OPS = {
    "AutoContrast": lambda img, a: ImageOps.autocontrast(img),
    "Equalize": lambda img, a: ImageOps.equalize(img),
    "Invert": lambda img, a: ImageOps.invert(img),
    "Rotate": lambda img, a: img.rotate(a, resample=Image.NEAREST, fillcolor=_fill(img)),
    # bits ≥ 8 keep the image; 0 bits (timm's top level) is clamped to Pillow's minimum, 1
    "Posterize": lambda img, a: img if int(a) >= 8 else ImageOps.posterize(img, max(int(a), 1)),
    "Solarize": lambda img, a: ImageOps.solarize(img, a),
    "SolarizeAdd": lambda img, a: _solarize_add(img, a),
    "Color": lambda img, a: ImageEnhance.Color(img).enhance(a),
    "Contrast": lambda img, a: ImageEnhance.Contrast(img).enhance(a),
    "Brightness": lambda img, a: ImageEnhance.Brightness(img).enhance(a),
    "Sharpness": lambda img, a: ImageEnhance.Sharpness(img).enhance(a),
    "ShearX": lambda img, a: _affine(img, (1, a, 0, 0, 1, 0)),
    "ShearY": lambda img, a: _affine(img, (1, 0, 0, a, 1, 0)),
    "TranslateX": lambda img, a: _affine(img, (1, 0, a, 0, 1, 0)),     # a in pixels
    "TranslateY": lambda img, a: _affine(img, (1, 0, 0, 0, 1, a)),
}


def _solarize_add(img, add, thresh=128):
    v = np.asarray(img, np.int32)
    return Image.fromarray(np.where(v < thresh, np.minimum(v + int(add), 255), v).astype(np.uint8), img.mode)


def _signed(v, rng):
    return -v if rng.random() < 0.5 else v


def timm_arg(name: str, level: float, inc: bool, size: tuple[int, int], rng) -> float:
    """timm's magnitude → argument (level in [0, 10]; `inc`: the increasing-severity forms)."""
    l = level / 10.0
    if name == "Rotate":
        return _signed(30.0 * l, rng)
    if name in ("ShearX", "ShearY"):
        return _signed(0.3 * l, rng)
    if name in ("TranslateX", "TranslateY"):
        return _signed(0.45 * l * (size[0] if name == "TranslateX" else size[1]), rng)
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return 1.0 + _signed(0.9 * l, rng) if inc else 1.8 * l + 0.1
    if name == "Posterize":
        return 4 - int(4 * l) if inc else int(4 * l)
    if name == "Solarize":
        return 256 - 256 * l if inc else 256 * l
    if name == "SolarizeAdd":
        return 110 * l
    return 0.0


def tv_arg(name: str, level: int, size: tuple[int, int], rng) -> float:
    """torchvision's AutoAugment magnitude bins (10 levels) → argument."""
    bins = {"ShearX": 0.3, "ShearY": 0.3, "Rotate": 30.0, "Color": 0.9, "Contrast": 0.9,
            "Brightness": 0.9, "Sharpness": 0.9}
    if name in bins:
        v = _signed(np.linspace(0.0, bins[name], 10)[level], rng)
        return 1.0 + v if name in ("Color", "Contrast", "Brightness", "Sharpness") else v
    if name in ("TranslateX", "TranslateY"):
        span = size[0] if name == "TranslateX" else size[1]
        return _signed(np.linspace(0.0, 150.0 / 331.0 * span, 10)[level], rng)
    if name == "Posterize":
        return int(8 - round(level / ((10 - 1) / 4)))
    if name == "Solarize":
        return float(np.linspace(255.0, 0.0, 10)[level])
    return 0.0


# The ImageNet policy of Cubuk et al. 2018 (AutoAugment), as torchvision lists it: (op, p, level).
IMAGENET_POLICY = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 0)),
    (("Equalize", 0.8, 0), ("Equalize", 0.6, 0)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, 0), ("Solarize", 0.2, 4)), (("Equalize", 0.4, 0), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, 0)), (("Posterize", 0.8, 5), ("Equalize", 1.0, 0)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, 0), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, 0)),
    (("Equalize", 0.0, 0), ("Equalize", 0.8, 0)), (("Invert", 0.6, 0), ("Equalize", 1.0, 0)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, 0)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, 0)), (("Color", 0.4, 0), ("Equalize", 0.6, 0)),
    (("Equalize", 0.4, 0), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 0)),
    (("Invert", 0.6, 0), ("Equalize", 1.0, 0)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, 0), ("Equalize", 0.6, 0)),
)
RAND_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
            "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY")


def _to_pil(img: np.ndarray) -> Image.Image:
    u8 = np.clip(np.rint(img * 255.0), 0, 255).astype(np.uint8)
    return Image.fromarray(u8[0], "L") if img.shape[0] == 1 else Image.fromarray(u8.transpose(1, 2, 0), "RGB")


def _from_pil(im: Image.Image, c: int) -> np.ndarray:
    a = np.asarray(im, np.float32) / 255.0
    return a[None] if c == 1 else a.transpose(2, 0, 1)


# ---------------------------------------------------------------- the batch policy

class Policy:
    """The recipe's per-image policy: "lite", "rand" (geometric) or "auto"."""

    def __init__(self, kind: str, *, n: int = 2, m: float = 9.0, mstd: float = 0.0, inc: bool = False,
                 mean=None, std=None):
        self.kind, self.n, self.m, self.mstd, self.inc = kind, n, m, mstd, inc
        self.mean = None if mean is None else np.asarray(mean, np.float32)[None, :, None, None]
        self.std = None if std is None else np.asarray(std, np.float32)[None, :, None, None]

    @classmethod
    def from_config(cls, cfg, ds) -> "Policy | None":
        if cfg.use_auto_augment:
            p = cls("auto", mean=ds.mean, std=ds.std)
        elif cfg.use_rand_augment:
            p = cls("rand" if cfg.rand_augment_geometric else "lite", n=cfg.rand_augment_n, m=cfg.rand_augment_m,
                    mstd=cfg.rand_augment_mstd, inc=cfg.rand_augment_inc, mean=ds.mean, std=ds.std)
        else:
            return None
        if ds.x_train.ndim != 4:
            raise DataError(f"{ds.source('x_train')}: RandAugment/AutoAugment need image inputs [C, H, W], but the "
                            f"examples have shape {tuple(ds.x_train.shape[1:])}")
        if p.kind != "lite" and ds.x_train.shape[1] not in (1, 3):
            raise DataError(f"{ds.source('x_train')}: the Pillow ops of {'AutoAugment' if p.kind == 'auto' else 'RandAugment'}"
                            f" take 1- or 3-channel images, not {ds.x_train.shape[1]}",
                            hint="use the colour-only RandAugment (rand_augment_geometric: false)")
        return p

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        u = x if self.mean is None else x * self.std + self.mean          # de-normalized, [0, 1]
        if self.kind == "lite":
            u = lite(np.clip(u, 0.0, 1.0), self.n, self.m, rng)
        else:
            u = np.stack([self._image(img, rng) for img in u])
        return (u if self.mean is None else (u - self.mean) / self.std).astype(np.float32)

    def _image(self, img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        im = _to_pil(img)
        size = im.size
        if self.kind == "auto":
            for name, p, level in IMAGENET_POLICY[int(rng.integers(len(IMAGENET_POLICY)))]:
                if rng.random() < p:
                    im = OPS[name](im, tv_arg(name, level, size, rng))
        else:
            for name in rng.choice(RAND_OPS, self.n):
                if rng.random() < 0.5:
                    level = self.m if self.mstd <= 0 else float(np.clip(rng.normal(self.m, self.mstd), 0.0, 10.0))
                    im = OPS[name](im, timm_arg(name, level, self.inc, size, rng))
        return _from_pil(im, img.shape[0])
