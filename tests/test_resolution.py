"""train.train_res / train.test_crop_ratio (lmc/data/resolution.py, infer.train_net): train at one
resolution, evaluate at the spec's; the eval crop by timm's crop_pct rule.  The references here
are written out with Pillow's own calls (resize + crop box), not lmc's helpers."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from lmc.cli import app
from lmc.data import Batcher, load_dataset
from lmc.graph.infer import infer, train_net
from lmc.lower.lowering import abi, lower
from lmc.spec.netspec import load_spec

SPECS = Path(__file__).resolve().parents[1] / "specs"
POOLED = """name: pooled
input: {channels: 1, height: 8, width: 8}
dataset: digits
layers:
  - conv_bn: {ic: 1, oc: 8, k_size: 3}
  - conv_bn: {ic: 8, oc: 16, k_size: 3, stride: 2}
  - global_avg_pool
  - dense: {fan_in: 16, fan_out: 10}
train: {learning_rate: 0.01, batch_size: 32, epochs: 2, use_adam: true, train_res: 6, test_crop_ratio: 0.75}
"""


def _spec(tmp_path, text=POOLED, name="pooled.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_the_module_holds_both_resolutions(tmp_path):
    net = infer(load_spec(_spec(tmp_path)))
    t = train_net(net)
    assert net.input.dims == (32, 1, 8, 8) and t.input.dims == (32, 1, 6, 6)
    assert [(p.name, p.type) for p in net.params + net.state] == [(p.name, p.type) for p in t.params + t.state]
    assert abi(net).x.dims == (32, 1, 6, 6)
    import json
    info = json.loads(CliRunner().invoke(app, ["info", str(_spec(tmp_path)), "--json"]).stdout)
    assert info["input_shape"] == [32, 1, 8, 8] and info["train_abi"]["x"] == [32, 1, 6, 6]
    text = lower(net)
    train = next(l for l in text.splitlines() if "func.func @train_step(" in l)
    fwd = next(l for l in text.splitlines() if "func.func @forward(" in l)
    assert "%x: tensor<32x1x6x6xf32>" in train and "8x8" not in train
    assert "%x: tensor<32x1x8x8xf32>" in fwd
    # @input_grad (attacks) differentiates the eval net: the spec's resolution
    ig = next(l for l in lower(net, "input_grad").splitlines() if "func.func @input_grad(" in l)
    assert "%x: tensor<32x1x8x8xf32>" in ig


def test_a_net_whose_weights_depend_on_the_resolution_is_refused(tmp_path):
    # digits_cnn flattens 2×2×64 into its dense head; at 4×4 the flatten gives 1×1×64
    r = CliRunner().invoke(app, ["train", str(SPECS / "digits_cnn.yaml"), "--set", "train.train_res=4",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 2
    assert r.output.startswith("error: --set train.train_res: train.train_res 4: the net does not take a 4×4 input")
    assert "fan_in=256 but the input has 64 features" in r.output and "global_avg_pool" in r.output
    # located at the field in the file when the spec sets it
    spec = _spec(tmp_path, (SPECS / "digits_cnn.yaml").read_text().replace("  seed: 0\n", "  seed: 0\n  train_res: 4\n"),
                 "cnn.yaml")
    line = spec.read_text().splitlines().index("  train_res: 4") + 1
    r = CliRunner().invoke(app, ["validate", str(spec)])
    assert r.exit_code == 2 and r.output.startswith(f"error: {spec}:{line}:3: train.train_res 4:")
    # same output shape, other weights: the parameter comparison names the tensor
    vit = CliRunner().invoke(app, ["validate", str(SPECS / "digits_vit.yaml"), "--set", "train.train_res=4"])
    assert vit.exit_code == 2 and "patch_embed" in vit.output


def test_labels_that_are_not_one_class_per_image_are_refused():
    r = CliRunner().invoke(app, ["validate", str(SPECS / "unet_digits.yaml"), "--set", "train.train_res=4"])
    assert r.exit_code == 2 and "train.train_res 4 resizes the training images, not their labels" in r.output
    r = CliRunner().invoke(app, ["validate", str(SPECS / "unet_digits.yaml"), "--set", "train.test_crop_ratio=0.9"])
    assert r.exit_code == 2 and "train.test_crop_ratio resizes and crops the validation images" in r.output
    r = CliRunner().invoke(app, ["validate", str(SPECS / "digits_mlp.yaml"), "--set", "train.test_crop_ratio=0.9"])
    assert r.exit_code == 2 and "is not an image [C, H, W]" in r.output
    r = CliRunner().invoke(app, ["validate", str(SPECS / "digits_mlp.yaml"), "--set", "train.test_crop_ratio=1.2"])
    assert r.exit_code == 2 and "expected a ratio in [0, 1], got 1.2" in r.output


def _pil_resize(img2d, w, h):
    return np.asarray(Image.fromarray(img2d.astype(np.float32)).resize((w, h), Image.BILINEAR))


def test_training_batches_are_pillow_resized():
    plain = load_dataset("digits", None, (1, 8, 8), 10)
    small = load_dataset("digits", None, (1, 8, 8), 10, train_res=6)
    assert small.input_shape == (1, 6, 6)
    for augment in (False, True):
        a = Batcher(plain, 16, seed=3, augment=augment).batch(1, 2)[0]
        b = Batcher(small, 16, seed=3, augment=augment).batch(1, 2)[0]
        ref = np.stack([[_pil_resize(ch, 6, 6) for ch in img] for img in a])
        assert b.shape == (16, 1, 6, 6) and np.array_equal(b, ref)
    np.testing.assert_array_equal(small.x_val, plain.x_val)            # eval keeps the spec's resolution


@pytest.mark.parametrize("ratio", [0.75, 0.875, 0.5])
def test_crop_ratio_on_stored_images(ratio):
    plain = load_dataset("digits", None, (1, 8, 8), 10)
    got = load_dataset("digits", None, (1, 8, 8), 10, test_crop_ratio=ratio).x_val
    m = math.floor(8 / ratio)                         # timm: Resize(floor(S / crop_pct)), CenterCrop(S)
    t = int(round((m - 8) / 2.0))                     # torchvision's CenterCrop offset
    ref = np.stack([[np.asarray(Image.fromarray(ch).resize((m, m), Image.BILINEAR).crop((t, t, t + 8, t + 8)))
                     for ch in img] for img in plain.x_val])
    assert got.shape == plain.x_val.shape and np.array_equal(got, ref)
    assert not np.array_equal(got, plain.x_val)


def _folder(root: Path, size=(20, 30)):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / split / c / f"{i}.png")
    return root


@pytest.mark.parametrize("stream", [False, True])
def test_crop_ratio_on_image_files(tmp_path, stream):
    """A 20×30 file, eval 8×8, ratio 0.8: the shorter side to floor(8/0.8) = 10 (10×15), the
    centre 8×8 of that — timm's eval transform — from the file itself."""
    from lmc.data.imagenette import normalize
    root = _folder(tmp_path / "imgs")
    ds = load_dataset("imagenette", root, (3, 8, 8), 2, test_crop_ratio=0.8, stream=stream)
    paths = sorted((root / "val").glob("*/*.png"))
    ref = []
    for p in paths:
        im = Image.open(p).convert("RGB").resize((15, 10), Image.BILINEAR)
        top, left = int(round((10 - 8) / 2.0)), int(round((15 - 8) / 2.0))
        ref.append(np.asarray(im.crop((left, top, left + 8, top + 8))).transpose(2, 0, 1))
    np.testing.assert_array_equal(np.asarray(ds.x_val[np.arange(len(paths))]), normalize(np.stack(ref)))
    # 0 keeps the loader's own validation images (the squash to 8×8)
    plain = load_dataset("imagenette", root, (3, 8, 8), 2, stream=stream)
    assert not np.array_equal(np.asarray(plain.x_val[np.arange(4)]), np.asarray(ds.x_val[np.arange(4)]))


