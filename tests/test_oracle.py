"""End-to-end oracle [iree, jax]: a whole compiled @train_step against the same step in JAX.

For every registered layer kind that lowers × its examples, a tiny classifier around it (the
layer, then flatten + dense to NC classes) is lowered, compiled (llvm-cpu) and run for two
steps; after each step the updated params, optimizer state, EMA weights, BN running
statistics, loss and correct-count must match an independent computation in float64 JAX:

- forward: the TypedNet's own primitive graph (net.graph.nodes) evaluated with each
  primitive's `reference(jnp, ...)` (BN with batch statistics);
- loss: the loss registry's `reference(jnp, ...)` (lmc/losses/), gradients by jax.value_and_grad;
- update: the optimizer registry's `reference(jnp, ...)` per tensor (lmc/optim/), after the
  global-norm clip (grad_clip_norm) and with the head's lr × head_lr_mult; EMA and BN running
  statistics as running averages (weight on the old value: ema_decay warmed up, bn_momentum).

Cases come from the registries: every loss's and optimizer's `examples` (recipe fields and
runtime variants) — a new loss or optimizer module is tested with no edit here.  The update
knobs (clip that binds, head multiplier, EMA, weight-decay exclusion) run on the grid net.
Hyperparameters are runtime values (the hp vector), so one compiled module serves several
recipes: each variant must lower to the very same text.

Default run: each layer example with one (loss, optimizer) pair, rotating through all of them,
plus the full loss × optimizer grid and the knobs on a small MLP.  `-m slow` brings every
layer example together with every optimizer kind (the losses rotating); `-m grid` runs the
whole layer × loss × optimizer cross product (about 16,000 steps).  Gradient accumulation (@grad_step/@apply_step) is checked
against the fused step on one batch of k·B and against JAX with per-micro-batch BN.
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

from lmc.graph.infer import infer  # noqa: E402
from lmc.graph.infer import lowers
from lmc.layers import all_layers  # noqa: E402
from lmc.losses import lowered_losses  # noqa: E402
from lmc.lower.lowering import abi, hyperparams, lower  # noqa: E402
from lmc.core.errors import SpecError  # noqa: E402
from lmc.optim import GLOBAL_HP, all_optimizers, assign  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402

pytestmark = [pytest.mark.iree, pytest.mark.jax]

NC = 3              # classes of every test net
BN_MOMENTUM = 0.9   # not the default 0.99, so the batch statistics visibly move the estimates
STEPS = 2



def _registry_cases(registry) -> dict:
    """name → (train fields, runtime variants) from each entry's `examples` (the first example
    keeps the entry's name, later ones get #2, #3, ...)."""
    out = {}
    for name, cls in sorted(registry.items()):
        for i, ex in enumerate(cls.examples):
            out[name if i == 0 else f"{name}#{i + 1}"] = ex
    return out


LOSSES = _registry_cases(lowered_losses())
OPTIMIZERS = _registry_cases(all_optimizers())
# the update-side knobs, on the grid net (name → (train fields, runtime variants))
KNOBS = {
    "clip": ({"learning_rate": 0.01, "use_adam": True, "grad_clip_norm": 0.05}, [("", {})]),
    "clip_sgd": ({"learning_rate": 0.1, "momentum": 0.9, "grad_clip_norm": 0.05}, [("", {})]),
    "head_lr": ({"learning_rate": 0.05, "head_lr_mult": 10.0}, [("", {})]),
    "ema": ({"learning_rate": 0.01, "use_adam": True, "use_ema": True, "ema_decay": 0.5}, [("", {})]),
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
    if len(dims) == 3:             # tokens [B, N, D]: an image [B, D, N, 1] through spatial_flatten
        _, n, d = dims
        return f"{{channels: {d}, height: {n}, width: 1}}"
    _, c, h, w = dims
    return f"{{channels: {c}, height: {h}, width: {w}}}"


def _train_yaml(batch: int, fields: dict) -> str:
    f = {"batch_size": batch, "epochs": 1, "bn_momentum": BN_MOMENTUM, **fields}
    return "{" + ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in f.items()) + "}"


