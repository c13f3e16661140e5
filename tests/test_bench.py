"""lmc bench's distance to the limit: the train step's FLOPs as lmc counts them, the measured
sgemm peak, and the step's GFLOP/s as a fraction of it (correctness only: no timing asserted)."""
from pathlib import Path

import pytest

from lmc.graph.infer import infer
from lmc.spec.netspec import load_spec
from lmc.train import bench as bench_mod

ROOT = Path(__file__).resolve().parent.parent


def test_train_step_flops_are_three_forwards_of_lmc_info():
    net = infer(load_spec(ROOT / "specs" / "mnist_mlp.yaml", ["train.batch_size=8"]))
    dense = sum(l.flops for l in net.layers)
    assert dense > 0 and bench_mod.train_step_flops(net) == 3 * dense == 3 * net.total_flops


def test_sgemm_peak_is_a_rate():
    g = bench_mod.sgemm_peak_gflops(n=128, reps=2)
    assert 0.01 < g < 1e5


@pytest.mark.iree
def test_bench_reports_the_step_against_the_peak(tmp_path, monkeypatch):
    pytest.importorskip("iree.runtime")
    monkeypatch.setenv("LMC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bench_mod, "sgemm_peak_gflops", lambda: 50.0)
    net = infer(load_spec(ROOT / "specs" / "mnist_linear.yaml", ["train.batch_size=4"]))
    r = bench_mod.bench(net, steps=2, warmup=0, forward=False, peak=True)
    assert r["train_flops"] == 3 * net.total_flops
    assert r["train_gflops"] == pytest.approx(r["train_flops"] / (r["step_ms_median"] * 1e-3) / 1e9)
    assert r["sgemm_peak_gflops"] == 50.0 and r["peak_fraction"] == pytest.approx(r["train_gflops"] / 50.0)
    assert "peak_fraction" not in bench_mod.bench(net, steps=1, warmup=0, forward=False)


def _run_module():
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import run
    return run


def test_the_bench_tables_carry_gflops_peak_share_and_cold_start():
    """benchmarks/run.py's tables from a recorded row (no measurement): GFLOP/s is the row's
    train-step FLOPs over lmc's ms, its share of the measured peak, the top-5 column only when
    profiled, and a compile-only row only in the cold-start table."""
    run = _run_module()
    row = {"net": "mlp", "batch": 8, "lmc": 2.0, "jax": 4.0, "torch": 3.0, "torch_compile": None, "cpu": {"lmc": 3.0},
           "load": (1.0, 1.0), "train_flops": 2e8, "errors": {}, "first_call_s": {"lmc": 5.5, "jax": 2.0, "torch_compile": 4.0},
           "lmc_compile_s": {"lmc": 5.0}, "lmc_first_step_s": {"lmc": 0.5},
           "dispatches": {"share": 0.8, "dispatches_per_step": 43}}
    only = {**row, "net": "big", "compile_only": True, "lmc": None, "dispatches": None}
    t = run.table([row, only], {"native": 200.0}).splitlines()
    assert len(t) == 3 and t[0].count("|") == t[2].count("|")
    assert "| 100.0 | 50.0% | 80% of 43 |" in t[2]          # 2e8 FLOPs in 2 ms = 100 GFLOP/s, of 200
    assert "of sgemm peak" in t[0] and "top-5 dispatches" in t[0]
    assert "top-5" not in run.table([{**row, "dispatches": None}]).splitlines()[0]
    c = run.cold_table([row, only]).splitlines()
    assert c[2] == "| mlp (8) | 5.0 | 0.5 | 5.5 | 2.0 | 4.0 | 2.75 |"
    assert c[3].startswith("| big (8) (compile only) |")
    md = run.results_md([row], {"cpu": "x", "cores": 2, "date": "d", "python": "3"}, 3, {"native": 200.0})
    assert "200 GFLOP/s" in md and "Cold start" in md


def test_the_dispatch_profile_leaves_the_first_call_out():
    """The profile's rows from recorded events (no measurement; lmc/train/profile.py, which
    benchmarks/dispatch_profile.py uses): the first call's dispatches (its first touches of the
    step's memory) are not in the table."""
    import json
    from lmc.train import profile as dispatch_profile

    def ev(sub, key, ns):
        return json.dumps({"type": "host_dispatch_event", "submission_id": sub, "key": key, "duration_ns": ns})
    lines = [ev(3, "train_step_dispatch_0_matmul_8x8x8_f32", 9_000_000),
             ev(3, "train_step_dispatch_1_elementwise_64_f32", 5_000_000)]
    for sub in (7, 11):
        lines += [ev(sub, "train_step_dispatch_0_matmul_8x8x8_f32", 1_000_000),
                  ev(sub, "train_step_dispatch_1_elementwise_64_f32", 250_000),
                  ev(sub, "train_step_dispatch_1_elementwise_64_f32", 250_000)]
    rows = sorted(dispatch_profile.rows("\n".join(lines + ['{"type": "dispatch_summary"}'])))
    assert rows == [(1.0, 4, "train_step_dispatch_1_elementwise_64_f32", "elementwise"),
                    (2.0, 2, "train_step_dispatch_0_matmul_8x8x8_f32", "matmul")]
    share = dispatch_profile.top_share(rows, top=1)
    assert share["dispatches_per_step"] == 3 and share["dispatch_ms"] == 1.5 and share["share"] == 2.0 / 3.0
    assert share["names"] == ["0_matmul_8x8x8_f32"] and share["top_ms"] == [1.0]
    assert share["by_kind_ms"] == {"matmul": 1.0, "elementwise": 0.5}
    assert [dispatch_profile.kind(n) for n in ("batch_mmt4d_13x12x48x320x16x16x1_f32", "pack_12x260_f32",
                                               "elementwise_transpose_64x8_f32", "matvec_like_192x4160_f32")] == \
        ["mmt4d", "pack", "transpose", "matmul"]


@pytest.mark.iree
def test_bench_profile_names_the_costliest_dispatches(tmp_path):
    """`lmc bench --profile --json`: a real profile of the train step (iree-benchmark-module,
    iree-profile): the top dispatches are named, ordered, and their share is theirs of the
    dispatch time; on a GPU backend the flag is refused (exit 2)."""
    import json
    import os
    import subprocess
    import sys
    pytest.importorskip("iree.runtime")
    env = {**os.environ, "LMC_CACHE": str(tmp_path / "cache")}
    spec = str(ROOT / "specs" / "digits_cnn.yaml")
    r = subprocess.run([sys.executable, "-m", "lmc.cli", "bench", spec, "--timed-steps", "1", "--no-peak",
                        "--profile", "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["dispatches"]
    assert d["top"] == 5 == len(d["names"]) == len(d["top_ms"]) and d["profiled_calls"] == 10
    assert d["top_ms"] == sorted(d["top_ms"], reverse=True) and d["top_ms"][-1] > 0
    assert d["share"] == pytest.approx(sum(d["top_ms"]) / d["dispatch_ms"])
    assert sum(d["by_kind_ms"].values()) == pytest.approx(d["dispatch_ms"])
    assert d["dispatches_per_step"] > 5 and any("matmul" in n for n in d["names"])
    r = subprocess.run([sys.executable, "-m", "lmc.cli", "bench", spec, "--backend", "cuda", "--profile"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "--profile profiles llvm-cpu's task executor only, not cuda" in r.stdout + r.stderr