@pytest.mark.iree
def test_train_at_train_res_and_evaluate_at_the_spec_resolution(tmp_path, monkeypatch):
    pytest.importorskip("iree.runtime")
    import json

    import lmc.train.callbacks as tr
    import lmc.train.steps as st
    steps, evals = [], []
    real_step, real_eval = st.FusedStep.step, tr.evaluate
    monkeypatch.setattr(st.FusedStep, "step", lambda self, state, x, y, lr: steps.append(x.shape) or
                        real_step(self, state, x, y, lr))
    monkeypatch.setattr(tr, "evaluate", lambda *a, **k: evals.append(np.array(a[3])) or real_eval(*a, **k))
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", str(_spec(tmp_path)), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert steps and set(steps) == {(32, 1, 6, 6)}
    plain = load_dataset("digits", None, (1, 8, 8), 10).x_val
    assert evals and all(x.shape == (360, 1, 8, 8) for x in evals)
    m, t = math.floor(8 / 0.75), 1
    ref = np.stack([[np.asarray(Image.fromarray(ch).resize((m, m), Image.BILINEAR).crop((t, t, t + 8, t + 8)))
                     for ch in img] for img in plain])
    assert np.array_equal(evals[-1], ref)
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in recs if x["kind"] == "epoch"]
    assert len(losses) == 2 and all(np.isfinite(losses)) and losses[1] < losses[0]
    assert [x for x in recs if x["kind"] == "eval"][-1]["top1"] > 0.1


def _body(text: str, name: str) -> str:
    """The text of `func.func @name` without its loc(...) attributes."""
    import re
    start = text.index(f"  func.func @{name}(")
    end = text.index("\n  }", start)
    return re.sub(r' loc\(.*\)$', "", text[start:end], flags=re.M)


@pytest.mark.parametrize("extra", ["", "  dropout: 0.2\n  drop_path: 0.1\n  use_ema: true\n", "  grad_accum_steps: 2\n"])
def test_the_train_functions_are_the_net_lowered_at_train_res(tmp_path, extra):
    """Under train_res 4 the training functions are exactly those of the same spec written for a
    4×4 input (masks and accumulation included), and @forward that of the 8×8 spec."""
    mobile = (SPECS / "digits_mobile.yaml").read_text().replace("  seed: 0\n", "  seed: 0\n" + extra)
    split = load_spec(_spec(tmp_path, mobile.replace("  seed: 0\n", "  seed: 0\n  train_res: 4\n"), "split.yaml"))
    small = load_spec(_spec(tmp_path, mobile.replace("height: 8, width: 8", "height: 4, width: 4"), "small.yaml"))
    big = load_spec(_spec(tmp_path, mobile, "big.yaml"))
    text = lower(infer(split))
    names = ["grad_step", "apply_step"] if "grad_accum" in extra else ["train_step"]
    for name in names:
        assert _body(text, name) == _body(lower(infer(small)), name)
    assert _body(text, "forward") == _body(lower(infer(big)), "forward")
    assert [m.value.type for m in abi(infer(split)).masks] == [m.value.type for m in abi(infer(small)).masks]
