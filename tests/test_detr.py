"""DETR's set loss (lmc/losses/detr_set.py) around the oracle (test_oracle.py checks its value
and hand-derived gradient against JAX): the Hungarian matching against a brute-force search over
every assignment, the box targets regrouped per object and back (eval's ground truth), the
decoding, the recipe rules and data refusals, and [iree] a few training steps of a tiny DETR on
the embedded digits_det mosaics, whose loss falls (the trainer's matching hook in use)."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from lmc.check import load_net
from lmc.spec.config import LossKind
from lmc.core.errors import DataError, SpecError
from lmc.graph.infer import infer
from lmc.losses import loss_for
from lmc.losses.detr_set import EOS_COEF, giou, match, match_cost
from lmc.spec.netspec import load_spec
from lmc.core.types import f32

NC, Q = 3, 5


def _loss(q=Q, nc=NC):
    loss = loss_for(LossKind("detr_set"))
    loss.labels(f32(2, q, nc + 5))
    return loss


def _objects(rng, n, nc=NC):
    t = np.zeros((n, 6), np.float32)
    t[:, 0] = rng.integers(0, nc, n)
    t[:, 1:3] = rng.uniform(0.2, 0.8, (n, 2))
    t[:, 3:5] = rng.uniform(0.1, 0.5, (n, 2))
    t[:, 5] = 1
    return t


@pytest.mark.parametrize("seed", range(8))
def test_matching_is_the_cheapest_assignment(seed):
    """linear_sum_assignment's assignment costs what the best of every injective map of the
    objects to the queries costs (brute force), and each object lands on its query."""
    rng = np.random.default_rng(seed)
    b, n_obj = 3, [0, 2, 4]
    z = rng.standard_normal((b, Q, NC + 5)).astype(np.float32)
    z[..., NC + 1:] = rng.uniform(0.05, 0.95, (b, Q, 4))
    y = np.zeros((b, Q, 6), np.float32)
    y[..., 0] = NC
    for i, n in enumerate(n_obj):
        y[i, :n] = _objects(rng, n)
    out = match(z, y, NC)
    for i, n in enumerate(n_obj):
        assert out[i, :, 5].sum() == n and (out[i, out[i, :, 5] == 0, 0] == NC).all()
        if n == 0:
            continue
        cost = match_cost(z[i], y[i, :n])
        best = min(sum(cost[q, j] for j, q in enumerate(perm)) for perm in itertools.permutations(range(Q), n))
        got = 0.0
        for j in range(n):        # object j sits, unchanged, on exactly one query
            rows = np.nonzero((out[i] == y[i, j]).all(axis=1))[0]
            assert len(rows) == 1
            got += cost[rows[0], j]
        assert got == pytest.approx(best, rel=1e-9, abs=1e-12)


def test_the_cost_prefers_the_query_on_the_object():
    """A query predicting the object's class and box beats one elsewhere (weights 1, 5, 2)."""
    obj = np.array([[1, 0.5, 0.5, 0.2, 0.2, 1]], np.float32)
    z = np.zeros((2, NC + 5), np.float32)
    z[0, 1], z[0, NC + 1:] = 5.0, [0.5, 0.5, 0.2, 0.2]
    z[1, 1], z[1, NC + 1:] = 5.0, [0.2, 0.2, 0.2, 0.2]
    c = match_cost(z, obj)
    assert c[0, 0] < c[1, 0]
    assert match_cost(z[:1], obj)[0, 0] == pytest.approx(-np.exp(5) / (np.exp(5) + NC) - 2.0)


def test_giou_of_known_boxes():
    b = np.array([0.5, 0.5, 0.2, 0.2])
    assert giou(np, b, b) == pytest.approx(1.0)
    # disjoint unit squares side by side with a gap of 1: I = 0, U = 2, C = 3 → −1/3
    assert giou(np, np.array([0.5, 0.5, 1, 1]), np.array([2.5, 0.5, 1, 1])) == pytest.approx(-1 / 3)


def test_reference_class_term_is_the_weighted_mean():
    """With perfect boxes the loss is PyTorch's weighted-mean CE (no-object weighted EOS_COEF)."""
    loss = _loss(q=2)
    z = np.array([[[2.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.2, 0.2], [0.0, 1.0, 0.0, 3.0, 0.1, 0.1, 0.1, 0.1]]])
    t = np.array([[[0, 0.5, 0.5, 0.2, 0.2, 1], [NC, 0, 0, 0, 0, 0]]])
    logp = z[0, :, :NC + 1] - np.log(np.exp(z[0, :, :NC + 1]).sum(axis=1, keepdims=True))
    want = -(logp[0, 0] + EOS_COEF * logp[1, NC]) / (1 + EOS_COEF)
    assert loss.reference(np, z, t) == pytest.approx(want)


def test_box_targets_regroup_per_object_and_back():
    """digits_det's grid targets → per-query labels (objects first) and eval's ground truth in
    corners, the same boxes the YOLO loss reads."""
    from lmc.data.digits_seg import load_det
    ds = load_det()
    t = ds.y_val[:20]
    loss = _loss(q=6, nc=10)
    y = loss.fit_labels(t, 10, None)
    assert y.shape == (20, 6, 6)
    counts = (t[:, 20] > 0.5).sum(axis=(1, 2))
    assert (y[..., 5].sum(axis=1) == counts).all()
    yolo = loss_for(LossKind("yolov1_masked")).ground_truth(t)
    for (boxes, cls), (yb, yc), yi, n in zip(loss.ground_truth(t), yolo, y, counts):
        assert len(cls) == n
        np.testing.assert_allclose(boxes, yb, atol=1e-6)
        assert (cls == yc).all() and (yi[:n, 0] == cls).all() and (yi[n:, 0] == 10).all()