_BODY_OUT: dict = {}


def _body_out(layers, x_dims, style):
    """The body's spec text and its output type (inferred once per text: collection asks for
    every (loss, optimizer) combo of every layer case)."""
    head = f"name: oracle\ninput: {_input_yaml(x_dims)}\nconv_pad_style: {style}\nlayers:\n"
    if len(x_dims) == 3:
        layers = [("spatial_flatten", {})] + list(layers)
    text = head + "\n".join(_layer_yaml(k, f) for k, f in layers) + "\n"
    if text not in _BODY_OUT:
        _BODY_OUT[text] = infer(load_spec("oracle.yaml", text=text)).output.type
    return text, _BODY_OUT[text]


def classifier_yaml(layers: list[tuple[str, dict]], x_dims, style: str, train: dict, loss: str = "class_ce") -> str:
    """A spec: the given layers, then the loss case's head to NC classes (Loss.oracle_head:
    flatten if still an image, then dense; a per-pixel loss's 1×1 conv)."""
    text, out = _body_out(layers, x_dims, style)
    extra = _loss_head(loss, out, train)
    assert extra is not None, f"{loss} cannot follow a body of output {out}"
    text += "\n".join(_layer_yaml(k, f) for k, f in extra) + "\n"
    return text + f"train: {_train_yaml(x_dims[0], train)}\n"


def _loss_class(loss: str):
    return lowered_losses()[loss.split("#")[0]]


def _loss_head(loss: str, out, fields: dict):
    """The loss's oracle head for a body of output `out`; a head that depends on the loss
    case's recipe (yolo's anchors) takes its fields."""
    head = _loss_class(loss).oracle_head
    import inspect
    return head(out, NC, fields) if "fields" in inspect.signature(head).parameters else head(out, NC)


def _graph_key(net):
    return [(n.prim.key() if n.prim else None) for n in net.graph.nodes]


