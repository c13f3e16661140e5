"""`lmc train` compiles two modules side by side — the training functions (what the first step
waits for) and @forward (loaded at the first eval) — and runs them on one device: a background
compile's result and errors, its cancellation, device arrays passed from one module's function
to the other's, and the cache hits `lmc eval` / `lmc predict` get from what training compiled."""
import time
from pathlib import Path

import numpy as np
import pytest

from lmc import compile as lc
from lmc.compile import compile_background, compile_module
from lmc.core.errors import CompileError
from lmc.graph.infer import infer
from lmc.lower.lowering import abi, lower
from lmc.run.runtime import Module
from lmc.spec.netspec import load_spec
from lmc.train.bench import stepper

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.iree


def _net(name="mnist_linear", sets=("train.batch_size=4",)):
    return infer(load_spec(ROOT / "specs" / f"{name}.yaml", list(sets)))


def test_a_background_compile_is_the_foreground_one(tmp_path, monkeypatch):
    monkeypatch.setenv("LMC_CACHE", str(tmp_path))
    text = lower(_net(), "forward")
    pending = compile_background(text)
    got = pending.result()
    assert pending.done() and not got.cached and got.path.parent == tmp_path
    again = compile_module(text)
    assert again.cached and again.path == got.path


def test_the_cache_directory_is_the_one_set_when_it_started(tmp_path, monkeypatch):
    monkeypatch.setenv("LMC_CACHE", str(tmp_path / "a"))
    pending = compile_background(lower(_net(), "forward"))
    monkeypatch.setenv("LMC_CACHE", str(tmp_path / "b"))     # as lmc bench's cold compile restores it
    assert pending.result().path.parent == tmp_path / "a"


def test_a_background_compile_error_reaches_whoever_waits(tmp_path, monkeypatch):
    monkeypatch.setenv("LMC_CACHE", str(tmp_path))
    pending = compile_background("module @model {\n  func.func @f() -> tensor<2xf32> {\n  }\n}\n", options=None)
    with pytest.raises(CompileError, match="iree-compile failed"):
        pending.result()


def test_cancel_stops_the_iree_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("LMC_CACHE", str(tmp_path))
    text = lower(_net("resnet18", ["train.batch_size=2", "input.height=32", "input.width=32"]), "forward")
    pending = compile_background(text)
    deadline = time.time() + 30
    while not lc._RUNNING and time.time() < deadline:      # until its iree-compile has started
        time.sleep(0.05)
    assert lc._RUNNING
    t0 = time.time()
    pending.cancel()
    assert pending.done() and time.time() - t0 < 10 and not lc._RUNNING
    with pytest.raises(CompileError):
        pending.result()
    assert not list(tmp_path.glob("*.vmfb"))


def test_forward_from_a_second_module_reads_the_first_modules_arrays(tmp_path, monkeypatch):
    """One train step in the train module, then @forward loaded later on the same device from
    its own module, fed the step's output buffers: the same logits as the one-module build."""
    monkeypatch.setenv("LMC_CACHE", str(tmp_path))
    net = _net("mnist_cnn", ["train.batch_size=4"])
    calls = []
    fwd = compile_background(lower(net, "forward"))
    train = compile_module(lower(net, "train_step"))
    split = Module(train.path, later={"forward": lambda: calls.append(1) or fwd.result().path})
    whole = Module(compile_module(lower(net)).path)
    assert split.has("forward") and split.has("train_step") and not split.has("apply_step")
    assert calls == []                                      # nothing loaded before it is asked for
    outs = []
    for m in (split, whole):
        step, holder = stepper(net, m)
        step()
        a, args = abi(net), holder["args"]
        n = len(args) - 3 - len(a.masks)              # state, then x, labels, hp, masks
        P, S, x = args[:len(a.params)], args[n - len(a.state):n], args[n]
        outs.append(np.asarray(m.forward(*P, *S, x)))
    assert calls == [1]
    np.testing.assert_array_equal(outs[0], outs[1])


def test_eval_and_predict_after_train_compile_nothing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from lmc.cli.app import app
    monkeypatch.setenv("LMC_CACHE", str(tmp_path / "cache"))
    spec = str(ROOT / "specs" / "digits_mlp.yaml")
    r = CliRunner().invoke(app, ["train", spec, "--out", str(tmp_path / "run"), "--epochs", "1"])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "cache").glob("*.vmfb"))) == 2        # train functions + @forward
    np.save(tmp_path / "x.npy", np.zeros((3, 64), np.float32))
    for cmd in (["eval", spec, "--init", str(tmp_path / "run")],
                ["predict", spec, str(tmp_path / "x.npy"), "--init", str(tmp_path / "run"), "--json"]):
        r = CliRunner().invoke(app, cmd)
        assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "cache").glob("*.vmfb"))) == 2        # both were cache hits


