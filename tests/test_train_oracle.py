"""One train step through `lmc train` equals the same step written in JAX from the formulas.

Both start from the same --init file (random parameters and BN statistics) and see the same
batch (an .npz of exactly one batch, `--steps 1 --no-shuffle`); the checkpoint lmc saves after
the step must match JAX's parameters, optimizer state and BN running statistics to f32
tolerance.  JAX side: conv via lax.conv_general_dilated (NCHW/OIHW, XLA-SAME padding), BN with
batch statistics (ε = 1e-5, biased variance), softmax cross-entropy mean over the batch;
SGD and SGD+momentum with coupled L2 (g + wd·θ, as torch.optim.SGD and lmc's templates);
AdamW β 0.9/0.999, ε 1e-8, bias correction at t = 1, decoupled decay on the old θ."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

jax = pytest.importorskip("jax")
pytest.importorskip("iree.runtime")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from lmc.cli import app  # noqa: E402
from lmc.infer import infer  # noqa: E402
from lmc.spec import load_spec  # noqa: E402

pytestmark = [pytest.mark.iree, pytest.mark.jax]

B, NC = 8, 5
NETS = {
    # conv2d (bias, relu) → pool → dense relu → dense
    "plain": """
  - conv2d: {ic: 2, oc: 3, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - flatten
  - dense: {fan_in: 27, fan_out: 6, act: relu}
  - dense: {fan_in: 6, fan_out: 5}
""",
    # conv_bn → pool → conv_bn → global average pool → dense
    "bn": """
  - conv_bn: {ic: 2, oc: 3, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - conv_bn: {ic: 3, oc: 4, k_size: 3}
  - global_avg_pool
  - dense: {fan_in: 4, fan_out: 5}
""",
}
OPTS = {
    "sgd": "learning_rate: 0.1, weight_decay: 0.01",
    "momentum": "learning_rate: 0.1, momentum: 0.9, weight_decay: 0.01",
    "adamw": "learning_rate: 0.003, use_adam: true, weight_decay: 0.05",
}


def spec_text(net: str, opt: str) -> str:
    return (f"name: oracle_{net}\ninput: {{channels: 2, height: 6, width: 6}}\ndataset: npz\nlayers:{NETS[net]}"
            f"train: {{batch_size: {B}, epochs: 1, bn_momentum: 0.9, {OPTS[opt]}}}\n")


# ------------------------------------------------------------------------------------ JAX

def _forward(layers, params, x):
    """layers: [(kind, fields)]; params: list in ABI order.  Returns logits and BN batch stats."""
    it = iter(params)
    stats = []

    def conv(x, w):
        k = w.shape[-1]
        p = (k - 1) // 2                           # stride 1, odd k: XLA SAME = symmetric
        return lax.conv_general_dilated(x, w, (1, 1), [(p, p), (p, p)],
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                        precision=lax.Precision.HIGHEST)

    for kind, f in layers:
        if kind == "conv2d":
            w, b = next(it), next(it)
            x = jax.nn.relu(conv(x, w) + b[None, :, None, None])
        elif kind == "conv_bn":
            w, g, beta = next(it), next(it), next(it)
            y = conv(x, w)
            mu = y.mean(axis=(0, 2, 3))
            var = ((y - mu[None, :, None, None]) ** 2).mean(axis=(0, 2, 3))       # biased
            stats += [mu, var]
            yh = (y - mu[None, :, None, None]) / jnp.sqrt(var[None, :, None, None] + 1e-5)
            x = jax.nn.relu(yh * g[None, :, None, None] + beta[None, :, None, None])
        elif kind == "max_pool":
            s = f["size"]
            x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, s, s), (1, 1, f["stride"], f["stride"]), "SAME")
        elif kind == "flatten":
            x = x.reshape(x.shape[0], -1)
        elif kind == "global_avg_pool":
            x = x.mean(axis=(2, 3))
        elif kind == "dense":
            w, b = next(it), next(it)
            x = jnp.dot(x, w, precision=lax.Precision.HIGHEST) + b
            if f.get("act") == "relu":
                x = jax.nn.relu(x)
        else:
            raise AssertionError(kind)
    return x, stats


def jax_step(layers, params, state, x, y, opt, hp):
    def loss_fn(ps):
        logits, stats = _forward(layers, ps, x)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(logp[jnp.arange(len(y)), y]), stats

    (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    lr, wd = hp["lr"], hp["wd"]
    new_p, new_o = [], []
    if opt == "sgd":
        new_p = [p - lr * (g + wd * p) for p, g in zip(params, grads)]
    elif opt == "momentum":
        bufs = [hp["mu"] * 0.0 + g + wd * p for p, g in zip(params, grads)]      # buf₀ = 0
        new_p = [p - lr * b for p, b in zip(params, bufs)]
        new_o = bufs
    else:                                                                        # adamw, t = 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        ms = [(1 - b1) * g for g in grads]
        vs = [(1 - b2) * g * g for g in grads]
        new_p = [p - lr * (m / (1 - b1)) / (jnp.sqrt(v / (1 - b2)) + eps) - lr * wd * p
                 for p, m, v in zip(params, ms, vs)]
        new_o = ms + vs
    m = hp["bn_momentum"]
    new_s = [m * s + (1 - m) * b for s, b in zip(state, stats)]
    return float(loss), [np.asarray(a) for a in new_p], [np.asarray(a) for a in new_o], [np.asarray(a) for a in new_s]


# ------------------------------------------------------------------------------------ the test

@pytest.mark.parametrize("net_kind", ["plain", "bn"])
@pytest.mark.parametrize("opt", ["sgd", "momentum", "adamw"])
def test_one_lmc_step_equals_jax(tmp_path, net_kind, opt):
    text = spec_text(net_kind, opt)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(text)
    net = infer(load_spec(spec_path))
    rng = np.random.default_rng(11)
    params = [rng.standard_normal(p.type.dims).astype(np.float32) * (0.5 if p.type.rank > 1 else 0.1)
              + (1.0 if p.name.endswith("gamma") else 0.0) for p in net.params]
    state = [(rng.uniform(0.5, 1.5, s.type.dims) if s.name.endswith("var") else rng.standard_normal(s.type.dims))
             .astype(np.float32) for s in net.state]
    np.savez(tmp_path / "init.npz", **{p.name: a for p, a in zip(net.params, params)},
             **{s.name: a for s, a in zip(net.state, state)})
    x = rng.standard_normal((B, 2, 6, 6)).astype(np.float32)
    y = rng.integers(0, NC, B).astype(np.int32)
    np.savez(tmp_path / "batch.npz", x=x, y=y, x_val=x, y_val=y)

    r = CliRunner().invoke(app, ["train", str(spec_path), "--init", str(tmp_path / "init.npz"),
                                 "--data", str(tmp_path / "batch.npz"), "--steps", "1", "--no-shuffle",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "run" / "last.npz") as f:
        got = {k: f[k] for k in f.files}

    layers = [(e.kind, {k: getattr(getattr(e.layer, k), "value", getattr(e.layer, k))
                        for k in e.layer.__dataclass_fields__}) for e in net.spec.layers]
    cfg = net.spec.train
    hp = {"lr": cfg.learning_rate, "wd": cfg.weight_decay, "mu": cfg.momentum, "bn_momentum": cfg.bn_momentum}
    loss, new_p, new_o, new_s = jax_step(layers, [jnp.asarray(a) for a in params], [jnp.asarray(a) for a in state],
                                         jnp.asarray(x), jnp.asarray(y), opt, hp)
    meta = json.loads(str(got["__lmc__"]))
    assert meta["step"] == 1 and meta["loss"] == pytest.approx(loss, rel=1e-5)
    for p, want in zip(net.params, new_p):
        np.testing.assert_allclose(got[p.name], want, rtol=2e-5, atol=2e-6, err_msg=p.name)
    assert any(not np.allclose(got[p.name], a) for p, a in zip(net.params, params))
    slots = {"sgd": [], "momentum": ["momentum"], "adamw": ["m", "v"]}[opt]
    keys = [f"opt.{s}.{p.name}" for s in slots for p in net.params]
    assert sorted(k for k in got if k.startswith("opt.")) == sorted(keys)
    for k, want in zip(keys, new_o):
        np.testing.assert_allclose(got[k], want, rtol=2e-5, atol=1e-7, err_msg=k)
    for s, want in zip(net.state, new_s):
        np.testing.assert_allclose(got[s.name], want, rtol=2e-5, atol=2e-6, err_msg=s.name)
