"""TypedNet → StableHLO module text: `@train_step` (forward, loss, backward derived by walking
the primitive graph in reverse, optimizer update, BN running statistics) and `@forward` (eval).

ABI (see README "Module ABI"); P = params in `lmc info --params` order, S = BN state:
  @train_step(P..., opt_state..., S..., x, labels, hp: tensor<8xf32>)
      -> (P'..., opt_state'..., S'..., loss: tensor<f32>, correct: tensor<f32>)
  @forward(P..., S..., x) -> logits
opt_state: none (sgd), one `momentum` buffer per param (sgd with momentum > 0), or all Adam
`m` then all `v` (adam).  hp = [lr, weight_decay, momentum|beta1, beta2, eps, t, bn_momentum,
label_smoothing]: everything a schedule may change is a runtime value, never baked in."""
from __future__ import annotations

import os

from dataclasses import dataclass

from .config import effective_loss, effective_optimizer
from .errors import NotImplementedKind
from .fields import OptimizerKind
from .graph import Node
from .infer import TypedNet
from .render import render_prim, render_template, sig
from .types import TensorType, f32, i32

HP = ("lr", "weight_decay", "beta1", "beta2", "eps", "t", "bn_momentum", "label_smoothing")
SCALAR = "tensor<f32>"


@dataclass(frozen=True)
class Abi:
    """One definition of the argument/result layout, used by lower, runtime and checkpoints."""
    params: list
    opt_slots: tuple[str, ...]      # () | ("momentum",) | ("m", "v")
    state: list
    x: TensorType
    labels: TensorType
    logits: TensorType


def optimizer_slots(net: TypedNet) -> tuple[str, ...]:
    cfg = net.spec.train
    opt = effective_optimizer(cfg)
    if cfg.use_muon or cfg.use_shampoo:     # the seed's IREE path reads these; refuse, don't ignore
        raise NotImplementedKind("not implemented yet: use_muon / use_shampoo (lowered: sgd, sgd+momentum, adam/adamw)")
    if opt == OptimizerKind.adam:
        return ("m", "v")
    if opt == OptimizerKind.sgd:
        return ("momentum",) if cfg.momentum > 0 else ()
    raise NotImplementedKind(f"not implemented yet: optimizer {opt.value} (lowered: sgd, sgd+momentum, adam/adamw)")


def abi(net: TypedNet) -> Abi:
    loss = effective_loss(net.spec.train, net.spec.dataset) if net.spec.train else None
    out = net.output.type
    if loss is not None and loss.kind == "soft_label_ce":
        labels = out
    else:
        labels = i32(net.batch)
    slots = optimizer_slots(net) if net.spec.train else ()
    return Abi(net.params, slots, net.state, net.input, labels, out)


def hyperparams(cfg, lr: float, step: int) -> list[float]:
    """The hp vector for one step (t is 1-based)."""
    opt = effective_optimizer(cfg)
    beta1 = 0.9 if opt == OptimizerKind.adam else cfg.momentum
    return [lr, cfg.weight_decay, beta1, 0.999, 1e-8, float(step), cfg.bn_momentum, cfg.label_smoothing]


def _loc(net: TypedNet, layer: int) -> str:
    if layer < 0:
        return ""
    entry = net.spec.layers[layer]
    l = entry.loc
    return f' loc("layers[{layer}].{entry.kind}"("{l.file}":{l.line}:{l.col}))'


