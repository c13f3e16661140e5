"""lmc.data: every loader on small files written here in the real on-disk format, every
bad-input case (DataError, message asserted), batching determinism, prefetch, eval padding."""
from __future__ import annotations

import gzip
import pathlib
import pickle
import struct
import threading
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image

from lmc.data import Batcher, Dataset, eval_batches, load_dataset
from lmc.data import augment as aug
from lmc.data.fit import load_data
from lmc.data.split import lcg_permutation
from lmc.core.errors import DataError, LmcError
from lmc.graph.infer import infer
from lmc.spec.netspec import load_spec

# ---------------------------------------------------------------- writers of real formats


def write_idx_images(path, images: np.ndarray, magic: int = 2051, gz: bool = False, cut: int = 0):
    n, rows, cols = images.shape
    raw = struct.pack(">IIII", magic, n, rows, cols) + images.astype(np.uint8).tobytes()
    raw = raw[:len(raw) - cut]
    (gzip.open if gz else open)(str(path) + (".gz" if gz else ""), "wb").write(raw)


def write_idx_labels(path, labels: np.ndarray, magic: int = 2049, gz: bool = False):
    raw = struct.pack(">II", magic, len(labels)) + labels.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(str(path) + (".gz" if gz else ""), "wb").write(raw)


def make_mnist(d, n_train=20, n_val=7, gz=False, rng=None):
    rng = rng or np.random.default_rng(0)
    d.mkdir(parents=True, exist_ok=True)
    data = {}
    for prefix, n in (("train", n_train), ("t10k", n_val)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=n, dtype=np.uint8)
        write_idx_images(d / f"{prefix}-images-idx3-ubyte", x, gz=gz)
        write_idx_labels(d / f"{prefix}-labels-idx1-ubyte", y, gz=gz)
        data[prefix] = (x, y)
    return data


def write_cifar_batch(path, x: np.ndarray, y: np.ndarray):
    records = np.concatenate([y.astype(np.uint8)[:, None], x.reshape(len(x), -1)], axis=1)
    path.write_bytes(records.astype(np.uint8).tobytes())


def make_cifar(d, per_batch=4, n_val=5):
    rng = np.random.default_rng(1)
    d.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i in range(1, 6):
        x = rng.integers(0, 256, size=(per_batch, 3, 32, 32), dtype=np.uint8)
        y = rng.integers(0, 10, size=per_batch, dtype=np.uint8)
        write_cifar_batch(d / f"data_batch_{i}.bin", x, y)
        xs.append(x), ys.append(y)
    xv = rng.integers(0, 256, size=(n_val, 3, 32, 32), dtype=np.uint8)
    yv = rng.integers(0, 10, size=n_val, dtype=np.uint8)
    write_cifar_batch(d / "test_batch.bin", xv, yv)
    return np.concatenate(xs), np.concatenate(ys), xv, yv


def make_image_tree(d, classes=("n02", "n01"), per_class=3):
    rng = np.random.default_rng(2)
    for split in ("train", "val"):
        for c in classes:
            (d / split / c).mkdir(parents=True)
            for i in range(per_class):
                arr = rng.integers(0, 256, size=(20 + i, 30, 3), dtype=np.uint8)
                name, fmt = (f"img{i}.JPEG", "JPEG") if i % 2 == 0 else (f"img{i}.png", "PNG")
                Image.fromarray(arr).save(d / split / c / name, fmt)


@contextmanager
def raises_data_error(*texts):
    """A DataError (so an LmcError: exit code 2, no traceback) whose message has every text."""
    with pytest.raises(DataError) as info:
        yield info
    assert isinstance(info.value, LmcError)
    for t in texts:
        assert t in info.value.message, (t, info.value.message)


# ---------------------------------------------------------------- mnist


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_loads_idx_files(tmp_path, gz):
    data = make_mnist(tmp_path, gz=gz)
    ds = load_dataset("mnist", tmp_path, (1, 28, 28), 10)
    assert ds.x_train.shape == (20, 1, 28, 28) and ds.x_val.shape == (7, 1, 28, 28)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    np.testing.assert_array_equal(ds.x_train[:, 0], data["train"][0] / np.float32(255))
    np.testing.assert_array_equal(ds.y_val, data["t10k"][1])
    assert ds.num_classes == 10 and ds.name == "mnist"


