"""The FPN detector's data path (lmc/losses/boxes.py): grid targets ↔ box lists, the multi-scale
encoding (its decode by the loss's ground truth is the identity on the boxes), box-aware affine
augmentation (`fpn_affine_*`: the boxes follow the image, Pillow's affine map checked on a drawn
rectangle; the pixel and area thresholds drop boxes), and the recipe rules."""
from __future__ import annotations

import numpy as np
import pytest

from lmc.check import load_net
from lmc.losses.boxes import BoxAffine, encode_fpn, grid_to_list, shape_iou, warp
from lmc.core.errors import LmcError
from lmc.graph.infer import infer
from lmc.spec.netspec import load_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FPN = ROOT / "specs" / "digits_fpn_det.yaml"


def _loss(sets=()):
    net = infer(load_spec(FPN, [(s, "--set") for s in sets]))
    from lmc.lower.lowering import abi
    return net, abi(net).loss


def test_grid_targets_to_box_lists_and_back_through_the_loss():
    from lmc.data import load_dataset
    ds = load_dataset("digits_det", None, (1, 64, 64), None, seed=0)
    y = ds.y_val[:16]
    boxes = grid_to_list(y)
    net, loss = _loss()
    want = loss.ground_truth(y)                      # the single-box grid's own decoding
    got = loss.ground_truth(boxes)
    for (wb, wc), (gb, gc) in zip(want, got):
        np.testing.assert_allclose(gb, wb, atol=1e-6)
        assert np.array_equal(gc, wc)
    flat = loss.fit_labels(y, net.num_classes, net.spec.train)
    assert flat.shape == (16, net.output.type.dims[1])
    enc = loss.ground_truth(flat)                    # the encoded target, decoded per scale
    for (wb, wc), (eb, ec) in zip(want, enc):
        key = np.lexsort(wb.T)
        ekey = np.lexsort(eb.T)
        np.testing.assert_allclose(eb[ekey], wb[key], atol=1e-5)
        assert np.array_equal(ec[ekey], wc[key])


def test_assignment_by_shape_iou_and_collisions():
    slots = [(0, 2 * 6 * 2 * 2, 2, ((0.2, 0.2), (0.6, 0.6)), 6), (48, 6, 1, ((1.0, 1.0),), 6)]
    boxes = np.full((1, 4, 5), -1.0, np.float32)
    boxes[0, 0] = (0, 0.3, 0.3, 0.21, 0.19)          # small: scale 0, anchor 0
    boxes[0, 1] = (0, 0.6, 0.6, 0.9, 0.95)           # large: scale 1
    boxes[0, 2] = (0, 0.31, 0.32, 0.2, 0.2)          # same cell, same best slot → next best (anchor 1)
    out, dropped = encode_fpn(boxes, slots, 1)
    assert dropped == 0
    t = out[0]

    def obj(off, a, i, j, g):
        return t[off + ((a * 6 + 4) * g + i) * g + j]
    assert obj(0, 0, 0, 0, 2) == 1 and obj(0, 1, 0, 0, 2) == 1 and obj(48, 0, 0, 0, 1) == 1
    assert t.sum() == pytest.approx(3 * 2 + sum(b[3] + b[4] for b in boxes[0, :3]) +
                                    sum(b[1] * g - int(b[1] * g) + b[2] * g - int(b[2] * g)
                                        for b, g in zip(boxes[0, :3], (2, 1, 2))), rel=1e-5)
    assert shape_iou(0.2, 0.2, 0.2, 0.2) == 1.0
    boxes[0, 3] = (0, 0.3, 0.3, 0.2, 0.2)            # a fourth in the same cell: every slot taken
    boxes[0, 1] = (0, 0.4, 0.4, 0.5, 0.5)
    _, dropped = encode_fpn(boxes, slots, 1)
    assert dropped == 1


def test_affine_moves_boxes_with_the_image():
    img = np.zeros((1, 64, 64), np.float32)
    img[0, 20:30, 16:40] = 1.0                       # a rectangle: x 16..40, y 20..30
    box = np.array([[0, 28 / 64, 25 / 64, 24 / 64, 10 / 64]], np.float32)
    aff = BoxAffine(0.5, 0.2, 1.0, 1.0, 0.1)
    for s, tx, ty in [(1.3, 0.1, -0.05), (0.7, -0.1, 0.2), (1.0, 0.0, 0.0)]:
        out = warp(img, s, tx, ty)
        b = aff.move(box, s, tx, ty, 64, 64)[0]
        ys, xs = np.nonzero(out[0] > 0.5)            # the warped rectangle's extent (Pillow)
        assert abs(xs.min() - (b[1] - b[3] / 2) * 64) <= 1.0 and abs(xs.max() + 1 - (b[1] + b[3] / 2) * 64) <= 1.0
        assert abs(ys.min() - (b[2] - b[4] / 2) * 64) <= 1.0 and abs(ys.max() + 1 - (b[2] + b[4] / 2) * 64) <= 1.0
    np.testing.assert_allclose(warp(img, 1.0, 0.0, 0.0), img, atol=1e-6)


def test_thresholds_drop_boxes():
    aff = BoxAffine(0.5, 0.5, 1.0, 3.0, 0.5)
    b = np.full((3, 5), -1.0, np.float32)
    b[0] = (1, 0.5, 0.5, 0.2, 0.2)                   # stays inside
    b[1] = (2, 0.95, 0.5, 0.2, 0.2)                  # pushed mostly out of the frame: area < 0.5 kept
    b[2] = (3, 0.3, 0.3, 0.05, 0.2)                  # 3.2 px wide × 0.9 → under 3 px
    out = aff.move(b, 0.9, 0.1, 0.0, 64, 64)
    assert list(out[:, 0]) == [1.0, -1.0, -1.0]
    assert (out[0, 1:] >= 0).all() and out[0, 3] == pytest.approx(0.18, abs=1e-6)