class _Emitter:
    def __init__(self, net: TypedNet):
        self.net = net
        self.forms = _conv_form()          # alternative primitive spellings (LMC_CONV_FORM)
        self.funcs: dict[str, str] = {}      # symbol → text, emitted once each
        self.lines: list[str] = []
        self.n = 0

    def fresh(self, base: str) -> str:
        self.n += 1
        return f"%{base}{self.n}"

    def add_funcs(self, key: str, text: str):
        if key not in self.funcs:
            self.funcs[key] = text

    def call(self, sym: str, args: list[tuple[str, str]], results: list[str], loc: str = "") -> list[str]:
        """Emit a func.call; returns SSA names of the results."""
        base = self.fresh("r")
        argv = ", ".join(a for a, _ in args)
        argt = ", ".join(t for _, t in args)
        rest = ", ".join(results)
        if len(results) == 1:
            self.lines.append(f"    {base} = func.call @{sym}({argv}) : ({argt}) -> {rest}{loc}")
            return [base]
        self.lines.append(f"    {base}:{len(results)} = func.call @{sym}({argv}) : ({argt}) -> ({rest}){loc}")
        return [f"{base}#{i}" for i in range(len(results))]


def _check_lowerable(net: TypedNet):
    for l in net.layers:
        if not l.lowered:
            raise NotImplementedKind(f"not implemented yet: {l.kind} (layer {l.index}); "
                                     f"`lmc info` counts it but it cannot be lowered to StableHLO yet", l.loc)


def lower(net: TypedNet, functions: str = "all", backend: str | None = None) -> str:
    """Render the module.  functions: train_step | forward | all.  backend: llvm-cpu (default),
    cuda or rocm — every backend gets the same module today; `LMC_CONV_FORM=direct` picks the
    stablehlo.convolution spelling of conv (_FORMS) for any backend."""
    _check_lowerable(net)
    em = _Emitter(net)
    bodies = []
    if functions in ("all", "train_step"):
        if net.spec.train is None:
            from .errors import SpecError
            raise SpecError("rendering @train_step needs a `train:` recipe in the spec", net.spec.layers[0].loc)
        bodies.append(_train_step(net, em))
    if functions in ("all", "forward"):
        bodies.append(_forward(net, em))
    out = [f"// lmc: {net.spec.name} (batch {net.batch}); generated, do not edit", "module @model {"]
    out += [em.funcs[k] for k in em.funcs]
    out += bodies
    out.append("}")
    return "\n".join(out) + "\n"


# Alternative spellings of a primitive (same math, same contract, both oracle-tested).
# Every backend gets the matmul form of conv by default: it compiles in seconds for cuda and
# rocm too (resnet18 train step: 16 s for sm_86 at batch 8), while IREE 3.13's GPU codegen
# for stablehlo.convolution took > 15 minutes on resnet18 for cuda.  `LMC_CONV_FORM=direct`
# selects the stablehlo.convolution form (lmc/prims/conv_direct.py).
_FORMS = {"matmul": {}, "direct": {"conv": "conv_direct"}}


def _conv_form() -> dict:
    form = os.environ.get("LMC_CONV_FORM", "matmul")
    if form not in _FORMS:
        from .errors import LmcError
        raise LmcError(f"LMC_CONV_FORM={form!r}: expected one of {', '.join(_FORMS)}")
    return _FORMS[form]


def _prim_for(node: Node, forms: dict):
    alt = forms.get(node.prim.name)
    if alt:
        from .prims import make_prim
        return make_prim(alt, **node.prim.attrs)
    return node.prim


def _rendered(em: _Emitter, node: Node):
    r = render_prim(_prim_for(node, em.forms), [v.type for v in node.inputs], [p.type for p in node.params],
                    node.out.type)
    em.add_funcs(r.fwd, r.text)
    return r


