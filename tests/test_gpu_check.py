"""benchmarks/gpu_check.sh, dry-run on the CPU: the llvm-cpu module for this host against the
llvm-cpu reference for x86-64-v3 (AVX2), on two tiny specs — the same prepare/run path the GPU
run takes, with the backend under test swapped for llvm-cpu.  Plus the comparison itself: a
perturbed parameter or loss must fail it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

SPECS = ["specs/digits_mlp.yaml", "specs/digits_cnn.yaml"]


@pytest.mark.iree
def test_dry_run_on_llvm_cpu(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run([str(ROOT / "benchmarks" / "gpu_check.sh"), "all", "--backend", "llvm-cpu", "--specs", *SPECS,
                        "--no-time", "--steps", "2", "--time-steps", "1", "--dir", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads((tmp_path / "report.json").read_text())
    assert [c["name"] for c in rep["cases"]] == ["digits_mlp", "digits_cnn"]     # cheapest first
    for c in rep["cases"]:
        assert c["status"] == "pass" and c["same_init"] and c["finite"], c
        assert c["batch"] == 8                                                # capped from 64
        assert len(c["dev_losses"]) == len(c["ref_losses"]) == 2
        assert c["loss_rel_err"] <= 1e-3 and c["update_rel_err"] <= 5e-2
        assert c["dev_losses"][1] != c["dev_losses"][0]                       # the steps did train
    assert "--iree-llvmcpu-target-cpu=x86-64-v3" in rep["ref_flags"]
    md = (tmp_path / "report.md").read_text()
    assert "| digits_cnn | 8 | pass |" in md and "2 pass, 0 fail" in md
    assert sorted(p.name for p in (tmp_path / "vmfb").iterdir()) == [
        "digits_cnn.dev.vmfb", "digits_cnn.ref.vmfb", "digits_mlp.dev.vmfb", "digits_mlp.ref.vmfb"]
    # the run phase alone, from the manifest, past its time budget: every case listed as skipped, exit 1
    r = subprocess.run([str(ROOT / "benchmarks" / "gpu_check.sh"), "run", "--dir", str(tmp_path), "--budget-s", "0"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads((tmp_path / "report.json").read_text())
    assert [c["status"] for c in rep["cases"]] == ["skipped (time budget)"] * 2


def _fake(n_params=2, seed=0):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(4).astype(np.float32) for _ in range(n_params)]
    final = [w - 1e-3 * np.sign(rng.standard_normal(4)).astype(np.float32) for w in init]
    return {"losses": [2.3, 2.2], "init": init, "final": final}


class _Net:        # what compare() asks of a net: its ABI (two params, no optimizer state)
    pass


def test_compare_catches_a_wrong_parameter_and_a_wrong_loss(monkeypatch):
    import gpu_check
    from lmc.lower.lowering import Abi
    from lmc.graph.ir import Param
    from lmc.core.types import TensorType
    ps = [Param(f"p{i}", TensorType((4,)), "zeros") for i in range(2)]
    a = Abi(ps, [], [], [], TensorType((1, 4)), TensorType((1,)), TensorType((1, 4)))
    monkeypatch.setattr("lmc.lower.lowering.abi", lambda net: a)
    ref = _fake()
    same = {k: (list(v) if isinstance(v, list) else v) for k, v in ref.items()}
    assert gpu_check.compare(_Net(), same, ref, 1e-3, 5e-2)["ok"]
    wrong_p = {**ref, "final": [ref["final"][0], ref["init"][1] + 3e-3]}        # one tensor moved 3× too far
    res = gpu_check.compare(_Net(), wrong_p, ref, 1e-3, 5e-2)
    assert not res["ok"] and res["worst_tensor"] == "p1" and res["update_rel_err"] > 0.5
    wrong_l = {**ref, "losses": [2.3, 2.21]}
    res = gpu_check.compare(_Net(), wrong_l, ref, 1e-3, 5e-2)
    assert not res["ok"] and res["loss_rel_err"] == pytest.approx(0.01 / 2.2)
    nan = {**ref, "losses": [2.3, float("nan")]}
    assert not gpu_check.compare(_Net(), nan, ref, 1e-3, 5e-2)["ok"]
