"""Datasets for training: load one into host RAM, fit it to the spec, batch it.

    ds = load_dataset("mnist", "data/mnist", input_shape=(1, 28, 28), num_classes=10)
    batches = Batcher(ds, 128, seed=0, augment=False)
    for xb, yb in batches.epoch(0): ...
    for xb, yb, n_valid in eval_batches(ds.x_val, ds.y_val, 128): ...

Kinds: a registry (lmc/data/kinds/, one module per kind: its label format, whether it is
embedded or reads a path, its spec fields and options, its fetch hint, its loader), e.g. mnist
(IDX files), cifar10 (binary batches), imagenette and imagenet (class-per-folder images; streamed
when large), npz (one .npz file), synthetic (drawn from the seed), digits (scikit-learn's
embedded 8x8 digits, the default: never downloads), text (a UTF-8 file as byte windows for a
language model; without a path the embedded corpus of standard-library sources).  The readers
of the formats are the modules beside this one; pure numpy + Pillow.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmc.data.batcher import Batcher, eval_batches
from lmc.data.dataset import Dataset, check_labels, fit_shape
from lmc.core.errors import DataError
from lmc.data.kinds import all_datasets
from lmc.data.resolution import eval_crop

__all__ = ["Dataset", "Batcher", "eval_batches", "load_dataset", "all_datasets"]


def load_dataset(kind: str, path: str | Path | None, input_shape: tuple[int, ...],
                 num_classes: int | None, *, seed: int = 0, stream: bool | None = None, train_res: int = 0,
                 test_crop_ratio: float = 0.0, classes: tuple | None = None, loader_workers: int | None = None,
                 **options) -> Dataset:
    """Load dataset `kind` from `path` and fit it to the spec.

    input_shape: the spec's per-example shape, e.g. (1, 28, 28), (784,), (1, 8, 8) or (64,);
    the examples are reshaped to it when the element counts agree, else DataError.
    num_classes: the spec head's class count (None: take the dataset's); a label outside
    [0, num_classes) is a DataError naming the file and the label.
    seed: drives the synthetic data only (the fixed splits of digits/npz never depend on it).
    stream: image folders (imagenette, imagenet) decoded per batch instead of held in RAM —
    True, False, or None: imagenet always, imagenette above imagenette.STREAM_ABOVE bytes.
    train_res: train.train_res R > 0 — the Batcher resizes the training images to R×R
    (lmc.data.resolution); test_crop_ratio: train.test_crop_ratio r > 0 — the validation images
    are resized and centre-cropped by it, from their files for image folders.
    loader_workers: image folders decoded (and cut to their training crops) in N worker
    processes, 0 (or None) in threads of this process.  The batches do not depend on it.
    options: extra keyword arguments for the loader (synthetic: n_train, n_val, signal; text:
    vocab, byte or char).
    """
    input_shape = tuple(int(d) for d in input_shape)
    kinds = all_datasets()
    k = kinds.get(kind)
    if stream and not (k is not None and k.image_folder):
        folders = ", ".join(n for n, c in kinds.items() if c.image_folder)
        raise DataError(f"--stream reads image folders ({folders}), not {kind}")
    if loader_workers is not None and not (k is not None and k.image_folder):
        folders = ", ".join(n for n, c in kinds.items() if c.image_folder)
        raise DataError(f"--loader-workers decodes image folders ({folders}); {kind} has no files to decode")
    if loader_workers is not None and loader_workers < 0:
        raise DataError(f"--loader-workers must be 0 (threads) or a number of processes, got {loader_workers}")
    if k is not None:
        k.check_stream(stream)
    folder = k is not None and k.image_folder
    if loader_workers is not None:
        options = {**options, "loader_workers": loader_workers}
    ds = _load(kind, path, input_shape, num_classes, seed, options, stream,
               test_crop_ratio if folder else 0.0)
    if ds.train_crop is None:
        ds.x_train = fit_shape(ds.x_train, input_shape, ds.source("x_train"))
    ds.x_val = fit_shape(ds.x_val, input_shape, ds.source("x_val"))
    for name, on in (("train_res", train_res), ("test_crop_ratio", test_crop_ratio)):
        if on and (ds.x_val.ndim != 4 or ds.label_format != "class ids"):
            raise DataError(f"{ds.name}: train.{name} resizes images [C, H, W] with a class label each, but the "
                            f"examples have shape {tuple(ds.x_val.shape[1:])} and {ds.label_format} labels")
    if train_res:
        ds.train_res = (int(train_res), int(train_res))
    if test_crop_ratio and not folder:
        ds.x_val = eval_crop(ds.x_val, test_crop_ratio)
    if classes:
        _keep_classes(ds, classes, num_classes)
    if np.issubdtype(ds.y_train.dtype, np.integer):       # class ids (per example or pixel)
        check_labels(ds.y_train, num_classes, ds.source("y_train"))
        check_labels(ds.y_val, num_classes, ds.source("y_val"))
    if num_classes is not None:
        ds.num_classes = num_classes
    return ds


def _keep_classes(ds: Dataset, classes: tuple, num_classes: int | None) -> None:
    """dataset.classes: only the examples of `classes` in both splits (their ids unchanged)."""
    if num_classes is not None and max(classes) >= num_classes:
        raise DataError(f"dataset.classes: class {max(classes)}, but the head has {num_classes} classes")
    for split in ("train", "val"):
        x, y = getattr(ds, "x_" + split), getattr(ds, "y_" + split)
        if not isinstance(x, np.ndarray) or ds.label_format != "class ids":
            raise DataError(f"dataset.classes selects in-memory examples with a class id each; {ds.name}'s "
                            f"{split} split is {'streamed' if not isinstance(x, np.ndarray) else ds.label_format}",
                            hint="--no-stream holds an image folder in memory")
        keep = np.isin(np.asarray(y), np.asarray(classes))
        if not keep.any():
            raise DataError(f"dataset.classes {list(classes)}: {ds.source('y_' + split)} has no example of them")
        setattr(ds, "x_" + split, np.ascontiguousarray(x[keep]))
        setattr(ds, "y_" + split, np.ascontiguousarray(np.asarray(y)[keep]))


def _load(kind, path, input_shape, num_classes, seed, options, stream=None, crop_ratio=0.0) -> Dataset:
    """The registered kind's loader, after the checks every kind shares: a known kind with a
    loader, only the options it takes, a path where it reads files and embeds none."""
    kinds = all_datasets()
    if kind not in kinds:
        raise DataError(f"unknown dataset kind '{kind}' (known: {', '.join(kinds)})")
    k = kinds[kind]
    if not k.loaded:
        raise DataError(f"dataset kind {kind} is not supported yet "
                        f"(supported: {', '.join(n for n, c in kinds.items() if c.loaded)})")
    known = k.option_names()
    extra = set(options) - set(known)
    if extra and not known:
        raise DataError(f"dataset kind {kind} takes no options (got {', '.join(sorted(options))})")
    if extra:
        raise DataError(f"dataset kind {kind} takes no option(s) {', '.join(sorted(extra))} "
                        f"(known: {', '.join(sorted(known))})")
    if not k.takes_path:
        path = None
    elif path is not None:
        path = Path(path).expanduser()
    elif not k.embedded:
        raise DataError(f"dataset kind {kind} needs a data path",
                        hint=f"pass --data PATH or set the spec's `dataset: {{kind: {kind}, path: PATH}}`; "
                             f"lmc never downloads data (`dataset: digits` and `dataset: synthetic` need no files)")
    return k.load(path, input_shape, num_classes, seed=seed, stream=stream, crop_ratio=crop_ratio, **options)
