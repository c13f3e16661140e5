"""Labels other than class ids: the npz label ABIs (per-pixel masks, float targets, YOLO targets
with their mask), the embedded digits_seg / digits_denoise sets, the segmentation and regression
metrics (lmc/evaluate/metrics.py), the refusal of data whose labels do not fit the train step, and (iree)
a segmentation run end to end: loss falls, mIoU in the JSONL, `lmc eval --json`, `lmc plot`."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lmc.spec.config import LossKind
from lmc.data import load_dataset
from lmc.data.dataset import Dataset
from lmc.core.errors import DataError, NotImplementedKind
from lmc.losses import BOXES, CLASS, FLOAT, MASK, loss_for
from lmc.evaluate.metrics import RegressionResult, SegResult
from lmc.core.types import f32, i32


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


# ---------------------------------------------------------------- npz label ABIs


def test_npz_masks_floats_and_yolo_targets(tmp_path):
    x = np.random.default_rng(0).random((10, 1, 4, 4), dtype=np.float32)
    ds = load_dataset("npz", _npz(tmp_path / "m.npz", x=x, y=(x[:, 0] > 0.5).astype(np.uint8) * 2), (1, 4, 4), 3)
    assert ds.label_format == MASK and ds.y_train.shape == (9, 4, 4) and ds.y_train.dtype == np.int32
    assert set(np.unique(ds.y_train)) <= {0, 2}
    ds = load_dataset("npz", _npz(tmp_path / "f.npz", x=x, y=1 - x), (1, 4, 4), None)
    assert ds.label_format == FLOAT and ds.y_val.shape == (1, 1, 4, 4)
    t = np.random.default_rng(1).random((10, 6, 2, 2), dtype=np.float32)
    m = (np.arange(40).reshape(10, 2, 2) % 3 == 0).astype(np.float32)
    ds = load_dataset("npz", _npz(tmp_path / "y.npz", x=x, y=t, mask=m, x_val=x[:2], y_val=t[:2], mask_val=m[:2]),
                      (1, 4, 4), None)
    assert ds.label_format == BOXES and ds.y_train.shape == (10, 7, 2, 2)
    np.testing.assert_array_equal(ds.y_train[:, :6], t)
    np.testing.assert_array_equal(ds.y_train[:, 6], m)          # the mask rides as the last channel


@pytest.mark.parametrize("arrays, words", [
    (dict(y=np.zeros((10, 4), int)), ["'y' has shape (10, 4)", "[10, H, W], one per pixel"]),
    (dict(y=np.zeros((10, 6, 2, 2), np.float32), mask=np.zeros((10, 3, 3))), ["'mask' has shape (10, 3, 3)", "mask [N, gH, gW]"]),
    (dict(y=np.zeros((10, 4, 4), int), x_val=np.zeros((2, 1, 4, 4), np.float32), y_val=np.zeros(2, int)),
     ["'y_val' (class ids [2]) does not match 'y' (mask [10, 4, 4])"]),
    (dict(y=np.zeros((9, 1, 4, 4), np.float32)), ["'y' has 9 rows; expected 10"]),
])
def test_npz_bad_labels_name_the_file(tmp_path, arrays, words):
    p = _npz(tmp_path / "bad.npz", x=np.zeros((10, 1, 4, 4), np.float32), **arrays)
    with pytest.raises(DataError) as e:
        load_dataset("npz", p, (1, 4, 4), None)
    assert str(p) in e.value.message and all(w in e.value.message for w in words), e.value.message


# ---------------------------------------------------------------- embedded sets


def test_digits_seg_is_fixed_and_labels_the_ink():
    a = load_dataset("digits_seg", None, (1, 32, 32), 11)
    b = load_dataset("digits_seg", None, (1, 32, 32), 11)
    assert a.label_format == MASK and a.x_train.shape == (3000, 1, 32, 32) and a.y_val.shape == (500, 32, 32)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    from lmc.data.digits_seg import INK
    assert (a.x_train[:, 0][a.y_train > 0] >= INK).all()
    counts = np.bincount(a.y_train.ravel(), minlength=11)
    assert counts.argmax() == 0 and (counts[1:] > 0.5 * counts[1:].mean()).all()     # every digit present
    d = load_dataset("digits_denoise", None, (1, 16, 16), None)
    assert d.label_format == FLOAT and d.y_train.shape == d.x_train.shape == (1437, 1, 16, 16)
    assert 0.05 < float(np.mean((d.x_val - d.y_val) ** 2)) < 0.09     # N(0, 0.3²) noise, clipped


# ---------------------------------------------------------------- metrics


def test_seg_metrics_from_the_confusion_matrix():
    r = SegResult(3, {"FG": (1, 2), "ABSENT": (2,)})
    y = np.array([[[0, 0, 1, 1]]])                       # [B=1, H=1, W=4]
    pred = np.array([0, 1, 1, 0])
    logits = np.eye(3)[pred].T[None, :, None, :]          # [1, 3, 1, 4], argmax = pred
    r.add(logits, y)
    # class 0: TP 1, row 2, col 2 → 1/3; class 1: TP 1, row 2, col 2 → 1/3; class 2 absent: left out
    assert r.iou() == [pytest.approx(1 / 3), pytest.approx(1 / 3), None]
    assert r.miou() == pytest.approx(1 / 3) and r.pixel_acc() == 0.5
    d = r.as_dict()
    assert d["dice_FG"] == pytest.approx(2 * 1 / (2 + 2)) and d["dice_ABSENT"] == 1.0
    assert "mIoU 0.3333" in r.describe()


def test_psnr():
    r = RegressionResult()
    r.add(np.full((2, 1, 2, 2), 0.1, np.float32), np.zeros((2, 1, 2, 2), np.float32))
    assert r.mse() == pytest.approx(0.01) and r.psnr() == pytest.approx(20.0)


# ---------------------------------------------------------------- labels that do not fit the step


def _ds(y, fmt):
    return Dataset("d.npz", np.zeros((len(y), 1, 4, 4), np.float32), y, y, y, 3, label_format=fmt,
                   sources={"y_train": "d.npz"})


def test_masks_at_another_resolution_are_refused():
    loss = loss_for(LossKind("per_pixel_ce"))
    fit = lambda y: loss.fit_labels(y, 3, None)      # noqa: E731
    loss.check_data(_ds(np.zeros((4, 4, 4), np.int32), MASK), i32(2, 4, 4), fit)      # fits
    with pytest.raises(DataError) as e:
        loss.check_data(_ds(np.zeros((4, 8, 8), np.int32), MASK), i32(2, 4, 4), fit)
    assert e.value.message.startswith("d.npz: the labels are mask of shape [8, 8] per example") and "[4, 4]" in e.value.message
    with pytest.raises(DataError, match="needs per-pixel labels"):
        fit(np.zeros(4, np.int32))
    mse = loss_for(LossKind("float_target_mse"))
    with pytest.raises(DataError, match="needs float32 targets"):
        mse.fit_labels(np.zeros(4, np.int32), 3, None)


def test_augmenting_images_whose_labels_live_in_image_space_is_refused():
    from lmc.spec.config import TrainConfig
    cfg = TrainConfig(learning_rate=0.1, batch_size=2, epochs=1, augment=True, loss_kind=LossKind("per_pixel_ce"))
    loss = loss_for(LossKind("per_pixel_ce"), cfg)
    loss.check_data(_ds(np.zeros((4, 4, 4), np.int32), MASK), i32(2, 4, 4), lambda y: y)   # paired flips
    erasing = TrainConfig(learning_rate=0.1, batch_size=2, epochs=1, random_erasing=True,
                          loss_kind=LossKind("per_pixel_ce"))
    with pytest.raises(NotImplementedKind, match="not implemented yet: train.random_erasing with mask labels"):
        loss_for(LossKind("per_pixel_ce"), erasing).check_data(_ds(np.zeros((4, 4, 4), np.int32), MASK),
                                                               i32(2, 4, 4), lambda y: y)
    yolo = TrainConfig(learning_rate=0.1, batch_size=2, epochs=1, augment=True, use_yolov1=True)
    # boxes follow their image through HSV jitter + paired flips (the box-label base pack)
    loss_for(LossKind("yolov1_masked"), yolo).check_data(_ds(np.zeros((4, 14, 2, 2), np.float32), BOXES),
                                                         f32(2, 14, 2, 2), lambda y: y)
    yolo_erase = TrainConfig(learning_rate=0.1, batch_size=2, epochs=1, random_erasing=0.5, use_yolov1=True)
    with pytest.raises(NotImplementedKind, match="not implemented yet: train.random_erasing with boxes labels"):
        loss_for(LossKind("yolov1_masked"), yolo_erase).check_data(_ds(np.zeros((4, 14, 2, 2), np.float32), BOXES),
                                                                   f32(2, 14, 2, 2), lambda y: y)
    loss_for(LossKind("class_ce"), cfg).check_data(_ds(np.zeros(4, np.int32), CLASS), i32(2), lambda y: y)


# ---------------------------------------------------------------- end to end (iree)

SEG_SPEC = """name: seg_tiny
input: {channels: 1, height: 6, width: 6}
dataset: {kind: npz, path: %s}
layers:
  - conv_bn: {ic: 1, oc: 8, k_size: 3}
  - conv2d: {ic: 8, oc: 3, k_size: 1, act: identity}
