"""Initial parameters and BN running statistics for a TypedNet, in ABI order.

Input: the net (its `params` and `state`, in `lmc info --params` order) and the recipe's seed.
Output: one float32 array per parameter and per state tensor.

Rules (the seed's; training.md §5.2/§5.3, not the Lean IREE path's fan-in Bates-3 sampler):
  he            normal, std √(2/fan_out)                 conv weights [oc, ic, k, k]
  glorot        uniform ±√(6/(fan_in + fan_out))         dense weights [in, out]
  normal        normal, std Param.std
  trunc_normal  normal, std Param.std, redrawn outside ±2·std
  zeros / ones  biases, BN β / BN γ; BN running mean 0, running var 1
  constant      every element Param.std (ConvNeXt's LayerScale, 1e-6)
  uniform       U(±Param.std)

Recipe switches that replace these rules (training.md §5.2, `recipe_inits`):
  vit_init      every 2-D weight (dense, linear: q/k/v/out, MLP, heads) trunc_normal 0.02 (biases
                stay 0), the patch_embed conv U(±1/√(ic·p²)), its class token and position table
                normal 0.02; LayerNorm stays (1, 0)
  cnx_init      every conv and linear weight (rank ≥ 2) trunc_normal 0.02; LN (1, 0) and the
                LayerScale 1e-6 stay
Any other kind is refused: silently drawing something plausible would train a different net.

Determinism: tensor i draws from its own `Generator(PCG64([seed, INIT_STREAM, i]))`, so the
same seed gives bit-identical tensors (in float64, then rounded to float32) on every platform,
and adding a layer at the end never changes the earlier layers' draws."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from lmc.core.errors import SpecError
from lmc.graph.infer import param_prefix

INIT_STREAM = 0x1A17      # mixed into the seed so init never shares a stream with the data order
KINDS = ("he", "glorot", "normal", "trunc_normal", "zeros", "ones", "constant", "uniform")


def recipe_inits(net) -> dict:
    """param name → the Param with the init rule vit_init / cnx_init give it (only those that change)."""
    cfg = getattr(getattr(net, "spec", None), "train", None)
    out = {}
    if cfg is None or not (cfg.vit_init or cfg.cnx_init):
        return out
    weight = lambda p: p.name.endswith("weight")     # noqa: E731  (biases, norms, tokens keep theirs)
    for layer in net.layers:
        for p in layer.params:
            if cfg.vit_init and layer.kind == "patch_embed":
                short = p.name.rsplit(".", 1)[-1]
                if short == "weight":
                    fan_in = math.prod(p.type.dims[1:])
                    out[p.name] = replace(p, init="uniform", std=1.0 / math.sqrt(fan_in))
                elif short in ("cls", "pos"):
                    out[p.name] = replace(p, init="normal", std=0.02)
            elif cfg.vit_init and weight(p) and p.type.rank == 2:
                out[p.name] = replace(p, init="trunc_normal", std=0.02)
            elif cfg.cnx_init and weight(p) and p.type.rank >= 2:
                out[p.name] = replace(p, init="trunc_normal", std=0.02)
    return out


def init_tensors(net, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(params, state): fresh float32 arrays in ABI order."""
    rules = recipe_inits(net)
    params = [_draw(rules.get(p.name, p), np.random.Generator(np.random.PCG64([seed % 2**64, INIT_STREAM, i])))
              for i, p in enumerate(net.params)]
    state = [_constant(s.name, s.init, s.type.dims) for s in net.state]
    return params, state


def _constant(name: str, kind: str, dims) -> np.ndarray:
    if kind == "zeros":
        return np.zeros(dims, np.float32)
    if kind == "ones":
        return np.ones(dims, np.float32)
    raise SpecError(f"tensor {name}: unknown init {kind!r} for a constant tensor (known: zeros, ones)")