def _forward(net: TypedNet, em: _Emitter) -> str:
    em.lines = []
    g = net.graph
    pname = {p.name: f"%p{i}" for i, p in enumerate(g.params)}
    sname = {s.name: f"%s{i}" for i, s in enumerate(g.state)}
    args = [f"{pname[p.name]}: {p.type.mlir}" for p in g.params] + \
           [f"{sname[s.name]}: {s.type.mlir}" for s in g.state] + [f"%x: {net.input.mlir}"]
    val = {g.x.id: "%x"}
    for node in g.nodes:
        r = _rendered(em, node)
        ins = [(val[v.id], v.type.mlir) for v in node.inputs] + [(pname[p.name], p.type.mlir) for p in node.params]
        loc = _loc(net, node.layer)
        if r.eval:
            res = em.call(r.eval, ins + [(sname[s.name], s.type.mlir) for s in node.state], [node.out.type.mlir], loc)
        else:
            outs = [node.out.type.mlir] + [t.mlir for t in r.saved] + [t.mlir for t in r.stats]
            res = em.call(r.fwd, ins, outs, loc)
        val[node.out.id] = res[0]
    out = net.output
    body = "\n".join(em.lines)
    return (f"  func.func @forward({', '.join(args)}) -> {out.type.mlir} {{\n{body}\n"
            f"    return {val[out.id]} : {out.type.mlir}\n  }}")


