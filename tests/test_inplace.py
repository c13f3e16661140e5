"""In-place state updates (lmc/lower/inplace.py): which @train_step arguments are tied to their
results, and that a tied module trains bit-identically to an untied one through IREE — with
the buffers really reused (the returned state is the argument's storage)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from lmc.graph.infer import infer
from lmc.lower.inplace import tie
from lmc.lower.lowering import lower
from lmc.lower.options import LowerOptions
from lmc.spec.netspec import load_spec

SPECS = Path(__file__).resolve().parent.parent / "specs"


def _tied(text: str) -> set[str]:
    head = next(x for x in text.splitlines() if "func.func @train_step(" in x)
    return set(re.findall(r"(%\w+): tensor<[^>]*> \{iree\.abi\.output = \d+ : index\}", head))


def test_mlp_ties_all_but_the_weights_a_dx_reads():
    # dense 784→512→512→10: layers 2 and 3 compute dx = dy·Wᵀ, which nothing orders before the
    # update of W (it needs only dW): those two stay untied; W1 (no dx), the biases (db reads no
    # b) and every Adam slot are tied
    t = _tied(lower(infer(load_spec(SPECS / "mnist_mlp.yaml")), "train_step"))
    assert t == {"%p0", "%p1", "%p3", "%p5"} | {f"%o{i}" for i in range(12)}


def test_global_clip_orders_every_read():
    # with grad_clip_norm every clipped gradient depends on every gradient (the global norm), so
    # each dx is finished before any update: all state is tied
    net = infer(load_spec(SPECS / "mnist_mlp.yaml", ["train.grad_clip_norm=1.0"]))
    assert len(_tied(lower(net, "train_step"))) == 18
    assert _tied(lower(net, "train_step", options=LowerOptions(inplace="off"))) == set()


def test_bn_statistics_and_ema_are_tied():
    net = infer(load_spec(SPECS / "mnist_cnn.yaml", ["train.use_ema=true"]))
    t = _tied(lower(net, "train_step"))
    assert {f"%s{i}" for i in range(8)} <= t and {f"%e{i}" for i in range(16)} <= t


def test_an_unordered_read_is_refused():
    # %a is read by op %u, whose result is live but not a source of the new value %n
    args = ["%a: tensor<4xf32>", "%x: tensor<4xf32>"]
    body = ["    %u = stablehlo.multiply %a, %x : tensor<4xf32>",
            "    %n = stablehlo.add %x, %x : tensor<4xf32>"]
    assert tie(args, body, [("%n", "tensor<4xf32>"), ("%u", "tensor<4xf32>")], [(0, 0)]) == args
    ordered = ["    %u = stablehlo.multiply %a, %x : tensor<4xf32>",
               "    %n = stablehlo.add %u, %a : tensor<4xf32>"]
    assert "iree.abi.output = 0" in tie(args, ordered, [("%n", "tensor<4xf32>"), ("%u", "tensor<4xf32>")], [(0, 0)])[0]
    # a passed-through argument is not tied (nothing is written), nor one whose old value is
    # also returned, nor a value returned twice
    assert tie(args, body, [("%a", "tensor<4xf32>"), ("%u", "tensor<4xf32>")], [(0, 0)]) == args
    two = [("%n", "tensor<4xf32>"), ("%a", "tensor<4xf32>")]
    assert tie(args, ordered, two, [(0, 0)]) == args
    assert tie(args, ordered, [("%n", "tensor<4xf32>"), ("%n", "tensor<4xf32>")], [(0, 0)]) == args


def test_call_results_depend_only_on_what_the_callee_reads():
    funcs = {"f": "func.func private @f(%w: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {\n"
                  "  %dx = stablehlo.multiply %w, %y : tensor<4xf32>\n"
                  "  %dw = stablehlo.add %y, %y : tensor<4xf32>\n"
                  "  return %dx, %dw : tensor<4xf32>, tensor<4xf32>\n}"}
    args = ["%w: tensor<4xf32>", "%y: tensor<4xf32>"]
    call = "    %r:2 = func.call @f(%w, %y) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)"
    upd = "    %n = stablehlo.subtract %w, %r#1 : tensor<4xf32>"
    rets = [("%n", "tensor<4xf32>"), ("%r#0", "tensor<4xf32>")]
    assert tie(args, [call, upd], rets, [(0, 0)], funcs) == args                     # %r#0 (dx) reads w, unordered
    assert "iree.abi.output" in tie(args, [call, upd], [("%n", "tensor<4xf32>"), ("%r#1", "tensor<4xf32>")], [(0, 0)], funcs)[0]


@pytest.mark.iree
@pytest.mark.parametrize("spec,sets", [("mnist_mlp.yaml", ["train.batch_size=16"]),
                                        ("mnist_cnn.yaml", ["train.batch_size=4", "train.use_ema=true"])])
def test_tied_steps_equal_untied_steps(spec, sets):
    pytest.importorskip("iree.runtime")
    from lmc.train.bench import stepper
    from lmc.compile import compile_module
    from lmc.run.runtime import Module
    net = infer(load_spec(SPECS / spec, sets))
    finals = {}
    for mode in ("on", "off"):
        options = LowerOptions(inplace=mode)
        m = Module(compile_module(lower(net, "train_step", options=options), options=options).path)
        step, h = stepper(net, m, lr=1e-3)
        first = h["args"][0]
        for _ in range(4):
            step()
        if mode == "on":                       # the new parameters live in the first argument's buffer
            assert np.array_equal(first.to_host(), h["args"][0].to_host())
        finals[mode] = [np.array(a.to_host()) for a in h["args"][:-3]]
    for a, b in zip(finals["on"], finals["off"]):
        assert np.array_equal(a, b)


def test_every_spec_is_analysed():
    # a body the reader could not follow falls back to no ties at all: each spec's @train_step
    # must come out with some (every optimizer's slots are read by their update alone)
    import yaml
    n = 0
    for path in sorted(SPECS.glob("*.yaml")):
        if "train" not in yaml.safe_load(path.read_text()):
            continue
        net = infer(load_spec(path))
        try:
            text = lower(net, "train_step")
        except NotImplementedError:
            continue
        assert _tied(text), path.name
        n += 1
    assert n >= 20


def test_accumulation_ties_the_update_but_not_the_accumulators():
    # @apply_step writes P', O' over P, O (only the optimizer reads them) but not its zeros over
    # G (G is still read by the update); @grad_step writes S' over S, but G' into a fresh buffer:
    # the G it is given is @apply_step's constant zeros, which IREE may share
    text = lower(infer(load_spec(SPECS / "mnist_cnn.yaml", ["train.grad_accum_steps=2"])), "train_step")
    heads = {m.group(1): m.group(0) for m in re.finditer(r"func\.func @(grad_step|apply_step)\(.*", text)}
    grad = set(re.findall(r"(%\w+): tensor<[^>]*> \{iree\.abi\.output", heads["grad_step"]))
    apply = set(re.findall(r"(%\w+): tensor<[^>]*> \{iree\.abi\.output", heads["apply_step"]))
    assert grad == {f"%s{i}" for i in range(8)}
    assert apply == {f"%p{i}" for i in range(16)} | {f"%o{i}" for i in range(32)}