def _styles(layers, x_dims):
    """Both conv_pad_style values where they build different graphs, else just the default."""
    nets = {s: infer(load_spec("o.yaml", text=classifier_yaml(layers, x_dims, s, {"learning_rate": 0.1})))
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
            # a kind reading earlier layers' outputs (skips, taps) comes after the layers it needs
            before, x_dims = cls.net_before(fields, x) or ([], x.dims)
            layers = before + [(kind, fields)]
            for style in _styles(layers, x_dims):
                cases.append((f"{kind}[{desc}]-{style}", layers, x_dims, style))
    return cases


LAYER_CASES = _layer_cases()
# the grid net for loss × optimizer: a small MLP (weights of rank 2, biases of rank 1 for
# wd_exclude_norm_bias), the cheapest module to compile; BN running statistics and conv
# weights meet every optimizer through the layer cases (every optimizer kind under -m slow)
GRID_NET = ("grid[dense+relu,x=3x6]", [("dense", {"fan_in": 6, "fan_out": 5, "act": "relu"})], (3, 6), "xla_same")
# the eval net: odd input, strided xla_same conv_bn (BN with running statistics), max_pool
EVAL_NET = ([("conv_bn", {"ic": 2, "oc": 3, "k_size": 3, "stride": 2}), ("max_pool", {"size": 2, "stride": 2})],
            (3, 2, 7, 7), "xla_same")


def _opt_class(opt: str):
    return all_optimizers()[opt.split("#")[0]]


def grid_net(opt: str, loss: str = "class_ce"):
    """The grid net for a (loss, optimizer) case: GRID_NET, or the loss's own `oracle_net` where
    its logits are not [B, NC] (per-pixel losses), or the optimizer's where it needs tensors
    the small MLP lacks (Muon, Shampoo)."""
    own = _loss_class(loss).oracle_net or _opt_class(opt).oracle_net
    if own is None:
        return GRID_NET
    layers, x = own
    desc = "+".join(f"{k}{f['fan_in']}x{f['fan_out']}" if k == "dense" else k for k, f in layers)
    return (f"grid[{desc},x={_dims(x)}]", layers, x, "xla_same")


_FITS: dict = {}
_ASSIGNS: dict = {}        # (the net's layers as text, optimizer) → whether it applies


def _fits(cid, layers, x, style, loss, opt) -> bool:
    """Whether a (loss, optimizer) case lowers on a layer case's net: the loss's head must fit
    the body (a per-pixel loss needs an image), and an optimizer with a fallback (Muon,
    Shampoo) that applies to none of the net's tensors is refused by `assign`."""
    if (cid, loss, opt) not in _FITS:
        if _loss_head(loss, _body_out(layers, x, style)[1], LOSSES[loss][0]) is None:
            _FITS[cid, loss, opt] = False
        elif _opt_class(opt).fallback is None:
            _FITS[cid, loss, opt] = True
        else:       # whether the optimizer applies to a tensor depends on the layers, not the loss
            text = classifier_yaml(layers, x, style, {**LOSSES[loss][0], **OPTIMIZERS[opt][0]}, loss)
            key = (text[:text.index("\ntrain:")], opt)
            if key not in _ASSIGNS:
                try:
                    assign(infer(load_spec("o.yaml", text=text)))
                    _ASSIGNS[key] = True
                except SpecError:
                    _ASSIGNS[key] = False
            _FITS[cid, loss, opt] = _ASSIGNS[key]
    return _FITS[cid, loss, opt]


def _optimizer_cover(i: int, fit: list[int], first: int) -> set[int]:
    """The combos (indices into COMBOS) that bring layer case i together with every optimizer
    kind once: the default combo, plus for each other kind one of its fitting combos, rotating
    with i so that the cases share out the losses and the optimizers' variants.  A layer meets
    the loss only through the cotangent its head hands back, and an optimizer sees only the
    layer's tensors, so this covers every (layer, optimizer) pair and most (layer, loss) pairs."""
    kinds = sorted({COMBOS[j][1].split("#")[0] for j in fit})
    out = {first}
    for k, kind in enumerate(kinds):
        same = [j for j in fit if COMBOS[j][1].split("#")[0] == kind]
        if first not in same:
            out.add(same[(i + k) % len(same)])
    return out


def _params():
    """Each layer case runs by default with one (loss, optimizer) combo, rotating through COMBOS
    (skipping forward past the combos whose optimizer applies to no tensor of that net); under
    -m slow it meets every optimizer kind once (the loss and the optimizer's variant rotating
    over the fitting ones); the rest of the full layer × loss × optimizer cross product is
    marked `grid` as well (make test-grid, about 17 h on 2 cores).  The grid net runs every
    (loss, optimizer) combo."""
    default, slow = [], []
    for i, (cid, layers, x, style) in enumerate(LAYER_CASES):
        fit = [j for j, (loss, opt) in enumerate(COMBOS) if _fits(cid, layers, x, style, loss, opt)]
        first = min(fit, key=lambda j: (j - i) % len(COMBOS))
        covered = _optimizer_cover(i, fit, first)
        for j in fit:
            loss, opt = COMBOS[j]
            p = (cid, layers, x, style, loss, opt)
            if j == first:
                default.append(pytest.param(*p, id=f"{cid}-{loss}-{opt}"))
            else:
                marks = [pytest.mark.slow] if j in covered else [pytest.mark.slow, pytest.mark.grid]
                slow.append(pytest.param(*p, id=f"{cid}-{loss}-{opt}", marks=marks))
    # the loss cases that meet one optimizer by default (rotating), the others under -m slow:
    # all but the first example of the losses marked `oracle_grid` (class_ce, soft_label_ce),
    # which cross every optimizer — the interaction is the gradient handed over, the same for all
    rotating = [l for l in LOSSES if not (_loss_class(l).oracle_grid and "#" not in l)]
    grid = []
    for loss, opt in COMBOS:
        gid, glayers, gx, gstyle = grid_net(opt, loss)
        if not _fits(gid, glayers, gx, gstyle, loss, opt):
            continue
        opts = [o for o in OPTIMIZERS if _fits(gid, glayers, gx, gstyle, loss, o)]
        slow_here = loss in rotating and opts.index(opt) != rotating.index(loss) % len(opts)
        grid.append(pytest.param(gid, glayers, gx, gstyle, loss, opt, id=f"{gid}-{loss}-{opt}",
                                 marks=[pytest.mark.slow] if slow_here else []))
    return default + grid + slow


# ----------------------------------------------------------------------------- the JAX oracle


def jax_forward(net, params: dict, x, state: dict | None = None, masks: list | None = None):
    """Evaluate the net's primitive graph with the primitives' references in jax.numpy.
    state None: training (each primitive's batch statistics, from `stats_reference`, are
    returned by state name); else eval (`eval_reference` with the running state).  masks: the
    dropout / drop-path masks in Abi order (None: all ones, as @forward)."""
    vals = {net.graph.x.id: x}
    for i, m in enumerate(net.graph.masks):
        vals[m.value.id] = jnp.ones(m.value.type.dims) if masks is None else masks[i]
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


def make_jax_step(net, a):
    """One train step in float64 JAX, jitted once per test (the eager version spends seconds
    dispatching and compiling single ops):
    step(P, O, E, S, x, labels, hp) -> (P', O', E', S', loss, logits, grad norm); hp: name → value.
    O is keyed (slot, param name), as Abi.opt."""
    cfg = net.spec.train
    loss = a.loss

    def step(P, O, E, S, x, labels, hp):
        def loss_of(p):
            logits, stats = jax_forward(net, p, x)
            return loss.reference(jnp, logits, labels, **{h: hp[h] for h in loss.hp}), (logits, stats)

        (lval, (logits, stats)), g = jax.value_and_grad(loss_of, has_aux=True)(P)
        norm = jnp.sqrt(sum(jnp.sum(gi ** 2) for gi in g.values()))
        if cfg.grad_clip_norm > 0:                       # optimizers.md §3.5
            scale = jnp.minimum(1.0, hp["grad_clip_norm"] / (norm + F32(1e-6)))
            g = {k: v * scale for k, v in g.items()}
        nP, nO = {}, {}
        for name, th in P.items():
            o = a.optimizers[name]
            lr = hp["lr"] * hp["head_lr_mult"] if name in a.head else hp["lr"]
            ohp = {h: hp[h if h in GLOBAL_HP else f"{o.name}.{h}"] for h in o.hp}
            nP[name], slots = o.reference(jnp, th, g[name], {s: O[(s, name)] for s in o.slots}, lr,
                                          hp["weight_decay"], a.decay(name), **ohp)
            for s, v in slots.items():
                nO[(s, name)] = v
        nE = {k: hp["ema_decay"] * E[k] + (1 - hp["ema_decay"]) * nP[k] for k in E}
        m = hp["bn_momentum"]
        nS = {k: m * S[k] + (1 - m) * stats[k] for k in S}
        return nP, nO, nE, nS, lval, logits, norm

    return jax.jit(step)


# ----------------------------------------------------------------------------- helpers


@functools.lru_cache(maxsize=None)
def _module(text: str):
    from lmc.compile import compile_module
    from lmc.run.runtime import Module
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


def _batch(net, a, rng):
    # a first layer that reads something other than real values (token ids) draws its input
    first = net.spec.layers[0].layer
    draw = getattr(first, "draw_input", None)
    x = draw(rng, net.input) if draw else rng.standard_normal(net.input.dims).astype(np.float32)
    return x, a.loss.draw_labels(rng, a.labels, a.logits)


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
    ratio = np.where(np.isnan(ratio), np.inf, ratio)      # a NaN (got or want) fails: nan > 1 is False
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(ratio), ratio.shape))
    if ratio[worst] > 1:
        failures.append(f"{what}: |got − want| = {abs(got[worst] - want[worst]):.3g} at {worst} "
                        f"(got {got[worst]:.9g}, want {want[worst]:.9g}; allowed {bound[worst]:.3g})")
    return float(ratio[worst])


