"""Fine-tuning [iree]: `dataset.classes` keeps some classes' examples (both splits, ids
unchanged), and train.bootstrap_backbone starts a new run's leading layers from another run by
tensor name — the docs/train.md demo in small (digits_mlp, 0–4 then 5–9)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.runtime")

from lmc.data import load_dataset  # noqa: E402
from cli_run import run  # noqa: E402

pytestmark = pytest.mark.iree
MLP = Path(__file__).resolve().parents[1] / "specs" / "digits_mlp.yaml"
LOW, HIGH = "dataset={kind: digits, classes: [0, 1, 2, 3, 4]}", "dataset={kind: digits, classes: [5, 6, 7, 8, 9]}"
PREFIX = 64 * 128 + 128 + 128 * 128 + 128          # the two hidden dense layers: all but the head



def test_dataset_classes_keeps_those_examples():
    full = load_dataset("digits", None, (1, 8, 8), 10)
    low = load_dataset("digits", None, (1, 8, 8), 10, classes=(0, 1, 2, 3, 4))
    assert set(np.unique(low.y_train)) == set(range(5)) == set(np.unique(low.y_val))
    assert len(low.y_val) == int((full.y_val < 5).sum())
    assert np.array_equal(low.x_val, full.x_val[full.y_val < 5])


def test_bootstrap_from_a_run(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    r = run("train", MLP, "--set", LOW, "--epochs", 2, "--out", a)
    assert r.exit_code == 0, r.output
    info = json.loads((a / "run.json").read_text())
    assert info["dataset"]["n_val"] < 360
    r = run("train", MLP, "--set", HIGH, "--set", f"train.bootstrap_backbone=[{a}, {PREFIX}]",
            "--set", "train.head_lr_mult=3", "--max-steps", 1, "--out", b)
    assert r.exit_code == 0, r.output
    assert f"bootstrap: 4 tensors ({PREFIX:,} floats, 00.dense.weight … 01.dense.bias) from {a / 'last.npz'}" in r.output
    r = run("train", MLP, "--set", HIGH, "--set", f"train.bootstrap_backbone=[{a}, {PREFIX + 1}]", "--out", b,
            "--overwrite")
    assert r.exit_code == 2 and "ends inside '02.dense.weight'" in r.stderr, r.stderr
    r = run("validate", MLP, "--set", "dataset={kind: digits, classes: [1, 1]}")
    assert r.exit_code == 2 and "repeats a class" in r.stderr
