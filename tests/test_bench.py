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