def _param_allowance(gain, upd: float, lr: float, m_scale: float):
    """How far θ' may be off: RTOL·(the size of this step's update).  An adaptive optimizer
    (Adam: gain = 1/(√v̂ + ε), the registry's `error_gain`) divides by √v̂ elementwise, so an
    element with a small gradient (√v̂ ≪ the gradients' scale) turns the f32 error of its
    gradient into a large relative error of its step; first-order propagation of a gradient
    error δg = RTOL·scale gives the extra term 2·lr·δg·gain (from m̂ and from √v̂, using
    |m̂| ≲ √v̂).  The scale is the larger of this tensor's largest first moment and `m_scale`
    (the net's largest × f32 ε / RTOL): a tensor whose true gradient is exactly zero (a BN
    shift followed by another BN, e.g. uib's pre_dw.beta) still gets f32 rounding noise of
    that size, which Adam normalizes into a full-size step of random sign."""
    allowed = RTOL["param"] * upd
    if gain is not None:
        allowed = allowed + 2 * lr * RTOL["param"] * m_scale * np.asarray(gain)
    return allowed


def _first_moment(o, slots: dict, t: int):
    """The largest bias-corrected first moment of an adaptive optimizer's tensor (0 if none)."""
    if "m" not in slots:
        return 0.0
    return float(np.max(np.abs(np.asarray(slots["m"])))) / (1 - F32(0.9) ** t)