def test_decode_skips_no_object_and_gives_corners():
    loss = _loss(q=2)
    z = np.zeros((1, 2, NC + 5))
    z[0, 0, :NC + 1] = [0, 3, 0, 9]               # "no object" wins, the best real class is 1
    z[0, 0, NC + 1:] = [0.5, 0.4, 0.2, 0.4]
    boxes, scores, classes = loss.decode(z)
    np.testing.assert_allclose(boxes[0, 0], [0.4, 0.2, 0.6, 0.6])
    assert classes[0, 0] == 1 and scores[0, 0] == pytest.approx(np.exp(3) / (np.exp(3) + 2 + np.exp(9)))


TINY = """name: tiny_detr
input: {channels: 1, height: 64, width: 64}
dataset: digits_det
layers:
  - conv2d: {ic: 1, oc: 8, k_size: 3}
  - max_pool: {size: 4, stride: 4}
  - conv2d: {ic: 8, oc: 16, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - patch_embed: {ic: 16, dim: 16, patch_size: 1, n_patches: 64}
  - transformer_decoder: {dim: 16, heads: 2, mlp_dim: 32, n_blocks: 1, n_queries: QUERIES}
  - detr_heads: {dim: 16, n_classes: NCLS}
train: {loss_kind: detr_set, optimizer: adam, learning_rate: 0.002, batch_size: 16, epochs: 1, seed: 0EXTRA}
"""


def _tiny(queries=5, ncls=10, extra=""):
    return TINY.replace("QUERIES", str(queries)).replace("NCLS", str(ncls)).replace("EXTRA", extra)


@pytest.mark.parametrize("extra, field", [(", use_focal: true", "use_focal"), (", use_yolov1: true", "use_yolov1"),
                                          (", label_smoothing: 0.1", "label_smoothing"),
                                          (", use_diou_box: true", "use_diou_box"), (", use_mixup: true", "mixup")])
def test_recipe_rules(extra, field):
    with pytest.raises(SpecError) as e:
        load_net("t.yaml", text=_tiny(extra=extra))
    assert field in str(e.value) and "detr_set" in str(e.value)


def test_data_refusals():
    from lmc.data.digits_seg import load_det
    from lmc.lower.lowering import abi
    ds = load_det()
    for queries, ncls, want in [(3, 10, "an image holds 4 objects, but the net has 3 queries"),
                                (5, 9, "with 9 classes (the net's detr_heads), got [3000, 21, 8, 8]")]:
        a = abi(infer(load_spec("t.yaml", text=_tiny(queries, ncls))))
        with pytest.raises(DataError) as e:
            a.loss.check_data(ds, a.labels, lambda y: a.loss.fit_labels(y, 1, None))
        assert want in str(e.value)
    # class ids are not box targets: refused before anything reads them as grids
    from lmc.data import digits
    a = abi(infer(load_spec("t.yaml", text=_tiny())))
    with pytest.raises(DataError, match=r"reads single-box grid targets .* got \[1437\]"):
        a.loss.check_data(digits.load(), a.labels, lambda y: a.loss.fit_labels(y, 1, None))


@pytest.mark.iree
def test_a_tiny_detr_trains_and_is_scored_by_map(tmp_path, monkeypatch):
    pytest.importorskip("iree.runtime")
    pytest.importorskip("pycocotools")
    from typer.testing import CliRunner
    from lmc.cli import app
    from lmc.losses.detr_set import DetrSet
    calls = []
    real = DetrSet.prepare_labels

    def spy(self, y, predict):           # the trainer's hook: every step, on that batch's predictions
        out = real(self, y, predict)
        calls.append(not np.array_equal(out, y))
        return out
    monkeypatch.setattr(DetrSet, "prepare_labels", spy)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(_tiny())
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", str(spec), "--max-steps", "60", "--out", str(run)])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in recs if x["kind"] == "step"]
    assert len(losses) == 60 and all(np.isfinite(losses))
    assert len(calls) == 60 and any(calls)      # the matching moved objects off their data order
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10]), losses
    (ev,) = [x for x in recs if x["kind"] == "eval"]
    assert ev["n"] == 500 and 0.0 <= ev["map50"] <= 1.0 and 0.0 <= ev["map"] <= ev["map50"]


def test_plot_draws_map():
    from lmc.evaluate.plot import _plot_other_evals

    class Ax:
        labels = []

        def plot(self, x, y, *a, label=None, **k):
            self.labels.append((label, list(y)))
    ax = Ax()
    _plot_other_evals(ax, [{"step": 10, "map50": 0.5, "map": 0.2}, {"step": 20, "map50": 0.6, "map": 0.3}], 10)
    assert ax.labels == [("val mAP@0.5", [50.0, 60.0]), ("val mAP@[.5:.95]", [20.0, 30.0])]
