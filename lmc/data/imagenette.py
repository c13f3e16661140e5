"""Imagenette (or any class-per-folder image tree) from its JPEG/PNG files.

Reads DIR/train/<class>/*.{JPEG,jpg,jpeg,png} and DIR/val/<class>/..., classes numbered in
sorted folder order (for imagenette2-320: n01440764 tench -> 0 ... n03888257 parachute -> 9).
Like the reference's preprocess_imagenette.py every image is squashed (aspect ratio not kept)
with PIL bilinear: val straight to the spec's H x W, train to round(H*256/224) x round(W*256/224)
so the Batcher can crop H x W out of it (random when augmenting, centred otherwise) — the
reference's 256 -> 224 crop at any input size.  Pixels are normalized with the ImageNet
mean/std: (x/255 - mean_c) / std_c.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from lmc.data.dataset import Dataset, fetch_hint
from lmc.errors import DataError

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
EXTENSIONS = {".jpeg", ".jpg", ".png"}
EXPECTED = "expected an image tree DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg"
HINT = fetch_hint("imagenette", "extract imagenette2-320.tgz (https://github.com/fastai/imagenette), which "
                                "holds train/ and val/ — or lay out any images as DIR/{train,val}/<class>/")


def train_size(h: int, w: int) -> tuple[int, int]:
    """The stored train size: the reference stores 256 and crops 224, so scale by 256/224."""
    return round(h * 256 / 224), round(w * 256 / 224)


def list_images(split_dir: Path, classes: list[str] | None) -> tuple[list[Path], list[int], list[str]]:
    """(paths, labels, classes) of one split.  classes=None: take them from the folder names."""
    if not split_dir.is_dir():
        raise DataError(f"no such directory: {split_dir}, {EXPECTED}", hint=HINT)
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
        raise DataError(f"{split_dir}: no .jpg/.jpeg/.png images in any class folder; {EXPECTED}", hint=HINT)
    return paths, labels, classes


def read_image(path: Path, size: tuple[int, int]) -> np.ndarray:
    """uint8 [3, h, w]: RGB (greyscale and CMYK files converted), squashed to size=(h, w)."""
    try:
        with Image.open(path) as im:
            im = im.convert("RGB").resize((size[1], size[0]), Image.BILINEAR)
            return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise DataError(f"{path}: cannot read image ({e})") from None


def read_images(paths: list[Path], size: tuple[int, int]) -> np.ndarray:
    """Decode in threads (PIL releases the GIL while decoding and resizing), then normalize."""
    out = np.empty((len(paths), 3, *size), dtype=np.uint8)

    def fill(i: int) -> None:
        out[i] = read_image(paths[i], size)

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        for _ in pool.map(fill, range(len(paths))):   # consuming re-raises a worker's DataError
            pass
    return normalize(out)


def normalize(images: np.ndarray) -> np.ndarray:
    """(x/255 - mean)/std per channel, in float32 and in chunks so no float64 copy is made."""
    scale = (1.0 / (255.0 * np.asarray(STD))).astype(np.float32)[:, None, None]
    shift = (np.asarray(MEAN) / np.asarray(STD)).astype(np.float32)[:, None, None]
    x = np.empty(images.shape, dtype=np.float32)
    for i in range(0, len(images), 1024):
        x[i:i + 1024] = images[i:i + 1024] * scale - shift
    return x


def load(path: Path, input_shape: tuple[int, ...]) -> Dataset:
    if len(input_shape) != 3 or input_shape[0] != 3:
        raise DataError(f"{path}: imagenette gives RGB images [3, H, W] but the spec's input is "
                        f"{tuple(input_shape)}", hint="give the spec an input of shape [3, H, W]")
    if not path.is_dir():
        raise DataError(f"no such directory: {path}, {EXPECTED}", hint=HINT)
    h, w = int(input_shape[1]), int(input_shape[2])
    train_paths, y_train, classes = list_images(path / "train", None)
    val_paths, y_val, _ = list_images(path / "val", classes)
    x_train = read_images(train_paths, train_size(h, w))
    x_val = read_images(val_paths, (h, w))
    sources = {"x_train": str(path / "train"), "y_train": str(path / "train"),
               "x_val": str(path / "val"), "y_val": str(path / "val")}
    return Dataset("imagenette", x_train, np.asarray(y_train, dtype=np.int32),
                   x_val, np.asarray(y_val, dtype=np.int32), num_classes=len(classes),
                   mean=MEAN, std=STD, train_crop=(h, w), sources=sources)