def _finite(*trees) -> bool:
    """Whether every value of the reference step's outputs is finite."""
    return all(bool(np.all(np.isfinite(np.asarray(v)))) for t in trees
               for v in (t.values() if isinstance(t, dict) else [t]))


def run_oracle(layers, x_dims, style, loss, opt, seed=0, cases=None):
    """Compile one module and run each runtime variant of (loss, opt) for STEPS steps against
    JAX.  `opt` names an OPTIMIZERS case (or, with cases=KNOBS, a knob case).  Returns the worst
    error ratios seen (for tolerance reports)."""
    lfields, lvariants = LOSSES[loss]
    ofields, ovariants = (cases or OPTIMIZERS)[opt]
    base = {**lfields, **ofields}
    net = infer(load_spec("oracle.yaml", text=classifier_yaml(layers, x_dims, style, base, loss)))
    text = lower(net, "train_step")
    mod = _module(text)
    a = abi(net)
    jstep = make_jax_step(net, a)
    worst: dict[str, float] = {}
    for (ln, lo), (on, oo) in itertools.product(lvariants, ovariants):
        variant = "+".join(n for n in (loss, ln, opt, on) if n)
        vspec = load_spec("oracle.yaml", text=classifier_yaml(layers, x_dims, style, {**base, **lo, **oo}, loss))
        vnet = infer(vspec)
        # hyperparameters are runtime values: the variant must be the very same module
        assert lower(vnet, "train_step") == text, f"{variant}: a runtime hyperparameter changed the module text"
        cfg = vspec.train
        rng = np.random.default_rng(seed)
        P, S = _init(net, rng)
        O = dict(zip(a.opt_keys, a.initial_opt()))
        E = {p.name: P[p.name].copy() for p in a.ema}
        j64 = lambda d: {k: jnp.asarray(v, jnp.float64) for k, v in d.items()}  # noqa: E731
        failures: list[str] = []
        for step in range(1, STEPS + 1):
            x, labels = _batch(net, a, rng)
            hpv = hyperparams(a, cfg, cfg.learning_rate, step)
            hp = np.asarray(hpv, np.float32)
            args = [P[p.name] for p in net.params] + [O[k] for k in a.opt_keys] + [E[p.name] for p in a.ema] + \
                   [S[s.name] for s in net.state] + [x, labels, hp]
            out = [np.asarray(r) for r in mod.train_step(*args)]
            n_p, n_o, n_e = len(net.params), len(a.opt), len(a.ema)
            assert len(out) == n_p + n_o + n_e + len(net.state) + 2
            JP = j64(P)
            jhp = {h: jnp.float64(v) for h, v in zip(a.hp, hp)}    # as the module receives them (f32)
            nJP, nJO, nJE, nJS, jloss, jlogits, gnorm = jstep(JP, j64(O), j64(E), j64(S), jnp.asarray(x, jnp.float64),
                                                              jnp.asarray(labels), jhp)
            if cfg.grad_clip_norm > 0:
                assert float(gnorm) > cfg.grad_clip_norm, f"{variant}: the clip does not bind (norm {float(gnorm):.3g})"
            at = f"{variant} step {step}"
            if step > 1 and not _finite(nJP, nJO, nJE, nJS, jloss):
                # The float64 reference overflowed: the previous step (checked) already took the
                # params to ~1e20+ (SGD at lr 0.1 on a summed detection loss of a deep block), and
                # there is nothing left to compare against.  Step 1 is never excused.
                break

            def check(key, what, got, want, allowed):
                worst[key] = max(worst.get(key, 0.0), _compare(f"{at}: {what}", got, want, allowed, failures))

            m_net = max([_first_moment(a.optimizers[p.name], {s: nJO[(s, p.name)] for s in a.optimizers[p.name].slots},
                                       step) for p in net.params])
            m_floor = 8 * F32_EPS * m_net / RTOL["param"]
            # Absolute floors at the net's scale: a tensor whose true gradient is exactly zero
            # (uib's pre_dw.beta: a BN shift feeding a linear conv and another BN) still carries
            # f32 rounding noise of the size of the net's other gradients; per-tensor relative
            # bounds alone would demand it be exactly zero.
            upds = {p.name: float(np.max(np.abs(np.asarray(nJP[p.name]) - np.asarray(JP[p.name])))) for p in net.params}
            upd_floor = RTOL["param"] * max(upds.values())
            opt_floor = {s: RTOL["opt"] * max(float(np.max(np.abs(np.asarray(nJO[k])))) for k in a.opt_keys if k[0] == s)
                         for s, _ in a.opt_keys}
            for i, p in enumerate(net.params):
                o = a.optimizers[p.name]
                oslots = {s: nJO[(s, p.name)] for s in o.slots}
                ohp = {h: float(jhp[h if h in GLOBAL_HP else f"{o.name}.{h}"]) for h in o.hp}
                gain = o.step_gain({s: O[(s, p.name)] for s in o.slots}, oslots, noise=m_floor,      # O: old slots
                                   w=P[p.name], wd=float(jhp["weight_decay"]), decay=a.decay(p.name), **ohp)
                lr = float(jhp["lr"]) * (float(jhp["head_lr_mult"]) if p.name in a.head else 1.0)
                m_scale = max(_first_moment(o, oslots, step), m_floor)
                # × the optimizer's declared oracle_tolerance (Shampoo's inverse roots amplify the
                # gradient's f32 error: lmc/optim/shampoo.py), as test_train_oracle applies it
                allowed = o.oracle_tolerance * _param_allowance(gain, upds[p.name], lr, m_scale) + upd_floor
                check("param", f"param {p.name}", out[i], nJP[p.name], allowed)
                P[p.name] = out[i]
            for j, k in enumerate(a.opt_keys):
                want = nJO[k]
                check("opt", f"{k[0]} of {k[1]}", out[n_p + j], want,
                      RTOL["opt"] * float(np.max(np.abs(want))) + opt_floor[k[0]])
                O[k] = out[n_p + j]
            for j, p in enumerate(a.ema):
                want = nJE[p.name]
                check("opt", f"ema of {p.name}", out[n_p + n_o + j], want,
                      RTOL["opt"] * float(np.max(np.abs(want))) + upd_floor)
                E[p.name] = out[n_p + n_o + j]
            for k, s in enumerate(net.state):
                want = nJS[s.name]
                check("state", s.name, out[n_p + n_o + n_e + k], want, RTOL["state"] * float(np.max(np.abs(want))))
                S[s.name] = out[n_p + n_o + n_e + k]
            # a loss read off logits z (log-softmax: logsumexp(z) − z_y) rounds like z itself in f32:
            # an absolute floor of a few ε·max|z| besides the relative tolerance (a small loss on
            # large logits otherwise has no room for the forward's f32 summation order)
            z_floor = 16 * F32_EPS * float(np.max(np.abs(np.asarray(jlogits))))
            check("loss", "loss", out[-2], jloss, RTOL["loss"] * abs(float(jloss)) + z_floor)
            count, ambiguous = a.loss.correct_reference(np.asarray(jlogits), np.asarray(labels))
            if abs(float(out[-1]) - count) > ambiguous:
                failures.append(f"{at}: correct = {float(out[-1])}, JAX counts {count}")
            # Each step is checked from the same state: JAX continues from lmc's outputs, so an
            # allowed rounding difference (e.g. Adam's random-sign step on a zero gradient) is
            # not compounded into the next step's comparison.
        assert not failures, f"{len(failures)} mismatches vs JAX:\n" + "\n".join(failures[:12])
    return worst