def _train_step(net: TypedNet, em: _Emitter) -> str:
    em.lines = []
    cfg = net.spec.train
    g = net.graph
    a = abi(net)
    pname = {p.name: f"%p{i}" for i, p in enumerate(g.params)}
    oname = {(slot, p.name): f"%o{j}_{i}" for j, slot in enumerate(a.opt_slots) for i, p in enumerate(g.params)}
    sname = {s.name: f"%s{i}" for i, s in enumerate(g.state)}
    args = [f"{pname[p.name]}: {p.type.mlir}" for p in g.params]
    args += [f"{oname[(slot, p.name)]}: {p.type.mlir}" for slot in a.opt_slots for p in g.params]
    args += [f"{sname[s.name]}: {s.type.mlir}" for s in g.state]
    args += [f"%x: {a.x.mlir}", f"%labels: {a.labels.mlir}", f"%hp: tensor<{len(HP)}xf32>"]
    # scalars out of the hp vector
    for i, h in enumerate(HP):
        em.lines.append(f"    %hp_{h}_1 = stablehlo.slice %hp [{i}:{i + 1}] : (tensor<{len(HP)}xf32>) -> tensor<1xf32>")
        em.lines.append(f"    %{h} = stablehlo.reshape %hp_{h}_1 : (tensor<1xf32>) -> tensor<f32>")
    # forward
    val = {g.x.id: "%x"}
    saved, stats = {}, {}
    for node in g.nodes:
        r = _rendered(em, node)
        ins = [(val[v.id], v.type.mlir) for v in node.inputs] + [(pname[p.name], p.type.mlir) for p in node.params]
        outs = [node.out.type.mlir] + [t.mlir for t in r.saved] + [t.mlir for t in r.stats]
        res = em.call(r.fwd, ins, outs, _loc(net, node.layer))
        val[node.out.id] = res[0]
        saved[id(node)] = list(zip(res[1:1 + len(r.saved)], r.saved))
        stats[id(node)] = list(zip(res[1 + len(r.saved):], r.stats))
    # loss: (logits, labels, label_smoothing) -> (loss, dlogits, correct)
    loss = effective_loss(cfg, net.spec.dataset)
    if loss.kind not in ("class_ce", "soft_label_ce"):
        raise NotImplementedKind(f"not implemented yet: loss {loss} (lowered: class_ce, soft_label_ce)")
    if cfg.use_focal:
        raise NotImplementedKind("not implemented yet: use_focal")
    lctx = {"logits": a.logits.mlir, "labels": a.labels.mlir, "b": a.logits.dims[0], "nc": a.logits.dims[1],
            "inv_b": f"{1.0 / a.logits.dims[0]:.9e}", "row": f32(a.logits.dims[0]).mlir,
            "mask": TensorType(a.logits.dims, "i1").mlir, "row_mask": TensorType((a.logits.dims[0],), "i1").mlir}
    lsym = f"{loss.kind}_{sig(loss.kind, lctx)}"
    lctx["name"] = lsym
    em.add_funcs(lsym, render_template(f"losses/{loss.kind}.mlir.j2", lctx, f"loss {loss.kind}"))
    out = net.output
    lres = em.call(lsym, [(val[out.id], out.type.mlir), ("%labels", a.labels.mlir), ("%label_smoothing", SCALAR)],
                   [SCALAR, out.type.mlir, SCALAR])
    # backward: reverse walk, summing cotangents where a value fans out
    cot: dict[int, list[str]] = {out.id: [lres[1]]}
    grads: dict[str, list[str]] = {}
    for node in reversed(g.nodes):
        if node.out.id not in cot:
            continue
        dy = _sum(em, cot.pop(node.out.id), node.out.type.mlir)
        r = _rendered(em, node)
        args_b = [(dy, node.out.type.mlir)] + [(s, t.mlir) for s, t in saved[id(node)]] + \
                 [(pname[p.name], p.type.mlir) for p in node.params]
        outs = [v.type.mlir for v in node.inputs] + [p.type.mlir for p in node.params]
        res = em.call(r.bwd, args_b, outs, _loc(net, node.layer))
        for v, d in zip(node.inputs, res):
            if v.node is not None:          # no gradient for the network input
                cot.setdefault(v.id, []).append(d)
        for p, d in zip(node.params, res[len(node.inputs):]):
            grads.setdefault(p.name, []).append(d)
    # optimizer
    opt = effective_optimizer(cfg)
    new_p, new_o = {}, {}
    for p in g.params:
        gsum = _sum(em, grads[p.name], p.type.mlir) if p.name in grads else _zeros(em, p.type.mlir)
        decay = not (cfg.wd_exclude_norm_bias and p.type.rank < 2)
        kind = "adam" if opt == OptimizerKind.adam else ("momentum" if a.opt_slots else "sgd")
        octx = {"p": p.type.mlir, "decay": decay}
        osym = f"{kind}_{sig(kind, octx)}"
        octx["name"] = osym
        em.add_funcs(osym, render_template(f"optim/{kind}.mlir.j2", octx, f"optimizer {kind}"))
        st = [(oname[(slot, p.name)], p.type.mlir) for slot in a.opt_slots]
        hp = [(f"%{h}", SCALAR) for h in ("lr", "weight_decay", "beta1", "beta2", "eps", "t")]
        res = em.call(osym, [(pname[p.name], p.type.mlir), (gsum, p.type.mlir)] + st + hp,
                      [p.type.mlir] * (1 + len(a.opt_slots)))
        new_p[p.name] = res[0]
        for slot, rr in zip(a.opt_slots, res[1:]):
            new_o[(slot, p.name)] = rr
    # BN running statistics: running = m·running + (1 − m)·batch (m = bn_momentum, weight on OLD)
    new_s = {}
    for node in g.nodes:
        for s, (b, t) in zip(node.state, stats.get(id(node), [])):
            ctx = {"c": t.mlir}
            esym = f"ema_{sig('ema', ctx)}"
            ctx["name"] = esym
            em.add_funcs(esym, render_template("optim/ema.mlir.j2", ctx, "running statistics"))
            new_s[s.name] = em.call(esym, [(sname[s.name], t.mlir), (b, t.mlir), ("%bn_momentum", SCALAR)], [t.mlir])[0]
    rets = [(new_p[p.name], p.type.mlir) for p in g.params]
    rets += [(new_o[(slot, p.name)], p.type.mlir) for slot in a.opt_slots for p in g.params]
    rets += [(new_s.get(s.name, sname[s.name]), s.type.mlir) for s in g.state]
    rets += [(lres[0], SCALAR), (lres[2], SCALAR)]
    body = "\n".join(em.lines)
    return (f"  func.func @train_step({', '.join(args)}) -> ({', '.join(t for _, t in rets)}) {{\n{body}\n"
            f"    return {', '.join(v for v, _ in rets)} : {', '.join(t for _, t in rets)}\n  }}")


def _sum(em: _Emitter, vals: list[str], t: str) -> str:
    acc = vals[0]
    for v in vals[1:]:
        n = em.fresh("acc")
        em.lines.append(f"    {n} = stablehlo.add {acc}, {v} : {t}")
        acc = n
    return acc


