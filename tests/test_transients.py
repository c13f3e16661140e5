"""Transient storage passed by the caller (LowerOptions.transients, LMC_TRANSIENTS): the lowering
gives every exported function one more argument, last, `iree.abi.transients`, and the runtime's
Module appends one device buffer, kept between calls, to every call.  The same numbers as the
functions that allocate their own, bit for bit; results never live in the storage (a later
call does not change an earlier call's results); one buffer serves all of a Module's functions."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.runtime")

from lmc.check import load_net  # noqa: E402
from lmc.compile import compile_module  # noqa: E402
from lmc.core.errors import UsageError  # noqa: E402
from lmc.lower.lowering import TRANSIENTS, abi, lower, with_transients  # noqa: E402
from lmc.lower.options import LowerOptions  # noqa: E402
from lmc.run.runtime import Module  # noqa: E402

pytestmark = pytest.mark.iree
ROOT = Path(__file__).resolve().parent.parent
SPEC = str(ROOT / "tests" / "data" / "bn_dropout.yaml")      # conv_bn, max_pool, dropout
EXTERNAL, ALLOCA = LowerOptions(transients="external"), LowerOptions(transients="alloca")


def _publics(text: str) -> dict[str, str]:
    return {m.group(1): line for line in text.splitlines() if (m := re.match(r"\s*func\.func @([\w.$-]+)\(", line))}


def test_every_exported_function_takes_the_storage_last():
    net = load_net(SPEC)
    ext, own = lower(net, options=EXTERNAL), lower(net, options=ALLOCA)
    pub = _publics(ext)
    assert set(pub) == {"train_step", "forward"}
    for line in pub.values():
        assert line.split(") -> ")[0].endswith(", " + TRANSIENTS)
    assert TRANSIENTS not in own and ext.count(TRANSIENTS) == 2
    assert ext == with_transients(own)          # the one change: private functions as they were
    # auto: external on llvm-cpu only (the GPU backends keep their own allocation)
    assert lower(net) == ext and lower(net, backend="llvm-cpu") == ext
    assert TRANSIENTS not in lower(net, backend="cuda") and TRANSIENTS not in lower(net, backend="rocm")
    assert TRANSIENTS in lower(net, backend="cuda", options=EXTERNAL)
    # a function without arguments gets the storage alone
    assert with_transients("  func.func @f() -> tensor<f32> {") == f"  func.func @f({TRANSIENTS}) -> tensor<f32> {{"
    with pytest.raises(UsageError, match="LMC_TRANSIENTS='on'"):
        LowerOptions.from_env({"LMC_TRANSIENTS": "on"})


def _args(net, a, rng):
    from lmc.graph.init import init_tensors
    P, S = init_tensors(net, net.spec.train.seed)
    O = [(0.01 * np.abs(rng.standard_normal(p.type.dims))).astype(np.float32) for _, p in a.opt]
    x = rng.standard_normal(a.x.dims).astype(np.float32)
    y = a.loss.draw_labels(rng, a.labels, a.logits)
    masks = [((rng.random(m.value.type.dims) < 0.75) / np.float32(0.75)).astype(np.float32) for m in a.masks]
    hp = a.hp_vector(net.spec.train, 0.01, 1)
    return [*(np.asarray(p, np.float32) for p in P), *O, *(np.asarray(s, np.float32) for s in S), x, y, hp, *masks]


def _host(rs):
    return [np.array(r.to_host()) for r in rs]


def test_caller_storage_gives_the_same_numbers_and_outlives_no_result():
    net = load_net(SPEC)
    a = abi(net)
    first, second = _args(net, a, np.random.default_rng(0)), _args(net, a, np.random.default_rng(1))
    ext = Module(compile_module(lower(net, options=EXTERNAL), options=EXTERNAL).path)
    own = Module(compile_module(lower(net, options=ALLOCA), options=ALLOCA).path)
    r_ext, r_own = ext.train_step(*first), own.train_step(*first)
    kept = _host(r_ext)
    for g, w in zip(kept, _host(r_own)):
        assert np.array_equal(g, w)
    # a second call through the same storage, on other inputs: the first call's results stand
    r2 = _host(ext.train_step(*second))
    assert any(not np.array_equal(g, w) for g, w in zip(r2, kept))
    for g, w in zip(_host(r_ext), kept):
        assert np.array_equal(g, w)
    for g, w in zip(r2, _host(own.train_step(*second))):
        assert np.array_equal(g, w)
    # @forward through the same Module shares the one buffer, as large as the larger need
    size = {f: int(ext.model[f].vm_function.reflection["iree.abi.transients.size.constant"])
            for f in ("train_step", "forward")}
    nP, nS = len(net.params), len(net.state)
    fwd_args = [*first[:nP], *first[nP + len(a.opt):nP + len(a.opt) + nS], first[nP + len(a.opt) + nS]]
    y_ext = np.array(ext.forward(*fwd_args).to_host())
    assert np.array_equal(y_ext, np.array(own.forward(*fwd_args).to_host()))
    assert ext._storage.nbytes == max(size.values()) > 0
    assert own._storage is None
