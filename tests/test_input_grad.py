"""@input_grad against JAX [iree, jax]: for every layer kind that lowers × its examples (the
oracle's tiny classifiers, tests/test_oracle.py), the compiled loss and dL/dx must match
jax.grad of the same loss of the primitives' float64 references (BN with batch statistics,
as the train step), the losses rotating through the registry.

Every primitive's dx is already checked by finite differences (test_gradients.py) and inside
the whole train step (test_oracle.py); what @input_grad adds is the plumbing — the cotangents
that reach the network input collected and summed where it fans out.  So the default run is
the first example of a few kinds that exercise it (dense, conv + BN, a residual block whose
shortcut reads the input), one loss each; `-m slow` runs every case (every primitive that
lowers) with one loss, rotating, and every loss on those three kinds; `-m grid` every loss on
every case."""
from __future__ import annotations

import numpy as np
import pytest

from test_oracle import (F32_EPS, LAYER_CASES, LOSSES, NC, _batch, _body_out, _compare, _init, _loss_class, _module,
                         classifier_yaml, jax_forward)

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import abi, lower  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402

pytestmark = [pytest.mark.iree, pytest.mark.jax]
RTOL = 1e-4      # |dx − dx_jax| over max|dx_jax|; the loss relative


DEFAULT_KINDS = ("dense", "conv_bn", "residual_block")
# cases that once failed, run by default with one loss: IREE 3.13's data tiling miscompiled the
# dx of this strided one-channel patch conv (the lowering no longer packs @input_grad)
REGRESSIONS = (("patch_embed[ic=1,dim=6,patch_size=2,n_patches=6,x=1x1x4x6]", "class_ce"),)


def _default() -> set[int]:
    """The first case of each DEFAULT_KINDS kind."""
    first = {}
    for i, (_, layers, _, _) in enumerate(LAYER_CASES):
        if len(layers) == 1 and layers[0][0] in DEFAULT_KINDS:
            first.setdefault(layers[0][0], i)
    assert set(first) == set(DEFAULT_KINDS), f"no oracle case for {set(DEFAULT_KINDS) - set(first)}"
    return set(first.values())


def _cases():
    losses = sorted(LOSSES)
    default = _default()
    out = []
    for i, (cid, layers, x, style) in enumerate(LAYER_CASES):
        out_t = _body_out(layers, x, style)[1]
        if any(f.get("ids_input") or f.get("gather") for _, f in layers):
            continue           # token ids: no input gradient (lower refuses it; tested below)
        fits = [loss for loss in losses if _loss_class(loss).oracle_head(out_t, NC) is not None]
        for loss in fits:      # a per-pixel loss needs an image body
            fast = (i in default and loss == fits[i % len(fits)]) or (cid.split("-")[0], loss) in REGRESSIONS
            slow = i in default or loss == fits[(i + 1) % len(fits)]
            marks = () if fast else (pytest.mark.slow,) if slow else (pytest.mark.slow, pytest.mark.grid)
            out.append(pytest.param(layers, x, style, loss, id=f"{cid}-{loss}", marks=marks))
    return out


@pytest.mark.parametrize("layers,x_dims,style,loss", _cases())
def test_input_grad(layers, x_dims, style, loss):
    lfields, variants = LOSSES[loss]
    _, lo = variants[-1]
    net = infer(load_spec("oracle.yaml", text=classifier_yaml(layers, x_dims, style,
                                                              {"learning_rate": 0.1, **lfields, **lo}, loss)))
    a = abi(net)
    text = lower(net, "input_grad")
    assert "func.func @input_grad" in text and "func.func @forward" in text and "@train_step" not in text
    mod = _module(text)
    rng = np.random.default_rng(1)
    P, S = _init(net, rng)
    x, labels = _batch(net, a, rng)
    hp = a.hp_vector(net.spec.train, 0.0, 1)
    loss_v, dx = (np.asarray(r) for r in mod.input_grad(*[P[p.name] for p in net.params],
                                                        *[S[s.name] for s in net.state], x, labels, hp))
    jhp = {h: jnp.float64(v) for h, v in zip(a.hp, hp)}
    JP = {k: jnp.asarray(v, jnp.float64) for k, v in P.items()}

    def f(xx):
        logits, _ = jax_forward(net, JP, xx)
        return a.loss.reference(jnp, logits, jnp.asarray(labels), **{h: jhp[h] for h in a.loss.hp})

    jl, jdx = jax.value_and_grad(f)(jnp.asarray(x, jnp.float64))
    jdx = np.asarray(jdx)
    assert float(np.max(np.abs(jdx))) > 0, "the reference gradient is zero: the check would be vacuous"
    failures: list[str] = []
    _compare("loss", loss_v, jl, RTOL * abs(float(jl)), failures)
    _compare("dx", dx, jdx, RTOL * float(np.max(np.abs(jdx))) + 4 * F32_EPS * float(np.max(np.abs(jdx))), failures)
    assert not failures, "\n".join(failures)


def test_input_grad_is_refused_for_token_ids():
    from lmc.core.errors import SpecError
    ids = next((layers, x, style) for _, layers, x, style in LAYER_CASES
               if any(f.get("ids_input") for _, f in layers))
    net = infer(load_spec("o.yaml", text=classifier_yaml(*ids, {"learning_rate": 0.1})))
    with pytest.raises(SpecError, match="no primitive passes a gradient back to the input"):
        lower(net, "input_grad")