def test_mnist_flat_input_reshapes(tmp_path):
    data = make_mnist(tmp_path)
    ds = load_dataset("mnist", str(tmp_path), (784,), 10)
    assert ds.x_train.shape == (20, 784)
    np.testing.assert_array_equal(ds.x_train[3], data["train"][0][3].reshape(-1) / np.float32(255))


def test_mnist_missing_directory(tmp_path):
    with raises_data_error("no such directory", str(tmp_path / "nope"), "train-images-idx3-ubyte[.gz]"):
        load_dataset("mnist", tmp_path / "nope", (1, 28, 28), 10)


def test_mnist_missing_file(tmp_path):
    make_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with raises_data_error(str(tmp_path), "missing mnist file t10k-labels-idx1-ubyte[.gz]"):
        load_dataset("mnist", tmp_path, (1, 28, 28), 10)


def test_mnist_truncated(tmp_path):
    make_mnist(tmp_path)
    x = np.zeros((20, 28, 28), np.uint8)
    write_idx_images(tmp_path / "train-images-idx3-ubyte", x, cut=100)
    with raises_data_error("train-images-idx3-ubyte", "truncated", "(20, 28, 28)"):
        load_dataset("mnist", tmp_path, (1, 28, 28), 10)


def test_mnist_truncated_header(tmp_path):
    make_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"\x00\x00")
    with raises_data_error("train-labels-idx1-ubyte", "truncated", "header"):
        load_dataset("mnist", tmp_path, (1, 28, 28), 10)


def test_mnist_bad_magic(tmp_path):
    make_mnist(tmp_path)
    write_idx_images(tmp_path / "train-images-idx3-ubyte", np.zeros((20, 28, 28)), magic=2049)
    with raises_data_error("train-images-idx3-ubyte", "bad IDX magic number 2049, expected 2051"):
        load_dataset("mnist", tmp_path, (1, 28, 28), 10)


def test_mnist_label_count_mismatch(tmp_path):
    make_mnist(tmp_path)
    write_idx_labels(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(6))
    with raises_data_error("t10k-labels-idx1-ubyte", "6 labels", "7 images"):
        load_dataset("mnist", tmp_path, (1, 28, 28), 10)


def test_mnist_corrupt_gzip(tmp_path):
    make_mnist(tmp_path, gz=True)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    with raises_data_error("train-images-idx3-ubyte.gz", "cannot read"):
        load_dataset("mnist", tmp_path, (1, 28, 28), 10)


def test_labels_out_of_range(tmp_path):
    make_mnist(tmp_path)
    write_idx_labels(tmp_path / "train-labels-idx1-ubyte", np.array([0] * 10 + [12] + [1] * 9))
    with raises_data_error("train-labels-idx1-ubyte", "label 12 at index 10", "[0, 10)"):
        load_dataset("mnist", tmp_path, (1, 28, 28), 10)
    with raises_data_error("train-labels-idx1-ubyte", "label 12", "[0, 5)"):
        load_dataset("mnist", tmp_path, (1, 28, 28), 5)


def test_shape_mismatch(tmp_path):
    make_mnist(tmp_path)
    with raises_data_error("train-images-idx3-ubyte", "(20, 1, 28, 28)", "(3, 32, 32)"):
        load_dataset("mnist", tmp_path, (3, 32, 32), 10)


# ---------------------------------------------------------------- cifar10


@pytest.mark.parametrize("sub", ["", "cifar-10-batches-bin", "cifar-10"])
def test_cifar10_loads_binary_batches(tmp_path, sub):
    x, y, xv, yv = make_cifar(tmp_path / sub if sub else tmp_path)
    ds = load_dataset("cifar10", tmp_path, (3, 32, 32), 10)
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_val.shape == (5, 3, 32, 32)
    np.testing.assert_array_equal(ds.x_train, x / np.float32(255))
    np.testing.assert_array_equal(ds.y_train, y)
    np.testing.assert_array_equal(ds.y_val, yv)
    assert 0.0 <= ds.x_val.min() and ds.x_val.max() <= 1.0