train: {loss_kind: per_pixel_ce, learning_rate: 0.05, batch_size: 16, epochs: 4, use_adam: true, seed: 0, bn_momentum: 0.5,
        eval_every_n_epochs: 2}
"""


@pytest.mark.iree
def test_segmentation_trains_and_reports_miou(tmp_path):
    pytest.importorskip("iree.runtime")
    from typer.testing import CliRunner
    from lmc.cli import app
    rng = np.random.default_rng(0)
    x = rng.random((160, 1, 6, 6), dtype=np.float32)
    y = np.digitize(x[:, 0], [0.33, 0.66]).astype(np.int32)          # 3 classes by brightness
    data = _npz(tmp_path / "seg.npz", x=x, y=y)
    spec = tmp_path / "seg.yaml"
    spec.write_text(SEG_SPEC % data)
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", str(spec), "--out", str(run)])
    assert r.exit_code == 0, r.output
    recs = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    loss = [q["loss"] for q in recs if q["kind"] == "step"]
    assert np.isfinite(loss).all() and np.mean(loss[-3:]) < 0.6 * np.mean(loss[:3])
    evals = [q for q in recs if q["kind"] == "eval"]
    assert len(evals) == 2 and evals[-1]["miou"] > 0.6 and len(evals[-1]["iou"]) == 3 and evals[-1]["n"] == 16
    r = CliRunner().invoke(app, ["eval", str(spec), "--init", str(run / "last.npz"), "--json"])
    assert r.exit_code == 0, r.output
    scored = json.loads(r.stdout.strip().splitlines()[-1])
    assert scored["miou"] == pytest.approx(evals[-1]["miou"]) and scored["pixel_acc"] == evals[-1]["pixel_acc"]
    r = CliRunner().invoke(app, ["plot", str(run)])
    assert r.exit_code == 0 and (run / "curves.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------- detection metrics


def test_nms_keeps_the_best_of_overlapping_boxes():
    from lmc.evaluate.metrics import nms
    boxes = np.array([[0, 0, 1, 1], [0.05, 0, 1.05, 1], [2, 2, 3, 3]], float)
    assert list(nms(boxes, np.array([0.5, 0.9, 0.1]), 0.5)) == [1, 2]
    assert list(nms(boxes, np.array([0.5, 0.9, 0.1]), 0.99)) == [1, 0, 2]


def test_map_of_perfect_and_of_wrong_class_predictions():
    pytest.importorskip("pycocotools")
    from lmc.data.digits_seg import load_det
    from lmc.evaluate.metrics import DetResult
    ds = load_det()
    t = ds.y_val[:16]
    loss = loss_for(LossKind("yolov1_masked"))
    z = t[:, :20].copy()
    z[:, 10:20] *= 20.0                                # the true class, confidently
    r = DetResult(loss)
    r.add(z, t)
    m50, m = r.maps()
    assert m50 == pytest.approx(1.0) and m == pytest.approx(1.0)
    assert len(r.gts) == 16 and sum(len(g[1]) for g in r.gts) == int(t[:, 20].sum())
    wrong = z.copy()
    wrong[:, 10:20] = np.roll(z[:, 10:20], 1, axis=1)  # every box right, every class wrong
    r = DetResult(loss)
    r.add(wrong, t)
    assert r.maps() == (0.0, 0.0)


def test_digits_det_targets_fit_the_boxes():
    from lmc.data.digits_seg import load_det
    ds = load_det()
    t = ds.y_train[:50]
    m = t[:, 20] > 0.5
    assert ds.label_format == BOXES and t.shape == (50, 21, 8, 8)
    assert (t[:, 4][m] == 1).all() and (t[:, 0:2].transpose(0, 2, 3, 1)[m] >= 0).all()
    assert (t[:, 0:2].transpose(0, 2, 3, 1)[m] < 1).all()              # the centre lies in its cell
    assert (t[:, 10:20].sum(axis=1)[m] == 1).all() and (t[:, 10:20].sum(axis=1)[~m] == 0).all()


# ---------------------------------------------------------------- the reference's .bin sets


def _bin(path, records: list[bytes]):
    path.write_bytes(np.uint32(len(records)).tobytes() + b"".join(records))


def test_pets_and_brats_records(tmp_path):
    rng = np.random.default_rng(0)
    s = 6
    img = [rng.integers(0, 256, 3 * s * s, dtype=np.uint8) for _ in range(3)]
    mask = [rng.integers(0, 3, s * s, dtype=np.uint8) for _ in range(3)]
    for split in ("train", "val"):
        _bin(tmp_path / f"{split}.bin", [i.tobytes() + m.tobytes() for i, m in zip(img, mask)])
    ds = load_dataset("pets", tmp_path, (3, s, s), 3)
    assert ds.label_format == MASK and ds.x_train.shape == (3, 3, s, s) and ds.y_val.shape == (3, s, s)
    np.testing.assert_array_equal(ds.y_train[1].ravel(), mask[1])
    want = (img[2].reshape(3, s, s) / 255.0 - np.array([0.485, 0.456, 0.406])[:, None, None]) / \
        np.array([0.229, 0.224, 0.225])[:, None, None]
    np.testing.assert_allclose(ds.x_train[2], want, rtol=1e-5)
    b = tmp_path / "brats"
    b.mkdir()
    vol = [rng.integers(0, 256, 4 * s * s, dtype=np.uint8) for _ in range(2)]
    seg = [rng.integers(0, 4, s * s, dtype=np.uint8) for _ in range(2)]
    for split in ("train", "val"):
        _bin(b / f"{split}.bin", [v.tobytes() + m.tobytes() for v, m in zip(vol, seg)])
    ds = load_dataset("brats224", b, (4, s, s), 4)
    np.testing.assert_allclose(ds.x_val[0].ravel(), (vol[0].astype(float) - 128) * 5 / 127, rtol=1e-6)
    assert set(np.unique(ds.y_train)) <= {0, 1, 2, 3}
    # a truncated file names itself
    (b / "val.bin").write_bytes((b / "val.bin").read_bytes()[:-5])
    with pytest.raises(DataError, match=f"{b / 'val.bin'}: .* do not split into 2 records"):
        load_dataset("brats", b, (4, s, s), 4)


def test_pets_det_records(tmp_path):
    rng = np.random.default_rng(1)
    s = 8
    recs, targets = [], []
    for _ in range(2):
        t = rng.random((30, 7, 7), dtype=np.float32)
        m = (rng.random((7, 7)) < 0.2).astype(np.float32)
        targets.append((t, m))
        label = t.astype("<f4").tobytes() + m.astype("<f4").tobytes() + np.uint32(1).tobytes() + bytes(56 * 20)
        assert len(label) == 7200
        recs.append(rng.integers(0, 256, 3 * s * s, dtype=np.uint8).tobytes() + label)
    for split in ("train", "val"):
        _bin(tmp_path / f"{split}.bin", recs)
    ds = load_dataset("pets_det", tmp_path, (3, s, s), None)
    assert ds.label_format == BOXES and ds.y_train.shape == (2, 31, 7, 7)
    np.testing.assert_array_equal(ds.y_train[1, :30], targets[1][0])
    np.testing.assert_array_equal(ds.y_train[1, 30], targets[1][1])


def test_anchor_targets_decode_to_their_own_boxes():
    pytest.importorskip("pycocotools")
    from lmc.spec.config import TrainConfig
    from lmc.evaluate.metrics import DetResult
    cfg = TrainConfig(learning_rate=0.1, batch_size=2, epochs=1, use_yolov1=True, anchors=((0.5, 0.5), (1.0, 2.0)))
    loss = loss_for(LossKind("yolov1_masked"), cfg)
    rng = np.random.default_rng(3)
    t = np.zeros((4, 2 * 8, 3, 3), np.float32)        # 2 anchors × (5 + 3 classes)
    for k, (aw, ah) in enumerate(((0.5, 0.5), (1.0, 2.0))):
        o = 8 * k
        m = rng.random((4, 3, 3)) < 0.3
        t[:, o + 4] = m
        t[:, o:o + 2] = rng.uniform(0.1, 0.9, (4, 2, 3, 3))
        t[:, o + 2] = aw * rng.uniform(0.5, 1.5, (4, 3, 3))
        t[:, o + 3] = ah * rng.uniform(0.5, 1.5, (4, 3, 3))
        t[:, o + 5:o + 8] = rng.integers(0, 3, (4, 3, 3))[:, None] == np.arange(3)[None, :, None, None]
    # the logits that decode exactly to the targets: σ⁻¹ of the offsets, log(w/a), confident class
    z = t.copy()
    for k, (aw, ah) in enumerate(((0.5, 0.5), (1.0, 2.0))):
        o = 8 * k
        z[:, o:o + 2] = np.log(t[:, o:o + 2] / (1 - t[:, o:o + 2]))
        z[:, o + 2], z[:, o + 3] = np.log(t[:, o + 2] / aw), np.log(t[:, o + 3] / ah)
        z[:, o + 4] = np.where(t[:, o + 4] > 0, 8.0, -8.0)
        z[:, o + 5:o + 8] = 20 * t[:, o + 5:o + 8]
    r = DetResult(loss)
    r.add(z, t)
    assert sum(len(g[1]) for g in r.gts) == int(t[:, [4, 12]].sum()) > 0
    assert r.maps()[0] == pytest.approx(1.0)


def test_masks_flip_with_their_images():
    from lmc.data import Batcher
    rng = np.random.default_rng(0)
    x = rng.random((8, 1, 3, 4), dtype=np.float32)
    y = (x[:, 0] > 0.5).astype(np.int32) + 2 * (np.arange(4) == 0)      # column 0 marked in the mask
    ds = Dataset("d", x, y, x, y, 3, label_format=MASK)
    xb, yb = Batcher(ds, 8, seed=1, shuffle=False, augment=True).batch(0, 0)
    flipped = [not np.array_equal(xb[i], x[i]) for i in range(8)]
    assert 0 < sum(flipped) < 8
    for i in range(8):                 # the mask moved exactly as its image did
        want = y[i][:, ::-1] if flipped[i] else y[i]
        np.testing.assert_array_equal(yb[i], want)
        np.testing.assert_array_equal(xb[i], x[i][:, :, ::-1] if flipped[i] else x[i])
