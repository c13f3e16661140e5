"""`lmc export`: the safetensors writer (and the package-based reader behind --init)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lmc.cli import app
from lmc.core.errors import CheckpointError
from lmc.export.tensors import write_safetensors
from lmc.export.weights import load_weights
from lmc.graph.infer import infer
from lmc.graph.init import init_tensors
from lmc.run.checkpoint import load_init, read_tensors, save_checkpoint
from lmc.spec.netspec import load_spec

safetensors = pytest.importorskip("safetensors.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

CNN = """
name: tiny_cnn
input: {channels: 1, height: 6, width: 6}
layers:
  - conv_bn: {ic: 1, oc: 4, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - flatten
  - dense: {fan_in: 36, fan_out: 10}
train: {learning_rate: 0.1, batch_size: 4, epochs: 1, use_ema: true}
"""


def run(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    return r


@pytest.fixture
def ckpt(tmp_path):
    """A spec file and an lmc checkpoint of it with distinct live, EMA and BN tensors."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(CNN)
    net = infer(load_spec(spec))
    params, state = init_tensors(net, 3)
    state = [s + np.float32(0.5 + i) for i, s in enumerate(state)]
    ema = {p.name: a * 2 for p, a in zip(net.params, params)}
    path = save_checkpoint(tmp_path / "last.npz", net, [], params, [], state,
                           {"step": 7, "eval_region": "ema"}, regions={"ema": ema})
    return spec, net, path, params, state, ema


def test_safetensors_export_names_values_and_roundtrip(ckpt, tmp_path):
    spec, net, path, params, state, ema = ckpt
    out = tmp_path / "w.safetensors"
    r = run("export", spec, "--init", path, "--format", "safetensors", "-o", out, "--region", "live")
    assert r.exit_code == 0, r.output
    got = safetensors.load_file(str(out))
    assert list(got) == sorted([p.name for p in net.params] + [s.name for s in net.state])
    for p, a in zip(net.params, params):
        assert got[p.name].dtype == np.float32 and np.array_equal(got[p.name], a)
    for s, a in zip(net.state, state):
        assert np.array_equal(got[s.name], a)
    back = load_init(out, net)                       # --init reads the export back
    assert all(np.array_equal(x, y) for x, y in zip(back.params + back.state, params + state))
    from safetensors import safe_open
    with safe_open(str(out), framework="numpy") as f:
        meta = f.metadata()
    assert meta["lmc_spec"] == "tiny_cnn" and meta["lmc_region"] == "live"


def test_export_region_auto_is_what_the_run_scored(ckpt, tmp_path):
    spec, net, path, params, state, ema = ckpt
    w = load_weights(net, path)                      # the checkpoint says eval_region: ema
    assert w.region == "ema"
    assert all(np.array_equal(a, ema[p.name]) for p, a in zip(net.params, w.params))
    write_safetensors(net, w, tmp_path / "e.safetensors")
    got = safetensors.load_file(str(tmp_path / "e.safetensors"))
    assert np.array_equal(got[net.params[0].name], ema[net.params[0].name])
    r = run("export", spec, "--init", path, "--format", "safetensors", "-o", tmp_path / "s.safetensors",
            "--region", "swa")
    assert r.exit_code == 2 and "has no swa weights" in r.output


def test_export_refusals_exit_2(ckpt, tmp_path):
    spec, net, path, *_ = ckpt
    r = run("export", spec, "--init", path, "--format", "tflite", "-o", tmp_path / "x")
    assert r.exit_code == 2 and "--format 'tflite'" in r.output
    r = run("export", spec, "--init", path, "--format", "safetensors", "-o", tmp_path / "x.bin")
    assert r.exit_code == 2 and ".safetensors file" in r.output
    r = run("export", spec, "--init", path, "--format", "safetensors", "-o", tmp_path / "x.safetensors", "--batch", "4")
    assert r.exit_code == 2 and "--batch" in r.output
    # a file without BN statistics cannot make a standalone net with BN layers
    bare = tmp_path / "bare.npz"
    np.savez(bare, **{p.name: np.zeros(p.type.dims, np.float32) for p in net.params})
    r = run("export", spec, "--init", bare, "--format", "safetensors", "-o", tmp_path / "y.safetensors")
    assert r.exit_code == 2 and "no BN running statistics" in r.output


def test_reader_takes_the_packages_float_widths_and_refuses_ints(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    p = tmp_path / "w.safetensors"
    safetensors.save_file({"h": a.astype(np.float16), "b": a.astype(ml_dtypes.bfloat16), "d": a.astype(np.float64)},
                          str(p))
    t, meta = read_tensors(p)
    assert meta is None and t["b"].dtype == np.float32
    for k in "hbd":
        assert np.array_equal(np.asarray(t[k], np.float32), a)
    safetensors.save_file({"i": np.arange(3, dtype=np.int64)}, str(p))
    with pytest.raises(CheckpointError, match="tensor 'i' has dtype int64"):
        read_tensors(p)
    p.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00nope!")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        read_tensors(p)


def test_missing_extra_is_named(tmp_path, monkeypatch):
    p = tmp_path / "w.safetensors"
    safetensors.save_file({"a": np.zeros(2, np.float32)}, str(p))
    for m in [m for m in sys.modules if m == "safetensors" or m.startswith("safetensors.")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "safetensors", None)        # `import safetensors` fails
    with pytest.raises(CheckpointError, match=r"needs the safetensors package") as e:
        read_tensors(p)
    assert "lmc[export]" in e.value.hint