def test_a_refusal_after_the_compiles_started_stops_them(tmp_path, monkeypatch):
    """lmc train starts both compiles before it loads the data; a missing dataset is still
    reported (exit 2) at once, and the compiles are stopped, leaving nothing in the cache."""
    import subprocess
    import sys
    cache = tmp_path / "cache"
    env = {**__import__("os").environ, "LMC_CACHE": str(cache)}
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "lmc", "train", str(ROOT / "specs" / "resnet18.yaml"),
                        "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and "no such directory" in r.stderr, r.stderr
    assert time.time() - t0 < 30           # resnet18's train module alone takes minutes to compile
    assert not [p for p in cache.iterdir() if not p.name.endswith(".vmfb")]


def test_ctrl_c_while_compiling_stops_the_compiles(tmp_path):
    """Ctrl-C while the spinner waits for the train module: exit 130 at once, both compiles
    stopped, no half-written file left in the cache."""
    import os
    import signal
    import subprocess
    import sys
    cache = tmp_path / "cache"
    p = subprocess.Popen([sys.executable, "-m", "lmc", "train", str(ROOT / "specs" / "digits_efficientnet.yaml"),
                          "--out", str(tmp_path / "run")], stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "LMC_CACHE": str(cache)})
    for line in p.stderr:
        if line.startswith("compiling"):
            break
    deadline = time.time() + 60
    while not list(cache.glob("*.mlir")) and time.time() < deadline:     # the text iree-compile reads
        time.sleep(0.1)
    time.sleep(0.5)
    assert p.poll() is None and list(cache.glob("*.mlir"))          # compiling
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    rest = p.stderr.read()
    assert p.wait(timeout=60) == 130, rest
    assert "aborted by Ctrl-C" in rest and time.time() - t0 < 15
    assert not [f for f in cache.iterdir() if not f.name.endswith(".vmfb")]


def test_cancelling_a_finished_compile_changes_nothing_for_the_next(tmp_path, monkeypatch):
    monkeypatch.setenv("LMC_CACHE", str(tmp_path))
    first = compile_background(lower(_net(), "forward"))
    first.result()
    first.cancel()                  # lmc bench's `finally` does this on the normal path
    for sets in (["train.batch_size=3"], ["train.batch_size=5"]):   # threads whose ids may be reused
        assert not compile_background(lower(_net("mnist_linear", sets), "forward")).result().cached


def test_a_compile_started_after_others_waits_for_them(tmp_path, monkeypatch):
    """`after`: @forward's compile starts once the two halves' are done (three at once on two
    cores slow the halves the first step waits for); cancelling it while it waits stops it at
    once, with nothing compiled."""
    monkeypatch.setenv("LMC_CACHE", str(tmp_path))
    spans, real = {}, lc.compile_module

    def timed(text, *args, **kw):
        t0 = time.perf_counter()
        try:
            return real(text, *args, **kw)
        finally:
            spans[text] = (t0, time.perf_counter())
    monkeypatch.setattr(lc, "compile_module", timed)
    texts = [lower(_net("mnist_linear", [f"train.batch_size={b}"]), "forward") for b in (3, 5)]
    first = compile_background(texts[0])
    second = compile_background(texts[1], after=(first,))
    second.result()
    assert first.done() and spans[texts[1]][0] >= spans[texts[0]][1]
    monkeypatch.setattr(lc, "compile_module", real)
    gate = compile_background(lower(_net("resnet18", ["train.batch_size=2", "input.height=32", "input.width=32"]),
                                    "forward"))
    waiting = compile_background(lower(_net("mnist_linear", ["train.batch_size=7"]), "forward"), after=(gate,))
    time.sleep(0.3)
    assert not waiting.done()
    t0 = time.time()
    waiting.cancel()
    assert waiting.done() and time.time() - t0 < 2 and not gate.done()
    with pytest.raises(CompileError, match="stopped"):
        waiting.result()
    gate.cancel()
    assert len(list(tmp_path.glob("*.vmfb"))) == 2          # the two that ran; the cancelled one never did