def test_cifar10_size_not_multiple(tmp_path):
    make_cifar(tmp_path)
    with open(tmp_path / "data_batch_3.bin", "ab") as f:
        f.write(b"\x00" * 10)
    with raises_data_error("data_batch_3.bin", "not a multiple of the 3073-byte"):
        load_dataset("cifar10", tmp_path, (3, 32, 32), 10)


def test_cifar10_missing(tmp_path):
    with raises_data_error("no such directory", "data_batch_1.bin"):
        load_dataset("cifar10", tmp_path / "none", (3, 32, 32), 10)
    with raises_data_error(str(tmp_path), "no cifar-10 files found"):
        load_dataset("cifar10", tmp_path, (3, 32, 32), 10)
    make_cifar(tmp_path)
    (tmp_path / "data_batch_4.bin").unlink()
    with raises_data_error("data_batch_4.bin", "missing cifar-10 file"):
        load_dataset("cifar10", tmp_path, (3, 32, 32), 10)


# ---------------------------------------------------------------- cifar100


def make_cifar100(d, n_train=6, n_val=4, meta_classes=100):
    """cifar-100-python/'s files: train and test, pickled dicts of bytes keys (the layout the
    tarball's Python 2 pickles have), and meta."""
    rng = np.random.default_rng(3)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, n, protocol in (("train", n_train, 2), ("test", n_val, pickle.HIGHEST_PROTOCOL)):
        split = {b"filenames": [b"img_%d.png" % i for i in range(n)], b"batch_label": b"%s batch 1 of 1" % name.encode(),
                 b"fine_labels": rng.integers(0, 100, n).tolist(), b"coarse_labels": rng.integers(0, 20, n).tolist(),
                 b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)}
        with open(d / name, "wb") as f:
            pickle.dump(split, f, protocol=protocol)
        out[name] = split
    with open(d / "meta", "wb") as f:
        pickle.dump({b"fine_label_names": [b"class_%d" % i for i in range(meta_classes)],
                     b"coarse_label_names": [b"super_%d" % i for i in range(20)]}, f)
    return out


CIFAR100_SPEC = """name: c100
input: {channels: 3, height: 32, width: 32}
layers:
  - conv2d: {ic: 3, oc: 4, k_size: 3}
  - global_avg_pool
  - dense: {fan_in: 4, fan_out: 100}
dataset: {kind: cifar100, path: PATH}
"""


def cifar100_net(path):
    return infer(load_spec("c100.yaml", text=CIFAR100_SPEC.replace("PATH", str(path))))


@pytest.mark.parametrize("sub", ["", "cifar-100-python"])
def test_cifar100_loads_the_python_version_through_a_spec(tmp_path, sub):
    files = make_cifar100(tmp_path / sub if sub else tmp_path)
    ds = load_data(cifar100_net(tmp_path), None, seed=0)
    assert ds.name == "cifar100" and ds.num_classes == 100
    assert ds.x_train.shape == (6, 3, 32, 32) and ds.x_val.shape == (4, 3, 32, 32) and ds.x_train.dtype == np.float32
    train, test = files["train"], files["test"]
    np.testing.assert_array_equal(ds.x_train, train[b"data"].reshape(6, 3, 32, 32) / np.float32(255))
    np.testing.assert_array_equal(ds.y_train, train[b"fine_labels"])          # the fine labels, not the coarse
    np.testing.assert_array_equal(ds.y_val, test[b"fine_labels"])
    assert ds.y_train.dtype == np.int32
    root = tmp_path / sub if sub else tmp_path
    assert ds.source("x_train") == str(root / "train") and ds.source("y_val") == str(root / "test")


def test_cifar100_errors(tmp_path):
    with raises_data_error("no such directory", "cifar-100 python files train and test") as e:
        load_data(cifar100_net(tmp_path / "none"), None, seed=0)
    assert "cifar-100-python.tar.gz" in e.value.hint and "`dataset: {kind: cifar100, path: PATH}`" in e.value.hint
    with raises_data_error(str(tmp_path), "no cifar-100 files found"):
        load_dataset("cifar100", tmp_path, (3, 32, 32), 100)
    make_cifar100(tmp_path)
    (tmp_path / "test").unlink()
    with raises_data_error(str(tmp_path / "test"), "missing cifar-100 file"):
        load_dataset("cifar100", tmp_path, (3, 32, 32), 100)