def _zeros(em: _Emitter, t: str) -> str:
    n = em.fresh("zero")
    em.lines.append(f"    {n} = stablehlo.constant dense<0.0> : {t}")
    return n


def prim_test_module(prim, ins: list[TensorType], ps: list[TensorType]) -> str:
    """A module exposing one primitive for the oracle tests:
    @forward(ins..., ps...) -> y ;  @vjp(dy, ins..., ps...) -> (d_ins..., d_ps...);
    for primitives with batch statistics, @stats(ins..., ps...) -> (stats...); and for those
    with an eval function (batch norm), @eval(ins..., ps..., state...) -> y."""
    out, _ = prim.infer(ins, ps)
    r = render_prim(prim, ins, ps, out)
    a = [f"%i{k}: {t.mlir}" for k, t in enumerate(ins)] + [f"%q{k}: {t.mlir}" for k, t in enumerate(ps)]
    names = [f"%i{k}" for k in range(len(ins))] + [f"%q{k}" for k in range(len(ps))]
    types = [t.mlir for t in ins] + [t.mlir for t in ps]
    fouts = [out.mlir] + [t.mlir for t in r.saved] + [t.mlir for t in r.stats]
    call_f = (f"    %f:{len(fouts)} = func.call @{r.fwd}({', '.join(names)}) : ({', '.join(types)}) -> ({', '.join(fouts)})"
              if len(fouts) > 1 else
              f"    %f0 = func.call @{r.fwd}({', '.join(names)}) : ({', '.join(types)}) -> {out.mlir}")
    y = "%f#0" if len(fouts) > 1 else "%f0"
    saved = [f"%f#{1 + k}" for k in range(len(r.saved))]
    bargs = ["%dy"] + saved + [f"%q{k}" for k in range(len(ps))]
    btypes = [out.mlir] + [t.mlir for t in r.saved] + [t.mlir for t in ps]
    bouts = [t.mlir for t in ins] + [t.mlir for t in ps]
    nb = len(bouts)
    call_b = (f"    %g:{nb} = func.call @{r.bwd}({', '.join(bargs)}) : ({', '.join(btypes)}) -> ({', '.join(bouts)})"
              if nb > 1 else f"    %g0 = func.call @{r.bwd}({', '.join(bargs)}) : ({', '.join(btypes)}) -> {bouts[0]}")
    gouts = [f"%g#{k}" for k in range(nb)] if nb > 1 else ["%g0"]
    statsf = []
    if r.stats:
        touts = [t.mlir for t in r.stats]
        statsf = [f"  func.func @stats({', '.join(a)}) -> ({', '.join(touts)}) {{", call_f,
                  f"    return {', '.join(f'%f#{1 + len(r.saved) + k}' for k in range(len(r.stats)))} : "
                  f"{', '.join(touts)}", "  }"]
    evalf = []
    if r.eval:
        state = prim.state(ins, ps, out)
        st = [f"%st{k}: {t.mlir}" for k, t in enumerate(state)]
        enames = names + [f"%st{k}" for k in range(len(state))]
        etypes = types + [t.mlir for t in state]
        evalf = [f"  func.func @eval({', '.join(a + st)}) -> {out.mlir} {{",
                 f"    %e = func.call @{r.eval}({', '.join(enames)}) : ({', '.join(etypes)}) -> {out.mlir}",
                 f"    return %e : {out.mlir}", "  }"]
    return "\n".join([
        "module @model {", r.text,
        f"  func.func @forward({', '.join(a)}) -> {out.mlir} {{", call_f, f"    return {y} : {out.mlir}", "  }",
        f"  func.func @vjp(%dy: {out.mlir}, {', '.join(a)}) -> ({', '.join(bouts)}) {{", call_f, call_b,
        f"    return {', '.join(gouts)} : {', '.join(bouts)}", "  }", *statsf, *evalf, "}"]) + "\n"
