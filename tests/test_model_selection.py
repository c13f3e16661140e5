"""Model selection [iree]: checkpoint_every_n_epochs keeps numbered snapshots RUN/epoch-N.npz,
train.keep_best keeps the k best checkpoints by a validation metric (best.npz the best),
train.early_stop ends a run at its patience, classifier evals report the validation loss, and
a run stopped mid-way and resumed ends bit for bit as an uninterrupted one with both on."""
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
BPE = 22          # steps per epoch of digits_mlp (1,437 // 64)


def train(*args):
    r = CliRunner().invoke(app, ["train", str(MLP), *map(str, args)])
    assert "Traceback" not in r.output
    return r


def sets(**fields):
    out = []
    for k, v in fields.items():
        out += ["--set", f"train.{k}={json.dumps(v)}"]
    return out


def records(run, kind):
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def tensors(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files if k != "__lmc__"}, json.loads(str(f["__lmc__"]))


def test_early_stop_at_its_patience(tmp_path):
    out = tmp_path / "r"
    # no eval can raise top-1 by 1.0: epoch 1 sets the best, epochs 2 and 3 miss it, it stops after 3 of 6
    r = train("--epochs", 6, *sets(eval_every_n_epochs=1, early_stop={"metric": "top1", "patience": 2, "min_delta": 1.0}),
              "--out", out)
    assert r.exit_code == 0, r.output
    assert len(records(out, "epoch")) == 3
    (stop,) = records(out, "early_stop")
    assert stop["epoch"] == 3 and stop["best_epoch"] == 1 and stop["patience"] == 2
    _, meta = tensors(out / "last.npz")
    assert meta["step"] == 3 * BPE and meta["complete"] and meta["selection"]["early_stop"]["stopped"]
    r = train("--epochs", 6, *sets(eval_every_n_epochs=1, early_stop={"metric": "top1", "patience": 2, "min_delta": 1.0}),
              "--out", out, "--resume")
    assert r.exit_code == 0 and "stopped early at epoch 3" in r.output, r.output
    assert tensors(out / "last.npz")[1]["step"] == 3 * BPE


def test_best_checkpoint_is_the_best_epoch(tmp_path):
    out = tmp_path / "r"
    r = train("--epochs", 5, *sets(eval_every_n_epochs=1, checkpoint_every_n_epochs=1,
                                   keep_best={"metric": "loss", "k": 2}), "--out", out)
    assert r.exit_code == 0, r.output
    evals = records(out, "eval")
    assert len(evals) == 5 and all("loss" in e for e in evals)          # the validation loss is reported
    losses = [e["loss"] for e in evals]
    best = int(np.argmin(losses)) + 1
    assert sorted(p.name for p in out.glob("epoch-*.npz")) == [f"epoch-{n}.npz" for n in range(1, 6)]
    kept = sorted(np.argsort(losses, kind="stable")[:2] + 1)
    assert sorted(p.name for p in out.glob("best-epoch-*.npz")) == sorted(f"best-epoch-{n}.npz" for n in kept)
    a, meta = tensors(out / "best.npz")
    b, _ = tensors(out / f"epoch-{best}.npz")
    assert meta["epoch"] == best and a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # lmc eval of RUN:best scores what the run scored at that epoch
    r = CliRunner().invoke(app, ["eval", str(out), "--init", f"{out}:best", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["loss"] == pytest.approx(losses[best - 1], rel=1e-6)


def test_resume_is_bit_exact_with_selection_on(tmp_path):
    knobs = sets(eval_every_n_epochs=1, checkpoint_every_n_epochs=2, keep_best={"metric": "loss", "k": 2},
                 early_stop={"metric": "top1", "patience": 2, "min_delta": 0.02})
    full, part = tmp_path / "full", tmp_path / "part"
    assert train("--epochs", 6, *knobs, "--out", full).exit_code == 0
    assert train("--epochs", 6, *knobs, "--out", part, "--max-steps", 2 * BPE + 7).exit_code == 0
    r = train("--epochs", 6, *knobs, "--out", part, "--resume")
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in full.glob("*.npz"))
    assert names == sorted(p.name for p in part.glob("*.npz")) and "best.npz" in names
    for name in names:
        a, ma = tensors(full / name)
        b, mb = tensors(part / name)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), name
        assert ma["step"] == mb["step"] and ma.get("selection") == mb.get("selection"), name
    assert len(records(full, "early_stop")) == 1                          # it did stop, before epoch 6
    assert records(full, "early_stop") == records(part, "early_stop")


def test_selection_fields_are_checked(tmp_path):
    r = train(*sets(keep_best={"metric": "miou"}), "--out", tmp_path / "r")
    assert r.exit_code == 2 and "keep_best.metric 'miou'" in r.output and "top1" in r.output
    r = train(*sets(early_stop={"metric": "top1"}, eval_every_n_epochs=0), "--out", tmp_path / "r")
    assert r.exit_code == 2 and "early_stop" in r.output and "eval_every_n_epochs" in r.output
    r = train(*sets(early_stop={"metric": "top1", "patience": 0}), "--out", tmp_path / "r")
    assert r.exit_code == 2 and "early_stop.patience" in r.output
