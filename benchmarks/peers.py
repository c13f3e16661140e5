"""The same net in JAX and PyTorch, built from lmc's own primitive graph (so the three
implementations cannot drift apart), with the same loss and optimizer.  Benchmark-only:
the lmc package never imports JAX or PyTorch.

Each primitive maps, through one table per framework (`_jax_ops`, `_torch_ops`), to the
framework's idiomatic fast op (lax.conv_general_dilated, F.conv2d, reduce_window /
max_pool2d, ...).  A primitive missing from the JAX table runs its own `reference(jnp, …)`
(correct, maybe slower: add an entry when benchmarking it); PyTorch has no fallback."""
from __future__ import annotations

import time

import numpy as np

from lmc.prims import same_pad
from lmc.prims.attention import _shift_mask, _window_index


# the losses PyTorch spells as F.cross_entropy (with the recipe's label smoothing): class_ce on
# [B, NC] and per_pixel_ce on [B, NC, H, W] against [B, H, W] — the LM's per-token CE on logits
# [B, V, T, 1] and next-token labels [B, T, 1], a mean over B·T as lmc's
TORCH_LOSSES = ("class_ce", "per_pixel_ce")


def _recipe(net, lr, any_loss=False, losses=("class_ce",)):
    """What the peers implement of the recipe: the lowered net's loss must be one of `losses`
    (both peers spell class_ce as softmax cross-entropy with smoothing, PyTorch per_pixel_ce
    too; any_loss: JAX runs another loss's registry `reference`, e.g. the LM's per-token CE);
    every optimizer of the registry (JAX runs each tensor's `reference` under jit; PyTorch uses
    torch.optim for sgd and adam, the reference for the rest); no clipping, head multiplier,
    EMA or accumulation.  Returns (abi, hp: name → value at step 1, decay: param name → bool)."""
    from lmc.lower.lowering import abi, hyperparams
    a = abi(net)
    cfg = net.spec.train
    if a.loss.name not in losses and not any_loss:
        raise NotImplementedError(f"benchmark peers implement {', '.join(losses)}, not {a.loss.name}")
    knobs = [k for k in ("grad_clip_norm", "head_lr_mult", "ema_decay", "grad_scale") if k in a.hp]
    if knobs:
        raise NotImplementedError(f"benchmark peers do not implement {', '.join(knobs)}")
    hp = dict(zip(a.hp, hyperparams(a, cfg, lr, 1)))
    return a, hp, {p.name: a.decay(p.name) for p in net.params}


def _update(xp, a, hp, decay, params, opt, grads, t):
    """Every tensor's update by its optimizer's registry reference (opt: {(slot, name): array})."""
    new_p, new_o = [], {}
    for p, w, gr in zip(a.params, params, grads):
        o = a.optimizers[p.name]
        ohp = {h: (t if h == "t" else hp[f"{o.name}.{h}"]) for h in o.hp}
        w2, slots = o.reference(xp, w, gr, {s: opt[(s, p.name)] for s in o.slots}, hp["lr"], hp["weight_decay"],
                                decay[p.name], **ohp)
        new_p.append(w2)
        new_o.update({(s, p.name): v for s, v in slots.items()})
    return new_p, new_o


# ----------------------------------------------------------------------------- JAX

def _pool_pads(hw, a):
    """max_pool's (lo, hi) along H and W: its explicit `pad`, else XLA SAME (MaxPool.pads)."""
    if a.get("pad") is not None:
        return tuple(a["pad"][:2]), tuple(a["pad"][2:])
    (h, w) = hw
    return same_pad(h, a["size"], a["stride"]), same_pad(w, a["size"], a["stride"])