@pytest.mark.parametrize("cid,layers,x_dims,style,loss,opt", _params())
def test_train_step(cid, layers, x_dims, style, loss, opt):
    run_oracle(layers, x_dims, style, loss, opt)


@pytest.mark.parametrize("knob", sorted(KNOBS))
def test_update_knob(knob):
    """grad_clip_norm (binding), head_lr_mult, use_ema on the grid net, against JAX."""
    _, layers, x, style = GRID_NET
    run_oracle(layers, x, style, "class_ce", knob, cases=KNOBS)


def test_forward_eval():
    """@forward (eval: BN with running statistics, train.running_bn: true) vs JAX."""
    layers, x_dims, style = EVAL_NET
    net = infer(load_spec("oracle.yaml", text=classifier_yaml(layers, x_dims, style,
                                                              {"learning_rate": 0.1, "running_bn": True})))
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


# ----------------------------------------------------------------------------- accumulation

ACCUM_K = 2


def _accum_run(layers, x_dims, style, train, xs, ys, k):
    """Run @grad_step over the micro-batches (xs[i], ys[i]) and one @apply_step per k of them
    (k = 1: the fused @train_step on each); returns (P, O, S, losses) as host arrays."""
    net = infer(load_spec("oracle.yaml", text=classifier_yaml(layers, x_dims, style,
                                                              {**train, "grad_accum_steps": k})))
    a = abi(net)
    mod = _module(lower(net, "train_step"))
    P, S = _init(net, np.random.default_rng(0))
    P, S = [P[p.name] for p in net.params], [S[s.name] for s in net.state]
    O, G = a.initial_opt(), [np.zeros(p.type.dims, np.float32) for p in net.params]
    cfg, nP, nO, nS = net.spec.train, len(P), len(a.opt), len(S)
    losses = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        hp = a.hp_vector(cfg, cfg.learning_rate, i // k + 1)
        if k == 1:
            out = [np.asarray(r).copy() for r in mod.train_step(*P, *O, *S, x, y, hp)]
            P, O, S = out[:nP], out[nP:nP + nO], out[nP + nO:-2]
        else:
            out = [np.asarray(r).copy() for r in mod.grad_step(*P, *S, *G, x, y, hp)]
            G, S = out[:nP], out[nP:nP + nS]
            if (i + 1) % k == 0:
                res = [np.asarray(r).copy() for r in mod.apply_step(*P, *O, *G, hp)]
                P, O, G = res[:nP], res[nP:nP + nO], res[nP + nO:]
                assert all(not g.any() for g in G), "apply_step must zero the accumulators"
        losses.append(float(out[-2]))
    return net, a, P, O, S, losses


def test_grad_accum_equals_one_large_batch():
    """Without BN, k micro-batches of B then one update == one fused step on the k·B batch."""
    _, layers, (b, f), style = GRID_NET
    train = {"learning_rate": 0.01, "use_adam": True, "weight_decay": 0.05}
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ACCUM_K * b, f)).astype(np.float32)
    y = rng.integers(0, NC, ACCUM_K * b).astype(np.int32)
    _, _, P1, O1, _, l1 = _accum_run(layers, (ACCUM_K * b, f), style, train, [x], [y], 1)
    net, _, Pk, Ok, _, lk = _accum_run(layers, (b, f), style, train, np.split(x, ACCUM_K), np.split(y, ACCUM_K), ACCUM_K)
    assert np.mean(lk) == pytest.approx(l1[0], rel=1e-5)
    failures = []
    for p, u, v, p0 in zip(net.params, Pk, P1, _init(net, np.random.default_rng(0))[0].values()):
        _compare(f"param {p.name}", u, v, RTOL["param"] * float(np.max(np.abs(v - p0))) + 1e-7, failures)
    for (slot, name), u, v in zip(abi(net).opt_keys, Ok, O1):
        _compare(f"{slot} of {name}", u, v, RTOL["opt"] * float(np.max(np.abs(v))), failures)
    assert not failures, "\n".join(failures)


