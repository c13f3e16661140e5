"""Reading .npy / .npz files the user hands lmc (checkpoints, datasets, bitmaps): plain arrays
only (never pickles), and every way a file can be bad — missing, a directory, empty, truncated,
corrupt, not numpy at all — one message naming the file (and the array), raised as the caller's
error type."""
from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

# what numpy raises on a bad file: a zip that is not one, a member cut short, a bad deflate stream
_BAD = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError)


def _why(e: Exception) -> str:
    text = str(e)
    if "pickle" in text:        # numpy's advice to load it with allow_pickle: not for lmc's files
        return "not numpy data, or pickled Python objects, which lmc does not load"
    return text.splitlines()[0][:200] if text else type(e).__name__


def _check_file(path: Path, what: str, error) -> None:
    if path.is_dir():
        raise error(f"{path}: is a directory, expected a {what}")
    if not path.is_file():
        raise error(f"no such {what}: {path}")
    if path.stat().st_size == 0:
        raise error(f"{path}: the file is empty (0 bytes), expected a {what}")


def read_npz(path: Path, error, what: str = ".npz file") -> dict[str, np.ndarray]:
    """Every array of a .npz, each read in full here (a truncated member fails now, named)."""
    path = Path(path)
    _check_file(path, what, error)
    try:
        f = np.load(path, allow_pickle=False)
    except _BAD as e:
        raise error(f"{path}: not a readable .npz file ({_why(e)})") from None
    if not isinstance(f, np.lib.npyio.NpzFile):
        raise error(f"{path}: a single .npy array, expected a .npz archive of named arrays")
    out = {}
    with f:
        for k in f.files:
            try:
                out[k] = f[k]
            except _BAD as e:
                raise error(f"{path}: array '{k}' is unreadable (truncated or corrupt: {_why(e)})") from None
    return out


def read_npy(path: Path, error, what: str = ".npy file") -> np.ndarray:
    """One array of a .npy file."""
    path = Path(path)
    _check_file(path, what, error)
    try:
        a = np.load(path, allow_pickle=False)
    except _BAD as e:
        raise error(f"{path}: not a readable .npy file ({_why(e)})") from None
    if isinstance(a, np.lib.npyio.NpzFile):
        a.close()
        raise error(f"{path}: a .npz archive, expected a {what}")
    return a
