"""The resolution split of a recipe (train.train_res, train.test_crop_ratio; timm's train size and
crop_pct, RSB-A2 trains at 160 and tests at 224): Pillow resizes of float images, no resampling
of our own.

- train_res R: every training batch, after its crop/flip and before RandAugment / AutoAugment,
  random erasing and mixing, is resized to R×R (Pillow bilinear, per channel in mode "F"; a
  downscale is antialiased as Pillow does it).  The module's train step takes [B, C, R, R]
  (infer.train_net); eval runs at the spec's resolution.
- test_crop_ratio r ∈ (0, 1]: each validation image is resized, aspect kept, so that it covers
  (floor(H/r), floor(W/r)) — the shorter side to floor(S/r) for a square S×S input, as timm's
  Resize(floor(S/crop_pct)) — then centre-cropped to H×W (torchvision's CenterCrop offsets,
  round((size − H)/2)).  Image folders apply it to the decoded file (lmc.data.imagenette), every
  other dataset to its stored validation images (already H×W: resized to floor(H/r)×floor(W/r)).
  0 keeps the dataset's own validation images (the folder loader's squash, the stored arrays).
"""
from __future__ import annotations

import math

import numpy as np
from PIL import Image


def resize(x: np.ndarray, h: int, w: int) -> np.ndarray:
    """[B, C, H, W] float32 → [B, C, h, w], each channel of each image by Pillow's bilinear resize."""
    b, c = x.shape[:2]
    if x.shape[2:] == (h, w):
        return x
    out = np.empty((b, c, h, w), dtype=np.float32)
    for i in range(b):
        for j in range(c):
            out[i, j] = np.asarray(Image.fromarray(np.ascontiguousarray(x[i, j], dtype=np.float32))
                                   .resize((w, h), Image.BILINEAR))
    return out


def crop_size(h0: int, w0: int, h: int, w: int, ratio: float) -> tuple[int, int]:
    """The size an h0×w0 image is resized to (aspect kept) before its centre H×W crop: the
    smallest that covers floor(H/ratio) × floor(W/ratio)."""
    th, tw = math.floor(h / ratio), math.floor(w / ratio)
    s = max(th / h0, tw / w0)
    return max(th, round(h0 * s)), max(tw, round(w0 * s))


def centre(rh: int, rw: int, h: int, w: int) -> tuple[int, int]:
    """(top, left) of the centre h×w window of an rh×rw image (torchvision's CenterCrop)."""
    return round((rh - h) / 2), round((rw - w) / 2)


def crop_image(im: Image.Image, h: int, w: int, ratio: float) -> Image.Image:
    """One decoded image (a folder's file) → its h×w eval view under test_crop_ratio."""
    rh, rw = crop_size(im.height, im.width, h, w, ratio)
    top, left = centre(rh, rw, h, w)
    return im.resize((rw, rh), Image.BILINEAR).crop((left, top, left + w, top + h))


def eval_crop(x: np.ndarray, ratio: float) -> np.ndarray:
    """Stored validation images [N, C, H, W] → the same shape, each resized to
    crop_size(H, W, H, W, ratio) and centre-cropped back to H×W."""
    n, c, h, w = x.shape
    rh, rw = crop_size(h, w, h, w, ratio)
    top, left = centre(rh, rw, h, w)
    big = resize(x, rh, rw)
    return np.ascontiguousarray(big[:, :, top:top + h, left:left + w])
