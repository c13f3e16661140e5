"""Any dataset saved as one NumPy .npz file.

Keys: `x` [N, C, H, W] or [N, D] and `y`; optionally `x_val` and `y_val` (and `mask_val`).
`y` is, by its dtype and rank (the loss decides how it is used; a mismatch is an error naming
both shapes when training starts):

- integer [N]:              class indices (or the targets a loss builds from them);
- integer [N, H, W]:        a class index per pixel (the per-pixel losses);
- float32 [N, NC]:          multi-hot / soft targets, or vector regression targets;
- float32 [N, C, H, W]:     regression targets of the output's shape;
- float32 [N, perCell, gH, gW] with `mask` [N, gH, gW] (0/1 where a box centre falls): YOLOv1
  targets; they are stored as one array [N, perCell + 1, gH, gW], the mask last.
  Without them a fixed 10% (N // 10 examples, chosen by `split.holdout` with seed
HOLDOUT_SEED — the same examples on every run, whatever the run's seed) is held out for
validation.  float32 x is used exactly as given; uint8 x is scaled x/255; any other dtype is
refused rather than guessed at.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmc.data.dataset import Dataset
from lmc.data.split import holdout
from lmc.core.arrays import read_npz as _read_npz
from lmc.core.errors import DataError
from lmc.losses import BOXES, CLASS, FLOAT, MASK

HOLDOUT_SEED = 1234
EXPECTED = "expected keys x [N, ...] and y [N, ...], optionally x_val and y_val"


def read_npz(path: Path, hint: str | None = None) -> dict[str, np.ndarray]:
    """Every array of the file (`hint`: where it comes from, for the error when it is missing)."""
    if not path.exists():
        raise DataError(f"no such file: {path}, expected a .npz file with keys x [N, ...] and y [N] "
                        f"(optionally x_val and y_val)", hint=hint)
    return _read_npz(path, DataError, "dataset .npz file")


def images(arrays: dict[str, np.ndarray], key: str, path: Path) -> np.ndarray:
    x = arrays[key]
    if x.ndim < 2:
        raise DataError(f"{path}: '{key}' has shape {x.shape}; expected [N, C, H, W] or [N, D]")
    if len(x) == 0:
        raise DataError(f"{path}: '{key}' has 0 rows (an empty split)")
    if x.dtype == np.float32:
        finite = np.isfinite(x.reshape(len(x), -1)).all(axis=1)
        if not finite.all():
            row = int(np.argmin(finite))
            what = "NaN" if np.isnan(x[row]).any() else "Inf"
            raise DataError(f"{path}: '{key}' row {row} holds {what} ({int((~finite).sum())} rows are not finite)",
                            hint="drop or impute those rows before training")
        return x
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    raise DataError(f"{path}: '{key}' has dtype {x.dtype}; expected float32 (used as given) "
                    f"or uint8 (scaled by 1/255)", hint="convert it with x.astype(np.float32)")


def labels(arrays: dict[str, np.ndarray], key: str, n: int, path: Path) -> tuple[np.ndarray, str]:
    """(labels, their format) for `key` (y or y_val), with n examples of x."""
    y = arrays[key]
    of = "x" if key == "y" else "x_val"
    if np.issubdtype(y.dtype, np.integer):
        if y.ndim not in (1, 3) or len(y) != n:
            raise DataError(f"{path}: '{key}' has shape {y.shape}; expected ({n},), one label per "
                            f"example of '{of}' (or [{n}, H, W], one per pixel)")
        return y.astype(np.int32), (CLASS if y.ndim == 1 else MASK)
    if y.dtype != np.float32 or y.ndim < 2:
        raise DataError(f"{path}: '{key}' has dtype {y.dtype} and shape {y.shape}; expected integer class "
                        f"indices [N] or [N, H, W], or float32 targets [N, ...] of rank >= 2")
    if len(y) != n:
        raise DataError(f"{path}: '{key}' has {len(y)} rows; expected {n}, one per example of '{of}'")
    mkey = "mask" if key == "y" else "mask_val"
    if mkey not in arrays:
        return y, FLOAT
    m = arrays[mkey]
    if y.ndim != 4 or m.shape != (n, y.shape[2], y.shape[3]):
        raise DataError(f"{path}: '{mkey}' has shape {m.shape} for '{key}' of shape {y.shape}; YOLO targets "
                        f"are y [N, perCell, gH, gW] with mask [N, gH, gW]")
    return np.concatenate([y, m.astype(np.float32)[:, None]], axis=1), BOXES


def load(path: Path, hint: str | None = None) -> Dataset:
    arrays = read_npz(path, hint)
    need = ["x", "y"]
    if "x_val" in arrays or "y_val" in arrays:
        need += ["x_val", "y_val"]   # one without the other is almost surely a mistake
    missing = [k for k in need if k not in arrays]
    if missing:
        raise DataError(f"{path}: missing key(s) {', '.join(missing)}; found "
                        f"{', '.join(sorted(arrays)) or 'no arrays'}; {EXPECTED}")
    if "mask" in arrays and "x_val" in arrays and "mask_val" not in arrays:
        raise DataError(f"{path}: has mask and x_val but no mask_val; {EXPECTED}")
    x = images(arrays, "x", path)
    y, fmt = labels(arrays, "y", len(x), path)
    if "x_val" in arrays:
        x_val = images(arrays, "x_val", path)
        y_val, fmt_val = labels(arrays, "y_val", len(x_val), path)
        if fmt_val != fmt or y_val.shape[1:] != y.shape[1:]:
            raise DataError(f"{path}: 'y_val' ({fmt_val} {list(y_val.shape)}) does not match 'y' ({fmt} {list(y.shape)})")
    else:
        train, val = holdout(len(x), len(x) // 10, HOLDOUT_SEED)
        x, y, x_val, y_val = x[train], y[train], x[val], y[val]
    if fmt in (CLASS, MASK):
        num_classes = int(max(y.max(initial=-1), y_val.max(initial=-1))) + 1
    else:
        num_classes = y.shape[1] if y.ndim == 2 else 1
    return Dataset("npz", x, y, x_val, y_val, num_classes=num_classes, label_format=fmt,
                   sources={k: str(path) for k in ("x_train", "y_train", "x_val", "y_val")})
