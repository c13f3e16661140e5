"""cifar100: CIFAR-100 from its python version (cifar-100-python.tar.gz, extracted), 32×32 RGB,
the 100 fine classes.

Reads `train` (50,000 images) and `test` (10,000, the validation split) from DIR or
DIR/cifar-100-python/ (the tarball's folder), each a pickled dict: b'data' uint8 [N, 3072] (R, G,
B planes of 32×32, already CHW), b'fine_labels' (100 classes: the labels used here),
b'coarse_labels' (20 superclasses) and b'filenames'; `meta`, where present, must name the 100
fine classes (b'fine_label_names').  Images become float32 [N, 3, 32, 32] scaled x/255 (no
mean/std), as cifar10's (lmc/data/cifar10.py, whose helpers find the folder and scale).

The pickles are read by an unpickler that builds nothing but dicts, lists, strings, numbers and
NumPy arrays: a file that asks for any other object is refused as not CIFAR-100, never run."""
from __future__ import annotations

import codecs
import pickle
from pathlib import Path

import numpy as np

from lmc.core.errors import DataError
from lmc.data import cifar10
from lmc.data.dataset import Dataset
from lmc.data.kinds import Kind, register

TRAIN_FILE, VAL_FILE, META_FILE = "train", "test", "meta"
SUBFOLDERS = ("", "cifar-100-python")
CLASSES = 100
PIXELS = 3 * 32 * 32
EXPECTED = ("expected the cifar-100 python files train and test (and meta) in it or in its "
            "cifar-100-python/ subfolder")
# the only globals a pickle of NumPy arrays names (numpy.core in older pickles, numpy._core in
# newer; _frombuffer under protocol 5), and the bytes of a protocol-2 pickle written by Python 3
# (_codecs.encode of a str)
_NUMPY = ("numpy", "numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric", "numpy._core.numeric")
_GLOBALS = {"_reconstruct": np.zeros(0).__reduce__()[0], "scalar": np.float64(0).__reduce__()[0],
            "_frombuffer": np.zeros(1).__reduce_ex__(5)[0], "ndarray": np.ndarray, "dtype": np.dtype}


class _Arrays(pickle.Unpickler):
    """An unpickler of plain data and NumPy arrays only."""

    def find_class(self, module, name):
        if module in _NUMPY and name in _GLOBALS:
            return _GLOBALS[name]
        if (module, name) == ("_codecs", "encode"):
            return codecs.encode
        raise pickle.UnpicklingError(f"it asks for {module}.{name}, which a CIFAR-100 file never holds")


def read_pickle(path: Path, hint: str | None) -> dict:
    """The dict pickled in one cifar-100 file (keys are bytes, as the files were written by Python 2)."""
    if not path.is_file():
        raise DataError(f"{path}: missing cifar-100 file; {EXPECTED}", hint=hint)
    try:
        with open(path, "rb") as f:
            d = _Arrays(f, encoding="bytes").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, MemoryError) as e:
        raise DataError(f"{path}: not a cifar-100 python file ({e})") from None
    if not isinstance(d, dict):
        raise DataError(f"{path}: holds a pickled {type(d).__name__}, not the dict of a cifar-100 python file")
    return d


def read_split(path: Path, hint: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(images float32 [n, 3, 32, 32], fine labels int32 [n]) of `train` or `test`."""
    d = read_pickle(path, hint)
    for key in (b"data", b"fine_labels"):
        if key not in d:
            raise DataError(f"{path}: no {key!r} entry (found {', '.join(map(repr, sorted(d, key=repr))) or 'none'}); "
                            f"{EXPECTED}")
    data = np.asarray(d[b"data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != PIXELS:
        raise DataError(f"{path}: b'data' is {data.dtype} of shape {list(data.shape)}; expected uint8 "
                        f"[N, {PIXELS}] (R, G, B planes of 32x32)")
    labels = np.asarray(d[b"fine_labels"])
    if labels.shape != (len(data),) or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise DataError(f"{path}: b'fine_labels' has shape {list(labels.shape)}; expected {len(data)} integer "
                        f"class indices, one per image of b'data'")
    return cifar10.scaled(data.reshape(-1, 3, 32, 32), labels)


def check_meta(root: Path, hint: str | None) -> None:
    """`meta`, if present, names the 100 fine classes (else this is another dataset's folder)."""
    path = root / META_FILE
    if not path.is_file():
        return
    names = read_pickle(path, hint).get(b"fine_label_names")
    if not isinstance(names, (list, tuple)) or len(names) != CLASSES:
        raise DataError(f"{path}: b'fine_label_names' should name the {CLASSES} fine classes, found "
                        f"{len(names) if isinstance(names, (list, tuple)) else 'none'}")


@register("cifar100")
class Cifar100(Kind):
    order = 15
    fetch = ("extract the python version, cifar-100-python.tar.gz from "
             "https://www.cs.toronto.edu/~kriz/cifar.html")

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        hint = cls.hint()
        root = cifar10.find_root(path, hint, markers=(VAL_FILE, TRAIN_FILE), subfolders=SUBFOLDERS,
                                 what="cifar-100", expected=EXPECTED)
        check_meta(root, hint)
        x_train, y_train = read_split(root / TRAIN_FILE, hint)
        x_val, y_val = read_split(root / VAL_FILE, hint)
        return Dataset(cls.name, x_train, y_train, x_val, y_val, num_classes=CLASSES,
                       sources=cifar10.splits(str(root / TRAIN_FILE), str(root / VAL_FILE)))
