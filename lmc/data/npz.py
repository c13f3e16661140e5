"""Any dataset saved as one NumPy .npz file.

Keys: `x` [N, C, H, W] or [N, D] and `y` [N] integer class indices; optionally `x_val` and
`y_val`.  Without them a fixed 10% (N // 10 examples, chosen by `split.holdout` with seed
HOLDOUT_SEED — the same examples on every run, whatever the run's seed) is held out for
validation.  float32 x is used exactly as given; uint8 x is scaled x/255; any other dtype is
refused rather than guessed at.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from lmc.data.dataset import Dataset, fetch_hint
from lmc.data.split import holdout
from lmc.errors import DataError

HOLDOUT_SEED = 1234
EXPECTED = "expected keys x [N, ...] and y [N], optionally x_val and y_val"


def read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise DataError(f"no such file: {path}, expected a .npz file with keys x [N, ...] and y [N] "
                        f"(optionally x_val and y_val)",
                        hint=fetch_hint("npz", "write the file yourself, numpy.savez(PATH, x=x, y=y) "
                                               "(and x_val=, y_val= for a fixed validation split)"))
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"{path}: not a readable .npz file ({e})") from None


def images(arrays: dict[str, np.ndarray], key: str, path: Path) -> np.ndarray:
    x = arrays[key]
    if x.ndim < 2:
        raise DataError(f"{path}: '{key}' has shape {x.shape}; expected [N, C, H, W] or [N, D]")
    if x.dtype == np.float32:
        return x
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    raise DataError(f"{path}: '{key}' has dtype {x.dtype}; expected float32 (used as given) "
                    f"or uint8 (scaled by 1/255)", hint="convert it with x.astype(np.float32)")


def labels(arrays: dict[str, np.ndarray], key: str, n: int, path: Path) -> np.ndarray:
    y = arrays[key]
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{path}: '{key}' has dtype {y.dtype}; expected integer class indices")
    if y.shape != (n,):
        raise DataError(f"{path}: '{key}' has shape {y.shape}; expected ({n},), one label per "
                        f"example of '{'x' if key == 'y' else 'x_val'}'")
    return y.astype(np.int32)


def load(path: Path) -> Dataset:
    arrays = read_npz(path)
    need = ["x", "y"]
    if "x_val" in arrays or "y_val" in arrays:
        need += ["x_val", "y_val"]   # one without the other is almost surely a mistake
    missing = [k for k in need if k not in arrays]
    if missing:
        raise DataError(f"{path}: missing key(s) {', '.join(missing)}; found "
                        f"{', '.join(sorted(arrays)) or 'no arrays'}; {EXPECTED}")
    x = images(arrays, "x", path)
    y = labels(arrays, "y", len(x), path)
    if "x_val" in arrays:
        x_val = images(arrays, "x_val", path)
        y_val = labels(arrays, "y_val", len(x_val), path)
    else:
        train, val = holdout(len(x), len(x) // 10, HOLDOUT_SEED)
        x, y, x_val, y_val = x[train], y[train], x[val], y[val]
    num_classes = int(max(y.max(initial=-1), y_val.max(initial=-1))) + 1
    return Dataset("npz", x, y, x_val, y_val, num_classes=num_classes,
                   sources={k: str(path) for k in ("x_train", "y_train", "x_val", "y_val")})
