"""CIFAR-10 from the binary version (cifar-10-binary.tar.gz, extracted).

Reads data_batch_1.bin .. data_batch_5.bin (train, 50,000) and test_batch.bin (val, 10,000)
from DIR, DIR/cifar-10-batches-bin/ (the tarball's folder) or DIR/cifar-10/ (the reference's).
Each record is 3073 bytes: a label byte, then 3072 pixel bytes as R, G, B planes of 32x32 —
already CHW.  Images become float32 [N, 3, 32, 32] scaled x/255 (no mean/std, as the reference).
`hint` is the kind's (lmc/data/kinds/cifar10.py): where the files come from.
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


def find_root(path: Path, hint: str | None) -> Path:
    """The folder holding the .bin files: DIR itself or one of the known subfolders."""
    if not path.is_dir():
        raise DataError(f"no such directory: {path}, {EXPECTED}", hint=hint)
    for sub in SUBFOLDERS:
        root = path / sub if sub else path
        if (root / VAL_FILE).is_file() or (root / TRAIN_FILES[0]).is_file():
            return root
    raise DataError(f"{path}: no cifar-10 files found; {EXPECTED}", hint=hint)


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


def read_split(root: Path, names: tuple[str, ...], hint: str | None) -> tuple[np.ndarray, np.ndarray]:
    parts = [read_batch(root / name, hint) for name in names]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return images.astype(np.float32) / np.float32(255.0), labels.astype(np.int32)


def load(path: Path, hint: str | None) -> Dataset:
    root = find_root(path, hint)
    x_train, y_train = read_split(root, TRAIN_FILES, hint)
    x_val, y_val = read_split(root, (VAL_FILE,), hint)
    train_src = str(root / "data_batch_{1..5}.bin")
    val_src = str(root / VAL_FILE)
    sources = {"x_train": train_src, "y_train": train_src, "x_val": val_src, "y_val": val_src}
    return Dataset("cifar10", x_train, y_train, x_val, y_val, num_classes=10, sources=sources)