def test_cifar100_refuses_files_of_another_layout(tmp_path):
    files = make_cifar100(tmp_path)
    with open(tmp_path / "train", "wb") as f:
        pickle.dump({**files["train"], b"data": files["train"][b"data"].reshape(6, 3, 32, 32)}, f)
    with raises_data_error(str(tmp_path / "train"), "b'data' is uint8 of shape [6, 3, 32, 32]", "[N, 3072]"):
        load_dataset("cifar100", tmp_path, (3, 32, 32), 100)
    with open(tmp_path / "train", "wb") as f:
        pickle.dump({k: v for k, v in files["train"].items() if k != b"fine_labels"}, f)
    with raises_data_error("no b'fine_labels' entry"):
        load_dataset("cifar100", tmp_path, (3, 32, 32), 100)
    (tmp_path / "train").write_bytes(b"not a pickle")
    with raises_data_error(str(tmp_path / "train"), "not a cifar-100 python file"):
        load_dataset("cifar100", tmp_path, (3, 32, 32), 100)
    make_cifar100(tmp_path, meta_classes=10)
    with raises_data_error(str(tmp_path / "meta"), "should name the 100 fine classes, found 10"):
        load_dataset("cifar100", tmp_path, (3, 32, 32), 100)


class _Planted:
    """A pickle that touches `target` when pickle.load unpickles it (a pickle may call anything)."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.target),))


def test_cifar100_never_runs_what_a_pickle_asks_for(tmp_path):
    make_cifar100(tmp_path)
    planted = tmp_path / "planted"
    with open(tmp_path / "test", "wb") as f:
        pickle.dump({b"data": _Planted(planted)}, f)
    with open(tmp_path / "test", "rb") as f:                # the file has teeth: pickle.load runs it
        pickle.load(f)
    assert planted.exists()
    planted.unlink()
    with raises_data_error(str(tmp_path / "test"), "not a cifar-100 python file", "which a CIFAR-100 file never holds"):
        load_dataset("cifar100", tmp_path, (3, 32, 32), 100)
    assert not planted.exists()


def test_cifar100_labels_beyond_the_head(tmp_path):
    make_cifar100(tmp_path)
    with raises_data_error("labels must be in [0, 10)"):
        load_dataset("cifar100", tmp_path, (3, 32, 32), 10)


# ---------------------------------------------------------------- imagenette


def test_imagenette_image_tree(tmp_path):
    make_image_tree(tmp_path)
    ds = load_dataset("imagenette", tmp_path, (3, 14, 14), 2)
    # train squashed to round(14*256/224) = 16 and cropped by the Batcher; val straight to 14.
    assert ds.x_train.shape == (6, 3, 16, 16) and ds.train_crop == (14, 14)
    assert ds.input_shape == (3, 14, 14)
    assert ds.x_val.shape == (6, 3, 14, 14) and ds.x_val.dtype == np.float32
    # sorted folder order: n01 -> 0, n02 -> 1
    np.testing.assert_array_equal(ds.y_train, [0, 0, 0, 1, 1, 1])
    assert ds.mean == (0.485, 0.456, 0.406) and ds.std == (0.229, 0.224, 0.225)
    # normalization: recompute one val image by hand
    im = Image.open(tmp_path / "val" / "n02" / "img1.png").convert("RGB").resize((14, 14), Image.BILINEAR)
    ref = (np.asarray(im, np.float32).transpose(2, 0, 1) / 255 - np.array(ds.mean)[:, None, None]) \
        / np.array(ds.std)[:, None, None]
    np.testing.assert_allclose(ds.x_val[4], ref, atol=1e-5)
    b = Batcher(ds, 4, seed=0, augment=True)
    xb, _ = next(iter(b.epoch(0)))
    assert xb.shape == (4, 3, 14, 14)
    xb, _ = next(iter(Batcher(ds, 4, seed=0, shuffle=False).epoch(0)))
    np.testing.assert_array_equal(xb, ds.x_train[:4, :, 1:15, 1:15])   # centre crop


def test_imagenette_unreadable_image(tmp_path):
    make_image_tree(tmp_path)
    bad = tmp_path / "val" / "n01" / "broken.jpg"
    bad.write_bytes(b"this is no jpeg")
    with raises_data_error(str(bad), "cannot read image"):
        load_dataset("imagenette", tmp_path, (3, 14, 14), 2)


def test_imagenette_bad_tree(tmp_path):
    with raises_data_error("no such directory", "DIR/train/<class>"):
        load_dataset("imagenette", tmp_path / "x", (3, 14, 14), 2)
    make_image_tree(tmp_path)
    (tmp_path / "val" / "n99").mkdir()
    with raises_data_error("val", "n99", "do not exist under train/"):
        load_dataset("imagenette", tmp_path, (3, 14, 14), 2)
    with raises_data_error("imagenette gives RGB images [3, H, W]", "(588,)"):
        load_dataset("imagenette", tmp_path, (588,), 2)


# ---------------------------------------------------------------- npz


def test_npz_with_val(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((12, 2, 3, 3)).astype(np.float32)
    xv = rng.integers(0, 256, size=(4, 18), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(12) % 3, x_val=xv, y_val=np.array([0, 1, 2, 0]))
    ds = load_dataset("npz", tmp_path / "d.npz", (2, 3, 3), None)
    np.testing.assert_array_equal(ds.x_train, x)                   # float32 used exactly
    np.testing.assert_array_equal(ds.x_val, xv.reshape(4, 2, 3, 3) / np.float32(255))
    assert ds.num_classes == 3 and ds.y_train.dtype == np.int32


def test_npz_fixed_holdout(tmp_path):
    x = np.arange(50 * 4, dtype=np.float32).reshape(50, 4)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(50) % 5)
    a = load_dataset("npz", tmp_path / "d.npz", (4,), 5, seed=0)
    b = load_dataset("npz", tmp_path / "d.npz", (4,), 5, seed=99)
    assert len(a.x_train) == 45 and len(a.x_val) == 5
    np.testing.assert_array_equal(a.x_val, b.x_val)                # independent of the run seed
    rows = set(a.x_train[:, 0]) | set(a.x_val[:, 0])
    assert rows == set(x[:, 0])                                    # a partition of the file
    assert np.all(np.diff(a.x_train[:, 0]) > 0)                    # file order kept


def test_npz_missing_key(tmp_path):
    np.savez(tmp_path / "d.npz", images=np.zeros((3, 4), np.float32), y=np.zeros(3, int))
    with raises_data_error(str(tmp_path / "d.npz"), "missing key(s) x", "found images, y"):
        load_dataset("npz", tmp_path / "d.npz", (4,), 2)
    np.savez(tmp_path / "e.npz", x=np.zeros((3, 4), np.float32), y=np.zeros(3, int),
             x_val=np.zeros((1, 4), np.float32))
    with raises_data_error("e.npz", "missing key(s) y_val"):
        load_dataset("npz", tmp_path / "e.npz", (4,), 2)


def test_npz_bad_dtype(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((3, 4), np.float64), y=np.zeros(3, int))
    with raises_data_error("d.npz", "'x' has dtype float64", "float32", "uint8"):
        load_dataset("npz", tmp_path / "d.npz", (4,), 2)
    np.savez(tmp_path / "e.npz", x=np.zeros((3, 4), np.float32), y=np.zeros(3, np.float32))
    with raises_data_error("e.npz", "'y' has dtype float32 and shape (3,)", "integer"):
        load_dataset("npz", tmp_path / "e.npz", (4,), 2)
    np.savez(tmp_path / "f.npz", x=np.zeros((3, 4), np.float32), y=np.zeros(2, int))
    with raises_data_error("f.npz", "'y' has shape (2,)", "expected (3,)"):
        load_dataset("npz", tmp_path / "f.npz", (4,), 2)


def test_npz_missing_or_corrupt_file(tmp_path):
    with raises_data_error("no such file", "nope.npz"):
        load_dataset("npz", tmp_path / "nope.npz", (4,), 2)
    (tmp_path / "bad.npz").write_bytes(b"garbage")
    with raises_data_error("bad.npz", "not a readable .npz"):
        load_dataset("npz", tmp_path / "bad.npz", (4,), 2)


# ---------------------------------------------------------------- synthetic, digits, kinds


def test_synthetic(tmp_path):
    a = load_dataset("synthetic", None, (3, 4, 4), 5, seed=7, n_train=64, n_val=16)
    b = load_dataset("synthetic", None, (3, 4, 4), 5, seed=7, n_train=64, n_val=16)
    c = load_dataset("synthetic", None, (3, 4, 4), 5, seed=8, n_train=64, n_val=16)
    assert a.x_train.shape == (64, 3, 4, 4) and a.x_val.shape == (16, 3, 4, 4)
    assert a.x_train.dtype == np.float32 and a.y_train.min() >= 0 and a.y_train.max() < 5
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.x_train, c.x_train)
    assert len(load_dataset("synthetic", None, (8,), None).x_train) == 1024
    with raises_data_error("synthetic takes no option(s) n_test"):
        load_dataset("synthetic", None, (8,), 2, n_test=3)


def test_digits_split_and_range():
    ds = load_dataset("digits", None, (1, 8, 8), 10, seed=123)
    flat = load_dataset("digits", None, (64,), 10, seed=0)
    assert ds.x_train.shape == (1437, 1, 8, 8) and ds.x_val.shape == (360, 1, 8, 8)
    assert flat.x_train.shape == (1437, 64)
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() == 1.0
    np.testing.assert_array_equal(ds.x_val.reshape(360, 64), flat.x_val)   # split ignores the seed
    assert set(np.unique(ds.y_val)) == set(range(10))


def test_unsupported_and_unknown_kinds(tmp_path):
    for kind in ("pets", "pets_det", "brats", "brats224"):      # loaders: tests/test_seg_data.py
        with raises_data_error(f"no such file: {tmp_path / 'train.bin'}"):
            load_dataset(kind, tmp_path, (3, 224, 224), 10)
    with raises_data_error("unknown dataset kind 'minst'", "mnist"):
        load_dataset("minst", tmp_path, (784,), 10)
    with raises_data_error("dataset kind mnist needs a data path"):
        load_dataset("mnist", None, (784,), 10)


def test_lcg_permutation_matches_reference_algorithm():
    p = lcg_permutation(1000, 42)
    assert sorted(p.tolist()) == list(range(1000))
    rng, perm = 42 ^ 0x5DEECE66D, list(range(5))     # first steps spelled out by hand
    for i in range(4, 0, -1):
        rng = (rng * 6364136223846793005 + 1442695040888963407) % 2**64
        j = (rng >> 16) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    assert lcg_permutation(5, 42).tolist() == perm


# ---------------------------------------------------------------- Batcher


def small_ds(n=50, shape=(3, 8, 8), seed=0) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, *shape)).astype(np.float32)
    y = np.arange(n, dtype=np.int32) % 10
    return Dataset("t", x, y, x[:5], y[:5], num_classes=10)


def collect(it):
    return [(x.copy(), y.copy()) for x, y in it]


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x1, x2) and np.array_equal(y1, y2)
                                    for (x1, y1), (x2, y2) in zip(a, b))


def test_batcher_steps_and_shapes():
    b = Batcher(small_ds(), 8, seed=0)
    assert b.steps_per_epoch == 6                     # 50 // 8, remainder dropped
    batches = collect(b.epoch(0))
    assert len(batches) == 6
    assert all(x.shape == (8, 3, 8, 8) and x.dtype == np.float32 and y.dtype == np.int32
               for x, y in batches)
    seen = np.concatenate([y for _, y in batches])
    assert len(seen) == 48


def test_batcher_unshuffled_is_file_order():
    ds = small_ds()
    batches = collect(Batcher(ds, 8, seed=3, shuffle=False).epoch(2))
    np.testing.assert_array_equal(np.concatenate([x for x, _ in batches]), ds.x_train[:48])


def test_batcher_determinism_and_epoch_independence():
    ds = small_ds()
    a = Batcher(ds, 8, seed=5, augment=True, random_erasing=0.5)
    b = Batcher(ds, 8, seed=5, augment=True, random_erasing=0.5)
    runs_a = [collect(a.epoch(e)) for e in range(3)]
    assert same(collect(b.epoch(2)), runs_a[2])        # epoch 2 without epochs 0 and 1 first
    assert same(collect(b.epoch(0)), runs_a[0])
    assert not same(runs_a[0], runs_a[1])              # epochs differ
    c = Batcher(ds, 8, seed=6, augment=True, random_erasing=0.5)
    assert not same(collect(c.epoch(0)), runs_a[0])    # seeds differ


def test_batcher_resume_at_start_step():
    ds = small_ds()
    full = collect(Batcher(ds, 8, seed=1, augment=True).epoch(4))
    resumed = collect(Batcher(ds, 8, seed=1, augment=True).epoch(4, start_step=4))
    assert same(resumed, full[4:])
    assert collect(Batcher(ds, 8, seed=1).epoch(0, start_step=6)) == []
    with pytest.raises(IndexError):
        Batcher(ds, 8, seed=1).epoch(0, start_step=7)


def test_batcher_prefetches_in_background():
    ds = small_ds()
    made_in = []

    class Recording(Batcher):
        def batch(self, epoch, step):
            made_in.append((step, threading.current_thread().name))
            return super().batch(epoch, step)

    b = Recording(ds, 8, seed=0, prefetch=2)
    it = b.epoch(0)
    first = next(it)
    # while the consumer holds batch 0 the producer fills the queue: steps 1 and 2 (+1 in hand)
    for _ in range(100):
        if len(made_in) >= 3:
            break
        threading.Event().wait(0.01)
    assert len(made_in) >= 3 and all(name.startswith("lmc-batcher") for _, name in made_in)
    assert threading.current_thread().name not in {n for _, n in made_in}
    rest = collect(it)
    assert same([first] + rest, [b.batch(0, s) for s in range(6)])


def test_batcher_stops_thread_on_break_and_forwards_errors():
    b = Batcher(small_ds(), 8, seed=0)
    it = b.epoch(0)
    next(it)
    it.close()
    assert not it._thread.is_alive()

    class Failing(Batcher):
        def batch(self, epoch, step):
            if step == 2:
                raise RuntimeError("boom at step 2")
            return super().batch(epoch, step)

    got = []
    with pytest.raises(RuntimeError, match="boom at step 2"):
        for xb, _ in Failing(small_ds(), 8, seed=0).epoch(0):
            got.append(xb)
    assert len(got) == 2


def test_batcher_bad_config():
    with raises_data_error("3 training examples, fewer than one batch of 8"):
        Batcher(small_ds(n=3), 8, seed=0)
    flat = Dataset("f", np.zeros((10, 4), np.float32), np.zeros(10, np.int32),
                   np.zeros((0, 4), np.float32), np.zeros(0, np.int32), 2)
    with raises_data_error("augmentation needs image inputs", "(4,)"):
        Batcher(flat, 2, seed=0, augment=True)


def test_augment_keeps_shape_and_is_deterministic_per_step():
    ds = small_ds(n=64, shape=(3, 32, 32))
    b = Batcher(ds, 16, seed=9, augment=True, random_erasing=1.0)
    x1, y1 = b.batch(1, 2)
    x2, _ = Batcher(ds, 16, seed=9, augment=True, random_erasing=1.0).batch(1, 2)
    plain, y0 = Batcher(ds, 16, seed=9).batch(1, 2)
    assert x1.shape == plain.shape == (16, 3, 32, 32) and x1.dtype == np.float32
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y0)               # augmentation never reorders labels
    assert not np.array_equal(x1, plain)
    assert not np.array_equal(x1, b.batch(1, 3)[0])


def test_augment_functions():
    rng = np.random.default_rng(0)
    x = np.arange(2 * 1 * 4 * 4, dtype=np.float32).reshape(2, 1, 4, 4) + 1
    crops = aug.crop(x, np.array([0, 1]), np.array([1, 0]), 2, 3)
    np.testing.assert_array_equal(crops[0, 0], x[0, 0, 0:2, 1:4])
    np.testing.assert_array_equal(crops[1, 0], x[1, 0, 1:3, 0:3])
    padded = aug.pad_crop(x, 2, rng)
    assert padded.shape == x.shape
    assert all(set(np.unique(p)) - {0.0} <= set(np.unique(o)) for p, o in zip(padded, x))
    flipped = aug.hflip(np.repeat(x[:1], 64, 0), rng)
    n_flipped = sum(np.array_equal(f, x[0, :, :, ::-1]) for f in flipped)
    assert 10 < n_flipped < 54 and all(np.array_equal(f, x[0]) or np.array_equal(f, x[0, :, :, ::-1])
                                       for f in flipped)
    ones = np.full((200, 3, 16, 16), 7.0, np.float32)
    erased = aug.random_erasing(ones, 0.5, rng)
    changed = (erased != 7.0).reshape(200, 3, -1)
    frac = changed.any(axis=(1, 2)).mean()
    assert 0.3 < frac < 0.7                                             # p = 0.5
    area = changed[:, 0].sum(1)[changed[:, 0].any(1)] / 256
    assert area.min() >= 0.01 and area.max() <= 0.4
    np.testing.assert_array_equal(changed[:, 0], changed[:, 2])         # same box on every channel


# ---------------------------------------------------------------- eval_batches


def test_eval_batches_pads_last_batch():
    x = np.arange(10 * 3, dtype=np.float32).reshape(10, 3) + 1
    y = np.arange(10, dtype=np.int32) + 1
    out = list(eval_batches(x, y, 4))
    assert [n for _, _, n in out] == [4, 4, 2]
    assert all(xb.shape == (4, 3) and yb.shape == (4,) for xb, yb, _ in out)
    xb, yb, n = out[-1]
    np.testing.assert_array_equal(xb[:2], x[8:])
    assert not xb[2:].any() and not yb[2:].any()
    np.testing.assert_array_equal(np.concatenate([b[:k] for _, b, k in out]), y)
    assert [n for *_, n in eval_batches(x, y, 5)] == [5, 5]
    assert list(eval_batches(x[:0], y[:0], 4)) == []


def test_eval_batches_fill_the_tail_with_real_rows_under_batch_statistics():
    """BN with batch statistics at eval (train.running_bn false): the tail batch is completed
    with real rows, never zeros (they would shift the real rows' normalisation); a split smaller
    than a batch is cycled."""
    x = np.arange(10 * 3, dtype=np.float32).reshape(10, 3) + 1
    y = np.arange(10, dtype=np.int32) + 1
    out = list(eval_batches(x, y, 4, batch_stats=True))
    assert [n for _, _, n in out] == [4, 4, 2]
    xb, yb, _ = out[-1]
    np.testing.assert_array_equal(xb[:2], x[8:])
    assert all(any((r == row).all() for row in x[:8]) for r in xb[2:]) and yb[2:].all()
    xb, yb, n = next(eval_batches(x[:3], y[:3], 8, batch_stats=True))
    assert n == 3 and xb.shape == (8, 3) and xb.all() and set(yb) == {1, 2, 3}


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), batch=st.integers(1, 12))
def test_eval_batches_cover_every_row_once(n, batch):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n, dtype=np.int32)
    out = list(eval_batches(x, y, batch))
    assert len(out) == -(-n // batch)
    assert all(xb.shape == (batch, 2) and 0 < k <= batch for xb, _, k in out)
    np.testing.assert_array_equal(np.concatenate([xb[:k] for xb, _, k in out] or [x]), x)


@pytest.mark.parametrize("kind, shape, where", [
    ("mnist", (1, 28, 28), "yann.lecun.com/exdb/mnist"), ("cifar10", (3, 32, 32), "cifar-10-binary.tar.gz"),
    ("imagenette", (3, 32, 32), "imagenette2-320.tgz"), ("npz", (4,), "numpy.savez(PATH, x=x, y=y)")])
def test_missing_dataset_hint_says_where_files_come_from(tmp_path, kind, shape, where):
    with pytest.raises(DataError) as info:
        load_dataset(kind, tmp_path / ("nope.npz" if kind == "npz" else "nope"), shape, 10)
    hint = info.value.hint
    assert hint.startswith("lmc never downloads data: ") and where in hint, hint
    assert "--data PATH" in hint and "`dataset: digits`" in hint
    with pytest.raises(DataError) as info:
        load_dataset(kind, None, shape, 10)
    assert "--data PATH" in info.value.hint and "never downloads" in info.value.hint
