"""Run directories [iree]: a run trained with `--set` overrides describes itself (RUN/spec.yaml,
run.json, the checkpoint's metadata), and RUN stands in for the spec and the checkpoint:
`lmc eval RUN`, `--init RUN`, `--init RUN:best`, `lmc attack RUN`, `lmc train RUN --resume`; a
resume on another backend or with a spec whose tensors differ is refused naming the difference."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.runtime")

from lmc.run.rundir import checkpoint_path, data_differences, resolve_init  # noqa: E402
from cli_run import run  # noqa: E402

pytestmark = pytest.mark.iree
MLP = Path(__file__).resolve().parents[1] / "specs" / "digits_mlp.yaml"
SETS = ["--set", "layers.0.dense.fan_out=48", "--set", "layers.1.dense.fan_in=48"]



@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("rundir") / "R"
    r = run("train", MLP, *SETS, "--epochs", "1", "--out", out)
    assert r.exit_code == 0, r.output
    return out


def test_the_run_describes_itself(trained):
    info = json.loads((trained / "run.json").read_text())
    assert info["sets"] == ["layers.0.dense.fan_out=48", "layers.1.dense.fan_in=48", "train.epochs=1"]
    assert info["backend"] == "llvm-cpu" and info["lmc_version"] and "IREE" in info["iree_version"]
    assert info["dataset"]["kind"] == "digits" and info["dataset"]["n_val"] == 360
    text = (trained / "spec.yaml").read_text()
    assert "fan_out: 48" in text and "--set layers.0.dense.fan_out=48" in text
    with np.load(trained / "last.npz") as f:
        meta = json.loads(str(f["__lmc__"]))
    assert meta["sets"] == info["sets"] and meta["backend"] == "llvm-cpu"


def test_eval_run_needs_no_spec(trained):
    a = run("eval", trained, "--json")
    assert a.exit_code == 0, a.output
    b = run("eval", MLP, *SETS, "--init", trained / "last.npz", "--json")
    assert b.exit_code == 0, b.output
    assert json.loads(a.stdout)["top1"] == json.loads(b.stdout)["top1"]
    # the plain spec has other shapes: the checkpoint is refused naming the tensor
    c = run("eval", MLP, "--init", trained)
    assert c.exit_code == 2 and "does not match the spec" in c.stderr and "[64, 48]" in c.stderr, c.stderr


def test_init_run_starts_from_its_checkpoint(trained, tmp_path):
    r = run("train", trained, "--init", trained, "--max-steps", "2", "--out", tmp_path / "R2")
    assert r.exit_code == 0, r.output
    assert f"initialized from {trained / 'last.npz'}" in r.stderr
    r = run("eval", trained, "--init", f"{trained}:best")
    assert r.exit_code == 2 and "no checkpoint 'best'" in r.stderr and "last" in r.stderr


def test_attack_takes_a_run(trained):
    r = run("attack", trained, "--eps", "0,0.1", "--limit", "20", "--json")
    assert r.exit_code == 0, r.output


def test_export_and_predict_take_a_run(trained, tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.numpy import load_file
    r = run("export", trained, "--format", "safetensors", "-o", tmp_path / "w.safetensors")
    assert r.exit_code == 0, r.output
    w = load_file(str(tmp_path / "w.safetensors"))
    with np.load(trained / "last.npz") as f:
        assert "00.dense.weight" in w and set(w) <= set(f.files), sorted(w)
        for k in w:
            assert np.array_equal(w[k], f[k]), k
    x = np.random.default_rng(0).random((3, 64), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    r = run("predict", trained, tmp_path / "x.npy", "--json")
    assert r.exit_code == 0, r.output
    assert len([line for line in r.stdout.splitlines() if line.strip().startswith("{")]) == 3, r.stdout


def test_resume_refuses_another_spec_or_backend(trained, monkeypatch):
    import lmc.train.plan as plan
    monkeypatch.setattr(plan, "check_device", lambda *a, **k: None)   # as on a machine with that GPU
    r = run("train", MLP, "--resume", "--out", trained)
    assert r.exit_code == 2
    assert "layers.0.dense.fan_out: 48 in" in r.stderr and "128 now" in r.stderr, r.stderr
    r = run("train", trained, "--resume", "--backend", "cuda")
    assert r.exit_code == 2 and "trained on backend llvm-cpu" in r.stderr and "cuda" in r.stderr, r.stderr
    r = run("train", trained, "--resume", "--set", "train.use_ema=true")      # another kept region
    assert r.exit_code == 2 and "train.use_ema" in r.stderr, r.stderr


def test_resolution(tmp_path):
    (tmp_path / "last.npz").write_bytes(b"")
    (tmp_path / "epoch-2.npz").write_bytes(b"")
    assert checkpoint_path(tmp_path) == tmp_path / "last.npz"
    assert checkpoint_path(f"{tmp_path}:epoch-2") == tmp_path / "epoch-2.npz"
    assert resolve_init(tmp_path / "other.yaml", None) is None        # a spec beside a run is not its
    assert resolve_init(tmp_path / "spec.yaml", None) == tmp_path / "last.npz"
    assert resolve_init(tmp_path, tmp_path / "epoch-2.npz") == tmp_path / "epoch-2.npz"
    assert data_differences({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}], "c": 0}) == ["a.1.b", "c"]
