"""The update-side recipe knobs through `lmc train` on the embedded digits data: each trains
(loss falls), the checkpoint carries every state the knob adds (EMA weights, SWA/SWAG means
and deviations, gradient accumulators mid-cycle), a run stopped mid-way and resumed ends bit
for bit where an uninterrupted run does, and `lmc eval` scores what the run scored."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("iree.runtime")

from lmc.cli import app  # noqa: E402

pytestmark = pytest.mark.iree
MLP = Path(__file__).resolve().parents[1] / "specs" / "digits_mlp.yaml"
STOP = 50        # epoch 3 of 3 (22 steps each), past one SWA snapshot; 50 % 3 ≠ 0: mid-cycle

KNOBS = {
    "ema": ["train.use_ema=true", "train.ema_decay=0.99"],
    "swag": ["train.use_swa=true", "train.swa_start_epoch=1", "train.use_swag=true", "train.swag_k=3",
             "train.swag_samples=4"],
    "accum": ["train.grad_accum_steps=3"],
    "mixup_ls": ["train.use_mixup=true", "train.label_smoothing=0.1"],
    "dropout": ["train.dropout=0.3"],
    "knn_mixup": ["train.use_knn_mixup=true", "train.knn_mixup_alpha=0.4"],
    "clip_head_rmsprop": ["train.grad_clip_norm=1.0", "train.head_lr_mult=3", "train.optimizer=rmsprop",
                          "train.use_adam=false", "train.momentum=0.9", "train.learning_rate=0.001"],
    "ema_swa_accum": ["train.use_ema=true", "train.ema_decay=0.9", "train.use_swa=true",
                      "train.swa_start_epoch=1", "train.grad_accum_steps=3"],
}


def lmc(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, r.output


def _sets(knob):
    return [a for s in KNOBS[knob] for a in ("--set", s)]


def _ckpt(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files if k != "__lmc__"}, json.loads(str(f["__lmc__"]))


def _evals(run):
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "eval"]


@pytest.mark.parametrize("knob", sorted(KNOBS))
def test_knob_trains_checkpoints_and_resumes_exactly(tmp_path, knob):
    full, part = tmp_path / "full", tmp_path / "part"
    code, out = lmc("train", MLP, "--epochs", 3, *_sets(knob), "--out", full)
    assert code == 0, out
    code, out = lmc("train", MLP, "--epochs", 3, *_sets(knob), "--out", part, "--max-steps", STOP)
    assert code == 0, out
    mid, mmeta = _ckpt(part / "last.npz")
    assert mmeta["step"] == STOP
    code, out = lmc("train", MLP, "--epochs", 3, *_sets(knob), "--out", part, "--resume")
    assert code == 0, out
    a, ameta = _ckpt(full / "last.npz")
    b, _ = _ckpt(part / "last.npz")
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), f"{knob}: {k} differs after resume"
    # the state each knob adds is in the checkpoint (and moved)
    regions = set(ameta["regions"])
    on = " ".join(KNOBS[knob])
    assert ("ema" in regions) == ("use_ema" in on)
    assert ("swa" in regions) == ("use_swa" in on) and ("swag_dev" in regions) == ("use_swag" in on)
    assert ("grad_acc" in regions) == ("grad_accum" in on)
    w = "00.dense.weight"
    if "ema" in regions:
        assert not np.array_equal(a[f"ema.{w}"], a[w])
    if "swag_dev" in regions:
        assert a[f"swag_dev.{w}"].shape == (2,) + a[w].shape            # snapshots after epochs 2 and 3
        assert ameta["swa_n"] == 2
    if "grad_acc" in regions:
        assert any(mid[f"grad_acc.{w}"].ravel()), "the stop was mid-cycle: the accumulators hold gradients"
        assert not a[f"grad_acc.{w}"].any()                             # the last cycle was applied
    # the run learned, and lmc eval scores what its final eval scored
    ev = _evals(full)[-1]
    assert ev["top1"] > 0.5, ev
    assert ev["region"] == ameta["eval_region"] == (
        "ema" if "use_ema" in on else "swag" if "use_swag" in on else "swa" if "use_swa" in on else "live")
    r = CliRunner().invoke(app, ["eval", str(MLP), "--init", str(full / "last.npz"), "--json", *_sets(knob)])
    assert r.exit_code == 0, r.output
    scored = json.loads(r.stdout.strip().splitlines()[-1])
    assert scored["region"] == ev["region"] and scored["top1"] == ev["top1"]


def test_eval_region_picks_the_weights(tmp_path):
    run = tmp_path / "r"
    code, out = lmc("train", MLP, "--epochs", 2, "--set", "train.use_ema=true", "--set", "train.ema_decay=0.9",
                    "--out", run)
    assert code == 0, out
    res = {}
    for region in ("live", "ema"):
        r = CliRunner().invoke(app, ["eval", str(MLP), "--init", str(run / "last.npz"), "--region", region, "--json"])
        assert r.exit_code == 0, r.output
        res[region] = json.loads(r.stdout.strip().splitlines()[-1])
    evs = _evals(run)
    assert res["ema"]["top1"] == evs[-1]["top1"] and evs[-1]["region"] == "ema"
    r = CliRunner().invoke(app, ["eval", str(MLP), "--init", str(run / "last.npz"), "--region", "swa"])
    assert r.exit_code == 2 and "has no swa weights" in r.output
    r = CliRunner().invoke(app, ["eval", str(MLP), "--init", str(run / "last.npz"), "--region", "best"])
    assert r.exit_code == 2 and "--region 'best': expected one of auto, live, ema, swa, swag" in r.output


def _events(logdir):
    """(tag, step, value) of every scalar in the TFRecord event files under logdir, read with
    the Event protobuf (records: u64 length, u32 crc, payload, u32 crc)."""
    import struct
    from tensorboardX.proto.event_pb2 import Event
    out, purges = [], []
    for f in sorted(Path(logdir).glob("events.out.tfevents.*")):
        raw = f.read_bytes()
        i = 0
        while i < len(raw):
            (n,) = struct.unpack("<Q", raw[i:i + 8])
            ev = Event.FromString(raw[i + 12:i + 12 + n])
            i += 12 + n + 4
            if ev.HasField("file_version") and ev.step:
                purges.append(ev.step)
            for v in ev.summary.value:
                out.append((v.tag, ev.step, v.simple_value))
    return out, purges


def test_tensorboard_mirrors_the_metrics(tmp_path):
    pytest.importorskip("tensorboardX")
    run, tb = tmp_path / "r", tmp_path / "tb"
    code, out = lmc("train", MLP, "--epochs", 2, "--out", run, "--tensorboard", tb, "--log-every", 5)
    assert code == 0, out
    scalars, _ = _events(tb)
    recs = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in recs if r["kind"] == "step"]
    tb_loss = [(s, v) for t, s, v in scalars if t == "train/loss"]
    assert [s for s, _ in tb_loss] == [r["step"] for r in steps]
    np.testing.assert_allclose([v for _, v in tb_loss], [r["loss"] for r in steps], rtol=1e-6)
    ev = [r for r in recs if r["kind"] == "eval"][-1]
    assert ("eval/top1", ev["step"], pytest.approx(ev["top1"])) in [(t, s, v) for t, s, v in scalars]
    assert {t for t, _, _ in scalars} >= {"train/lr", "train/acc", "train/images_per_s", "epoch/loss", "eval/top1_lo"}
    # a resumed run purges what was logged after its checkpoint (TensorBoard drops those events)
    code, out = lmc("train", MLP, "--epochs", 3, "--out", run, "--resume", "--tensorboard", tb)
    assert code == 0, out
    _, purges = _events(tb)
    assert purges == [json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["steps_per_epoch"] * 2 + 1]


DEIT = MLP.parent / "digits_resnet_deit.yaml"


def test_deit_recipe_resumes_bit_exactly(tmp_path):
    """The whole data recipe on (mixing, RandAugment, erasing, repeated aug, EMA, smoothing):
    a run killed mid-epoch and resumed ends bit-identical to the uninterrupted one."""
    full, part = tmp_path / "full", tmp_path / "part"
    code, out = lmc("train", DEIT, "--epochs", 2, "--out", full)
    assert code == 0, out
    code, out = lmc("train", DEIT, "--epochs", 2, "--out", part, "--max-steps", 31)
    assert code == 0, out
    code, out = lmc("train", DEIT, "--epochs", 2, "--out", part, "--resume")
    assert code == 0, out
    a, _ = _ckpt(full / "last.npz")
    b, _ = _ckpt(part / "last.npz")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_deit_recipe_reaches_98_percent(tmp_path):
    code, out = lmc("train", DEIT, "--out", tmp_path / "r")
    assert code == 0, out
    assert _evals(tmp_path / "r")[-1]["top1"] >= 0.98
