"""MNIST from the original IDX files (http://yann.lecun.com/exdb/mnist/ layout).

Reads DIR/train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
t10k-labels-idx1-ubyte, each optionally gzipped (`.gz`).  Images become float32
[N, 1, rows, cols] scaled x/255 to [0, 1] (no mean/std, as the reference); labels int32.
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from lmc.data.dataset import Dataset
from lmc.core.errors import DataError

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
IMAGES_MAGIC = 2051     # 0x00000803: unsigned bytes, 3 dimensions
LABELS_MAGIC = 2049     # 0x00000801: unsigned bytes, 1 dimension
EXPECTED = "expected mnist idx files " + ", ".join(f"{f}[.gz]" for f in FILES)


def find(directory: Path, name: str, hint: str | None) -> Path:
    """The plain file if present, else its .gz; DataError naming both when neither exists."""
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"{directory}: missing mnist file {name}[.gz]; {EXPECTED}", hint=hint)


def read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read ({e})") from None


def read_idx(path: Path, magic: int, ndim: int) -> np.ndarray:
    """Parse an IDX file of unsigned bytes: big-endian u32 magic, ndim u32 sizes, then data."""
    raw = read_bytes(path)
    header = 4 * (1 + ndim)
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX file: {len(raw)} bytes, shorter than its "
                        f"{header}-byte header")
    fields = np.frombuffer(raw, dtype=">u4", count=1 + ndim)
    if int(fields[0]) != magic:
        raise DataError(f"{path}: bad IDX magic number {int(fields[0])}, expected {magic} "
                        f"({'images' if magic == IMAGES_MAGIC else 'labels'} file)")
    dims = tuple(int(d) for d in fields[1:])
    need = int(np.prod(dims))
    have = len(raw) - header
    if have < need:
        raise DataError(f"{path}: truncated IDX file: header promises shape {dims} "
                        f"({need} bytes of data) but only {have} bytes follow")
    # Trailing bytes are tolerated (some mirrors pad files); only the promised count is read.
    return np.frombuffer(raw, dtype=np.uint8, count=need, offset=header).reshape(dims)


def load_split(directory: Path, images_name: str, labels_name: str, hint: str | None):
    """(x, y, images path, labels path) of one split."""
    images_path = find(directory, images_name, hint)
    labels_path = find(directory, labels_name, hint)
    images = read_idx(images_path, IMAGES_MAGIC, 3)
    labels = read_idx(labels_path, LABELS_MAGIC, 1)
    if len(images) != len(labels):
        raise DataError(f"{labels_path}: {len(labels)} labels but {images_path} has "
                        f"{len(images)} images; the counts must match")
    # Scaling to [0, 1] in float32 directly avoids a float64 copy of the whole set.
    x = images[:, None, :, :].astype(np.float32) / np.float32(255.0)
    return x, labels.astype(np.int32), str(images_path), str(labels_path)


def load(path: Path, hint: str | None) -> Dataset:
    """`hint`: the kind's (lmc/data/kinds/mnist.py), where the files come from."""
    if not path.is_dir():
        raise DataError(f"no such directory: {path}, {EXPECTED}", hint=hint)
    x_train, y_train, *train_src = load_split(path, FILES[0], FILES[1], hint)
    x_val, y_val, *val_src = load_split(path, FILES[2], FILES[3], hint)
    sources = dict(zip(("x_train", "y_train", "x_val", "y_val"), (*train_src, *val_src)))
    return Dataset("mnist", x_train, y_train, x_val, y_val, num_classes=10, sources=sources)
