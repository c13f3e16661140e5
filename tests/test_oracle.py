"""End-to-end oracle [iree, jax]: a whole compiled @train_step against the same step in JAX.

For every registered layer kind that lowers × its examples, a tiny classifier around it (the
layer, then flatten + dense to NC classes) is lowered, compiled (llvm-cpu) and run for two
steps; after each step the updated params, optimizer state, BN running statistics, loss and
correct-count must match an independent computation in float64 JAX:

- forward: the TypedNet's own primitive graph (net.graph.nodes) evaluated with each
  primitive's `reference(jnp, ...)` (BN with batch statistics);
- loss written here from reference/losses.md; gradients by jax.value_and_grad;
- optimizer updates and running statistics written here from reference/optimizers.md:
    SGD       g += wd·θ;  θ −= lr·g                 (torch.optim.SGD)
    momentum  g += wd·θ;  buf = μ·buf + g;  θ −= lr·buf
    Adam(W)   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;  m̂, v̂ bias-corrected with t;
              θ −= lr·m̂/(√v̂ + ε) + lr·wd·θ_old      (β1 .9, β2 .999, ε 1e-8, decoupled decay)
    wd_exclude_norm_bias: tensors of rank < 2 get no decay;
    BN running = m·running + (1−m)·batch stat (m = bn_momentum, biased variance).

Hyperparameters are runtime values (hp vector), so one compiled module serves several
recipes: a test compiles one module and runs each of its runtime variants (weight decay on
and off, label smoothing on and off), asserting that the variant lowers to the same text.

Default run: each layer example with one (loss, optimizer) pair, rotating through all of them,
plus the full loss × optimizer grid on a small MLP.  `-m slow` runs the full
grid for every layer example.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
# Skip most XLA optimizations: they cost ~60% of compiling each oracle step (seconds per net)
# and only change float64 rounding, orders of magnitude below the tolerances here.
jax.config.update("jax_disable_most_optimizations", True)
import jax.numpy as jnp  # noqa: E402

from lmc.infer import infer  # noqa: E402
from lmc.layers import all_layers, lowers  # noqa: E402
from lmc.lower import abi, hyperparams, lower  # noqa: E402
from lmc.spec import load_spec  # noqa: E402

pytestmark = [pytest.mark.iree, pytest.mark.jax]

NC = 3              # classes of every test net
BN_MOMENTUM = 0.9   # not the default 0.99, so the batch statistics visibly move the estimates
STEPS = 2

# name → (train fields in YAML, runtime variants: [(name, train-field overrides)])
LOSSES = {
    "class_ce": ({}, [("", {}), ("ls0.1", {"label_smoothing": 0.1})]),
    "soft_label_ce": ({"loss_kind": "soft_label_ce"}, [("", {})]),
}
OPTIMIZERS = {
    "sgd": ({"learning_rate": 0.1}, [("", {}), ("wd", {"weight_decay": 0.05})]),
    "momentum": ({"learning_rate": 0.1, "momentum": 0.9, "wd_exclude_norm_bias": True},
                 [("wd", {"weight_decay": 0.05})]),
    "adam": ({"learning_rate": 0.01, "use_adam": True}, [("", {}), ("adamw", {"weight_decay": 0.05})]),
    "adamw_excl": ({"learning_rate": 0.01, "use_adam": True, "wd_exclude_norm_bias": True},
                   [("wd", {"weight_decay": 0.05})]),
}
COMBOS = list(itertools.product(LOSSES, OPTIMIZERS))

# Tolerances, each relative to the size of what is compared, plus the f32 rounding of the
# stored result (see _compare):
#   param: |θ' − θ'_jax| over the size of this step's update max|θ'_jax − θ_jax| (much
#          stricter than relative to θ: the update is what the gradient decides), widened
#          for Adam where √v̂ is small (see _param_allowance);
#   opt:   momentum buffer, Adam m and v, over max|value|;   state: BN running mean/var, ditto;
#   loss:  relative.
# Observed worst fractions of these bounds over the full grid (-m slow: 152 runs, IREE 3.13
# llvm-cpu vs float64 JAX): param 0.10, opt 0.065, state 0.022, loss 0.036.
RTOL = {"param": 1e-4, "opt": 1e-4, "state": 1e-5, "loss": 1e-5}
F32_EPS = float(np.finfo(np.float32).eps)


def F32(v) -> float:
    """A hyperparameter as the module receives it: the hp vector is f32, so β2 = 0.999 arrives
    as 0.99900001 and 1 − β2 is 1.3e-5 off — the oracle computes with the same values, so a
    tolerance never has to absorb that."""
    return float(np.float32(v))


# ----------------------------------------------------------------------------- nets


def _dims(dims) -> str:
    return "x".join(str(d) for d in dims)


def _layer_yaml(kind: str, fields: dict) -> str:
    if not fields:
        return f"  - {kind}"
    return f"  - {kind}: {{{', '.join(f'{k}: {v}' for k, v in fields.items())}}}"


def _input_yaml(dims) -> str:
    if len(dims) == 2:
        return f"{{features: {dims[1]}}}"
    _, c, h, w = dims
    return f"{{channels: {c}, height: {h}, width: {w}}}"


def _train_yaml(batch: int, fields: dict) -> str:
    f = {"batch_size": batch, "epochs": 1, "bn_momentum": BN_MOMENTUM, **fields}
    return "{" + ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in f.items()) + "}"


def classifier_yaml(layers: list[tuple[str, dict]], x_dims, style: str, train: dict) -> str:
    """A spec: the given layers, then flatten (if still an image) and dense → NC classes."""
    head = f"name: oracle\ninput: {_input_yaml(x_dims)}\nconv_pad_style: {style}\nlayers:\n"
    body = "\n".join(_layer_yaml(k, f) for k, f in layers) + "\n"
    out = infer(load_spec("oracle.yaml", text=head + body)).output.type
    extra = []
    if out.rank == 4:
        extra.append(("flatten", {}))
    extra.append(("dense", {"fan_in": out.size // out.dims[0], "fan_out": NC}))
    body += "\n".join(_layer_yaml(k, f) for k, f in extra) + "\n"
    return head + body + f"train: {_train_yaml(x_dims[0], train)}\n"


def _graph_key(net):
    return [(n.prim.key() if n.prim else None) for n in net.graph.nodes]


def _styles(kind, fields, x_dims):
    """Both conv_pad_style values where they build different graphs, else just the default."""
    nets = {s: infer(load_spec("o.yaml", text=classifier_yaml([(kind, fields)], x_dims, s, {"learning_rate": 0.1})))
            for s in ("xla_same", "symmetric")}
    if _graph_key(nets["xla_same"]) == _graph_key(nets["symmetric"]):
        return ["xla_same"]
    return ["xla_same", "symmetric"]


def _fmt(v) -> str:
    return str(getattr(v, "value", v))


def _layer_cases():
    cases = []
    for kind, cls in sorted(all_layers().items()):
        if not lowers(cls):                   # kinds with declared-only primitives cannot be lowered yet
            continue
        for fields, x in cls.examples:
            desc = ",".join([f"{k}={_fmt(v)}" for k, v in fields.items()] + [f"x={_dims(x.dims)}"])
            for style in _styles(kind, fields, x.dims):
                cases.append((f"{kind}[{desc}]-{style}", [(kind, fields)], x.dims, style))
    return cases


LAYER_CASES = _layer_cases()
# the grid net for loss × optimizer: a small MLP (weights of rank 2, biases of rank 1 for
# wd_exclude_norm_bias), the cheapest module to compile; BN running statistics and conv
# weights meet every optimizer through the rotating layer cases (all of them under -m slow)
GRID_NET = ("grid[dense+relu,x=3x6]", [("dense", {"fan_in": 6, "fan_out": 5, "act": "relu"})], (3, 6), "xla_same")
# the eval net: odd input, strided xla_same conv_bn (BN with running statistics), max_pool
EVAL_NET = ([("conv_bn", {"ic": 2, "oc": 3, "k_size": 3, "stride": 2}), ("max_pool", {"size": 2, "stride": 2})],
            (3, 2, 7, 7), "xla_same")


def _params():
    default, slow = [], []
    for i, (cid, layers, x, style) in enumerate(LAYER_CASES):
        for j, (loss, opt) in enumerate(COMBOS):
            p = (cid, layers, x, style, loss, opt)
            if j == i % len(COMBOS):
                default.append(pytest.param(*p, id=f"{cid}-{loss}-{opt}"))
            else:
                slow.append(pytest.param(*p, id=f"{cid}-{loss}-{opt}", marks=pytest.mark.slow))
    gid, glayers, gx, gstyle = GRID_NET
    grid = [pytest.param(gid, glayers, gx, gstyle, loss, opt, id=f"{gid}-{loss}-{opt}") for loss, opt in COMBOS]
    return default + grid + slow


# ----------------------------------------------------------------------------- the JAX oracle


def jax_forward(net, params: dict, x, state: dict | None = None):
    """Evaluate the net's primitive graph with the primitives' references in jax.numpy.
    state None: training (each primitive's batch statistics, from `stats_reference`, are
    returned by state name); else eval (`eval_reference` with the running state)."""
    vals = {net.graph.x.id: x}
    stats = {}
    for node in net.graph.nodes:
        prim = node.prim
        args = [vals[v.id] for v in node.inputs] + [params[p.name] for p in node.params]
        if state is None:
            vals[node.out.id] = prim.reference(jnp, *args, **prim.attrs)
            if node.state:
                batch = prim.stats_reference(jnp, *args, **prim.attrs)
                assert len(batch) == len(node.state), f"{prim.name}: {len(batch)} stats for {len(node.state)} states"
                stats.update((s.name, b) for s, b in zip(node.state, batch))
        else:
            vals[node.out.id] = prim.eval_reference(jnp, *args, *[state[s.name] for s in node.state], **prim.attrs)
    return vals[net.output.id], stats


def jax_loss(logits, labels, kind: str, ls):
    """losses.md §2/§3: mean over the batch of −Σ_c t·log_softmax(z)."""
    logp = jax.nn.log_softmax(logits, axis=1)
    if kind == "class_ce":
        t = (1.0 - ls) * jax.nn.one_hot(labels, logits.shape[1]) + ls / logits.shape[1]
    else:
        t = labels
    return -jnp.sum(t * logp) / logits.shape[0]


def jax_correct(logits, labels, kind: str):
    """(count, ambiguous): rows whose arg-max logit is the label (class_ce) / holds the row's
    largest target (soft_label_ce); `ambiguous` counts rows whose top two logits are so close
    that f32 rounding may reorder them."""
    z = np.asarray(logits)
    top = np.argmax(z, axis=1)
    if kind == "class_ce":
        hit = top == np.asarray(labels)
    else:
        t = np.asarray(labels)
        hit = t[np.arange(len(t)), top] >= t.max(axis=1)
    s = np.sort(z, axis=1)
    ambiguous = int(np.sum(s[:, -1] - s[:, -2] < 1e-4 * (1 + np.abs(s[:, -1]))))
    return int(hit.sum()), ambiguous


def make_jax_step(net, loss_kind: str, opt: str, decay: dict):
    """One train step in float64 JAX, jitted once per test (the eager version spends seconds
    dispatching and compiling single ops):
    step(P, O, S, x, labels, hp) -> (P', O', S', loss, logits), hp = (lr, wd, μ, ls, t)."""

    def step(P, O, S, x, labels, hp):
        lr, wd, mu, ls, t = hp

        def loss_of(p):
            logits, stats = jax_forward(net, p, x)
            return jax_loss(logits, labels, loss_kind, ls), (logits, stats)

        (loss, (logits, stats)), g = jax.value_and_grad(loss_of, has_aux=True)(P)
        nP, nO = {}, {k: {} for k in O}
        for name, th in P.items():
            gi = g[name]
            if opt == "adam":
                b1, b2, eps = F32(0.9), F32(0.999), F32(1e-8)
                m = b1 * O["m"][name] + (1 - b1) * gi
                v = b2 * O["v"][name] + (1 - b2) * gi ** 2
                mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
                upd = mhat / (jnp.sqrt(vhat) + eps)
                nP[name] = th - lr * upd - (lr * wd * th if decay[name] else 0.0)   # decoupled, old θ
                nO["m"][name], nO["v"][name] = m, v
            else:
                gd = gi + wd * th if decay[name] else gi                             # coupled (torch SGD)
                if opt == "momentum":
                    gd = mu * O["momentum"][name] + gd
                    nO["momentum"][name] = gd
                nP[name] = th - lr * gd
        m = F32(BN_MOMENTUM)
        nS = {k: m * S[k] + (1 - m) * stats[k] for k in S}
        return nP, nO, nS, loss, logits

    return jax.jit(step)


# ----------------------------------------------------------------------------- helpers


@functools.lru_cache(maxsize=None)
def _module(text: str):
    from lmc.compile import compile_module
    from lmc.runtime import Module
    # local-sync: no worker threads to fight over the cores with the other test process
    return Module(compile_module(text).path, driver="local-sync")


def _init(net, rng):
    """Random f32 params (scaled as their init says, gammas and betas perturbed so they
    matter) and running statistics."""
    P = {}
    for p in net.params:
        d = p.type.dims
        if p.init == "he":
            v = rng.standard_normal(d) * np.sqrt(2.0 / p.fan_in)
        elif p.init == "glorot":
            v = rng.standard_normal(d) * np.sqrt(2.0 / (p.fan_in + p.fan_out))
        elif p.init == "ones":
            v = 1.0 + 0.2 * rng.standard_normal(d)
        else:
            v = 0.2 * rng.standard_normal(d)
        P[p.name] = v.astype(np.float32)
    S = {}
    for s in net.state:
        v = rng.uniform(0.5, 1.5, s.type.dims) if s.init == "ones" else 0.2 * rng.standard_normal(s.type.dims)
        S[s.name] = v.astype(np.float32)
    return P, S


def _batch(net, loss_kind, rng):
    x = rng.standard_normal(net.input.dims).astype(np.float32)
    b = net.input.dims[0]
    if loss_kind == "class_ce":
        return x, rng.integers(0, NC, b).astype(np.int32)
    return x, rng.dirichlet(np.ones(NC), b).astype(np.float32)      # soft targets, rows sum to 1


def _compare(what: str, got, want, allowed, failures: list) -> float:
    """Elementwise |got − want| ≤ allowed (scalar or array) + the f32 rounding of the stored
    result (2·eps·|want|).  Returns the largest fraction of that bound used (≤ 1 passes)."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        failures.append(f"{what}: shape {got.shape}, expected {want.shape}")
        return float("inf")
    bound = np.broadcast_to(allowed + 2 * F32_EPS * np.abs(want) + 1e-30, want.shape)
    ratio = np.abs(got - want) / bound
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(ratio), ratio.shape))
    if ratio[worst] > 1:
        failures.append(f"{what}: |got − want| = {abs(got[worst] - want[worst]):.3g} at {worst} "
                        f"(got {got[worst]:.9g}, want {want[worst]:.9g}; allowed {bound[worst]:.3g})")
    return float(ratio[worst])


def _param_allowance(opt: str, upd: float, lr: float, m, v, t: int, m_scale: float = 0.0):
    """How far θ' may be off: RTOL·(the size of this step's update).  Adam divides by √v̂
    elementwise, so an element with a small gradient (√v̂ ≪ the gradients' scale) turns the
    f32 error of its gradient into a large relative error of its step; first-order propagation
    of a gradient error δg = RTOL·scale gives the extra term 2·lr·δg/(√v̂ + ε) (from m̂ and
    from √v̂, using |m̂| ≲ √v̂).  The scale is the larger of this tensor's largest |m̂| and
    `m_scale` (the net's largest |m̂| × f32 ε): a tensor whose true gradient is exactly zero
    (a BN shift followed by another BN, e.g. uib's pre_dw.beta) still gets f32 rounding noise
    of that size, which Adam normalizes into a full-size step of random sign."""
    allowed = RTOL["param"] * upd
    if opt == "adam":
        mhat = np.abs(np.asarray(m)) / (1 - F32(0.9) ** t)
        vhat = np.asarray(v) / (1 - F32(0.999) ** t)
        scale = max(float(mhat.max()), m_scale / RTOL["param"])
        allowed = allowed + 2 * lr * RTOL["param"] * scale / (np.sqrt(vhat) + F32(1e-8))
    return allowed


def run_oracle(layers, x_dims, style, loss, opt, seed=0):
    """Compile one module and run each runtime variant of (loss, opt) for STEPS steps against
    JAX.  Returns the worst error ratios seen (for tolerance reports)."""
    lfields, lvariants = LOSSES[loss]
    ofields, ovariants = OPTIMIZERS[opt]
    base = {**lfields, **ofields}
    net = infer(load_spec("oracle.yaml", text=classifier_yaml(layers, x_dims, style, base)))
    text = lower(net, "train_step")
    mod = _module(text)
    a = abi(net)
    decay = {p.name: not (net.spec.train.wd_exclude_norm_bias and p.type.rank < 2) for p in net.params}
    kind = "adam" if a.opt_slots == ("m", "v") else ("momentum" if a.opt_slots else "sgd")
    jstep = make_jax_step(net, loss, kind, decay)
    worst: dict[str, float] = {}
    for (ln, lo), (on, oo) in itertools.product(lvariants, ovariants):
        variant = "+".join(n for n in (loss, ln, opt, on) if n)
        vspec = load_spec("oracle.yaml", text=classifier_yaml(layers, x_dims, style, {**base, **lo, **oo}))
        vnet = infer(vspec)
        # hyperparameters are runtime values: the variant must be the very same module
        assert lower(vnet, "train_step") == text, f"{variant}: a runtime hyperparameter changed the module text"
        cfg = vspec.train
        rng = np.random.default_rng(seed)
        P, S = _init(net, rng)
        O = {slot: {p.name: np.zeros(p.type.dims, np.float32) for p in net.params} for slot in a.opt_slots}
        JP = {k: jnp.asarray(v, jnp.float64) for k, v in P.items()}
        JO = {s: {k: jnp.asarray(v, jnp.float64) for k, v in d.items()} for s, d in O.items()}
        JS = {k: jnp.asarray(v, jnp.float64) for k, v in S.items()}
        failures: list[str] = []
        for step in range(1, STEPS + 1):
            x, labels = _batch(net, loss, rng)
            hp = np.asarray(hyperparams(cfg, cfg.learning_rate, step), np.float32)
            args = [P[p.name] for p in net.params] + [O[s][p.name] for s in a.opt_slots for p in net.params] + \
                   [S[s.name] for s in net.state] + [x, labels, hp]
            out = [np.asarray(r) for r in mod.train_step(*args)]
            n_p, n_o = len(net.params), len(a.opt_slots) * len(net.params)
            assert len(out) == n_p + n_o + len(net.state) + 2
            prevJP = JP
            jhp = tuple(jnp.float64(F32(v)) for v in (cfg.learning_rate, cfg.weight_decay, cfg.momentum,
                                                       cfg.label_smoothing, step))
            JP, JO, JS, jloss, jlogits = jstep(JP, JO, JS, jnp.asarray(x, jnp.float64), jnp.asarray(labels), jhp)
            at = f"{variant} step {step}"

            def check(key, what, got, want, allowed):
                worst[key] = max(worst.get(key, 0.0), _compare(f"{at}: {what}", got, want, allowed, failures))

            m_scale = 0.0
            if kind == "adam":
                m_scale = 8 * float(np.finfo(np.float32).eps) * max(
                    float(np.max(np.abs(np.asarray(JO["m"][p.name])))) for p in net.params) / (1 - F32(0.9) ** step)
            # Absolute floors at the net's scale: a tensor whose true gradient is exactly zero
            # (uib's pre_dw.beta: a BN shift feeding a linear conv and another BN) still carries
            # f32 rounding noise of the size of the net's other gradients; per-tensor relative
            # bounds alone would demand it be exactly zero.
            upds = {p.name: float(np.max(np.abs(np.asarray(JP[p.name]) - np.asarray(prevJP[p.name]))))
                    for p in net.params}
            upd_floor = RTOL["param"] * max(upds.values())
            opt_floor = {s: RTOL["opt"] * max(float(np.max(np.abs(np.asarray(JO[s][p.name])))) for p in net.params)
                         for s in a.opt_slots}
            for i, p in enumerate(net.params):
                allowed = _param_allowance(kind, upds[p.name], F32(cfg.learning_rate), JO.get("m", {}).get(p.name),
                                           JO.get("v", {}).get(p.name), step, m_scale) + upd_floor
                check("param", f"param {p.name}", out[i], JP[p.name], allowed)
                P[p.name] = out[i]
            for j, (s, p) in enumerate((s, p) for s in a.opt_slots for p in net.params):
                want = JO[s][p.name]
                check("opt", f"{s} of {p.name}", out[n_p + j], want,
                      RTOL["opt"] * float(np.max(np.abs(want))) + opt_floor[s])
                O[s][p.name] = out[n_p + j]
            for k, s in enumerate(net.state):
                want = JS[s.name]
                check("state", s.name, out[n_p + n_o + k], want, RTOL["state"] * float(np.max(np.abs(want))))
                S[s.name] = out[n_p + n_o + k]
            check("loss", "loss", out[-2], jloss, RTOL["loss"] * abs(float(jloss)))
            count, ambiguous = jax_correct(jlogits, labels, loss)
            if abs(float(out[-1]) - count) > ambiguous:
                failures.append(f"{at}: correct = {float(out[-1])}, JAX counts {count}")
            # Each step is checked from the same state: continue JAX from lmc's outputs, so an
            # allowed rounding difference (e.g. Adam's random-sign step on a zero gradient) is
            # not compounded into the next step's comparison.
            JP = {k: jnp.asarray(v, jnp.float64) for k, v in P.items()}
            JO = {s: {k: jnp.asarray(v, jnp.float64) for k, v in d.items()} for s, d in O.items()}
            JS = {k: jnp.asarray(v, jnp.float64) for k, v in S.items()}
        assert not failures, f"{len(failures)} mismatches vs JAX:\n" + "\n".join(failures[:12])
    return worst


@pytest.mark.parametrize("cid,layers,x_dims,style,loss,opt", _params())
def test_train_step(cid, layers, x_dims, style, loss, opt):
    run_oracle(layers, x_dims, style, loss, opt)


def test_forward_eval():
    """@forward (eval: BN with running statistics) vs JAX."""
    layers, x_dims, style = EVAL_NET
    net = infer(load_spec("oracle.yaml", text=classifier_yaml(layers, x_dims, style, {"learning_rate": 0.1})))
    mod = _module(lower(net, "forward"))
    rng = np.random.default_rng(1)
    P, S = _init(net, rng)
    x = rng.standard_normal(net.input.dims).astype(np.float32)
    y = np.asarray(mod.forward(*[P[p.name] for p in net.params], *[S[s.name] for s in net.state], x))
    want, _ = jax_forward(net, {k: jnp.asarray(v, jnp.float64) for k, v in P.items()}, jnp.asarray(x, jnp.float64),
                          {k: jnp.asarray(v, jnp.float64) for k, v in S.items()})
    failures = []
    _compare("forward (eval)", y, want, RTOL["state"] * float(np.max(np.abs(want))), failures)
    assert not failures, failures[0]