def test_prob_zero_is_no_change_and_draws_are_seeded():
    from lmc.data import load_dataset
    ds = load_dataset("digits_det", None, (1, 64, 64), None, seed=0)
    x, y = ds.x_train[:8].copy(), ds.y_train[:8]
    aff = BoxAffine(0.3, 0.1, 1.0, 1.0, 0.1)
    a1 = aff(x, y, np.random.default_rng(5))
    a2 = aff(x, y, np.random.default_rng(5))
    assert np.array_equal(a1[0], a2[0]) and np.array_equal(a1[1], a2[1])
    assert not np.array_equal(a1[0], x)
    none = BoxAffine(0.3, 0.1, 0.0, 1.0, 0.1)(x, y, np.random.default_rng(5))
    assert np.array_equal(none[0], x) and np.array_equal(none[1], grid_to_list(y))


@pytest.mark.parametrize("spec,sets,msg", [
    ("yolo_digits", ["train.fpn_affine_prob=0.5", "train.fpn_affine_scale=0.2"], "fpn_affine_prob moves the boxes"),
    ("digits_fpn_det", ["train.fpn_affine_prob=0.5"], "would change nothing"),
    ("digits_fpn_det", ["train.fpn_affine_scale=0.2"], "fpn_affine_scale has no effect without fpn_affine_prob"),
    ("digits_mlp", ["train.fpn_affine_prob=0.5", "train.fpn_affine_scale=0.2"], "is a YOLOv1-loss option"),
])
def test_rules(spec, sets, msg):
    with pytest.raises(LmcError, match=msg):
        load_net(ROOT / "specs" / f"{spec}.yaml", [(s, "--set") for s in sets])     # load, infer, check


@pytest.mark.iree
def test_fpn_detector_trains_with_box_aware_affine(tmp_path):
    """A few steps of specs/digits_fpn_det.yaml with fpn_affine on: finite, falling loss, scored
    by mAP (pycocotools) on the validation boxes."""
    import json
    from typer.testing import CliRunner
    from lmc.cli import app
    r = CliRunner().invoke(app, ["train", str(FPN), "--max-steps", "30", "--out", str(tmp_path / "run"),
                                 "--set", "train.fpn_affine_prob=0.5", "--set", "train.fpn_affine_scale=0.3",
                                 "--set", "train.fpn_affine_translate=0.1", "--log-every", "5"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in recs if x["kind"] == "step"]
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    ev = [x for x in recs if x["kind"] == "eval"][-1]
    assert ev["n"] == 500 and "map50" in ev


def test_the_box_label_base_pack_flips_boxes_with_their_image():
    """augment on box labels (the Lean kit's FPN base pack): HSV jitter + horizontal flip, the
    boxes mirrored with the image — in the dataset's grid form and in box-list form alike, so
    every detection loss's label fitting reads the moved boxes.  Checked on digits_det: a flipped
    image's boxes decode to the mirrored boxes of the original, and the pixels inside each
    mirrored box are the original box's, mirrored (up to the value jitter)."""
    from lmc.data import Batcher, load_dataset
    from lmc.data.augment import boxes_hflip, hsv_jitter
    ds = load_dataset("digits_det", None, (1, 64, 64), 10)
    x, y = ds.x_train[:16].copy(), ds.y_train[:16].copy()
    rng = np.random.default_rng(3)
    xf, yf = boxes_hflip(x, y, np.random.default_rng(3))
    flip = np.random.default_rng(3).random(16) < 0.5
    assert flip.any() and not flip.all()
    before, after = grid_to_list(y), grid_to_list(yf)
    for k in range(16):
        b = before[k][before[k][:, 0] >= 0]
        a = after[k][after[k][:, 0] >= 0]
        want = b.copy()
        if flip[k]:
            want[:, 1] = 1 - b[:, 1]
            np.testing.assert_array_equal(xf[k], x[k][:, :, ::-1])
        key = lambda r: (r[0], round(float(r[1]), 4), round(float(r[2]), 4))
        np.testing.assert_allclose(sorted(a.tolist(), key=key), sorted(want.tolist(), key=key), atol=1e-5)
    lf, lyf = boxes_hflip(x, before, np.random.default_rng(3))       # box lists: cx → 1 − cx
    np.testing.assert_allclose(lyf[flip, :, 1][before[flip, :, 0] >= 0], 1 - before[flip, :, 1][before[flip, :, 0] >= 0])
    # HSV on one channel is a value gain in [0.6, 1.4] per image (in [0, 1], clipped)
    j = hsv_jitter(np.full((4, 1, 2, 2), 0.5, np.float32), rng)
    assert ((j >= 0.3 - 1e-6) & (j <= 0.7 + 1e-6)).all() and len(np.unique(j)) == 4
    rgb = np.random.default_rng(1).random((3, 3, 4, 4)).astype(np.float32)     # zero gains: the identity
    np.testing.assert_allclose(hsv_jitter(rgb, rng, gains=(0, 0, 0)), rgb, atol=1e-5)
    b = Batcher(ds, 16, seed=0, augment=True)
    xb, yb = b.batch(0, 0)
    assert xb.shape == (16, 1, 64, 64) and yb.shape == ds.y_train[:16].shape
