"""Imagenette (or any class-per-folder image tree) from its JPEG/PNG files.

Reads DIR/train/<class>/*.{JPEG,jpg,jpeg,png} and DIR/val/<class>/..., classes numbered in
sorted folder order (for imagenette2-320: n01440764 tench -> 0 ... n03888257 parachute -> 9).
The same loader reads `imagenet` (the standard train/<wnid>/*.JPEG, val/<wnid>/*.JPEG tree).
Like the reference's preprocess_imagenette.py every image is squashed (aspect ratio not kept)
with PIL bilinear: val straight to the spec's H x W, train to round(H*256/224) x round(W*256/224)
so the Batcher can crop H x W out of it (random when augmenting, centred otherwise) — the
reference's 256 -> 224 crop at any input size.  Pixels are normalized with the ImageNet
mean/std: (x/255 - mean_c) / std_c.

Streaming (`stream=True`, always for imagenet, and automatically when the decoded float32
images would take more than STREAM_ABOVE bytes of RAM): x_train / x_val are `Images`, array-
likes that decode the rows asked for on each access, so memory holds a few batches (the
Batcher's prefetch queue) instead of the dataset; every epoch reads the files again.  The
Batcher hands `Images.read` each training image's crop window and flip, so a file is cut and
mirrored as 8-bit pixels right after its decode, where the work is done, and only the crop is
normalized.

Where the files are decoded (`Decoder`, `loader_workers`): 0 — threads of this process (Pillow
releases the GIL while decoding and resizing, not for the rest); N > 0 — N worker processes
(spawned, each decoding whole chunks of a batch and sending back its 8-bit crops).  Every
random choice (order, window, flip) is drawn by the Batcher from (seed, epoch, step) before the
files are handed out, and a worker's result is a function of its file and those choices only,
so the batches are bit-identical for any worker count.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import BrokenExecutor, Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from lmc.data.dataset import Dataset
from lmc.data.resolution import crop_image
from lmc.core.errors import DataError

STREAM_ABOVE = 4 << 30     # bytes of decoded float32 images above which the loader streams
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
EXTENSIONS = {".jpeg", ".jpg", ".png"}
CHUNK = 64                  # the most files one worker process decodes per message
EXPECTED = "expected an image tree DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg"


def train_size(h: int, w: int) -> tuple[int, int]:
    """The stored train size: the reference stores 256 and crops 224, so scale by 256/224."""
    return round(h * 256 / 224), round(w * 256 / 224)


def list_images(split_dir: Path, classes: list[str] | None,
                hint: str | None = None) -> tuple[list[Path], list[int], list[str]]:
    """(paths, labels, classes) of one split.  classes=None: take them from the folder names.
    `hint`: where the files come from, for the errors of a missing tree."""
    if not split_dir.is_dir():
        raise DataError(f"no such directory: {split_dir}, {EXPECTED}", hint=hint)
    found = sorted(p.name for p in split_dir.iterdir() if p.is_dir())
    if classes is None:
        classes = found
    unknown = [c for c in found if c not in classes]
    if unknown:
        raise DataError(f"{split_dir}: class folder(s) {', '.join(unknown)} do not exist under "
                        f"train/ (train classes: {', '.join(classes)})")
    paths, labels = [], []
    for label, name in enumerate(classes):
        folder = split_dir / name
        if not folder.is_dir():
            continue
        for p in sorted(folder.iterdir()):
            if p.suffix.lower() in EXTENSIONS:
                paths.append(p)
                labels.append(label)
    if not paths:
        raise DataError(f"{split_dir}: no .jpg/.jpeg/.png images in any class folder; {EXPECTED}", hint=hint)
    return paths, labels, classes


def read_image(path: Path, size: tuple[int, int], crop_ratio: float = 0.0,
               window: tuple[int, int, int, int] | None = None, flip: bool = False) -> np.ndarray:
    """uint8 [3, h, w] (a view): RGB (greyscale and CMYK files converted), squashed to size=(h, w)
    — or, with crop_ratio r > 0 (train.test_crop_ratio), resized aspect kept to cover (h/r, w/r)
    and centre-cropped to (h, w) (lmc.data.resolution).  window (top, left, wh, ww): then only that
    window of it; flip: mirrored left-right (after the window)."""
    try:
        with Image.open(path) as im:
            if im.mode != "RGB":              # (converting RGB to RGB would only copy it)
                im = im.convert("RGB")
            im = crop_image(im, *size, crop_ratio) if crop_ratio else im.resize((size[1], size[0]), Image.BILINEAR)
            a = np.asarray(im, dtype=np.uint8)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise DataError(f"{path}: cannot read image ({e})") from None
    if window is not None:
        t, l, h, w = window
        a = a[t:t + h, l:l + w]
    if flip:
        a = a[:, ::-1]
    return a.transpose(2, 0, 1)


# (top[n], left[n], h, w): the h x w window of each of n images
Windows = tuple[np.ndarray, np.ndarray, int, int]


def read_images(paths: list[Path], size: tuple[int, int], decoder: "Decoder | None" = None,
                crop_ratio: float = 0.0) -> np.ndarray:
    """The files decoded (by `decoder`, else threads of this process) and normalized."""
    if decoder is not None:
        return normalize(decoder.decode(paths, size, crop_ratio))
    own = Decoder(0)
    try:
        return normalize(own.decode(paths, size, crop_ratio))
    finally:
        own.close()


def _threads() -> int:
    return min(16, os.cpu_count() or 1)


def _fill(out: np.ndarray, paths, size, crop_ratio, windows: Windows | None, flips, rows) -> None:
    """out[i] = file i decoded (its window, mirrored where flips[i]) for i in rows."""
    for i in rows:
        win = None if windows is None else (int(windows[0][i]), int(windows[1][i]), windows[2], windows[3])
        out[i] = read_image(paths[i], size, crop_ratio, win, flips is not None and bool(flips[i]))


def _shape(size: tuple[int, int], windows: Windows | None) -> tuple[int, int]:
    return tuple(size) if windows is None else (int(windows[2]), int(windows[3]))


def _decode_chunk(paths, size, crop_ratio, windows: Windows | None, flips) -> np.ndarray:
    """A worker process's share of one decode: uint8 [len(paths), 3, h, w]."""
    out = np.empty((len(paths), 3, *_shape(size, windows)), dtype=np.uint8)
    _fill(out, paths, size, crop_ratio, windows, flips, range(len(paths)))
    return out


