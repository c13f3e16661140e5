"""The in-memory dataset every loader produces, and the checks that make it fit a spec.

Input: the arrays a loader read (in the file's own layout).  Output: a `Dataset` whose
examples have exactly the spec's per-example shape and whose labels fit the spec's head.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from lmc.core.errors import DataError


@dataclass
class Dataset:
    """A whole dataset in host RAM (the reference does the same), ready for batching.

    x_* are float32 and already normalized: [N, C, H, W] for images, [N, D] for flat inputs,
    or whatever per-example shape the spec asked for.  y_* are int32 class indices.

    `train_crop` is set when the training images are stored larger than the spec's input
    (imagenette: squashed to 256/224 of the input size, like the reference's 256 -> 224);
    the Batcher then crops them to (H, W) — randomly when augmenting, centred otherwise.
    `train_res` (train.train_res) is the (R, R) the Batcher resizes every training batch to after
    that crop (lmc.data.resolution); evaluation keeps the spec's resolution.
    `draw`, when set, makes each training batch's pairs from the stored ones: (x, y, rng) → (x, y),
    rng drawn from (seed, epoch, step) by the Batcher (a diffusion dataset's noising,
    lmc.data.diffusion); the validation split is stored as it is scored.
    `sources` maps each array's name ('x_train', 'y_train', 'x_val', 'y_val') to the file it
    was read from, so errors found later (shape, labels) can name that file.
    """
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    num_classes: int
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    train_crop: tuple[int, int] | None = None
    train_res: tuple[int, int] | None = None     # train.train_res: the Batcher resizes to it
    sources: dict[str, str] = field(default_factory=dict)
    # what y holds (a lmc.losses label format): "class ids" [N], "mask" [N, H, W] int,
    # "float" targets [N, ...], "boxes" (YOLO targets); evaluation scores by it
    label_format: str = "class ids"
    # a character-level text dataset's vocabulary (id i = vocab[i]); None: bytes or not text
    vocab: str | None = None
    # per-batch training pairs from the stored ones (see above); None: the stored pairs
    draw: Callable | None = None

    def close(self) -> None:
        """Stop the threads or processes a streamed split decodes its files in (a later access
        starts them again)."""
        for x in (self.x_train, self.x_val):
            if hasattr(x, "close"):
                x.close()

    def source(self, array: str) -> str:
        """The file an array ('x_train', 'y_val', ...) was read from, for error messages."""
        return self.sources.get(array, self.name)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Per-example shape the Batcher yields (after any train crop and resize)."""
        if self.train_res is not None:
            return (self.x_train.shape[1], *self.train_res)
        if self.train_crop is not None:
            return (self.x_train.shape[1], *self.train_crop)
        return tuple(self.x_train.shape[1:])


def fetch_hint(kind: str, source: str) -> str:
    """The hint for missing dataset files: lmc never downloads; where `kind`'s files come from,
    how to point lmc at them, and the two kinds that need no files at all."""
    return (f"lmc never downloads data: {source}; then pass --data PATH or set the spec's "
            f"`dataset: {{kind: {kind}, path: PATH}}` (default data/{kind}).  "
            f"`dataset: digits` (embedded 8x8 digits) and `dataset: synthetic` need no files")


def fit_shape(x: np.ndarray, input_shape: tuple[int, ...], source: str) -> np.ndarray:
    """Return x viewed as [N, *input_shape].

    [N, C, H, W] <-> [N, C*H*W] reshapes are allowed when the element counts agree (an MLP on
    mnist gets (784,)); the flattening is C-order, the same order a `flatten` layer uses.
    """
    input_shape = tuple(int(d) for d in input_shape)
    have = tuple(x.shape[1:])
    if have == input_shape:
        return x
    if math.prod(have) == math.prod(input_shape):
        return x.reshape((x.shape[0], *input_shape))
    raise DataError(
        f"{source}: the data has shape {tuple(x.shape)} ({math.prod(have)} values per example) "
        f"but the spec's input is {input_shape} ({math.prod(input_shape)} values per example)",
        hint="change the spec's input shape to match the data, or point it at another dataset")


def check_labels(y: np.ndarray, num_classes: int | None, source: str) -> None:
    """Refuse labels outside [0, num_classes): they would index past the head silently."""
    if len(y) == 0:
        return
    low = int(y.min())
    if low < 0:
        raise DataError(f"{source}: label {low} at index {int(np.argmin(y))} is negative; "
                        f"labels must be class indices in [0, {num_classes or 'num_classes'})")
    if num_classes is None:
        return
    high = int(y.max())
    if high >= num_classes:
        raise DataError(
            f"{source}: label {high} at index {int(np.argmax(y))} is out of range: the spec's head "
            f"has {num_classes} classes, so labels must be in [0, {num_classes})",
            hint=f"give the last layer at least {high + 1} outputs")