def test_grad_accum_with_bn_matches_per_micro_batch_statistics():
    """With BN, each micro-batch normalizes with its own statistics (ghost BN) and moves the
    running estimates with bn_momentum^(1/k); the update uses the mean of the k gradients."""
    layers, x_dims, style = EVAL_NET
    train = {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.01}
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(x_dims).astype(np.float32) for _ in range(ACCUM_K)]
    ys = [rng.integers(0, NC, x_dims[0]).astype(np.int32) for _ in range(ACCUM_K)]
    net, a, P, O, S, losses = _accum_run(layers, x_dims, style, train, xs, ys, ACCUM_K)
    # JAX: per-micro-batch loss, gradient and batch statistics; one SGD+momentum update
    P0, S0 = _init(net, np.random.default_rng(0))
    JP = {k: jnp.asarray(v, jnp.float64) for k, v in P0.items()}
    JS = {k: jnp.asarray(v, jnp.float64) for k, v in S0.items()}
    m = F32(F32(BN_MOMENTUM) ** (1.0 / ACCUM_K))
    gsum = {k: 0.0 for k in JP}
    for i, (x, y) in enumerate(zip(xs, ys)):
        def loss_of(p):
            logits, stats = jax_forward(net, p, jnp.asarray(x, jnp.float64))
            return a.loss.reference(jnp, logits, jnp.asarray(y), label_smoothing=0.0), stats
        (lval, stats), g = jax.value_and_grad(loss_of, has_aux=True)(JP)
        assert losses[i] == pytest.approx(float(lval), rel=1e-5)
        gsum = {k: gsum[k] + g[k] for k in JP}
        JS = {k: m * JS[k] + (1 - m) * stats[k] for k in JS}
    failures = []
    for p, got in zip(net.params, P):
        o = a.optimizers[p.name]
        want, _ = o.reference(jnp, JP[p.name], gsum[p.name] / ACCUM_K, {"momentum": jnp.zeros(p.type.dims)},
                              F32(0.1), F32(0.01), True, mu=F32(0.9))
        _compare(f"param {p.name}", got, want, RTOL["param"] * float(np.max(np.abs(np.asarray(want) - P0[p.name]))),
                 failures)
    for s, got in zip(net.state, S):
        _compare(s.name, got, JS[s.name], RTOL["state"] * float(np.max(np.abs(np.asarray(JS[s.name])))), failures)
    assert not failures, "\n".join(failures)
