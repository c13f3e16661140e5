"""Host-side input throughput of the streaming image-folder loader: JPEG decode + squash resize +
the training crop/flip + normalisation + batching, in images per second, per `--loader-workers`
count (0: threads in the training process; N > 0: N decoding processes), against the step rate
a train step would consume.

The images are synthetic JPEGs made here with Pillow (smooth colour waves plus noise, so they
compress and decode like photographs rather than like white noise) in class folders; nothing
is downloaded.  Every count reads the same epochs (interleaved rounds, the median shown) and the
batches are checked to be bit-identical across the counts.

    python benchmarks/loader.py [--images 320] [--size 224 224] [--batch 32] [--workers 0 1 2 4]
                                [--rounds 3] [--epochs 1] [--policy rand] [--dir DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

CLASSES = 10


def photo_like(h: int, w: int, rng: np.random.Generator) -> Image.Image:
    """An RGB image of smooth colour waves plus pixel noise (σ 12): JPEG files of about the size
    and decode cost of photographs of that size (white noise would be 5-10x larger)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.empty((h, w, 3), np.float32)
    for c in range(3):
        fx, fy = rng.uniform(0.5, 6.0, 2)
        phase = rng.uniform(0, 2 * np.pi)
        img[..., c] = 127 + 80 * np.sin(xx / w * fx * 2 * np.pi + phase) * np.cos(yy / h * fy * 2 * np.pi)
    img += rng.normal(0, 12, img.shape).astype(np.float32)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def make_tree(root: Path, n_train: int, size: tuple[int, int], n_val: int = CLASSES, seed: int = 0) -> Path:
    """root/{train,val}/cNN/*.JPEG (quality 90), n_train training images over CLASSES folders."""
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("val", n_val)):
        for i in range(n):
            d = root / split / f"c{i % CLASSES:02d}"
            d.mkdir(parents=True, exist_ok=True)
            photo_like(*size, rng).save(d / f"{i:05d}.JPEG", quality=90)
    return root


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's live children (the decoding workers)."""
    me, total = os.getpid(), 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:                       # ppid
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def epoch_rate(ds, batch: int, epochs: int, policy) -> tuple[float, float, float]:
    """(images/s, CPU ms per image of this process, of its workers) over `epochs` epochs of
    augmented batches."""
    from lmc.data import Batcher
    b = Batcher(ds, batch, seed=0, augment=True, policy=policy)
    n = 0
    t, cpu, kids = time.perf_counter(), time.process_time(), children_cpu()
    for e in range(epochs):
        for x, y in b.epoch(e):
            n += len(x)
    dt, cpu, kids = time.perf_counter() - t, time.process_time() - cpu, children_cpu() - kids
    return n / dt, 1e3 * cpu / n, 1e3 * kids / n


def digest(ds, batch: int, policy) -> str:
    """sha256 of every batch (images and labels) of epochs 0 and 1 (untimed)."""
    from lmc.data import Batcher
    b = Batcher(ds, batch, seed=0, augment=True, policy=policy)
    h = hashlib.sha256()
    for e in (0, 1):
        for x, y in b.epoch(e):
            h.update(x.tobytes())
            h.update(y.tobytes())
    return h.hexdigest()[:12]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=320, help="training images (over 10 class folders)")
    ap.add_argument("--size", type=int, nargs=2, default=(224, 224), metavar=("H", "W"),
                    help="the JPEGs' size (imagenette2-320's are about 320 x 426)")
    ap.add_argument("--input", type=int, default=224, help="the spec's input resolution (crop of round(S*256/224))")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, nargs="*", default=[0, 1, 2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1, help="epochs per round")
    ap.add_argument("--policy", choices=["none", "lite", "rand", "auto"], default="none",
                    help="also run a RandAugment/AutoAugment policy per image (in the batcher's thread)")
    ap.add_argument("--dir", type=Path, help="keep the synthetic tree here (default: a temporary directory)")
    args = ap.parse_args()

    from lmc.data import load_dataset
    from lmc.data.policy import Policy

    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="lmc-loader-")
        args.dir = Path(tmp.name)
    if not (args.dir / "train").is_dir():
        t = time.perf_counter()
        make_tree(args.dir, args.images, tuple(args.size))
        print(f"made {args.images} JPEGs of {args.size[0]}x{args.size[1]} in {time.perf_counter() - t:.1f} s", flush=True)
    sets, digests = {}, {}
    for w in args.workers:
        ds = load_dataset("imagenette", args.dir, (3, args.input, args.input), CLASSES, stream=True,
                          loader_workers=w)
        policy = None if args.policy == "none" else \
            Policy("auto" if args.policy == "auto" else args.policy, mean=ds.mean, std=ds.std)
        digests[w] = digest(ds, args.batch, policy)    # also the warm-up: page cache, worker start
        sets[w] = (ds, policy)
    rates = {w: [] for w in args.workers}
    load = os.getloadavg()[0]
    for _ in range(args.rounds):
        for w, (ds, policy) in sets.items():
            rates[w].append(epoch_rate(ds, args.batch, args.epochs, policy))
    load = f"{load:.1f}-{os.getloadavg()[0]:.1f}"
    for ds, _ in sets.values():
        ds.close()
    same = len(set(digests.values())) == 1
    print(f"\n{os.cpu_count()} cores, load {load}; {args.images} JPEGs {args.size[0]}x{args.size[1]} -> "
          f"{args.input}x{args.input} crops, batch {args.batch}, policy {args.policy}, "
          f"{args.rounds} rounds of {args.epochs} epoch(s)")
    print("| loader workers | images/s (median) | range | CPU ms/image: training process | workers | total | batches sha256 |")
    print("|---|---|---|---|---|---|---|")
    for w in args.workers:
        ips, main, kids = (statistics.median(c) for c in zip(*rates[w]))
        lo, hi = min(r[0] for r in rates[w]), max(r[0] for r in rates[w])
        print(f"| {w} | {ips:.0f} | {lo:.0f}-{hi:.0f} | {main:.2f} | {kids:.2f} | {main + kids:.2f} | {digests[w]} |")
    print(f"batches bit-identical across counts: {same}")
    if tmp is not None:
        tmp.cleanup()
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
