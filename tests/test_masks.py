"""Dropout and stochastic depth (drop path): the sites in the graph, the host's masks, the train
step against JAX with the same random masks, all-ones masks as the exact identity, eval with
them on equal to eval without, and the refusals."""
from __future__ import annotations

import numpy as np
import pytest

from lmc.core.errors import SpecError
from lmc.graph.infer import infer
from lmc.train.masks import draw, site_rates
from lmc.spec.netspec import load_spec

NET = """name: masked
input: {channels: 2, height: 6, width: 6}
dataset: digits
layers:
  - conv_bn: {ic: 2, oc: 4, k_size: 3}
  - residual_block: {ic: 4, oc: 4, n_blocks: 3}
  - flatten
  - dense: {fan_in: 144, fan_out: 10}
train: {learning_rate: 0.1, batch_size: 4, epochs: 1%s}
"""


def net_of(extra=""):
    return infer(load_spec("m.yaml", text=NET % extra))


def test_sites_masks_and_the_ramp():
    net = net_of(", drop_path: 0.3, dropout: 0.25")
    kinds = [m.kind for m in net.graph.masks]
    assert kinds == ["drop_path"] * 3 + ["dropout"]
    assert [m.value.type.dims for m in net.graph.masks] == [(4, 1, 1, 1)] * 3 + [(4, 144)]
    cfg = net.spec.train
    assert site_rates(net.graph.masks, cfg) == pytest.approx([0.0, 0.15, 0.3, 0.25])
    ms = draw(net.graph.masks, cfg, 0, 1, 2)
    assert np.array_equal(ms[0], np.ones((4, 1, 1, 1), np.float32))           # rate 0 at the first site
    big = draw(net.graph.masks[3:], cfg, 0, 0, 0)[0]
    assert set(np.unique(big).tolist()) <= {0.0, np.float32(1 / 0.75)}
    assert np.array_equal(draw(net.graph.masks, cfg, 0, 1, 2)[3], ms[3])       # (seed, epoch, batch) only
    assert not np.array_equal(draw(net.graph.masks, cfg, 0, 1, 3)[3], ms[3])
    assert net_of().graph.masks == []


def test_refusals():
    with pytest.raises(SpecError, match="train.drop_path: the net has no stochastic-depth site"):
        infer(load_spec("m.yaml", text="name: m\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 3}\n"
                                       "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, drop_path: 0.1}\n"))
    with pytest.raises(SpecError, match="train.dropout drops the input of the final dense layer, but the net ends with"):
        infer(load_spec("m.yaml", text="name: m\ninput: {channels: 1, height: 4, width: 4}\nlayers:\n"
                                       "  - conv2d: {ic: 1, oc: 2, k_size: 3}\n"
                                       "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, dropout: 0.1}\n"))


@pytest.mark.iree
def test_train_step_with_masks_equals_jax_and_ones_are_the_identity():
    pytest.importorskip("iree.runtime")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from test_oracle import _batch, _init, _module, jax_forward
    from lmc.lower.lowering import abi, lower

    jax.config.update("jax_enable_x64", True)
    net = net_of(", drop_path: 0.5, dropout: 0.4")
    plain = net_of()
    a = abi(net)
    rng = np.random.default_rng(3)
    P, S = _init(net, rng)
    x, y = _batch(net, a, rng)
    masks = draw(a.masks, net.spec.train, 5, 0, 1)
    assert any(not m.all() for m in masks)          # some example and some element dropped
    hp = a.hp_vector(net.spec.train, 0.1, 1)
    mod, mod0 = _module(lower(net)), _module(lower(plain))
    args = [P[p.name] for p in net.params] + [S[s.name] for s in net.state] + [x, y, hp]
    out = [np.asarray(r).copy() for r in mod.train_step(*args, *masks)]

    def loss_of(p):
        logits, _ = jax_forward(net, p, jnp.asarray(x, jnp.float64), masks=[jnp.asarray(m, jnp.float64) for m in masks])
        return a.loss.reference(jnp, logits, jnp.asarray(y), label_smoothing=0.0)

    JP = {k: jnp.asarray(v, jnp.float64) for k, v in P.items()}
    jl, jg = jax.value_and_grad(loss_of)(JP)
    assert abs(float(out[-2]) - float(jl)) <= 1e-4 * abs(float(jl))
    for i, p in enumerate(net.params):
        want = np.asarray(JP[p.name] - 0.1 * jg[p.name])
        scale = float(np.max(np.abs(np.asarray(jg[p.name])))) * 0.1 + 1e-12
        assert np.max(np.abs(out[i] - want)) <= 1e-4 * scale + 4e-7 * np.max(np.abs(want)), p.name

    # all-ones masks: the plain net's step, bit for bit; @forward ignores the knobs
    ones = [np.asarray(r).copy() for r in mod.train_step(*args, *a.mask_ones())]
    ref = [np.asarray(r).copy() for r in mod0.train_step(*args)]
    assert all(np.array_equal(u, v) for u, v in zip(ones, ref))
    fwd = [P[p.name] for p in net.params] + [S[s.name] for s in net.state] + [x]
    assert np.array_equal(np.asarray(mod.forward(*fwd)), np.asarray(mod0.forward(*fwd)))