def _jax_ops() -> dict:
    """primitive name → fn(inputs, params, attrs) -> y, or (y, batch statistics) for the
    primitives with running state.  A primitive missing here runs its `reference` in jnp."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    acts = {"relu": jax.nn.relu, "relu6": jax.nn.relu6, "swish": jax.nn.silu,
            "h_swish": jax.nn.hard_swish, "gelu": lambda v: jax.nn.gelu(v, approximate=True),
            "sigmoid": jax.nn.sigmoid, "h_sigmoid": jax.nn.hard_sigmoid}

    def conv(ins, ps, a):
        ph0, ph1, pw0, pw1 = a["pad"]
        return lax.conv_general_dilated(ins[0], ps[0], (a["stride"],) * 2, [(ph0, ph1), (pw0, pw1)],
                                        feature_group_count=a["groups"],
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def batch_norm(ins, ps, a):
        axes = (0, 2, 3) if ins[0].ndim == 4 else (0,)
        shp = (1, -1) + (1,) * (ins[0].ndim - 2)
        m = ins[0].mean(axes)
        v = ((ins[0] - m.reshape(shp)) ** 2).mean(axes)
        y = (ins[0] - m.reshape(shp)) * lax.rsqrt(v.reshape(shp) + 1e-5) * ps[0].reshape(shp) + ps[1].reshape(shp)
        return y, [m, v]

    def max_pool(ins, ps, a):
        ph, pw = _pool_pads(ins[0].shape[2:], a)
        return lax.reduce_window(ins[0], -jnp.inf, lax.max, (1, 1, a["size"], a["size"]),
                                 (1, 1, a["stride"], a["stride"]), [(0, 0), (0, 0), ph, pw])

    return {
        "conv": conv,
        "batch_norm": batch_norm,
        "act": lambda ins, ps, a: acts[a["kind"]](ins[0]),
        "bias": lambda ins, ps, a: ins[0] + ps[0].reshape((1, -1) + (1,) * (ins[0].ndim - 2)),
        "add": lambda ins, ps, a: ins[0] + ins[1],
        "reshape": lambda ins, ps, a: ins[0].reshape(a["dims"]),
        "dense": lambda ins, ps, a: ins[0] @ ps[0] + ps[1],
        "global_avg_pool": lambda ins, ps, a: ins[0].mean((2, 3)),
        "max_pool": max_pool,
    }


def jax_step(net, lr=1e-4):
    import jax
    import jax.numpy as jnp

    cfg = net.spec.train
    g = net.graph
    a, hp, decay = _recipe(net, lr, any_loss=True)
    eps_ls = cfg.label_smoothing

    ops = _jax_ops()

    def run(params, x):
        val = {g.x.id: x}
        stats = []
        pi = {p.name: i for i, p in enumerate(g.params)}
        for n in g.nodes:
            ins = [val[v.id] for v in n.inputs]
            ps = [params[pi[p.name]] for p in n.params]
            op = ops.get(n.prim.name)
            if op is not None:
                y = op(ins, ps, n.prim.attrs)
            else:       # no idiomatic op listed: the primitive's own formula, traced by JAX
                y = n.prim.reference(jnp, *ins, *ps, **n.prim.attrs)
                if n.state:
                    y = y, n.prim.stats_reference(jnp, *ins, *ps, **n.prim.attrs)
            if n.state:             # stateful ops return (y, batch statistics)
                y, st = y
                stats += st
            val[n.out.id] = y
        return val[net.output.id], stats

    nc = net.output.type.dims[-1]

    def loss_fn(params, x, y):
        logits, stats = run(params, x)
        if a.loss.name != "class_ce":        # the registry's formula, traced by JAX
            return a.loss.reference(jnp, logits, y, **{h: hp[h] for h in a.loss.hp}), stats
        t = jax.nn.one_hot(y, nc) * (1 - eps_ls) + eps_ls / nc
        return -(t * jax.nn.log_softmax(logits)).sum() / x.shape[0], stats

    def step(params, opt, x, y, t):
        (l, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
        params, opt = _update(jnp, a, hp, decay, params, opt, grads, t)
        return params, opt, l, stats

    rng = np.random.default_rng(0)
    params = [jnp.asarray((rng.standard_normal(p.type.dims) * 0.05).astype(np.float32)) for p in g.params]
    opt = {k: jnp.asarray(v) for k, v in zip(a.opt_keys, a.initial_opt())}
    x = jnp.asarray(rng.standard_normal(net.input.dims).astype(np.float32))
    y = jnp.asarray(rng.integers(0, nc, net.batch).astype(np.int32))
    if a.loss.name != "class_ce":
        y = jnp.asarray(a.loss.draw_labels(rng, a.labels, a.logits))
    first = net.spec.layers[0].layer
    if getattr(first, "draw_input", None):      # token ids, as lmc's stepper would not draw them
        x = jnp.asarray(first.draw_input(rng, net.input))
    jstep = jax.jit(step, donate_argnums=(0, 1))
    state = {"params": params, "opt": opt, "t": 1.0}

    def call():
        p, o, l, _ = jstep(state["params"], state["opt"], x, y, state["t"])
        l.block_until_ready()
        state["params"], state["opt"] = p, o
        state["t"] += 1

    def hlo():
        return jax.jit(step).lower(params, opt, x, y, 1.0).as_text()

    return call, hlo


# ----------------------------------------------------------------------------- PyTorch

def _torch_ops() -> dict:
    """primitive name → fn(inputs, params, attrs) -> y (training mode: BN on batch statistics).
    No fallback: lmc's references are written against the NumPy API, which torch only partly
    speaks, so a missing primitive is a clear NotImplementedError rather than a wrong number."""
    import torch
    import torch.nn.functional as F

    acts = {"relu": F.relu, "relu6": F.relu6, "swish": F.silu, "h_swish": F.hardswish,
            "gelu": lambda v: F.gelu(v, approximate="tanh"), "sigmoid": torch.sigmoid,
            "h_sigmoid": F.hardsigmoid}

    def conv(ins, ps, a):
        ph0, ph1, pw0, pw1 = a["pad"]
        if (ph0, pw0) == (ph1, pw1):
            return F.conv2d(ins[0], ps[0], stride=a["stride"], padding=(ph0, pw0), groups=a["groups"])
        return F.conv2d(F.pad(ins[0], (pw0, pw1, ph0, ph1)), ps[0], stride=a["stride"], groups=a["groups"])

    def max_pool(ins, ps, a):
        ph, pw = _pool_pads(ins[0].shape[2:], a)
        return F.max_pool2d(F.pad(ins[0], (pw[0], pw[1], ph[0], ph[1]), value=float("-inf")), a["size"], a["stride"])

    def layer_norm(ins, ps, a):
        x, ax = ins[0], a["axis"] % ins[0].ndim
        shape = [1] * x.ndim
        shape[ax] = -1
        mu = x.mean(ax, keepdim=True)
        var = ((x - mu) ** 2).mean(ax, keepdim=True)
        return (x - mu) * torch.rsqrt(var + 1e-5) * ps[0].reshape(shape) + ps[1].reshape(shape)

    def embedding(ins, ps, a):
        # ids held in f32, rounded and clamped as lmc's template does (Embedding.reference);
        # F.embedding for both of lmc's spellings (gather / one-hot matmul: the same function)
        table = ps[0]
        idx = torch.floor(ins[0] + 0.5).clamp(0, table.shape[0] - 1).long()
        return F.embedding(idx, table)

    def softmax(ins, ps, a):
        s = ins[0] * a["scale"]
        if a["causal"]:
            n = s.shape[-1]
            s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=s.device).tril(), float("-inf"))
        return torch.softmax(s, -1)

    consts = {}                 # window_bias's index and mask, built once per (ws, grid, shift, device)

    def window_bias(ins, ps, a):
        # Swin's relative position bias: table [(2ws−1)², heads] gathered to [heads, T, T], plus
        # the shifted-window mask (0 / −100) → [nW, heads, T, T] (WindowBias.reference)
        table, ws, grid, shift = ps[0], a["ws"], tuple(a["grid"]), a["shift"]
        key = (ws, grid, shift, table.device)
        if key not in consts:
            consts[key] = (torch.as_tensor(_window_index(ws), device=table.device),
                           torch.as_tensor(_shift_mask(grid, ws, shift)[:, None], dtype=table.dtype,
                                           device=table.device))
        idx, mask = consts[key]
        return table[idx].permute(2, 0, 1)[None] + mask

    return {
        # the transformer primitives (lmc/prims/tensor.py, attention.py, norm.py: same semantics)
        "transpose": lambda ins, ps, a: ins[0].permute(*a["perm"]),
        "broadcast": lambda ins, ps, a: (ins + ps)[0].expand(*a["dims"]),
        "concat": lambda ins, ps, a: torch.cat(ins, a["axis"]),
        "slice": lambda ins, ps, a: ins[0][tuple(slice(b, e) for b, e in zip(a["start"], a["limit"]))],
        "layer_norm": layer_norm,
        "linear": lambda ins, ps, a: ins[0] @ ps[0] + ps[1] if len(ps) > 1 else ins[0] @ ps[0],
        "matmul": lambda ins, ps, a: torch.matmul(ins[0], ins[1]),
        "softmax": softmax,
        "conv": conv,
        "batch_norm": lambda ins, ps, a: F.batch_norm(ins[0], None, None, ps[0], ps[1], training=True, eps=1e-5),
        "act": lambda ins, ps, a: acts[a["kind"]](ins[0]),
        "bias": lambda ins, ps, a: ins[0] + ps[0].reshape((1, -1) + (1,) * (ins[0].ndim - 2)),
        "add": lambda ins, ps, a: ins[0] + ins[1],
        "reshape": lambda ins, ps, a: ins[0].reshape(a["dims"]),
        "dense": lambda ins, ps, a: torch.addmm(ps[1], ins[0], ps[0]),
        "global_avg_pool": lambda ins, ps, a: ins[0].mean((2, 3)),
        "max_pool": max_pool,
        "mul": lambda ins, ps, a: ins[0] * ins[1],
        "embedding": embedding,
        # ConvNeXt's LayerScale and Swin's shifted windows (lmc/prims/tensor.py, attention.py)
        "scale": lambda ins, ps, a: ins[0] * ps[0].reshape((1, -1) + (1,) * (ins[0].ndim - 2)),
        "roll": lambda ins, ps, a: torch.roll(ins[0], tuple(a["shifts"]), tuple(a["axes"])),
        "window_bias": window_bias,
    }


def torch_step(net, lr=1e-4, compile=False, device="cpu"):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    cfg = net.spec.train
    g = net.graph
    a, hp, decay = _recipe(net, lr, losses=TORCH_LOSSES)
    nc = net.output.type.dims[-1]
    rng = np.random.default_rng(0)
    params = [torch.tensor((rng.standard_normal(p.type.dims) * 0.05).astype(np.float32), requires_grad=True,
                           device=device) for p in g.params]
    pi = {p.name: i for i, p in enumerate(g.params)}
    ops = _torch_ops()

    def run(x):
        val = {g.x.id: x}
        for n in g.nodes:
            ins = [val[v.id] for v in n.inputs]
            ps = [params[pi[p.name]] for p in n.params]
            op = ops.get(n.prim.name)
            if op is None:
                raise NotImplementedError(f"benchmarks/peers.py: no PyTorch op for primitive {n.prim.name!r}; "
                                          f"add one to _torch_ops()")
            val[n.out.id] = op(ins, ps, n.prim.attrs)
        return val[net.output.id]

    def loss_fn(x, y):
        return F.cross_entropy(run(x), y, label_smoothing=cfg.label_smoothing)

    if compile:
        # A fresh cache and static shapes: every net compiles its own `loss_fn` closure (same
        # code object), which dynamo would otherwise treat as a recompilation of the previous
        # net's and retry with dynamic shapes — where inductor 2.13 fails on these graphs
        # ("Cannot convert expression to float").
        torch._dynamo.reset()
        loss_fn = torch.compile(loss_fn, dynamic=False)
    names = {o.name for o in a.optimizers.values()}
    if any(not d for d in decay.values()) and names & {"sgd", "adam"}:
        raise NotImplementedError("benchmark peers: wd_exclude_norm_bias with torch.optim (one param group)")
    if names == {"adam"}:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay, eps=1e-8)
    elif names == {"sgd"}:
        opt = torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    else:                   # the registry's reference, in torch, under no_grad
        opt = None
        state = {"opt": {k: torch.tensor(v, device=device) for k, v in zip(a.opt_keys, a.initial_opt())}, "t": 1.0}
    x = rng.standard_normal(net.input.dims).astype(np.float32)
    first = net.spec.layers[0].layer
    if getattr(first, "draw_input", None):      # token ids (as the JAX peer and lmc's stepper)
        x = first.draw_input(rng, net.input)
    x = torch.tensor(x, device=device)
    if a.loss.name == "class_ce":
        y = torch.tensor(rng.integers(0, nc, net.batch), device=device)
    else:                                       # per-pixel / per-token labels [B, H, W]
        y = torch.tensor(np.asarray(a.loss.draw_labels(rng, a.labels, a.logits)), device=device).long()

    def call():
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        else:
            for p in params:
                p.grad = None
        l = loss_fn(x, y)
        l.backward()
        if opt is not None:
            opt.step()
        else:
            with torch.no_grad():
                new_p, state["opt"] = _update(torch, a, hp, decay, params, state["opt"], [p.grad for p in params],
                                              state["t"])
                for p, w in zip(params, new_p):
                    p.copy_(w)
            state["t"] += 1
        return float(l.detach())

    return call


# ------------------------------------------------------- PyTorch: torchvision's own models

# lmc spec name → torchvision.models constructor: the same architecture (tests/test_layers_counts.py
# pins the parameter counts to torchvision's), built by torchvision's own code — the model a user
# would compare against, not one rebuilt from lmc's graph.
TORCHVISION = {"resnet18": "resnet18"}


def _import_torchvision():
    """torchvision, importable even when its compiled ops do not match this torch.

    The PyPI torchvision wheel is built against the CUDA torch; with the CPU torch wheel its
    `_C` extension does not load (libc10_cuda.so missing), which torchvision tolerates except
    for two unguarded `register_fake` calls (nms, qnms) that then fail at import with
    "operator torchvision::nms does not exist".  Defining those two schemas first lets the
    pure-Python models import; the models used here call none of the ops."""
    import torch
    try:
        import torchvision
        return torchvision
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
    import sys
    for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        del sys.modules[k]
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _import_torchvision.lib = lib          # keep the definitions alive
    import torchvision
    return torchvision


def torchvision_step(net, lr=1e-4, compile=False, channels_last=False, device="cpu"):
    """One train step of torchvision's own model for `net` (TORCHVISION), same batch, input
    size and class count, train mode (BN on batch statistics), F.cross_entropy with the
    recipe's label smoothing, torch.optim.AdamW with its weight decay — as a user would write
    it.  channels_last: the model and the batch in NHWC memory format (oneDNN's fast path on
    CPU, often slower elsewhere).  Refuses a net whose parameter count differs from lmc's."""
    import torch
    import torch.nn.functional as F

    tv = _import_torchvision()
    if net.spec.name not in TORCHVISION:
        raise NotImplementedError(f"no torchvision model listed for {net.spec.name!r} (peers.TORCHVISION)")
    a, hp, decay = _recipe(net, lr)
    names = {o.name for o in a.optimizers.values()}
    if names != {"adam"}:
        raise NotImplementedError(f"torchvision peer: AdamW only, the recipe uses {', '.join(sorted(names))}")
    cfg = net.spec.train
    nc = net.output.type.dims[-1]
    torch.manual_seed(0)
    model = getattr(tv.models, TORCHVISION[net.spec.name])(num_classes=nc)
    n = sum(p.numel() for p in model.parameters())
    if n != net.total_params:
        raise NotImplementedError(f"torchvision {TORCHVISION[net.spec.name]} has {n} parameters, lmc's "
                                  f"{net.spec.name} {net.total_params}: not the same net")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=fmt).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay, eps=1e-8)
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal(net.input.dims).astype(np.float32), device=device)
    x = x.contiguous(memory_format=fmt)
    y = torch.tensor(rng.integers(0, nc, net.batch), device=device)

    def loss_fn(x, y):
        return F.cross_entropy(model(x), y, label_smoothing=cfg.label_smoothing)

    if compile:
        torch._dynamo.reset()
        loss_fn = torch.compile(loss_fn, dynamic=False)

    def call():
        opt.zero_grad(set_to_none=True)
        l = loss_fn(x, y)
        l.backward()
        opt.step()
        return float(l.detach())

    return call


def time_calls(call, steps=10, warmup=3):
    for _ in range(warmup):
        call()
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), ts
