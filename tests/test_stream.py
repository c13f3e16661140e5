"""Streaming image folders (imagenette --stream, imagenet): the batches and eval scores are those
of the in-RAM loader, and an epoch runs in bounded memory (peak RSS measured in a subprocess)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from lmc.data import Batcher, eval_batches, load_dataset
from lmc.data.imagenette import Images
from lmc.core.errors import DataError


def make_tree(root, n_per_class=4, classes=("n01", "n02", "n03"), size=(40, 30), seed=0):
    rng = np.random.default_rng(seed)
    for split in ("train", "val"):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n_per_class):
                Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(d / f"{i}.JPEG", quality=90)


def test_streamed_batches_equal_the_in_ram_ones(tmp_path):
    make_tree(tmp_path)
    ram = load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=False)
    st = load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=True)
    assert isinstance(st.x_train, Images) and isinstance(st.x_val, Images)
    assert st.x_train.shape == ram.x_train.shape and st.train_crop == ram.train_crop
    np.testing.assert_array_equal(st.y_train, ram.y_train)
    for aug in (False, True):
        a, b = Batcher(ram, 4, seed=3, augment=aug), Batcher(st, 4, seed=3, augment=aug)
        for (xa, ya), (xb, yb) in zip(a.epoch(1), b.epoch(1)):
            np.testing.assert_array_equal(xa, xb)
            np.testing.assert_array_equal(ya, yb)
    for (xa, _, na), (xb, _, nb) in zip(eval_batches(ram.x_val, ram.y_val, 5), eval_batches(st.x_val, st.y_val, 5)):
        assert na == nb
        np.testing.assert_array_equal(xa, xb)
    np.testing.assert_array_equal(st.x_val[3], ram.x_val[3])


def test_imagenet_always_streams_and_stream_refuses_other_kinds(tmp_path):
    make_tree(tmp_path, n_per_class=2)
    ds = load_dataset("imagenet", tmp_path, (3, 14, 14), 3)
    assert isinstance(ds.x_train, Images) and ds.name == "imagenet"
    with pytest.raises(DataError, match="imagenet .* cannot be held in RAM"):
        load_dataset("imagenet", tmp_path, (3, 14, 14), 3, stream=False)
    with pytest.raises(DataError, match="--stream reads image folders"):
        load_dataset("digits", None, (1, 8, 8), 10, stream=True)


def test_an_epoch_streams_in_bounded_memory(tmp_path):
    """300 train images of 3×256×256 are 236 MB as float32: the streamed epoch's peak RSS
    growth must stay far below that (a few prefetched batches)."""
    make_tree(tmp_path, n_per_class=100, size=(256, 256))
    script = textwrap.dedent(f"""
        import json, resource, time
        from lmc.data import Batcher, load_dataset
        ds = load_dataset("imagenette", {str(tmp_path)!r}, (3, 224, 224), 3, stream=True)
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        n = sum(len(x) for x, _ in Batcher(ds, 16, seed=0, augment=True).epoch(0))
        dt = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"n": n, "growth_mb": (peak - base) / 1024, "images_per_s": n / dt}}))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"streamed epoch: {got}")
    assert got["n"] == 288                                   # 18 batches of 16: the remainder dropped
    assert got["growth_mb"] < 100, got                       # vs 236 MB for the decoded set


IMAGENET_NET = """name: inet
input: {{channels: 3, height: 14, width: 14}}
layers:
  - conv2d: {{ic: 3, oc: 4, k_size: 3}}
  - global_avg_pool
  - dense: {{fan_in: 4, fan_out: 3}}
train: {{learning_rate: 0.01, batch_size: 4, epochs: 3, {extra}}}
dataset: {{kind: {kind}, path: {path}}}
"""


def test_val_every_epochs_is_imagenets_cadence(tmp_path):
    import io
    from rich.console import Console
    from lmc.core.errors import SpecError
    from lmc.graph.infer import infer
    from lmc.check import load_net
    from lmc.train.trainer import TrainOptions, train
    make_tree(tmp_path, n_per_class=2)
    spec = lambda kind, extra: load_net("n.yaml", text=IMAGENET_NET.format(kind=kind, extra=extra, path=tmp_path)).spec
    with pytest.raises(SpecError, match=r"n.yaml:7:.*val_every_epochs is the ImageNet cadence \(dataset: imagenet\), "
                                        r"not for dataset imagenette"):
        spec("imagenette", "val_every_epochs: 2")
    with pytest.raises(SpecError, match="two cadences for one evaluation"):
        spec("imagenet", "val_every_epochs: 2, eval_every_n_epochs: 1")
    out = tmp_path / "run"
    train(infer(spec("imagenet", "val_every_epochs: 2")), TrainOptions(out=out), Console(file=io.StringIO()))
    evals = lambda out: [r["epoch"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
                         if r["kind"] == "eval"]
    assert evals(out) == [2, 3]               # every 2 epochs, and always the last
    # val_every_epochs ≤ 1 (the default 1) is the Lean kit's every-epoch validation on imagenet,
    # not lmc's 10-epoch default; an explicit eval_every_n_epochs stays lmc's cadence
    for extra, want in (("val_every_epochs: 1", [1, 2, 3]), ("val_every_epochs: 0", [1, 2, 3]),
                        ("eval_every_n_epochs: 2", [2, 3])):
        o = tmp_path / extra.replace(": ", "")
        train(infer(spec("imagenet", extra)), TrainOptions(out=o), Console(file=io.StringIO()))
        assert evals(o) == want, extra
    o = tmp_path / "nette"
    train(infer(spec("imagenette", "val_every_epochs: 1")), TrainOptions(out=o), Console(file=io.StringIO()))
    assert evals(o) == [3]                    # other datasets: lmc's eval_every_n_epochs (10), and the last
