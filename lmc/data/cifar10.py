"""CIFAR-10 from the binary version (cifar-10-binary.tar.gz, extracted).

Reads data_batch_1.bin .. data_batch_5.bin (train, 50,000) and test_batch.bin (val, 10,000)
from DIR, DIR/cifar-10-batches-bin/ (the tarball's folder) or DIR/cifar-10/ (the reference's).
Each record is 3073 bytes: a label byte, then 3072 pixel bytes as R, G, B planes of 32x32 —
already CHW.  Images become float32 [N, 3, 32, 32] scaled x/255 (no mean/std, as the reference).
`hint` is the kind's (lmc/data/kinds/cifar10.py): where the files come from.  find_root, scaled
and splits serve the other CIFAR layouts too (their own files and subfolders).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmc.data.dataset import Dataset
from lmc.core.errors import DataError

TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
VAL_FILE = "test_batch.bin"
SUBFOLDERS = ("", "cifar-10-batches-bin", "cifar-10")
RECORD = 1 + 3 * 32 * 32
EXPECTED = ("expected cifar-10 binary files data_batch_1.bin .. data_batch_5.bin and test_batch.bin "
            "in it or in its cifar-10-batches-bin/ or cifar-10/ subfolder")


def find_root(path: Path, hint: str | None, markers: tuple[str, ...] = (VAL_FILE, TRAIN_FILES[0]),
              subfolders: tuple[str, ...] = SUBFOLDERS, what: str = "cifar-10", expected: str = EXPECTED) -> Path:
    """The folder holding the files: DIR itself or the first of `subfolders` that holds one of
    `markers` (the .bin files by default; another CIFAR layout passes its own)."""
    if not path.is_dir():
        raise DataError(f"no such directory: {path}, {expected}", hint=hint)
    for sub in subfolders:
        root = path / sub if sub else path
        if any((root / m).is_file() for m in markers):
            return root
    raise DataError(f"{path}: no {what} files found; {expected}", hint=hint)


def read_batch(path: Path, hint: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [n, 3, 32, 32], labels uint8 [n]) of one .bin file."""
    if not path.is_file():
        raise DataError(f"{path}: missing cifar-10 file; {EXPECTED}", hint=hint)
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    if raw.size % RECORD:
        raise DataError(f"{path}: size {raw.size} bytes is not a multiple of the {RECORD}-byte "
                        f"cifar-10 record (1 label byte + 3072 pixel bytes); the file is truncated "
                        f"or not a cifar-10 binary batch")
    records = raw.reshape(-1, RECORD)
    return records[:, 1:].reshape(-1, 3, 32, 32), records[:, 0]


def scaled(images: np.ndarray, labels) -> tuple[np.ndarray, np.ndarray]:
    """(images as float32 x/255, labels as int32): the CIFAR pixels as the nets see them."""
    return np.asarray(images).astype(np.float32) / np.float32(255.0), np.asarray(labels).astype(np.int32)


def read_split(root: Path, names: tuple[str, ...], hint: str | None) -> tuple[np.ndarray, np.ndarray]:
    parts = [read_batch(root / name, hint) for name in names]
    return scaled(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def splits(train_src: str, val_src: str) -> dict[str, str]:
    """Dataset.sources for a train and a validation file."""
    return {"x_train": train_src, "y_train": train_src, "x_val": val_src, "y_val": val_src}


def load(path: Path, hint: str | None) -> Dataset:
    root = find_root(path, hint)
    x_train, y_train = read_split(root, TRAIN_FILES, hint)
    x_val, y_val = read_split(root, (VAL_FILE,), hint)
    sources = splits(str(root / "data_batch_{1..5}.bin"), str(root / VAL_FILE))
    return Dataset("cifar10", x_train, y_train, x_val, y_val, num_classes=10, sources=sources)
