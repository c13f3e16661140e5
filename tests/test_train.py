"""`lmc train`, `lmc eval`, `lmc plot` end to end on the CPU backend: a few steps (loss falls,
stays finite), metrics and checkpoint files, resume after SIGKILL and after Ctrl-C (same final
parameters as an uninterrupted run), NaN stop, every bad-input case (exit code 2 and its
message), and the GPU backends failing cleanly after compiling on a machine without a GPU."""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("iree.runtime")

from lmc.run.checkpoint import save_checkpoint  # noqa: E402
from lmc.cli import app  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.graph.init import init_tensors  # noqa: E402
from lmc.optim import all_optimizers  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402

pytestmark = pytest.mark.iree
ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "specs" / "digits_mlp.yaml"


def lmc(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, " ".join(r.output.split())       # messages compared with whitespace folded


def records(run: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def tensors(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k: f[k] for k in f.files if k != "__lmc__"}


def meta(path: Path) -> dict:
    with np.load(path) as f:
        return json.loads(str(f["__lmc__"]))


# ------------------------------------------------------------------------------------ training

def test_few_epochs_loss_falls_metrics_eval_and_plot(tmp_path):
    run = tmp_path / "run"
    code, out = lmc("train", MLP, "--epochs", 3, "--out", run)
    assert code == 0, out
    steps = records(run, "step")
    assert [r["step"] for r in steps] == list(range(1, 67))             # 22 steps/epoch, all logged
    loss = np.array([r["loss"] for r in steps])
    assert np.isfinite(loss).all() and loss[-10:].mean() < 0.5 * loss[:5].mean()
    assert {"step", "epoch", "loss", "lr", "images_per_s", "acc"} <= set(steps[0])
    assert steps[0]["lr"] < steps[21]["lr"]                             # warmup over epoch 1
    (ev,) = records(run, "eval")                                         # eval_every 5 > 3: only the final one
    assert ev["n"] == 360 and ev["top1_lo"] < ev["top1"] < ev["top1_hi"] and ev["top1"] > 0.8 and "top5" in ev
    m = meta(run / "last.npz")
    assert (m["step"], m["epoch"], m["batch"], m["complete"]) == (66, 3, 0, True)
    assert set(tensors(run / "last.npz")) == {f"{p}{i:02d}.dense.{w}" for p in ("", "opt.m.", "opt.v.")
                                             for i in range(3) for w in ("weight", "bias")}
    # lmc eval scores the checkpoint exactly as the final in-run eval did
    r = CliRunner().invoke(app, ["eval", str(MLP), "--init", str(run / "last.npz"), "--json"])
    assert r.exit_code == 0, r.output
    scored = json.loads(r.stdout.strip().splitlines()[-1])
    assert scored["n"] == 360 and scored["top1"] == ev["top1"]
    code, out = lmc("plot", run)
    assert code == 0 and (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("backend,kind", [("rocm", "HIP"), ("cuda", "CUDA")])
def test_gpu_backend_without_gpu_fails_before_compiling(tmp_path, backend, kind):
    code, out = lmc("train", MLP, "--backend", backend, "--out", tmp_path / "run")
    assert code == 2
    assert "module in" not in out, out          # refused before compiling or loading data
    assert out.startswith(f"error: no {kind}") and "device found" in out
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("backend,kind", [("rocm", "HIP"), ("cuda", "CUDA")])
def test_bench_on_a_gpu_backend_without_gpu_reports_the_compile(backend, kind):
    code, out = lmc("bench", MLP, "--backend", backend, "--timed-steps", 1)
    assert code == 2
    assert re.search(rf"compiled .* for {backend} \(batch \d+\): (cached|[\d.]+ s), [\d,]+ bytes; step timings need the device", out), out
    assert f"error: no {kind}" in out


def test_nan_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    run = tmp_path / "run"
    code, out = lmc("train", MLP, "--epochs", 3, "--max-steps", 22, "--out", run)
    assert code == 0, out
    digest = hashlib.sha256((run / "last.npz").read_bytes()).hexdigest()
    # fine-tuning with another lr is allowed (the net hash ignores the recipe); 1e30 diverges at once
    code, out = lmc("train", MLP, "--epochs", 3, "--resume", "--out", run, "--set", "train.learning_rate=1.0e+30")
    assert code == 2
    m = re.search(r"training diverged: the loss is (nan|inf) at step (\d+) \(epoch 2, batch (\d+)\)", out)
    assert m, out
    assert 23 <= int(m.group(2)) <= 26
    assert f"the last good checkpoint is {run / 'last.npz'} (step 22)" in out
    assert hashlib.sha256((run / "last.npz").read_bytes()).hexdigest() == digest
    (bad,) = records(run, "diverged")
    assert bad["step"] == int(m.group(2)) and bad["loss"] in ("nan", "inf")
    # a fresh run that diverges before any checkpoint says so
    code, out = lmc("train", MLP, "--epochs", 3, "--out", tmp_path / "fresh", "--set", "train.learning_rate=1.0e+30")
    assert code == 2 and "training diverged" in out and "no checkpoint had been written yet" in out


# ------------------------------------------------------------------------------------ bad input

def _spec(tmp_path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


MNIST = """name: m
input: {features: 784}
dataset: mnist
layers:
  - dense: {fan_in: 784, fan_out: 10}
train: {learning_rate: 0.1, batch_size: 8, epochs: 1}
"""


def test_bad_inputs_exit_2_with_a_message(tmp_path):
    # missing data directory / file
    code, out = lmc("train", _spec(tmp_path, MNIST), "--data", tmp_path / "nope", "--out", tmp_path / "r")
    assert code == 2 and f"no such directory: {tmp_path / 'nope'}" in out and "train-images-idx3-ubyte" in out
    code, out = lmc("train", MLP, "--data", tmp_path / "missing.npz", "--out", tmp_path / "r")
    assert code == 2 and f"no such file: {tmp_path / 'missing.npz'}" in out
    # a spec without a dataset
    code, out = lmc("train", _spec(tmp_path, MNIST.replace("dataset: mnist\n", "")), "--out", tmp_path / "r")
    assert code == 2 and "the spec names no dataset" in out and "--data FILE.npz" in out
    # an --init checkpoint saved from another net: refused naming the first mismatching tensor
    cnn = infer(load_spec(ROOT / "specs" / "digits_cnn.yaml"))
    params, state = init_tensors(cnn, 0)
    save_checkpoint(tmp_path / "cnn.npz", cnn, (), params, [], state, {"step": 0})
    code, out = lmc("train", MLP, "--init", tmp_path / "cnn.npz", "--out", tmp_path / "r")
    assert code == 2 and f"{tmp_path / 'cnn.npz'} does not match the spec: it has no tensor '00.dense.weight' [64, 128]" in out
    mlp = infer(load_spec(MLP))
    named = {p.name: a for p, a in zip(mlp.params, init_tensors(mlp, 0)[0])}
    named["01.dense.weight"] = np.zeros((128, 127), np.float32)
    np.savez(tmp_path / "bare.npz", **named)
    code, out = lmc("train", MLP, "--init", tmp_path / "bare.npz", "--out", tmp_path / "r")
    assert code == 2 and "tensor '01.dense.weight' has shape [128, 127] there but [128, 128] in the spec" in out
    # a flat .bin of the wrong size
    np.zeros(1000, "<f4").tofile(tmp_path / "p.bin")
    code, out = lmc("train", MLP, "--init", tmp_path / "p.bin", "--out", tmp_path / "r")
    assert code == 2 and "p.bin has 4,000 bytes but the spec's 26,122 parameters need 104,488" in out
    # --resume without a checkpoint; --resume with --init; a checkpoint of another net
    code, out = lmc("train", MLP, "--resume", "--out", tmp_path / "empty")
    assert code == 2 and "--resume: no checkpoint to resume in" in out
    code, out = lmc("train", MLP, "--resume", "--init", tmp_path / "cnn.npz", "--out", tmp_path / "r")
    assert code == 2 and "--resume and --init exclude each other" in out
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "last.npz").write_bytes((tmp_path / "cnn.npz").read_bytes())
    code, out = lmc("train", MLP, "--resume", "--out", tmp_path / "other")
    assert code == 2 and "does not match the spec: it has no tensor '00.dense.weight'" in out
    # an existing run is not overwritten by accident
    code, out = lmc("train", MLP, "--out", tmp_path / "other")
    assert code == 2 and "already holds a run" in out and "--overwrite" in out
    # recipe switches lmc train does not implement are refused, not ignored
    code, out = lmc("train", MLP, "--set", "train.sync_bn=true", "--out", tmp_path / "r")
    assert code == 2 and "not implemented yet in lmc train: train.sync_bn" in out
    # a knob for a head the net does not have is refused
    code, out = lmc("train", MLP, "--set", "train.det_prior_pi=0.01", "--out", tmp_path / "r")
    assert code == 2 and "train.det_prior_pi 0.01: it initialises fpn_detect's objectness biases" in out
    code, out = lmc("train", MLP, "--max-steps", 0, "--out", tmp_path / "r")
    assert code == 2 and "--max-steps must be at least 1" in out
    code, out = lmc("plot", tmp_path / "nothing")
    assert code == 2 and "no metrics log at" in out
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------ resume

KILL_SPEC = """name: kill_mlp
input: {features: 16}
dataset: npz
layers:
  - dense: {fan_in: 16, fan_out: 32, act: relu}
  - dense: {fan_in: 32, fan_out: 4}
train: {learning_rate: 0.001, batch_size: 8, epochs: 4, use_adam: true, cosine_decay: true,
        warmup_epochs: 1, seed: 5, checkpoint_every_n_epochs: 1, eval_every_n_epochs: 0}
"""


@pytest.fixture(scope="module")
def kill_setup(tmp_path_factory):
    """A spec whose epochs take about a second (so a signal lands mid-epoch) and the final
    checkpoint of an uninterrupted run of it."""
    d = tmp_path_factory.mktemp("kill")
    spec = d / "spec.yaml"
    spec.write_text(KILL_SPEC)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 24000)
    x = (rng.standard_normal((24000, 16)) + rng.standard_normal((4, 16))[y]).astype(np.float32)
    np.savez(d / "data.npz", x=x, y=y.astype(np.int32), x_val=x[:64], y_val=y[:64].astype(np.int32))
    ref = d / "ref"
    p = _run(spec, d, ref)
    assert _finish(p) == 0, p.log.read_text()
    return spec, d, tensors(ref / "last.npz")


def _run(spec, d, out, *extra):
    """`lmc train` in a subprocess; its stderr goes to out.stderr (a file: a pipe nobody reads
    could fill up and block it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    log = open(f"{out}.stderr", "a")
    p = subprocess.Popen([sys.executable, "-m", "lmc.cli", "train", str(spec), "--data", str(d / "data.npz"),
                          "--out", str(out), *extra], env=env, stdout=subprocess.DEVNULL, stderr=log)
    log.close()                                            # the child has its own descriptor
    p.log = Path(f"{out}.stderr")
    return p


def _finish(p, timeout=300) -> int:
    try:
        return p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()


def _wait_for_checkpoint(p, path: Path, timeout=300):
    t0 = time.time()
    try:
        while not path.exists():
            assert p.poll() is None, "the run ended before its first checkpoint: " + p.log.read_text()
            assert time.time() - t0 < timeout, "no checkpoint yet: " + p.log.read_text()
            time.sleep(0.01)
    except BaseException:
        p.kill()
        raise


def _wait_for_step(p, out: Path, step: int, timeout=300):
    """Until the run has logged a step past `step` (metrics are flushed every 10 steps)."""
    t0 = time.time()
    while True:
        try:
            if max((r["step"] for r in records(out, "step")), default=0) > step:
                return
        except (ValueError, KeyError):                     # a line being written
            pass
        if p.poll() is not None or time.time() - t0 > timeout:
            p.kill()
            raise AssertionError("the run ended (or stalled) before step " + str(step) + ": " + p.log.read_text())
        time.sleep(0.002)


def _same(a: dict, b: dict):
    assert a.keys() == b.keys()
    worst = max(float(np.abs(a[k] - b[k]).max()) for k in a)
    assert worst <= 1e-6, worst
    return worst


def test_resume_after_sigkill_reaches_the_same_parameters(kill_setup):
    spec, d, ref = kill_setup
    out = d / "killed"
    p = _run(spec, d, out)
    _wait_for_checkpoint(p, out / "last.npz")
    _wait_for_step(p, out, 3000)                           # into epoch 2 (or later: machines differ)
    p.kill()
    assert _finish(p) == -signal.SIGKILL
    ck = meta(out / "last.npz")
    assert ck["batch"] == 0 and ck["step"] in (3000, 6000, 9000)   # an end-of-epoch checkpoint
    assert max(r["step"] for r in records(out, "step")) > ck["step"]     # it was killed past it
    p = _run(spec, d, out, "--resume")
    assert _finish(p) == 0, p.log.read_text()
    assert _same(tensors(out / "last.npz"), ref) == 0.0    # bit for bit (CPU, same thread count)
    steps = [r["step"] for r in records(out, "step")]
    assert steps == list(range(1, 12001))                  # what the killed run logged past 3000 was dropped


def test_ctrl_c_checkpoints_mid_epoch_and_resume_matches(kill_setup):
    spec, d, ref = kill_setup
    out = d / "interrupted"
    p = _run(spec, d, out)
    _wait_for_checkpoint(p, out / "last.npz")
    _wait_for_step(p, out, 3000)
    p.send_signal(signal.SIGINT)
    assert _finish(p) == 130, p.log.read_text()
    err = " ".join(p.log.read_text().split())
    assert re.search(r"interrupted at step (\d+) \(epoch \d, batch (\d+)\); checkpoint saved to .*last\.npz", err), err
    assert "--resume" in err
    ck = meta(out / "last.npz")
    assert 1 <= ck["epoch"] < 4 and 0 <= ck["batch"] < 3000 and ck["step"] == 3000 * ck["epoch"] + ck["batch"]
    assert ck["step"] > 3000 and not ck["complete"]
    p = _run(spec, d, out, "--resume")
    assert _finish(p) == 0, p.log.read_text()
    assert _same(tensors(out / "last.npz"), ref) == 0.0


# ------------------------------------------------------------------------------------ demo specs

@pytest.mark.slow
@pytest.mark.parametrize("name,floor,limit", [("digits_mlp", 0.97, 120), ("digits_cnn", 0.98, 120),
                                              ("digits_mobile", 0.98, 300)])
def test_digits_specs_reach_their_accuracy(tmp_path, name, floor, limit):
    """The demo recipes (fixed seed) reach ≥ 97% (MLP) / ≥ 98% (CNN, MBConv+SE) test top-1 in
    < 2 min (< 5 min for digits_mobile, the issue's bound: its compile is most of it)."""
    t0 = time.time()
    code, out = lmc("train", ROOT / "specs" / f"{name}.yaml", "--out", tmp_path / "run")
    assert code == 0, out
    assert time.time() - t0 < limit
    ev = records(tmp_path / "run", "eval")[-1]
    assert ev["n"] == 360 and ev["top1"] >= floor, ev


# the recipes of docs/optimizers.md's table (digits_mlp, 30 epochs): each optimizer module's own
OPTIMIZER_RECIPES = {variant: (name, sets) for name, cls in all_optimizers().items()
                     for variant, sets in cls.digits_mlp.items()}


def test_every_optimizer_brings_its_digits_recipe():
    assert {name for name, _ in OPTIMIZER_RECIPES.values()} == set(all_optimizers())


@pytest.mark.parametrize("opt", sorted(OPTIMIZER_RECIPES))
def test_digits_mlp_trains_with_every_optimizer(tmp_path, opt):
    """Each optimizer (and SGD with momentum) trains specs/digits_mlp.yaml to ≥ 97% validation top-1."""
    name, overrides = OPTIMIZER_RECIPES[opt]
    sets = [a for s in overrides for a in ("--set", s)]
    code, out = lmc("train", MLP, *sets, "--out", tmp_path / "run")
    assert code == 0, out
    h = records(tmp_path / "run", "header")[0]
    fallback = all_optimizers()[name].fallback
    assert h["optimizer"] == "+".join(sorted({name, fallback} - {None}))
    ev = records(tmp_path / "run", "eval")[-1]
    assert ev["n"] == 360 and ev["top1"] >= 0.97, ev
