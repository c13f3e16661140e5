"""Fixed-size training batches (prefetched in a background thread) and padded eval batches.

Input: a `Dataset`.  Output: (x, y) batches of exactly `batch_size` rows for the static-shape
train step, and (x, y, n_valid) eval batches whose last one is zero-padded.

Determinism: epoch e's order is a permutation drawn from (seed, e) alone and step s's
augmentation from (seed, e, s) alone.  Unlike the reference (which shuffles cumulatively, each
epoch permuting the previous order) nothing carries over between epochs, so a run resumed at
(epoch, start_step) sees exactly the batches an uninterrupted run would have seen.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np

from lmc.data import augment as aug
from lmc.data.dataset import Dataset
from lmc.data.resolution import resize
from lmc.core.errors import DataError
from lmc.data.policy import Policy

# Purposes mixed into the seed so the shuffle and the augmentation streams never coincide.
_SHUFFLE, _AUGMENT, _MIX, _TTA, _BOXES, _DRAW = 0, 1, 2, 4, 5, 6     # (3: lmc/train/masks.py)


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed % 2**64, *keys])


class Batcher:
    """Yields fixed-size training batches, prepared in a background thread (queue of depth
    `prefetch`, default 2) so the device never waits for the host.

    steps_per_epoch = N // batch_size: the remainder is dropped each epoch, as the reference.
    augment (image inputs only): random crop + random horizontal flip.  The crop is a random
    H x W window of the larger stored image when the dataset has `train_crop` (imagenette),
    else a zero-padded crop with `pad_crop` pixels per side (pad_crop=0: flip only, the
    reference's cifar recipe).  Without augment, stored-larger images are centre-cropped.
    The dataset's train_res (train.train_res) then resizes the batch to R×R (Pillow bilinear).
    random_erasing: probability per image of erasing a rectangle with N(0, 1) noise (0 = off).
    labels: the loss's label fitting (class ids → the label tensor the step takes, e.g. smoothed
    one-hot targets), applied here in the background thread; None keeps the dataset's labels.
    mix: a `mix.Mixer` (mixup / cutmix / KNN-mixup of the fitted targets), after the image ops.
    policy: a `policy.Policy` (RandAugment / AutoAugment per image), after crop/flip and before
    random erasing.
    boxes: a `boxes.BoxAffine` (fpn_affine_*: scale/translate of image and boxes together, the
    labels handed on as box lists for the loss's label fitting to encode).
    repeated: repeated augmentation (timm's RASampler, one process): epoch e's order is its
    permutation with each index repeated `repeated` times in a row, cut to N, so a batch holds
    that many independently augmented copies of an image and steps_per_epoch is unchanged.
    The dataset's `draw` (a diffusion dataset's noising) then makes the batch's pairs, before the
    label fitting.
    """

    def __init__(self, ds: Dataset, batch_size: int, *, seed: int, shuffle: bool = True,
                 augment: bool = False, random_erasing: float = 0.0, pad_crop: int = 4,
                 prefetch: int = 2, labels=None, mix=None, policy=None, repeated: int = 1, boxes=None):
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if not 0.0 <= random_erasing <= 1.0:
            raise ValueError(f"random_erasing is a probability, got {random_erasing}")
        n = len(ds.x_train)
        if n < batch_size:
            raise DataError(f"{ds.source('x_train')}: {n} training examples, fewer than one "
                            f"batch of {batch_size}", hint="use a smaller batch size")
        image = ds.x_train.ndim == 4
        if (augment or random_erasing > 0) and not image:
            raise DataError(
                f"{ds.source('x_train')}: augmentation needs image inputs [C, H, W], but the "
                f"examples have shape {tuple(ds.x_train.shape[1:])}",
                hint="turn augment/random_erasing off, or give the spec an image input")
        if mix is not None and mix.cutmix_alpha is not None and not image:
            raise DataError(f"{ds.source('x_train')}: cutmix pastes image boxes, but the examples have "
                            f"shape {tuple(ds.x_train.shape[1:])}", hint="use mixup instead, or an image input")
        if mix is not None and labels is None:
            raise ValueError("mixing needs the loss's label fitting (labels=…)")
        self.ds = ds
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.augment = augment
        self.random_erasing = random_erasing
        self.pad_crop = pad_crop
        self.labels = labels
        self.mix = mix
        self.policy = policy
        self.boxes = boxes
        if repeated < 1:
            raise ValueError(f"repeated must be >= 1, got {repeated}")
        self.repeated = repeated
        self.prefetch = max(1, prefetch)
        self.steps_per_epoch = n // batch_size
        self._order_cache: tuple[int, np.ndarray] | None = None
        self._ahead: tuple | None = None              # ((epoch, step), _begin's) of the next batch of files
        self._ahead_lock = threading.Lock()

    def order(self, epoch: int) -> np.ndarray:
        """Example indices of epoch `epoch`, a function of (seed, epoch) only."""
        cached = self._order_cache
        if cached is not None and cached[0] == epoch:
            return cached[1]
        n = len(self.ds.x_train)
        perm = _rng(self.seed, _SHUFFLE, epoch).permutation(n) if self.shuffle else np.arange(n)
        if self.repeated > 1:
            perm = np.repeat(perm, self.repeated)[:n]
        self._order_cache = (epoch, perm)
        return perm

    def batch(self, epoch: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch `step` of epoch `epoch`, computed here in the calling thread.  For image files
        the decode of batch step+1 is started before this one is finished (its policy, erasing,
        labels and mixing), so the decoder works meanwhile; a call for that batch picks it up."""
        with self._ahead_lock:
            ahead, self._ahead = self._ahead, None
        begun = ahead[1] if ahead is not None and ahead[0] == (epoch, step) else self._begin(epoch, step)
        if ahead is not None and ahead[1] is not begun and ahead[1][4] is not None:
            ahead[1][4].cancel()                      # another batch was asked for: drop its files not started
        if begun[4] is not None and step + 1 < self.steps_per_epoch:
            nxt = ((epoch, step + 1), self._begin(epoch, step + 1))
            with self._ahead_lock:
                old, self._ahead = self._ahead, nxt
            if old is not None and old[1][4] is not None:
                old[1][4].cancel()
        return self._finish(begun)

    def _begin(self, epoch: int, step: int) -> tuple:
        """What batch (epoch, step) needs first: its rows and augmentation stream, and for image
        files (lmc.data.imagenette.Images) their decode, started — with the crop and flip drawn
        as random_crop and hflip draw them, handed to the decoder, which cuts and mirrors each
        image as it decodes it."""
        if not 0 <= step < self.steps_per_epoch:
            raise IndexError(f"step {step} outside [0, {self.steps_per_epoch})")
        idx = self.order(epoch)[step * self.batch_size:(step + 1) * self.batch_size]
        rng = _rng(self.seed, _AUGMENT, epoch, step)
        crop, src, reading = self.ds.train_crop, self.ds.x_train, None
        if crop and hasattr(src, "submit") and not (self.augment and self.ds.label_format in ("mask", "boxes")):
            n, size = len(idx), src.shape[2:]
            if self.augment:
                top, left = aug.crop_offsets(n, size, *crop, rng)
                flip = aug.flips(n, rng)
            else:
                top, left = np.full(n, (size[0] - crop[0]) // 2), np.full(n, (size[1] - crop[1]) // 2)
                flip = None
            reading = src.submit(idx.tolist(), (top, left, *crop), flip)
        return epoch, step, idx, rng, reading

    def _finish(self, begun: tuple) -> tuple[np.ndarray, np.ndarray]:
        epoch, step, idx, rng, reading = begun
        y = self.ds.y_train[idx]
        if self.ds.label_format == "mask" and self.augment:
            # per-pixel labels move with their image: paired flips only (the seed's seg path)
            x, y = aug.paired_hflip(self.ds.x_train[idx], y, rng)
            x = np.ascontiguousarray(x, dtype=np.float32)
        elif self.ds.label_format == "boxes" and self.augment:
            # box labels: the Lean kit's base pack, HSV jitter + horizontal flip with the boxes
            # (the box-aware affine, fpn_affine_*, goes on top below)
            x = aug.hsv_jitter(self.ds.x_train[idx], rng, self.ds.mean, self.ds.std)
            x, y = aug.boxes_hflip(x, y, rng)
            x = np.ascontiguousarray(x, dtype=np.float32)
        else:
            x = self._transform(idx, rng, reading)
        if self.boxes is not None:                     # box-aware affine: image and boxes together
            x, y = self.boxes(x, y, _rng(self.seed, _BOXES, epoch, step))
        if self.ds.draw is not None:                   # the dataset's per-batch pairs (diffusion noising)
            x, y = self.ds.draw(x, y, _rng(self.seed, _DRAW, epoch, step))
        if self.labels is not None:
            y = self.labels(y)
        if self.mix is not None:
            x, y, _, _ = self.mix(x, y, _rng(self.seed, _MIX, epoch, step))
        return x, y

    def _transform(self, idx: np.ndarray, rng: np.random.Generator, reading=None) -> np.ndarray:
        crop, src = self.ds.train_crop, self.ds.x_train
        if reading is not None:                       # image files, already cropped and flipped
            x = reading.result()
        elif self.augment:
            x = src[idx]                              # fancy indexing: a fresh copy, safe to alter
            x = aug.random_crop(x, *crop, rng) if crop else aug.pad_crop(x, self.pad_crop, rng)
            x = aug.hflip(x, rng)
        else:
            x = src[idx]
            if crop:
                x = aug.center_crop(x, *crop)
        if self.ds.train_res is not None:       # train.train_res: the step's resolution
            x = resize(x, *self.ds.train_res)
        if self.policy is not None:
            x = self.policy(x, rng)
        if self.random_erasing > 0:
            x = aug.random_erasing(x, self.random_erasing, rng)
        return np.ascontiguousarray(x, dtype=np.float32)

    def epoch(self, epoch: int, start_step: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Batches start_step .. steps_per_epoch-1 of epoch `epoch`.  Preparation starts now, in
        a background thread; breaking out of the loop (or dropping the iterator) stops it."""
        if not 0 <= start_step <= self.steps_per_epoch:
            raise IndexError(f"start_step {start_step} outside [0, {self.steps_per_epoch}]")
        return _Prefetch(lambda step: self.batch(epoch, step),
                         range(start_step, self.steps_per_epoch), self.prefetch,
                         name=f"lmc-batcher-e{epoch}")


class TTA:
    """Test-time augmentation (use_tta, tta_samples): `samples` label-free views of an eval batch
    whose logits the eval averages.  A view is the training pipeline's image augmentation minus
    what needs the label or destroys content (mixing, random erasing): pad-crop + horizontal flip
    under `augment` (hflip only for datasets whose validation images are stored at the eval size,
    imagenette — the seed's TTA), then the RandAugment / AutoAugment policy.  View k of eval batch
    i draws from (seed, i, k) only: every eval of a run sees the same views."""

    def __init__(self, ds: Dataset, cfg, pad_crop: int = 4):
        self.samples, self.seed = cfg.tta_samples, cfg.seed
        self.augment, self.hflip_only = cfg.augment, ds.train_crop is not None
        self.pad_crop = pad_crop
        self.policy = Policy.from_config(cfg, ds)
        if not (self.augment or self.policy):
            raise DataError("use_tta averages augmented views, but the recipe has no augmentation "
                            "(augment, use_rand_augment or use_auto_augment): every view would be the same")

    def view(self, x: np.ndarray, i: int, k: int) -> np.ndarray:
        rng = _rng(self.seed, _TTA, i, k)
        if self.augment:
            if not self.hflip_only:
                x = aug.pad_crop(x, self.pad_crop, rng)
            x = aug.hflip(x, rng)
        if self.policy is not None:
            x = self.policy(x, rng)
        return np.ascontiguousarray(x, dtype=np.float32)


class _Failure:
    """Carries an exception from the producer thread to the consumer, which re-raises it."""

    def __init__(self, exc: BaseException):
        self.exc = exc


_END = object()


class _Prefetch:
    """Iterator over make(step) for step in steps, computed ahead by one daemon thread.

    The thread holds no reference to this object, so dropping the iterator (garbage
    collection) stops the thread just as close() does.
    """

    def __init__(self, make, steps: range, depth: int, name: str):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=_produce, args=(make, steps, self._queue, self._stop),
                                         name=name, daemon=True)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END or isinstance(item, _Failure):
            self.close()
            if isinstance(item, _Failure):
                raise item.exc
            raise StopIteration
        return item

    def close(self) -> None:
        self._done = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __del__(self):
        self._stop.set()


def _produce(make, steps: range, q: queue.Queue, stop: threading.Event) -> None:
    def put(item) -> bool:
        # Wait for room, but look at `stop` every 0.1 s so an abandoned epoch ends the thread.
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        for step in steps:
            if not put(make(step)):
                return
        put(_END)
    except BaseException as e:   # noqa: BLE001 -- handed to the consumer, which re-raises it
        put(_Failure(e))


def eval_batches(x: np.ndarray, y: np.ndarray, batch_size: int, batch_stats: bool = False
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """All of (x, y) in order, as (xb, yb, n_valid) with exactly batch_size rows each.

    The last partial batch is padded and n_valid says how many of its (leading) rows are real;
    only those may be scored.  (The reference drops the tail instead.)  The padding is zeros,
    safe where eval normalisation is per-example (running-statistics BN, LayerNorm).
    batch_stats (BN with the batch's own statistics at eval, train.running_bn false): zero rows
    would shift the real rows' normalisation, so the tail is completed with the real examples
    before it instead (cycled when the split is smaller than a batch): every example is scored,
    each normalised with a batch of real examples.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        n = len(xb)
        if n < batch_size and batch_stats:
            fill = np.resize(np.arange(start), batch_size - n) if start else np.resize(np.arange(n), batch_size - n)
            xb, yb = np.concatenate([xb, x[fill]]), np.concatenate([yb, y[fill]])
        elif n < batch_size:
            xb = np.concatenate([xb, np.zeros((batch_size - n, *x.shape[1:]), dtype=x.dtype)])
            yb = np.concatenate([yb, np.zeros((batch_size - n, *y.shape[1:]), dtype=y.dtype)])
        yield xb, yb, n
