"""The reference's binary segmentation and detection sets (training.md §4): DIR/train.bin and
DIR/val.bin, each a u32 little-endian record count followed by the records.

pets      record: image 3·S·S u8 (CHW) + mask S·S u8 (trimap classes 0/1/2); images are
          normalized with the ImageNet mean/std, (x/255 − mean_c)/std_c.  (S = 224 in the
          reference's files.)
brats,    record: 4·S·S u8 (FLAIR, T1w, T1gd, T2w) + mask S·S u8 (0 background, 1 edema,
brats224  2 non-enhancing, 3 enhancing); each byte b is dequantised to z = (b − 128)·5/127
          (per-volume z-scores clipped at ±5σ), no ImageNet normalization.
pets_det  record: image 3·S·S u8 + a 7,200-byte label: YOLO target 30·7·7 f32 (the
          yolov1 grid layout: box0 x y w h c, box1, 20 classes), mask 7·7 f32, numBoxes u32
          and 56 raw boxes × 20 B (not read: `augment` flips the grid targets with the image);
          y = target ‖ mask [N, 31, 7, 7].

S is read from the file (its size and count), so smaller files of the same layout load too.
A file whose size does not fit its count and layout is an error naming the file."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmc.data.dataset import Dataset
from lmc.core.errors import DataError
from lmc.losses import BOXES, MASK

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
DET_LABEL_BYTES = 7200          # 30·7·7·4 + 7·7·4 + 4 + 56·20
DET_PER_CELL, DET_GRID = 30, 7


def _read(path: Path, kind: str, bytes_per_px: int, extra: int, hint: str | None) -> tuple[np.ndarray, int, int]:
    """(records [n, bytes] u8, n, S): records of bytes_per_px·S² + extra bytes after a u32 count."""
    if not path.is_file():
        raise DataError(f"no such file: {path}, expected the {kind} records (train.bin and val.bin)", hint=hint)
    raw = np.fromfile(path, np.uint8)
    if len(raw) < 4:
        raise DataError(f"{path}: {len(raw)} bytes, too short for the u32 record count")
    n = int(raw[:4].view("<u4")[0])
    body = len(raw) - 4
    if n == 0 or body % n:
        raise DataError(f"{path}: {body} bytes after the header do not split into {n} records")
    rec = body // n
    s2, rem = divmod(rec - extra, bytes_per_px)
    s = int(round(np.sqrt(s2))) if s2 > 0 else 0
    if rem or s2 <= 0 or s * s != s2:
        raise DataError(f"{path}: records of {rec} bytes do not hold {bytes_per_px}·S² bytes of image and mask"
                        + (f" plus a {extra}-byte label" if extra else "") + " for any square S")
    return raw[4:].reshape(n, rec), n, s


def pets_split(path: Path, kind: str, hint: str | None):
    """(x, y, classes) of one pets file: ImageNet-normalized RGB, a trimap class per pixel."""
    recs, n, s = _read(path, kind, 4, 0, hint)
    img = recs[:, :3 * s * s].reshape(n, 3, s, s).astype(np.float32) / np.float32(255.0)
    x = (img - np.asarray(MEAN, np.float32)[:, None, None]) / np.asarray(STD, np.float32)[:, None, None]
    y = recs[:, 3 * s * s:].reshape(n, s, s).astype(np.int32)
    return x.astype(np.float32), y, 3


def brats_split(path: Path, kind: str, hint: str | None):
    """(x, y, classes) of one brats file: four dequantized modalities, a class per pixel."""
    recs, n, s = _read(path, kind, 5, 0, hint)
    x = (recs[:, :4 * s * s].reshape(n, 4, s, s).astype(np.float32) - 128.0) * np.float32(5.0 / 127.0)
    y = recs[:, 4 * s * s:].reshape(n, s, s).astype(np.int32)
    return x.astype(np.float32), y, 4


def det_split(path: Path, kind: str, hint: str | None):
    """(x, y, None) of one pets_det file: ImageNet-normalized RGB, YOLO target ‖ cell mask."""
    recs, n, s = _read(path, kind, 3, DET_LABEL_BYTES, hint)
    img = recs[:, :3 * s * s].reshape(n, 3, s, s).astype(np.float32) / np.float32(255.0)
    x = (img - np.asarray(MEAN, np.float32)[:, None, None]) / np.asarray(STD, np.float32)[:, None, None]
    lab = np.ascontiguousarray(recs[:, 3 * s * s:])
    cells = DET_PER_CELL * DET_GRID * DET_GRID
    target = lab[:, :4 * cells].copy().view("<f4").reshape(n, DET_PER_CELL, DET_GRID, DET_GRID)
    mask = lab[:, 4 * cells:4 * cells + 4 * DET_GRID * DET_GRID].copy().view("<f4").reshape(n, 1, DET_GRID, DET_GRID)
    if not np.isin(mask, (0.0, 1.0)).all():
        raise DataError(f"{path}: the YOLO cell mask holds values other than 0 and 1")
    return x.astype(np.float32), np.concatenate([target, mask], axis=1).astype(np.float32), None


def load(kind: str, path: Path, split, hint: str | None) -> Dataset:
    """Dataset `kind` from DIR/train.bin and DIR/val.bin, each read by `split` (pets_split,
    brats_split, det_split); `hint`: the kind's, where the files come from."""
    parts = {}
    for name in ("train", "val"):
        parts[name] = split(Path(path) / f"{name}.bin", kind, hint)
    (xt, yt, nc), (xv, yv, _) = parts["train"], parts["val"]
    if xt.shape[1:] != xv.shape[1:]:
        raise DataError(f"{path}: train images are {list(xt.shape[1:])} but val images are {list(xv.shape[1:])}")
    sources = {"x_train": str(Path(path) / "train.bin"), "y_train": str(Path(path) / "train.bin"),
               "x_val": str(Path(path) / "val.bin"), "y_val": str(Path(path) / "val.bin")}
    if split is det_split:
        return Dataset(kind, xt, yt, xv, yv, num_classes=DET_PER_CELL - 10, label_format=BOXES, sources=sources)
    return Dataset(kind, xt, yt, xv, yv, num_classes=nc, label_format=MASK, sources=sources)
