"""The data-parallel backward in two halves (lowering.backward_cut, `@grad_late` + `@grad_early`)
computes what the whole `@grad_step` does — whose gradients the JAX oracle checks
(tests/test_oracle.py) — for cuts anywhere in the train graph: inside a residual block, next to
BN and dropout (a mask argument), and between two uses of a shared weight (a structure
module reads its weights in every round: the late half's share of their gradient is carried
over).  Also the cut rule itself, on the bench nets."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.runtime")

from lmc.check import load_net  # noqa: E402
from lmc.compile import compile_module  # noqa: E402
from lmc.graph.infer import train_net  # noqa: E402
from lmc.graph.init import init_tensors  # noqa: E402
from lmc.lower.lowering import abi, backward_cut, late_after, lower  # noqa: E402
from lmc.run.runtime import Module  # noqa: E402

pytestmark = pytest.mark.iree
W = 2

DROPOUT_BN = str(Path(__file__).parent / "data" / "bn_dropout.yaml")   # conv_bn, max_pool, dropout


def _inputs(net, a, seed=0):
    rng = np.random.default_rng(seed)
    P, S = init_tensors(net, net.spec.train.seed)
    G = [(0.01 * rng.standard_normal(p.type.dims)).astype(np.float32) for p in a.params]
    x = rng.standard_normal(a.x.dims).astype(np.float32)
    y = a.loss.draw_labels(rng, a.labels, a.logits)
    hp = a.hp_vector(net.spec.train, 0.01, 1)
    masks = [((rng.random(m.value.type.dims) < 0.75) / np.float32(0.75)).astype(np.float32) for m in a.masks]
    return [np.asarray(p, np.float32) for p in P], [np.asarray(s, np.float32) for s in S], G, x, y, hp, masks


def _host(v):
    return np.array(v.to_host()) if hasattr(v, "to_host") else np.array(v)


def _whole(net, a, ins):
    mod = Module(compile_module(lower(net, world=W, the_abi=a)).path)
    P, S, G, x, y, hp, masks = ins
    out = [_host(v) for v in mod.grad_step(*P, *S, *G, x, y, hp, *masks)]
    nP, nS = len(P), len(S)
    return out[:nP], out[nP:nP + nS], out[-2:]


def _halves(net, a, ins):
    text = lower(net, world=W, the_abi=a)
    assert "@grad_late(" in text and "@grad_early(" in text and "@grad_step(" not in text
    mod = Module(compile_module(text).path)
    P, S, G, x, y, hp, masks = ins
    late, early = a.late_index()
    nL, nS = len(late), len(S)
    out = mod.grad_late(*P, *S, *[G[i] for i in late], x, y, hp, *masks)
    res = mod.grad_early(*[P[i] for i in early], *[G[i] for i in early], *out[nL + nS + 2:])
    res = res if isinstance(res, (list, tuple)) else [res]
    Gs = [None] * len(P)
    for i, g in zip(late, out[:nL]):
        Gs[i] = _host(g)
    for i, g in zip(early, res):
        Gs[i] = _host(g)
    return Gs, [_host(v) for v in out[nL:nL + nS]], [_host(v) for v in out[nL + nS:nL + nS + 2]]


def _cut(net, a, k):
    return dataclasses.replace(a, cut=k, late=late_after(train_net(net), k))


def _compare(got, want, what):
    for name, gs, ws in zip(("G", "S'", "loss/correct"), got, want):
        assert len(gs) == len(ws)
        for j, (u, v) in enumerate(zip(gs, ws)):
            scale = max(float(np.abs(v).max()), 1e-3)
            np.testing.assert_allclose(u, v, rtol=2e-5, atol=2e-6 * scale, err_msg=f"{what}: {name}[{j}]")


def _case(tmp_path, spec):
    if spec.startswith("\n"):
        path = tmp_path / "net.yaml"
        path.write_text(spec)
        spec = str(path)
    return load_net(spec, world=W)


@pytest.mark.parametrize("spec,cuts", [
    (DROPOUT_BN, ["rule", 1, 6]),                          # after the first conv; inside conv_bn 2
    ("specs/digits_bottleneck.yaml", ["rule", "mid"]),     # residual blocks: a fan-out crosses the cut
    ("specs/digits_vit.yaml", ["mid"]),                    # attention, layer norm, the class token
])
def test_two_halves_compute_the_whole_grad_step(tmp_path, spec, cuts):
    net = _case(tmp_path, spec)
    whole = abi(net, W, overlap=False)
    assert not whole.cut
    ins = _inputs(net, whole)
    want = _whole(net, whole, ins)
    n = len(train_net(net).graph.nodes)
    for c in cuts:
        k = backward_cut(train_net(net))[0] if c == "rule" else n // 2 if c == "mid" else c
        assert 0 < k < n
        got = _halves(net, _cut(net, whole, k), ins)
        _compare(got, want, f"cut {k} of {n}")


SHARED = str(Path(__file__).parent / "data" / "halves_shared.yaml")   # a weight read in every round


def test_a_shared_weight_across_the_cut(tmp_path):
    """structure_module reads its weights once per round: a cut between two reads carries the
    late half's share of their gradient to @grad_early, which adds the early share.  (chain_fold
    itself is too ill-conditioned to compare two compiles at f32 tolerance: a 1e-6 relative
    change of its parameters moves a gradient by 7%.)"""
    net = _case(tmp_path, SHARED)
    t = train_net(net)
    uses: dict[str, list[int]] = {}
    for i, node in enumerate(t.graph.nodes):
        for p in node.params:
            uses.setdefault(p.name, []).append(i)
    k = min(v[-1] for v in uses.values() if len(v) > 1)   # a shared weight's last read: after the cut
    across = [name for name, v in uses.items() if v[0] < k <= v[-1]]
    assert across
    whole = abi(net, W, overlap=False)
    cut = _cut(net, whole, k)
    assert not set(across) & cut.late
    ins = _inputs(net, whole)
    _compare(_halves(net, cut, ins), _whole(net, whole, ins), f"cut {k}")


def test_the_cut_rule_on_the_bench_nets():
    """The rule hides all but a sliver of the gradient bytes behind the early backward on the
    conv nets; a net whose early layers hold most of the bytes is not split (mnist_mlp)."""
    got = {}
    for spec, sets in [("specs/mnist_cnn.yaml", []), ("specs/resnet18.yaml", ["input.height=32", "input.width=32"]),
                       ("specs/mnist_mlp.yaml", [])]:
        net = load_net(spec, sets, world=W)
        t = train_net(net)
        k, late = backward_cut(t)
        total = sum(p.type.size for p in t.graph.params)
        got[spec] = (k, sum(p.type.size for p in t.graph.params if p.name in late) / total)
        assert abi(net, W, overlap=True).cut == k and abi(net, 1, overlap=True).cut == 0 and abi(net, W).cut == 0
    assert got["specs/mnist_cnn.yaml"][0] > 0 and got["specs/mnist_cnn.yaml"][1] > 0.9
    assert got["specs/resnet18.yaml"][0] > 0 and got["specs/resnet18.yaml"][1] > 0.9
    assert got["specs/mnist_mlp.yaml"] == (0, 0.0)
