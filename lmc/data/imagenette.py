"""Imagenette (or any class-per-folder image tree) from its JPEG/PNG files.

Reads DIR/train/<class>/*.{JPEG,jpg,jpeg,png} and DIR/val/<class>/..., classes numbered in
sorted folder order (for imagenette2-320: n01440764 tench -> 0 ... n03888257 parachute -> 9).
The same loader reads `imagenet` (the standard train/<wnid>/*.JPEG, val/<wnid>/*.JPEG tree).
Like the reference's preprocess_imagenette.py every image is squashed (aspect ratio not kept)
with PIL bilinear: val straight to the spec's H x W, train to round(H*256/224) x round(W*256/224)
so the Batcher can crop H x W out of it (random when augmenting, centred otherwise) — the
reference's 256 -> 224 crop at any input size.  Pixels are normalized with the ImageNet
mean/std: (x/255 - mean_c) / std_c.

Streaming (`stream=True`, always for imagenet, and automatically when the decoded float32
images would take more than STREAM_ABOVE bytes of RAM): x_train / x_val are `Images`, array-
likes that decode the rows asked for on each access (in threads: PIL releases the GIL while
decoding and resizing), so memory holds a few batches (the Batcher's prefetch queue) instead of
the dataset; every epoch reads the files again.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from lmc.data.dataset import Dataset
from lmc.data.resolution import crop_image
from lmc.core.errors import DataError

STREAM_ABOVE = 4 << 30     # bytes of decoded float32 images above which the loader streams
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
EXTENSIONS = {".jpeg", ".jpg", ".png"}
EXPECTED = "expected an image tree DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg"


def train_size(h: int, w: int) -> tuple[int, int]:
    """The stored train size: the reference stores 256 and crops 224, so scale by 256/224."""
    return round(h * 256 / 224), round(w * 256 / 224)


def list_images(split_dir: Path, classes: list[str] | None,
                hint: str | None = None) -> tuple[list[Path], list[int], list[str]]:
    """(paths, labels, classes) of one split.  classes=None: take them from the folder names.
    `hint`: where the files come from, for the errors of a missing tree."""
    if not split_dir.is_dir():
        raise DataError(f"no such directory: {split_dir}, {EXPECTED}", hint=hint)
    found = sorted(p.name for p in split_dir.iterdir() if p.is_dir())
    if classes is None:
        classes = found
    unknown = [c for c in found if c not in classes]
    if unknown:
        raise DataError(f"{split_dir}: class folder(s) {', '.join(unknown)} do not exist under "
                        f"train/ (train classes: {', '.join(classes)})")
    paths, labels = [], []
    for label, name in enumerate(classes):
        folder = split_dir / name
        if not folder.is_dir():
            continue
        for p in sorted(folder.iterdir()):
            if p.suffix.lower() in EXTENSIONS:
                paths.append(p)
                labels.append(label)
    if not paths:
        raise DataError(f"{split_dir}: no .jpg/.jpeg/.png images in any class folder; {EXPECTED}", hint=hint)
    return paths, labels, classes


def read_image(path: Path, size: tuple[int, int], crop_ratio: float = 0.0) -> np.ndarray:
    """uint8 [3, h, w]: RGB (greyscale and CMYK files converted), squashed to size=(h, w) — or,
    with crop_ratio r > 0 (train.test_crop_ratio), resized aspect kept to cover (h/r, w/r) and
    centre-cropped to (h, w) (lmc.data.resolution)."""
    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            im = crop_image(im, *size, crop_ratio) if crop_ratio else im.resize((size[1], size[0]), Image.BILINEAR)
            return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise DataError(f"{path}: cannot read image ({e})") from None


def read_images(paths: list[Path], size: tuple[int, int], pool: ThreadPoolExecutor | None = None,
                crop_ratio: float = 0.0) -> np.ndarray:
    """Decode in threads (PIL releases the GIL while decoding and resizing), then normalize."""
    out = np.empty((len(paths), 3, *size), dtype=np.uint8)

    def fill(i: int) -> None:
        out[i] = read_image(paths[i], size, crop_ratio)

    if pool is not None:
        for _ in pool.map(fill, range(len(paths))):   # consuming re-raises a worker's DataError
            pass
        return normalize(out)
    with ThreadPoolExecutor(max_workers=_workers()) as own:
        return read_images(paths, size, own, crop_ratio)


def _workers() -> int:
    return min(16, os.cpu_count() or 1)


class Images:
    """[N, 3, h, w] float32 images decoded from their files on each access (streaming): rows by
    an index array or a slice, as numpy indexes; nothing is kept between accesses."""
    ndim = 4
    dtype = np.dtype(np.float32)

    def __init__(self, paths: list[Path], size: tuple[int, int], crop_ratio: float = 0.0):
        self.paths, self.size, self.crop_ratio = list(paths), tuple(size), crop_ratio
        self.shape = (len(self.paths), 3, *self.size)
        self._pool: ThreadPoolExecutor | None = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            rows = range(*idx.indices(len(self)))
        elif np.ndim(idx) == 0:
            return self[np.asarray([idx])][0]
        else:
            rows = np.asarray(idx).ravel().tolist()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=_workers(), thread_name_prefix="lmc-decode")
        return read_images([self.paths[i] for i in rows], self.size, self._pool, self.crop_ratio)

    def __getstate__(self):          # picklable (no pool)
        return {"paths": self.paths, "size": self.size, "crop_ratio": self.crop_ratio, "shape": self.shape,
                "_pool": None}


def normalize(images: np.ndarray) -> np.ndarray:
    """(x/255 - mean)/std per channel, in float32 and in chunks so no float64 copy is made."""
    scale = (1.0 / (255.0 * np.asarray(STD))).astype(np.float32)[:, None, None]
    shift = (np.asarray(MEAN) / np.asarray(STD)).astype(np.float32)[:, None, None]
    x = np.empty(images.shape, dtype=np.float32)
    for i in range(0, len(images), 1024):
        x[i:i + 1024] = images[i:i + 1024] * scale - shift
    return x


def load(path: Path, input_shape: tuple[int, ...], stream: bool | None = None, kind: str = "imagenette",
         crop_ratio: float = 0.0, hint: str | None = None) -> Dataset:
    """stream: True/False, or None for automatic (above STREAM_ABOVE bytes decoded).
    crop_ratio: train.test_crop_ratio, applied to the validation files as they are decoded.
    hint: the kind's (lmc/data/kinds/), where the files come from."""
    if len(input_shape) != 3 or input_shape[0] != 3:
        raise DataError(f"{path}: {kind} gives RGB images [3, H, W] but the spec's input is "
                        f"{tuple(input_shape)}", hint="give the spec an input of shape [3, H, W]")
    if not path.is_dir():
        raise DataError(f"no such directory: {path}, {EXPECTED}", hint=hint)
    h, w = int(input_shape[1]), int(input_shape[2])
    train_paths, y_train, classes = list_images(path / "train", None, hint)
    val_paths, y_val, _ = list_images(path / "val", classes, hint)
    th, tw = train_size(h, w)
    if stream is None:
        stream = 4 * 3 * (len(train_paths) * th * tw + len(val_paths) * h * w) > STREAM_ABOVE
    if stream:
        x_train, x_val = Images(train_paths, (th, tw)), Images(val_paths, (h, w), crop_ratio)
    else:
        x_train, x_val = read_images(train_paths, (th, tw)), read_images(val_paths, (h, w), crop_ratio=crop_ratio)
    sources = {"x_train": str(path / "train"), "y_train": str(path / "train"),
               "x_val": str(path / "val"), "y_val": str(path / "val")}
    return Dataset(kind, x_train, np.asarray(y_train, dtype=np.int32),
                   x_val, np.asarray(y_val, dtype=np.int32), num_classes=len(classes),
                   mean=MEAN, std=STD, train_crop=(h, w), sources=sources)
