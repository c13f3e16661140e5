"""One train step through `lmc train` equals the same step written in JAX.

Both start from the same --init file (random parameters and BN statistics) and see the same
batch (an .npz of exactly one batch, `--max-steps 1 --no-shuffle`); the checkpoint lmc saves after
the step must match JAX's parameters, optimizer state and BN running statistics to f32
tolerance.  JAX side: the forward written here with lax ops (conv via lax.conv_general_dilated,
NCHW/OIHW, XLA-SAME padding; BN with batch statistics, ε = 1e-5, biased variance; softmax
cross-entropy mean over the batch), gradients by jax.value_and_grad, and each tensor's update
by its optimizer's registry reference (lmc/optim/) under jax.numpy — every registered
optimizer's first example, on every net that has a tensor it applies to."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

jax = pytest.importorskip("jax")
pytest.importorskip("iree.runtime")
jax.config.update("jax_enable_x64", True)          # the oracle computes in float64
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from lmc.cli import app  # noqa: E402
from lmc.core.errors import SpecError  # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import abi, hyperparams  # noqa: E402
from lmc.optim import GLOBAL_HP, all_optimizers  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402

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
    # conv_bn → global average pool → a square 16×16 dense (Muon, Shampoo) → dense
    "wide": """
  - conv_bn: {ic: 2, oc: 16, k_size: 3}
  - global_avg_pool
  - dense: {fan_in: 16, fan_out: 16, act: relu}
  - dense: {fan_in: 16, fan_out: 5}
""",
}
def _yaml(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


# every registered optimizer's first example (recipe fields), as YAML flow text
OPTS = {name: ", ".join(f"{k}: {_yaml(v)}" for k, v in cls.examples[0][0].items())
        for name, cls in sorted(all_optimizers().items())}
OPTS["sgd+momentum"] = "learning_rate: 0.1, momentum: 0.9"
WD = 0.01        # weight decay of every case: coupled or decoupled, it takes part in the step


def spec_text(net: str, opt: str) -> str:
    return (f"name: oracle_{net}\ninput: {{channels: 2, height: 6, width: 6}}\ndataset: npz\nlayers:{NETS[net]}"
            f"train: {{batch_size: {B}, epochs: 1, bn_momentum: 0.9, weight_decay: {WD}, {OPTS[opt]}}}\n")


def _cases():
    """(net, optimizer) pairs where the optimizer has a tensor to act on (Muon and Shampoo
    need a dense weight ≥ 16: only the wide net)."""
    out = []
    for net in NETS:
        for opt in OPTS:
            try:
                abi(infer(load_spec("o.yaml", text=spec_text(net, opt))))
            except SpecError:
                continue
            out.append(pytest.param(net, opt, id=f"{opt}-{net}"))
    return out


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


def jax_step(layers, params, state, x, y, net):
    """One step from the formulas: loss and gradients by JAX, each tensor's update by its
    optimizer's registry reference; returns (loss, params', optimizer state' in Abi.opt order,
    state')."""
    def loss_fn(ps):
        logits, stats = _forward(layers, ps, x)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(logp[jnp.arange(len(y)), y]), stats

    (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    a, cfg = abi(net), net.spec.train
    hp = {h: float(np.float32(v)) for h, v in zip(a.hp, hyperparams(a, cfg, cfg.learning_rate, 1))}
    O = dict(zip(a.opt_keys, (jnp.asarray(v) for v in a.initial_opt())))
    new_p, new_o = [], {}
    for p, w, g in zip(net.params, params, grads):
        o = a.optimizers[p.name]
        ohp = {h: hp[h if h in GLOBAL_HP else f"{o.name}.{h}"] for h in o.hp}
        w2, slots = o.reference(jnp, w, g, {s_: O[(s_, p.name)] for s_ in o.slots}, hp["lr"], hp["weight_decay"],
                                a.decay(p.name), **ohp)
        new_p.append(w2)
        new_o.update({(s_, p.name): v for s_, v in slots.items()})
    m = hp["bn_momentum"]
    new_s = [m * s_ + (1 - m) * b for s_, b in zip(state, stats)]
    return (float(loss), [np.asarray(v) for v in new_p], [np.asarray(new_o[k]) for k in a.opt_keys],
            [np.asarray(v) for v in new_s])


# ------------------------------------------------------------------------------------ the test

@pytest.mark.parametrize("net_kind,opt", _cases())
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
                                 "--data", str(tmp_path / "batch.npz"), "--max-steps", "1", "--no-shuffle",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "run" / "last.npz") as f:
        got = {k: f[k] for k in f.files}

    layers = [(e.kind, {k: getattr(getattr(e.layer, k), "value", getattr(e.layer, k))
                        for k in e.layer.__dataclass_fields__}) for e in net.spec.layers]
    f64 = lambda a: jnp.asarray(a, jnp.float64)  # noqa: E731
    loss, new_p, new_o, new_s = jax_step(layers, [f64(a) for a in params], [f64(a) for a in state], f64(x),
                                         jnp.asarray(y), net)
    meta = json.loads(str(got["__lmc__"]))
    assert meta["step"] == 1 and meta["loss"] == pytest.approx(loss, rel=1e-5)
    # f32 against float64: each tensor within RTOL of the size of its own step (parameters) or of
    # its largest value (optimizer state, BN statistics), plus the f32 rounding of the value
    a = abi(net)
    for p, want, old in zip(net.params, new_p, params):
        tol = RTOL * a.optimizers[p.name].oracle_tolerance
        _close(got[p.name], want, tol * np.abs(want - old).max(), p.name)
    assert any(not np.allclose(got[p.name], a) for p, a in zip(net.params, params))
    keys = [f"opt.{s}.{name}" for s, name in abi(net).opt_keys]
    assert sorted(k for k in got if k.startswith("opt.")) == sorted(keys)
    for k, want in zip(keys, new_o):
        _close(got[k], want, RTOL * np.abs(want).max(), k)
    for s, want in zip(net.state, new_s):
        _close(got[s.name], want, RTOL * np.abs(want).max(), s.name)


RTOL = 1e-4


def _close(got, want, allowed, what):
    bound = allowed + 2 * np.finfo(np.float32).eps * np.abs(want) + 1e-30
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound).all(), f"{what}: |got − want| = {err.max():.3g} > {bound[np.unravel_index(np.argmax(err / bound), err.shape)]:.3g}"