def _worker_start(parent: int) -> None:
    """A decoding process: Ctrl-C is the training process's to handle (it stops the pool), and
    the process ends by itself if the training process dies without stopping it (SIGKILL)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)
    threading.Thread(target=watch, name="lmc-decode-parent", daemon=True).start()


class Decoder:
    """Decodes lists of image files into uint8 [n, 3, h, w], in order: `workers` 0 in threads of
    this process, N > 0 in N processes (spawned, so nothing of the training process — its
    runtime, its threads — is forked; a script that starts them needs the usual
    `if __name__ == "__main__":` guard).  Started on first use; close() stops the threads or
    processes (a later decode starts them again)."""

    def __init__(self, workers: int = 0):
        if workers < 0:
            raise ValueError(f"loader workers must be >= 0, got {workers}")
        self.workers = workers
        self._pool: Executor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> Executor:
        with self._lock:
            if self._pool is None:
                if self.workers == 0:
                    self._pool = ThreadPoolExecutor(max_workers=_threads(), thread_name_prefix="lmc-decode")
                else:
                    self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                     initializer=_worker_start, initargs=(os.getpid(),))
            return self._pool

    def decode(self, paths: list[Path], size: tuple[int, int], crop_ratio: float = 0.0,
               windows: Windows | None = None, flips: np.ndarray | None = None) -> np.ndarray:
        """The files squashed to `size` (or test_crop_ratio's crop), then each cut to its window
        and mirrored where flips[i]: uint8 [n, 3, h, w].  A file that cannot be read is a
        DataError naming it."""
        return self.submit(paths, size, crop_ratio, windows, flips).result()

    def submit(self, paths: list[Path], size: tuple[int, int], crop_ratio: float = 0.0,
               windows: Windows | None = None, flips: np.ndarray | None = None) -> "Decoding":
        """decode(), started now: the files decode while the caller does other work; the
        returned Decoding's result() waits for them."""
        n = len(paths)
        out = np.empty((n, 3, *_shape(size, windows)), dtype=np.uint8)
        pool = self._executor()
        if self.workers == 0:
            futs = [pool.submit(_fill, out, paths, size, crop_ratio, windows, flips, (i,)) for i in range(n)]
            return Decoding(self, out, [(i, i, f) for i, f in enumerate(futs)])
        # processes: a few chunks per worker, so the result of one travels while others decode,
        # and at most CHUNK files each, so a whole split loaded into RAM is not one message
        step = min(CHUNK, max(1, -(-n // (2 * self.workers))))
        parts = []
        # a submit may start a worker: with SIGINT blocked in this thread the new process starts
        # with it blocked, so a Ctrl-C during its start cannot interrupt it (_worker_start then
        # ignores it); the training process's main thread still receives it
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for a in range(0, n, step):
                b = min(n, a + step)
                win = None if windows is None else (windows[0][a:b], windows[1][a:b], windows[2], windows[3])
                parts.append((a, b, pool.submit(_decode_chunk, [str(p) for p in paths[a:b]], tuple(size), crop_ratio,
                                                win, None if flips is None else flips[a:b])))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return Decoding(self, out, parts)

    def close(self) -> None:
        """Stop the threads or processes (they finish the file they are decoding)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __getstate__(self):          # picklable: the count, not the running pool
        return {"workers": self.workers}

    def __setstate__(self, state):
        self.__init__(state["workers"])

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            try:
                pool.shutdown(wait=False, cancel_futures=True)
            except Exception:        # noqa: BLE001 -- at interpreter exit the pool may be half torn down
                pass


class Decoding:
    """A decode under way (Decoder.submit): result() waits for it and gives the uint8 images."""

    def __init__(self, decoder: Decoder, out: np.ndarray, parts: list, then=None):
        self.decoder, self.out, self.parts = decoder, out, parts   # parts: (first row, end row | same row, future)
        self.then = then                                           # applied to the images by result()

    def result(self) -> np.ndarray:
        try:
            for a, b, fut in self.parts:
                got = fut.result()                     # re-raises a thread's or worker's DataError
                if got is not None:                    # a process's chunk (threads fill `out` themselves)
                    self.out[a:b] = got
        except BrokenExecutor:
            self.decoder.close()
            raise DataError(f"an image-decoding worker process died (of {self.decoder.workers}; killed, or out of "
                            f"memory?)", hint="retry with fewer --loader-workers (0 decodes in threads of the "
                                              "training process)") from None
        finally:
            self.cancel()
        return self.out if self.then is None else self.then(self.out)

    def cancel(self) -> None:
        """Drop the files not started yet (an abandoned decode)."""
        for _, _, fut in self.parts:
            fut.cancel()


class Images:
    """[N, 3, h, w] float32 images decoded from their files on each access (streaming): rows by
    an index array or a slice, as numpy indexes; nothing is kept between accesses.  `read` also
    cuts each image to a window and mirrors it as it is decoded (the Batcher's crop and flip)."""
    ndim = 4
    dtype = np.dtype(np.float32)

    def __init__(self, paths: list[Path], size: tuple[int, int], crop_ratio: float = 0.0,
                 decoder: Decoder | None = None):
        self.paths, self.size, self.crop_ratio = list(paths), tuple(size), crop_ratio
        self.shape = (len(self.paths), 3, *self.size)
        self.decoder = decoder if decoder is not None else Decoder(0)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            rows = range(*idx.indices(len(self)))
        elif np.ndim(idx) == 0:
            return self[np.asarray([idx])][0]
        else:
            rows = np.asarray(idx).ravel().tolist()
        return self.read(rows)

    def read(self, rows, windows: Windows | None = None, flips: np.ndarray | None = None) -> np.ndarray:
        """Rows `rows`, each cut to its window and mirrored where flips[i], normalized: float32
        [n, 3, h, w] — exactly what cropping and flipping self[rows] would give."""
        return self.submit(rows, windows, flips).result()

    def submit(self, rows, windows: Windows | None = None, flips: np.ndarray | None = None) -> Decoding:
        """read(), started now: its result() is read's value."""
        d = self.decoder.submit([self.paths[i] for i in rows], self.size, self.crop_ratio, windows, flips)
        d.then = normalize
        return d

    def close(self) -> None:
        self.decoder.close()


def normalize(images: np.ndarray) -> np.ndarray:
    """(x/255 - mean)/std per channel, in float32: x * (1/(255 std)) - mean/std, one channel at a
    time with scalar factors (no broadcast, no float64 copy)."""
    scale = (1.0 / (255.0 * np.asarray(STD))).astype(np.float32)
    shift = (np.asarray(MEAN) / np.asarray(STD)).astype(np.float32)
    x = np.empty(images.shape, dtype=np.float32)
    for c in range(images.shape[1]):
        np.multiply(images[:, c], scale[c], out=x[:, c])
        np.subtract(x[:, c], shift[c], out=x[:, c])
    return x


def load(path: Path, input_shape: tuple[int, ...], stream: bool | None = None, kind: str = "imagenette",
         crop_ratio: float = 0.0, hint: str | None = None, workers: int | None = None) -> Dataset:
    """stream: True/False, or None for automatic (above STREAM_ABOVE bytes decoded).
    crop_ratio: train.test_crop_ratio, applied to the validation files as they are decoded.
    hint: the kind's (lmc/data/kinds/), where the files come from.
    workers: the decoding processes (0 or None: threads of this process)."""
    if len(input_shape) != 3 or input_shape[0] != 3:
        raise DataError(f"{path}: {kind} gives RGB images [3, H, W] but the spec's input is "
                        f"{tuple(input_shape)}", hint="give the spec an input of shape [3, H, W]")
    if not path.is_dir():
        raise DataError(f"no such directory: {path}, {EXPECTED}", hint=hint)
    h, w = int(input_shape[1]), int(input_shape[2])
    train_paths, y_train, classes = list_images(path / "train", None, hint)
    val_paths, y_val, _ = list_images(path / "val", classes, hint)
    th, tw = train_size(h, w)
    if stream is None:
        stream = 4 * 3 * (len(train_paths) * th * tw + len(val_paths) * h * w) > STREAM_ABOVE
    decoder = Decoder(workers or 0)
    if stream:
        x_train, x_val = Images(train_paths, (th, tw), decoder=decoder), Images(val_paths, (h, w), crop_ratio, decoder)
    else:
        try:
            x_train = read_images(train_paths, (th, tw), decoder)
            x_val = read_images(val_paths, (h, w), decoder, crop_ratio)
        finally:
            decoder.close()
    sources = {"x_train": str(path / "train"), "y_train": str(path / "train"),
               "x_val": str(path / "val"), "y_val": str(path / "val")}
    return Dataset(kind, x_train, np.asarray(y_train, dtype=np.int32),
                   x_val, np.asarray(y_val, dtype=np.int32), num_classes=len(classes),
                   mean=MEAN, std=STD, train_crop=(h, w), sources=sources)
