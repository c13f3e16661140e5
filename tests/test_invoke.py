"""Modules compiled with IREE's asynchronous ABI (LMC_INVOCATION=async, lmc/run/invoke.py): a
call returns once its work is queued, and host reads wait for it.  Queued steps compute what
blocking ones do, bit for bit — the fused step, the two halves of a split one, `lmc train` end
to end — and a host read of state written over its argument waits for every queued call."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.runtime")

from typer.testing import CliRunner  # noqa: E402

from lmc.cli import app  # noqa: E402
from lmc.compile import compile_module  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import abi, lower, lower_train  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.run import invoke  # noqa: E402
from lmc.run.runtime import training_module  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402
from lmc.train.bench import stepper  # noqa: E402

pytestmark = pytest.mark.iree
ROOT = Path(__file__).resolve().parent.parent
BN_DROPOUT = ROOT / "tests" / "data" / "bn_dropout.yaml"       # BN statistics and a dropout mask
SYNC, ASYNC = LowerOptions(), LowerOptions(invocation="async")


def _host(v):
    return np.array(v.to_host())


def _module(net, options, split="off"):
    options = dataclasses.replace(options, split=split)
    a = abi(net, halves=options.split)
    paths = [compile_module(t, options=options).path for t in lower_train(net, a, options=options)]
    fwd = compile_module(lower(net, "forward", options=options), options=options).path
    return training_module(paths, forward=lambda: fwd), a


def _run(net, options, queued, steps=5, split="off"):
    m, a = _module(net, options, split)
    step, h = stepper(net, m, lr=1e-2, a=a, queued=queued)
    losses = []
    for _ in range(steps):
        step()
        losses.append(h["loss"])
    step.finish()
    losses.append(h["loss"])
    state = [_host(v) for v in h["args"][:len(a.params) + len(a.opt) + len(a.ema) + len(a.state)]]
    return m, a, losses, state


@pytest.mark.parametrize("split", ["off", "on"])
def test_queued_steps_are_the_blocking_ones_bit_for_bit(split):
    net = infer(load_spec(BN_DROPOUT))
    m, a, got_losses, got = _run(net, ASYNC, queued=True, split=split)
    assert m.train_late if split == "on" else m.train_step       # the module is the one asked for
    fns = ["train_late", "train_early"] if split == "on" else ["train_step"]
    assert all(isinstance(getattr(m, f), invoke.AsyncFunction) for f in fns)
    _, _, want_losses, want = _run(net, SYNC, queued=False, split=split)
    # a queued step's call reads the previous step's loss: one behind, the same values
    assert got_losses[0] is None and got_losses[1:] == want_losses[:-1][:len(got_losses) - 1]
    assert got_losses[-1] == want_losses[-1]
    assert len(got) == len(want) and all(np.array_equal(u, v) for u, v in zip(got, want))


def test_a_read_of_state_waits_for_every_queued_call():
    """Parameters written over their arguments: read after more steps were queued, the read
    sees the last step's values (never a step in flight), as a blocking module's does."""
    net = infer(load_spec(BN_DROPOUT))
    m, a = _module(net, ASYNC)
    fn = m.train_step
    assert fn.tied and max(fn.tied) < len(a.params) + len(a.opt) + len(a.ema) + len(a.state)
    step, h = stepper(net, m, lr=1e-2, a=a, queued=True)
    first = None
    for k in range(4):
        step()
        if k == 0:
            first = h["args"][0]            # step 1's result, the buffer steps 2–4 write over
    assert m.timeline.value == 4
    got = _host(first)                     # waits for step 4, not only step 1
    assert m.timeline.done == 4
    _, _, _, want = _run(net, SYNC, queued=False, steps=4)
    assert np.array_equal(got, want[0])


def test_calls_in_flight_are_bounded():
    net = infer(load_spec(BN_DROPOUT))
    m, a = _module(net, ASYNC)
    step, h = stepper(net, m, a=a, queued=True)
    for _ in range(6):
        step()
        assert m.timeline.value - m.timeline.done <= invoke.DEPTH
    m.timeline.drain()
    assert m.timeline.done == m.timeline.value == 6


def test_lmc_train_queued_writes_the_blocking_run(tmp_path, monkeypatch):
    spec = ROOT / "specs" / "digits_mlp.yaml"
    runs = {}
    for inv in ("sync", "async"):
        monkeypatch.setenv("LMC_INVOCATION", inv)
        out = tmp_path / inv
        r = CliRunner().invoke(app, ["train", str(spec), "--out", str(out), "--max-steps", "30",
                                     "--log-every", "7"])
        assert r.exit_code == 0, r.output
        runs[inv] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = lambda rs: [(d["step"], d["loss"]) for d in rs if d.get("kind") == "step"]
    assert len(steps(runs["sync"])) == 30 and steps(runs["async"]) == steps(runs["sync"])
    with np.load(tmp_path / "sync" / "last.npz") as s, np.load(tmp_path / "async" / "last.npz") as q:
        assert sorted(s.files) == sorted(q.files)
        assert all(np.array_equal(s[k], q[k]) for k in s.files if s[k].dtype.kind in "fiub")   # not the metadata (its time)