def _draw(p, rng: np.random.Generator) -> np.ndarray:
    dims = p.type.dims
    if p.init in ("zeros", "ones"):
        return _constant(p.name, p.init, dims)
    if p.init == "constant":
        return np.full(dims, p.std, np.float32)
    if p.init == "uniform":
        return rng.uniform(-p.std, p.std, dims).astype(np.float32)
    if p.init == "he":
        if p.fan_out <= 0:
            raise SpecError(f"parameter {p.name}: He init needs fan_out > 0 (a bug in its layer)")
        return (rng.standard_normal(dims) * math.sqrt(2.0 / p.fan_out)).astype(np.float32)
    if p.init == "glorot":
        if p.fan_in + p.fan_out <= 0:
            raise SpecError(f"parameter {p.name}: Glorot init needs fan_in + fan_out > 0 (a bug in its layer)")
        a = math.sqrt(6.0 / (p.fan_in + p.fan_out))
        return rng.uniform(-a, a, dims).astype(np.float32)
    if p.init in ("normal", "trunc_normal"):
        if not p.std > 0:
            raise SpecError(f"parameter {p.name}: {p.init} init needs std > 0, got {p.std}")
        z = rng.standard_normal(dims)
        if p.init == "trunc_normal":
            out = np.abs(z) > 2.0
            while out.any():                  # redraw the tails: a normal truncated at ±2σ
                z[out] = rng.standard_normal(int(out.sum()))
                out = np.abs(z) > 2.0
        return (z * p.std).astype(np.float32)
    raise SpecError(f"parameter {p.name}: unknown init kind {p.init!r} (known: {', '.join(KINDS)})",
                     hint="add the rule to lmc/graph/init.py")


def apply_det_prior(params: list[np.ndarray], net, cfg) -> list[str]:
    """`det_prior_pi` π (RetinaNet's prior for the FPN detector, layers.md §3.43): every
    objectness bias — channel a·15 + 4 of each level's head bias [15·A] — becomes −log((1−π)/π),
    so the head starts at sigmoid = π; the box and class biases stay 0.  0 = off.  Refused on a
    net without an fpn_detect head.  Replaces params in place."""
    pi = float(cfg.det_prior_pi)
    if pi == 0.0:
        return []
    heads = [e for e in net.spec.layers if e.layer.kind == "fpn_detect"]
    if not heads:
        raise SpecError(f"train.det_prior_pi {pi:g}: it initialises fpn_detect's objectness biases, and this "
                         f"net has no fpn_detect head", hint="drop det_prior_pi")
    b = -np.log((1.0 - pi) / pi)
    where = {p.name: i for i, p in enumerate(net.params)}
    names = []
    for e in heads:
        for lvl in (3, 4, 5):
            name = f"{param_prefix(e)}head{lvl}.bias"
            bias = params[where[name]].copy()
            bias[4::15] = b
            params[where[name]] = bias.astype(np.float32)
            names.append(name)
    return [f"detector prior: objectness of {', '.join(names)} = −log((1−π)/π) = {b:.3f}"]


def apply_head_prior(params: list[np.ndarray], net, cfg) -> list[str]:
    """`head_prior_bias` π (RetinaNet's prior init, training.md §1 step 2): the head's bias — the
    last parameter tensor, which must be a [NC] bias — becomes log π_c, so the net starts out
    predicting the class prior instead of a uniform distribution.  Replaces params in place."""
    prior = np.asarray(cfg.head_prior_bias, np.float64)
    if prior.size == 0:
        return []
    last = net.params[-1] if net.params else None
    if last is None or last.type.dims != (prior.size,):
        raise SpecError(f"train.head_prior_bias: {prior.size} values, but the net's last parameter is "
                         f"{last.name + ' ' + str(list(last.type.dims)) if last else 'missing'}, not a "
                         f"[{prior.size}] head bias", hint="end the net with a dense (or 1×1 conv) layer with a bias")
    if not (prior > 0).all():
        raise SpecError(f"train.head_prior_bias: priors must be > 0 (their log is the bias), got {prior.tolist()}")
    params[-1] = np.log(prior).astype(np.float32)
    return [f"head prior: {last.name} = log π"]
