"""TypedNet → StableHLO module text: `@train_step` (forward, loss, backward derived by walking
the primitive graph in reverse, optimizer update, running statistics) and `@forward` (eval);
with grad_accum_steps k > 1, `@grad_step` and `@apply_step` instead of `@train_step`; with
use_swa, `@average`.

ABI (README "Module ABI"; `abi()` is its one definition, used by lower, train, checkpoints,
bench and the tests).  P = params in `lmc info --params` order, O = optimizer state (slot-major:
for each slot, the params that have it, in P order), E = EMA weights (use_ema; P's types),
S = running state, G = gradient accumulators (P's types), hp = the runtime hyperparameters:
  @train_step(P..., O..., E..., S..., x, labels, hp, M...) -> (P'..., O'..., E'..., S'..., loss, correct)
  @grad_step(P..., S..., G..., x, labels, hp, M...)       -> (G + g..., S'..., loss, correct)
  (data-parallel ranks, Abi.cut > 0: @grad_step in two halves, so the late layers' gradients
  are summed across ranks while the early layers' backward runs — `backward_cut`:
  @grad_late(P..., S..., G_late..., x, labels, hp, M...) -> (G_late + g..., S'..., loss, correct, C...)
  @grad_early(P_early..., G_early..., C...)              -> (G_early + g...)
  G_late: the accumulators of Abi.late, G_early the others', each in P order; P_early the
  params the early layers read; C what the early backward needs: the cotangents that cross
  the cut, the early layers' saved residuals, the late layers' share of a gradient both use)
  (M: the host-drawn dropout / drop-path masks, Abi.masks, none without those knobs)
  (Abi.halves, LMC_SPLIT: @train_step in two halves, compiled as two modules — `halves_cut`:
  @train_late(P..., O_late..., E_late..., S..., x, labels, hp, M...)
      -> (P_late'..., O_late'..., E_late'..., S'..., loss, correct, C...)
  @train_early(P_early..., O_early..., E_early..., hp, C...) -> (P_early'..., O_early'..., E_early'...)
  X_late: the entries of P, O, E whose param is in Abi.late, X_early the others', each in
  their group's order; C as @grad_late's.  The host calls them as one @train_step:
  lmc.run.runtime.HalvesCall)
  @apply_step(P..., O..., E..., G..., hp)           -> (P'..., O'..., E'..., 0...)
  @average(A..., [Q...,] P..., w)                   -> (A + w·(P − A)..., [Q + w·(P² − Q)...])
  @forward(P..., S..., x) -> logits
  (BN: running statistics S under train.running_bn: true; with running_bn: false, the Lean
  kit's default, the batch's own statistics and S unused: eval_batch_stats)
  (train.train_res R: the training functions take x at [B, C, R, R], @forward and @input_grad
  at the spec's input: one module holding the net lowered at both shapes, infer.train_net)
  @input_grad(P..., S..., x, labels, hp) -> (loss, dx)   (lower(net, "input_grad"), with @forward)
  @spectral_project(W..., U..., cap) -> (W'..., U'...)  (train.spectral_cap; W the capped
      weights, U their power-iteration vectors: lmc/lower/spectral.py)
@input_grad is the training graph (BN with batch statistics) carried down to the input: the
loss of the batch and its gradient with respect to x, for attacks (lmc/trust/attack.py).
The hp layout (`Abi.hp`) is assembled from what the loss, the optimizers and the update knobs
read; everything a schedule may change is a runtime value, never baked into the text."""
from __future__ import annotations


import re
import weakref
from dataclasses import dataclass, field, replace

import numpy as np

from lmc.lower import inplace
from lmc.lower.compile_cost import compile_seconds
from lmc.spec.config import effective_loss
from lmc.core.errors import SpecError, UsageError
from lmc.graph.ir import Node
from lmc.check import check
from lmc.graph.infer import TypedNet, bf16_operands, head_params, train_net
from lmc.graph.layout import place
from lmc.losses import Loss, make_loss
from lmc.optim import GLOBAL_HP, Optimizer, assign
from lmc.core.render import render_prim, render_template, sig
from lmc.core.types import TensorType
from lmc.lower.options import LowerOptions
from lmc.lower.spectral import capped, context
from lmc.prims import make_prim
from lmc.prims.axes import TO_HBWC, TO_NCHW, physical

# The lowering's hints to the compiler (a comment line of the module, `_packed_matmuls`): on
# llvm-cpu, compile it with packed (data-tiled, mmt4d) matmuls (lmc/compile.py) — always
# (PACKED), or for a target without AVX-512 or with Intel's (PACKED_DENSE: a net whose FLOPs are
# mostly dense layers; compile.dense_packs), or only for Intel's AVX-512 (PACKED_INTEL: large
# linear layers over token streams, their dW summed over chunks of rows).
PACKED = "// lmc: llvm-cpu packed matmuls"
PACKED_DENSE = "// lmc: llvm-cpu matmuls packed on AVX2-class and Intel AVX-512 targets"
PACKED_INTEL = "// lmc: llvm-cpu matmuls packed on Intel AVX-512 targets"
# the exported functions queued, with fences (LowerOptions.invocation; lmc/compile.py's
# --iree-execution-model=async-external, lmc/run/invoke.py)
ASYNC = "// lmc: asynchronous calls"
# The forward FLOPs of a token-stream net's largest linear layer from which it is PACKED_INTEL
# (benchmarks/NOTES.md: on an Intel Xeon, tiny_gpt's 0.27-GFLOP MLP matmuls at batch 32 step 12%
# slower packed before their dW was split in rows, the same at batch 128 (1.07 GFLOP) 21%
# faster, vit_tiny@32²'s 1.23 GFLOP 16%; after the split, tiny_gpt b32 steps the same either way).
LARGE_MATMUL_FLOPS = 5e8

SCALAR = "tensor<f32>"
# the hp entries every train step reads, first in the vector
CORE_HP = ("lr", "weight_decay", "t", "bn_momentum")


@dataclass(frozen=True)
class Abi:
    """One definition of the argument/result layout, used by lower, runtime, checkpoints, tests."""
    params: list
    opt: list                       # [(slot, Param)], slot-major
    ema: list                       # the params with an EMA copy (all of them under use_ema, else none)
    state: list
    x: TensorType
    labels: TensorType
    logits: TensorType
    hp: tuple[str, ...] = ()
    loss: Loss | None = None
    optimizers: dict = field(default_factory=dict)     # param name → Optimizer
    head: frozenset = frozenset()   # params whose lr is lr·head_lr_mult
    accum: int = 1                  # grad_accum_steps
    no_decay: frozenset = frozenset()   # params excluded from weight decay (wd_exclude_norm_bias)
    used: tuple = ()                # the distinct optimizers in use, in the hp vector's order
    masks: list = field(default_factory=list)   # graph.Mask: the train step's host-drawn random inputs
    world: int = 1                  # data-parallel ranks (lmc/run/dist.py): the gradient is Σ over them
    cut: int = 0                    # > 0: @grad_late/@grad_early split before train-graph node `cut`
    late: frozenset = frozenset()   # the params whose gradients @grad_late returns (backward_cut)

    @property
    def split(self) -> bool:
        """@grad_step + @apply_step instead of @train_step: accumulation, or data-parallel ranks
        (whose gradients are summed between the two)."""
        return self.accum > 1 or self.world > 1

    @property
    def halves(self) -> bool:
        """@train_late + @train_early instead of @train_step (one optimizer step in two calls,
        each half's parameters updated in its own: `halves_cut`)."""
        return self.cut > 0 and not self.split

    def late_index(self) -> tuple[list[int], list[int]]:
        """Positions in P of the params @grad_late returns gradients for, and of the others."""
        late = [i for i, p in enumerate(self.params) if p.name in self.late]
        return late, [i for i, p in enumerate(self.params) if p.name not in self.late]

    def mask_ones(self) -> list[np.ndarray]:
        """All-ones masks: the exact identity (what @forward uses)."""
        return [np.ones(m.value.type.dims, np.float32) for m in self.masks]

    def decay(self, name: str) -> bool:
        """Whether this parameter takes weight decay."""
        return name not in self.no_decay

    @property
    def opt_keys(self) -> list[tuple[str, str]]:
        return [(slot, p.name) for slot, p in self.opt]

    def initial_opt(self) -> list[np.ndarray]:
        """Fresh optimizer state, each slot at its optimizer's start value."""
        return [np.full(p.type.dims, self.optimizers[p.name].slot_init(slot), np.float32) for slot, p in self.opt]

    def hp_vector(self, cfg, lr: float, step: int) -> np.ndarray:
        return np.asarray(hyperparams(self, cfg, lr, step), np.float32)


def _opt_layout(net, optimizers: dict) -> list:
    slots: list[str] = []
    for p in net.params:
        for s in optimizers[p.name].slots:
            if s not in slots:
                slots.append(s)
    return [(s, p) for s in slots for p in net.params if s in optimizers[p.name].slots]


def _unique(optimizers: dict) -> list[Optimizer]:
    out = []
    for o in optimizers.values():
        if all(o is not q for q in out):
            out.append(o)
    return out


def abi(net: TypedNet, world: int = 1, overlap: bool = False, halves: str = "off") -> Abi:
    """The module's signature and what the host needs to call it (parameters, optimizer state
    layout, labels, the hp vector's names, masks) for a net the check stage passed (lmc/check:
    the loss and optimizers it asks for exist and fit).  world > 1 and overlap
    (LMC_DIST_OVERLAP=on): the backward split where `backward_cut` says, else one @grad_step.
    halves (LMC_SPLIT): on | auto | off — the train step as @train_late + @train_early, two
    modules compiled side by side (Abi.halves, `halves_cut`): always (a recipe that cannot be
    split refused), where `split_rule` says it pays, or never."""
    cfg = net.spec.train
    out = net.output.type
    if cfg is None:
        return Abi(net.params, [], [], net.state, net.input, out, out)
    loss = make_loss(effective_loss(cfg, net.spec.dataset), cfg)
    t = train_net(net)             # train.train_res: the training functions' input and masks
    optimizers = assign(net)
    head = head_params(net) if cfg.head_lr_mult != 1.0 else frozenset()
    used = tuple(_unique(optimizers))
    hp = list(CORE_HP) + [h for h in loss.hp if h not in CORE_HP]
    for o in used:
        hp += [f"{o.name}.{h}" for h in o.hp if h not in GLOBAL_HP]
    if cfg.grad_clip_norm > 0:
        hp.append("grad_clip_norm")
    if head:
        hp.append("head_lr_mult")
    if cfg.use_ema:
        hp.append("ema_decay")
    k = max(cfg.grad_accum_steps, 1)
    if k > 1 or world > 1:
        hp.append("grad_scale")
    no_decay = frozenset(p.name for p in net.params if cfg.wd_exclude_norm_bias and exempt_from_decay(p))
    if world > 1 and overlap:
        cut, late = backward_cut(t)
    elif split_rule(net, t, halves, world, k):
        cut, late = halves_cut(t)
        if not cut and halves == "on":
            raise UsageError("LMC_SPLIT=on: no cut of this net's train graph leaves parameters on both sides",
                             hint="LMC_SPLIT=auto splits where it can")
    else:
        cut, late = 0, frozenset()
    a = Abi(net.params, _opt_layout(net, optimizers), list(net.params) if cfg.use_ema else [], net.state,
            t.input, loss.labels(out), out, tuple(hp), loss, optimizers, head, k, no_decay, used,
            list(t.graph.masks), world, cut, late)
    return balanced_halves(net, t, a) if a.halves else a


# The backward's cut for data-parallel ranks (benchmarks/NOTES.md, "Data-parallel overlap"):
# the gradients of the params only the layers after the cut read are summed across ranks while
# the backward of the layers before it runs; the rest after it.  The cut minimises the modelled
# all-reduce time left exposed, in bytes of gradient:
#     max(0, late_bytes − 2·early_flops / REDUCE_FLOPS_PER_BYTE) + early_bytes
# (2·early_flops: the early layers' backward, dx and dW).  REDUCE_FLOPS_PER_BYTE: the backward
# FLOPs one rank computes while the helper thread's all-reduce (copies, reduction, upload) moves
# one byte of gradient, both measured side by side on 2 ranks × 1 core (resnet18@32²: the early
# backward at ≈ 65 GFLOP/s, 40.8 MB summed and uploaded in ≈ 50 ms: ≈ 80).  The model is flat
# near its minimum, so the constant need not be exact.  No cut (one @grad_step) unless it hides
# at least half of the bytes.
REDUCE_FLOPS_PER_BYTE = 70.0


def backward_cut(t: TypedNet) -> tuple[int, frozenset]:
    """(k, late): the train graph's backward split before node k (0: not split), and the
    params whose every use lies at or after it (those no node reads included: zeros)."""
    nodes = t.graph.nodes
    size = {p.name: 4 * p.type.size for p in t.graph.params}
    first: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for p in n.params:
            first.setdefault(p.name, i)
    total = sum(size.values())
    best, at = total / 2, 0
    flops = early = 0
    for k in range(1, len(nodes)):
        flops += nodes[k - 1].flops
        early += sum(size[p.name] for p in nodes[k - 1].params if first[p.name] == k - 1)
        exposed = max(0.0, total - early - 2 * flops / REDUCE_FLOPS_PER_BYTE) + early
        if exposed < best:
            best, at = exposed, k
    return (at, late_after(t, at)) if at else (0, frozenset())


# The train step in two halves (Abi.halves), compiled as two modules side by side: iree-compile
# spends most of a deep net's cold compile in stages that run on one core (flow/stream over the
# one inlined function, LLVM's serialisation of one module: benchmarks/NOTES.md), so two modules
# of about half the program each finish in about half the time on two cores.  @train_late holds
# the forward, the loss, the late layers' backward and their parameters' update; @train_early
# the early layers' backward and update.  Where to cut (`balanced_halves`): so that the two modules'
# cold compiles, modelled from their texts (lmc/lower/compile_cost.py), take about as long.
# The forward is all in @train_late, so a balanced pair gives @train_early more than half of
# the backward: 0.61–0.75 of the train graph's nodes on the reference nets (benchmarks/NOTES.md,
# "Where to cut, modelled").  LMC_SPLIT=auto
# splits a net of at least SPLIT_MIN_NODES train-graph nodes (a shallower one compiles in
# seconds anyway) whose step computes at least SPLIT_MIN_FLOPS (3× the forward's,
# bench.train_step_flops): the second call and its carried values cost a step about 0.5 ms
# (the digits CNN: 5.9 → 6.4 ms), ≤ 1% of a step of that size; and whose FLOPs are mostly convs
# (`mostly_convs`): the conv nets measured step 0–7% faster split, vit_tiny 5% slower (the
# attention's saved residuals handed from one module to the other), so a transformer keeps
# one module unless LMC_SPLIT=on.
HALVES_AT = 0.75              # the first cut tried, as a share of the train graph's nodes
HALVES_PROBE = 0.1            # the second: this much lower or higher, toward the lighter half
HALVES_RANGE = (0.5, 0.9)     # the shares a cut is taken from
SPLIT_MIN_NODES = 60
SPLIT_MIN_FLOPS = 4e9


def unsplittable(cfg, world: int, accum: int) -> str | None:
    """Why this recipe's step cannot be split into halves (None: it can)."""
    if world > 1 or accum > 1:
        return "data-parallel ranks and grad_accum_steps already split the step (@grad_step + @apply_step)"
    if cfg.grad_clip_norm > 0:
        return "train.grad_clip_norm scales every gradient by one global norm, which neither half has"
    return None


def split_rule(net: TypedNet, t: TypedNet, mode: str, world: int = 1, accum: int = 1) -> bool:
    """Whether the train step is lowered in halves: mode on (refused, exit 2, where the recipe
    cannot be split), auto (a net of at least SPLIT_MIN_NODES train-graph nodes and
    SPLIT_MIN_FLOPS per step, mostly convs) or off."""
    if mode == "off":
        return False
    why = unsplittable(net.spec.train, world, accum)
    if why is not None:
        if mode == "on":
            raise UsageError(f"LMC_SPLIT=on: {why}", hint="LMC_SPLIT=auto splits where it can")
        return False
    return mode == "on" or (len(t.graph.nodes) >= SPLIT_MIN_NODES and 3 * t.total_flops >= SPLIT_MIN_FLOPS
                            and mostly_convs(t))


def halves_cut(t: TypedNet, share: float = HALVES_AT) -> tuple[int, frozenset]:
    """(k, late) for Abi.halves: @train_early takes the backward of the train graph's nodes
    before k (`share` of them), @train_late the rest and the params no node before k reads;
    (0, ∅) where a half would have no parameter to update."""
    n = len(t.graph.nodes)
    k = min(max(1, round(n * share)), n - 1) if n > 1 else 0
    late = late_after(t, k) if k else frozenset()
    if not late or len(late) == len(t.graph.params):       # a half with nothing to update
        return 0, frozenset()
    return k, late


_BALANCED: dict[int, tuple] = {}     # id(net) → the cut chosen (dropped when the net is freed)


def balanced_halves(net: TypedNet, t: TypedNet, a: "Abi") -> "Abi":
    """`a` (cut at HALVES_AT) with the cut whose slower module compiles fastest, as the text
    model (lmc/lower/compile_cost.py) has it: the halves lowered at HALVES_AT, then HALVES_PROBE
    toward the lighter half, then where the line through the two gives equal times (within
    HALVES_RANGE); the best of the three.  Three lowerings (0.3–1.3 s on the reference nets,
    in-place ties off: they do not change what compiles), once per net and process."""
    hit = _BALANCED.get(id(net))
    if hit is not None:
        return replace(a, cut=hit[0], late=hit[1])
    tried: dict[int, tuple] = {}             # k → (late, slower half's seconds, late − early)

    def at(share: float) -> float:
        k, late = halves_cut(t, min(max(share, HALVES_RANGE[0]), HALVES_RANGE[1]))
        if k and k not in tried:
            texts = lower_train(net, replace(a, cut=k, late=late), options=LowerOptions(inplace="off"))
            sl, se = (compile_seconds(x) for x in texts)           # @train_late's module first
            tried[k] = (late, max(sl, se), sl - se)
        return tried[k][2] if k else 0.0
    d0 = at(HALVES_AT)
    probe = HALVES_AT - HALVES_PROBE if d0 < 0 else HALVES_AT + HALVES_PROBE
    d1 = at(probe)
    if d0 != d1:
        at(HALVES_AT + (probe - HALVES_AT) * d0 / (d0 - d1))
    if tried:
        k = min(tried, key=lambda j: (tried[j][1], j))
        a = replace(a, cut=k, late=tried[k][0])
    _BALANCED[id(net)] = (a.cut, a.late)
    weakref.finalize(net, _BALANCED.pop, id(net), None)      # before its id can be reused
    return a


def late_after(t: TypedNet, k: int) -> frozenset:
    """The params of the train graph no node before node k reads (@grad_late's)."""
    early = {p.name for n in t.graph.nodes[:k] for p in n.params}
    return frozenset(p.name for p in t.graph.params if p.name not in early)


def exempt_from_decay(p) -> bool:
    """wd_exclude_norm_bias's rule, for every optimizer (the Lean kit's field doc: 1-D params —
    biases, norm scales, the class token — and the positional embedding): rank < 2, or a tensor
    its layer declares a positional embedding (graph.ir.Param.role "position")."""
    return p.type.rank < 2 or p.role == "position"


def ema_decay(cfg, step: int) -> float:
    """The EMA weight on the old average at 1-based step `step`: ema_decay, warmed up as
    min(decay, (1 + t)/(10 + t)) with t = step − 1 (TF's ExponentialMovingAverage num_updates,
    the verified driver's rule: a constant 0.9999 would still hold the init weights after a
    short run)."""
    t = step - 1
    return min(cfg.ema_decay, (1.0 + t) / (10.0 + t))


def hyperparams(a: Abi, cfg, lr: float, step: int) -> list[float]:
    """The hp vector for optimizer step `step` (1-based), in `a.hp` order.  With k-step
    accumulation, bn_momentum is compensated to bn_momentum^(1/k): the running statistics see
    k micro-batches per optimizer step, and k updates of m^(1/k) weigh the old estimate as one
    update of m would."""
    vals = {"lr": lr, "weight_decay": cfg.weight_decay, "t": float(step),
            "bn_momentum": cfg.bn_momentum ** (1.0 / a.accum), "grad_clip_norm": cfg.grad_clip_norm,
            "head_lr_mult": cfg.head_lr_mult, "ema_decay": ema_decay(cfg, step), "grad_scale": 1.0 / (a.accum * a.world)}
    if a.loss is not None:
        vals.update(a.loss.hp_values(cfg))
    for o in a.used:
        vals.update({f"{o.name}.{h}": v for h, v in o.hp_values(cfg).items()})
    return [float(vals[h]) for h in a.hp]


def hp_ssa(name: str) -> str:
    return "%hp_" + name.replace(".", "_")


def _loc(net: TypedNet, layer: int) -> str:
    if layer < 0:
        return ""
    entry = net.spec.layers[layer]
    l = entry.loc
    return f' loc("layers[{layer}].{entry.kind}"("{l.file}":{l.line}:{l.col}))'


class _Emitter:
    def __init__(self, net: TypedNet, options: LowerOptions):
        self.net = net
        self.options = options
        self.forms = _FORMS[options.conv_form]     # alternative primitive spellings
        # the recipe's bf16: matmul operands in bfloat16, f32 accumulation (Prim.mixed_precision;
        # the standard convs' too with bf16_conv)
        self.bf16 = bool(net.spec.train is not None and net.spec.train.bf16)
        self.bf16_conv = bool(self.bf16 and net.spec.train.bf16_conv)
        self.funcs: dict[str, str] = {}      # symbol → text, emitted once each
        self.placed: dict[int, tuple] = {}   # id(graph) → _placed's (graph, output)
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


def option_refusal(net: TypedNet, options: LowerOptions) -> SpecError | None:
    """What the recipe asks that these options' spellings cannot give (the training functions'
    refusal, None if none): train.bf16_conv rounds the matmul form of conv, which the direct form
    does not have.  Asked by lower() and `lmc info`, not by abi() or the check stage: they
    describe the net whatever its spelling, and the options are the command line's."""
    cfg = net.spec.train
    if cfg is not None and cfg.bf16_conv and options.conv_form == "direct":
        return SpecError("train.bf16_conv covers the matmul form of conv, not LMC_CONV_FORM=direct's "
                         "stablehlo.convolution", net.spec.loc("train", "bf16_conv"))
    return None


def eval_batch_stats(net: TypedNet) -> bool:
    """Whether the recipe's @forward normalises with the batch's own statistics: train.running_bn
    false (the Lean kit's default) on a net with BN running state.  running_bn: true evaluates
    with the running statistics (the kit's ImageNet recipes and its IREE path's `_fwd_eval`); a
    spec with no recipe, or a net with no BN, has only the one form."""
    cfg = net.spec.train
    return bool(net.state) and cfg is not None and not cfg.running_bn


def lower(net: TypedNet, functions: str = "all", backend: str | None = None, world: int = 1,
          the_abi: Abi | None = None, options: LowerOptions = LowerOptions(),
          batch_stats: bool | None = None) -> str:
    """Render the module.  functions: train_step (the training functions: @train_step, or
    @grad_step + @apply_step under accumulation, and @average under use_swa) | forward | all.
    backend: llvm-cpu (default), cuda or rocm — every backend gets the same module today;
    options: the spellings (lmc/lower/options.py; conv_form="direct" picks the
    stablehlo.convolution form of conv, _FORMS) — the defaults unless the caller passes the
    command line's.  world > 1 (data-parallel ranks): @grad_step + @apply_step even without
    accumulation, the update scaled by 1/(k·world) — the host sums the ranks' accumulators in
    between.  the_abi: the ABI the caller already built for (net, world), else it is
    built here.  batch_stats: @forward normalises BN with the batch's own statistics (its
    running-state arguments unused) — None: as the recipe says (eval_batch_stats), True: `lmc
    eval --batch-stats`'s diagnostic.  A net the check stage refuses for these functions is refused here too (the
    check's report is cached on the net: a command that checked it first does not check again)."""
    check(net, world).raise_for(functions)
    if batch_stats is None:
        batch_stats = eval_batch_stats(net)
    refused = option_refusal(net, options)
    if refused is not None and functions in ("all", "train_step", "input_grad"):
        raise refused
    em = _Emitter(net, options)
    bodies = []
    if functions in ("all", "train_step"):
        if net.spec.train is None:
            raise SpecError("rendering @train_step needs a `train:` recipe in the spec", net.spec.layers[0].loc)
        a = the_abi if the_abi is not None else abi(net, world)
        tnet = train_net(net)      # train.train_res: the same weights at the training resolution
        if a.halves:
            bodies += _train_halves(tnet, em, a)
        elif not a.split:
            bodies.append(_train_step(tnet, em, a))
        elif a.cut:
            bodies += [*_grad_halves(tnet, em, a), _apply_step(net, em, a)]
        else:
            bodies += [_grad_step(tnet, em, a), _apply_step(net, em, a)]
        if net.spec.train.use_swa:
            bodies.append(_average(net, em, a))
        if net.spec.train.spectral_cap > 0:
            bodies.append(_spectral_project(net, em))
    if functions == "input_grad":
        if net.spec.train is None:
            raise SpecError("rendering @input_grad needs a `train:` recipe in the spec (its loss)", net.spec.layers[0].loc)
        bodies.append(_input_grad(net, em, the_abi if the_abi is not None else abi(net)))
    if functions in ("all", "forward", "input_grad"):
        bodies.append(_forward(net, em, batch_stats))
    text = _module(net, em, bodies, functions, options)
    return with_transients(text) if options.external_transients(backend or "llvm-cpu") else text


def lower_train(net: TypedNet, a: Abi, backend: str | None = None, world: int = 1,
                options: LowerOptions = LowerOptions()) -> list[str]:
    """The training functions' module texts, in the order `lmc train` loads them: one module,
    or an Abi.halves net's two (lower_halves: @train_late's, then @train_early's)."""
    if a.halves:
        return list(lower_halves(net, backend, a, options))
    return [lower(net, "train_step", backend=backend, world=world, the_abi=a, options=options)]


def lower_halves(net: TypedNet, backend: str | None = None, the_abi: Abi | None = None,
                 options: LowerOptions = LowerOptions()) -> tuple[str, str]:
    """The training functions of an Abi.halves net as two modules, compiled side by side: the
    first holds @train_late (and @average, @spectral_project where the recipe has them), the
    second @train_early; each with only the private functions it calls."""
    a = the_abi if the_abi is not None else abi(net)
    if not a.halves:
        raise ValueError("lower_halves: the ABI has no halves (Abi.halves)")
    whole = lower(net, "train_step", backend=backend, the_abi=a, options=options)
    return split_module(whole, ["train_early"])


_FUNC = re.compile(r"^\s*func\.func (private )?@([\w.$-]+)\(")
_SYM = re.compile(r"@([\w.$-]+)")


def split_module(text: str, second: list[str]) -> tuple[str, str]:
    """A module's text as two: the public functions named in `second` in the other, every other
    public function in the first, each module with the private functions it reaches (the
    header's comment lines in both)."""
    lines = text.splitlines()
    head = [l for l in lines if l.startswith("//")]
    funcs: dict[str, tuple[bool, str]] = {}      # symbol → (private, text), in module order
    cur, end = None, ""
    for line in lines:
        m = _FUNC.match(line) if cur is None else None
        if m:
            cur, end = m.group(2), line[:len(line) - len(line.lstrip())] + "}"
            funcs[cur] = (bool(m.group(1)), [])
        if cur is not None:
            funcs[cur][1].append(line)
            if line.rstrip() == end:        # the closing brace at the func's own indent
                cur = None
    body = {k: "\n".join(v) for k, (_, v) in funcs.items()}

    def module(publics):
        keep, todo = set(publics), list(publics)
        while todo:
            for sym in _SYM.findall(body[todo.pop()]):
                if sym in body and sym not in keep:
                    keep.add(sym)
                    todo.append(sym)
        out = head + ["module @model {"] + [body[k] for k in funcs if k in keep] + ["}"]
        return "\n".join(out) + "\n"
    publics = [k for k, (priv, _) in funcs.items() if not priv]
    missing = [f for f in second if f not in publics]
    if missing:
        raise ValueError(f"split_module: no public function {missing}")
    return module([f for f in publics if f not in second]), module(second)


TRANSIENTS = "%transients: !hal.buffer_view {iree.abi.transients}"
_PUBLIC = re.compile(r"^(\s*func\.func @[\w.$-]+\()(.*?)(\) -> .*)$")


def with_transients(text: str) -> str:
    """Every public function of a module with one more argument, last: the storage of its
    transient values (IREE's `iree.abi.transients`), passed by the caller and kept between calls
    (lmc/run/runtime.py's Module appends it), instead of an allocation per call — on llvm-cpu
    one malloc and zero fill of every transient allocation over 64 MiB, each call
    (LowerOptions.transients)."""
    def one(line: str) -> str:
        m = _PUBLIC.match(line)
        if not m:
            return line
        head, args, tail = m.groups()
        return f"{head}{args + ', ' if args else ''}{TRANSIENTS}{tail}"
    return "\n".join(one(l) for l in text.split("\n"))


def _module(net: TypedNet, em: _Emitter, bodies: list[str], functions: str, options: LowerOptions) -> str:
    """The module text: header, hint, the private functions, then the bodies."""
    out = [f"// lmc: {net.spec.name} (batch {net.batch}); generated, do not edit"]
    # @input_grad is never packed on "auto": IREE 3.13's data tiling miscompiles the dx of a
    # strided conv that reads one input channel (patch_embed on a grayscale 4×6 image gave a
    # wrong dx at every loss, tests/test_input_grad.py), and @input_grad is the one function
    # that takes a gradient through the net's first conv.
    hint = _packed_matmuls(net, options.packed)
    if hint and not (functions == "input_grad" and options.packed == "auto"):
        out.append(hint)            # lmc/compile.py: --iree-global-opt-data-tiling on llvm-cpu
    if options.queued:
        out.append(ASYNC)
    out.append("module @model {")
    out += [em.funcs[k] for k in em.funcs]
    out += bodies
    out.append("}")
    return "\n".join(out) + "\n"


def _packed_matmuls(net: TypedNet, packed: str = "auto") -> str | None:
    """The packing hint for llvm-cpu (benchmarks/NOTES.md, "Packed matmuls by instruction set"):
    packed (mmt4d) matmuls pay only for nets whose matmul FLOPs are mostly in dense/attention
    layers, and only on targets without AVX-512 (AVX2: mnist_mlp −10…−17%, tiny_gpt −7%,
    vit_tiny −7%; with AMD's AVX-512 they cost mnist_mlp +10…+14% and tiny_gpt +7%) or with
    Intel's (vit_tiny −16%, tiny_gpt at batch 128 −21%, mnist_mlp −17%: PACKED_DENSE).  A net
    whose FLOPs are mostly convs is faster unpacked
    on all three (Zen 4 / Zen 4 held to AVX2: mobilenet_v2 −14% / −9%, efficientnet_b0 −2% / −6%,
    resnet18@32² +3% / −12%; an Intel Xeon: mnist_cnn −15%, cifar_cnn_bn −12%, resnet18@32² −9%,
    mobilenet_v2 −14%, efficientnet_b0 −4%).  A net whose largest dense matmul is a linear layer
    over token streams that sums its dW over chunks of rows (lmc/prims/dense.py row_split) is
    faster unpacked on AVX2 (an Intel Xeon held to AVX2: vit_tiny −6%, tiny_gpt −7%, at batch 128
    −10%; an MLP's dense layers, split or not, still gain from packing there: mnist_mlp at batch
    1,024 −7%), so it is packed only on Intel's AVX-512 (PACKED_INTEL) where it is large, else
    not at all.  packed="on"|"off" (LowerOptions.packed, LMC_PACKED at the command line)
    overrides: PACKED on every target, or no hint (A/B)."""
    if packed != "auto":
        return PACKED if packed == "on" else None
    if mostly_convs(net):
        return None
    big = max((n for n in net.graph.nodes if not _is_conv(n)), key=lambda n: n.flops, default=None)
    if big is None:
        return None
    if _token_rows_split(big):
        return PACKED_INTEL if big.flops >= LARGE_MATMUL_FLOPS else None
    return PACKED_DENSE


def _token_rows_split(n: Node) -> bool:
    """Whether n is a linear layer over token streams ([B, T, K] or more axes) whose dW is summed
    over chunks of rows (its render context's `dw_split`, as the template reads it)."""
    if n.prim.name != "linear" or n.inputs[0].type.rank < 3:
        return False
    ctx = n.prim.context([v.type for v in n.inputs], [p.type for p in n.params], n.out.type)
    return ctx["dw_split"] is not None


def _is_conv(n: Node) -> bool:
    return bool(n.prim.conv_matmuls([v.type for v in n.inputs], [p.type for p in n.params]))


def mostly_convs(net: TypedNet) -> bool:
    """Whether at least half of the net's FLOPs are in convs (else in dense / attention layers)."""
    return 2 * sum(n.flops for n in net.graph.nodes if _is_conv(n)) >= max(net.total_flops, 1)


# Alternative spellings of a primitive (same math, same contract, both oracle-tested).
# Every backend gets the matmul form of conv by default: it compiles in seconds for cuda and
# rocm too (resnet18 train step: 16 s for sm_86 at batch 8), while IREE 3.13's GPU codegen
# for stablehlo.convolution took > 15 minutes on resnet18 for cuda.  conv_form="direct"
# (LowerOptions; LMC_CONV_FORM at the command line) selects the stablehlo.convolution form
# (lmc/prims/conv_direct.py).
# conv_form="winograd" (the default) computes the stride-1 3×3 convs of enough channels by
# Winograd F(2×2, 3×3) and every other conv as conv does (lmc/prims/conv_winograd.py,
# benchmarks/NOTES.md); "matmul" is conv's patch matmuls alone.
_FORMS = {"winograd": {"conv": "conv_winograd"}, "matmul": {}, "direct": {"conv": "conv_direct"}}




# train.bf16's spelling (templates/prims/_dot.j2): "emulated" rounds the operands on their f32
# bits and keeps an f32 dot; "convert" rounds them, converts to bf16 and dots bf16×bf16→f32.
# Same numbers; the default is the faster on llvm-cpu (docs/layers.md, benchmarks/bf16_forms.py).
# LowerOptions.bf16_form picks one.


def _prim_for(node: Node, em: "_Emitter"):
    """The node's primitive in the lowering's spelling: the form's alternative where it covers
    the instance (and, under train.bf16, takes bf16 operands), else the node's own."""
    alt = em.forms.get(node.prim.name)
    if alt:
        prim = make_prim(alt, **node.prim.attrs)
        bf16 = em.bf16 and bf16_operands(node, em.bf16_conv)
        if prim.covers([v.type for v in node.inputs], [p.type for p in node.params]) and (prim.takes_bf16 or not bf16):
            return prim
    return node.prim


def _placed(net: TypedNet, em: _Emitter):
    """(graph, output) with the lowering's spellings and activation layouts (lmc/graph/layout.py):
    what the forward and reverse walks visit."""
    key = id(net.graph)
    if key not in em.placed:
        em.placed[key] = place(net.graph, net.output, lambda n: _prim_for(n, em), em.options.hbwc)
    return em.placed[key]


def _rendered(em: _Emitter, node: Node):
    prim = node.prim
    extra = {"bf16": em.options.bf16_form} if em.bf16 and bf16_operands(node, em.bf16_conv) else None
    r = render_prim(prim, [v.type for v in node.inputs], [p.type for p in node.params], node.out.type, extra)
    em.add_funcs(r.fwd, r.text)
    return r


def _forward(net: TypedNet, em: _Emitter, batch_stats: bool = False) -> str:
    em.lines = []
    g, out = _placed(net, em)
    pname = {p.name: f"%p{i}" for i, p in enumerate(g.params)}
    sname = {s.name: f"%s{i}" for i, s in enumerate(g.state)}
    args = [f"{pname[p.name]}: {p.type.mlir}" for p in g.params] + \
           [f"{sname[s.name]}: {s.type.mlir}" for s in g.state] + [f"%x: {net.input.mlir}"]
    val = {g.x.id: "%x", **_ones(em, g.masks)}
    for node in g.nodes:
        r = _rendered(em, node)
        ins = [(val[v.id], v.type.mlir) for v in node.inputs] + [(pname[p.name], p.type.mlir) for p in node.params]
        loc = _loc(net, node.layer)
        if r.eval and not batch_stats:
            res = em.call(r.eval, ins + [(sname[s.name], s.type.mlir) for s in node.state], [node.out.type.mlir], loc)
        else:
            outs = [node.out.type.mlir] + [t.mlir for t in r.saved] + [t.mlir for t in r.stats]
            res = em.call(r.fwd, ins, outs, loc)
        val[node.out.id] = res[0]
    body = "\n".join(em.lines)
    return (f"  func.func @forward({', '.join(args)}) -> {out.type.mlir} {{\n{body}\n"
            f"    return {val[out.id]} : {out.type.mlir}\n  }}")


class _Names:
    """SSA names of the ABI groups in one function."""

    def __init__(self, net, a: Abi):
        self.p = {p.name: f"%p{i}" for i, p in enumerate(a.params)}
        self.o = {(slot, p.name): f"%o{j}" for j, (slot, p) in enumerate(a.opt)}
        self.e = {p.name: f"%e{i}" for i, p in enumerate(a.ema)}
        self.s = {s.name: f"%s{i}" for i, s in enumerate(a.state)}
        self.g = {p.name: f"%g{i}" for i, p in enumerate(a.params)}

    def args(self, a: Abi, groups: str) -> list[str]:
        """Arguments for the groups in order: P, O, E, S, G."""
        out = []
        for grp in groups:
            if grp == "P":
                out += [f"{self.p[p.name]}: {p.type.mlir}" for p in a.params]
            elif grp == "O":
                out += [f"{self.o[(slot, p.name)]}: {p.type.mlir}" for slot, p in a.opt]
            elif grp == "E":
                out += [f"{self.e[p.name]}: {p.type.mlir}" for p in a.ema]
            elif grp == "S":
                out += [f"{self.s[s.name]}: {s.type.mlir}" for s in a.state]
            elif grp == "G":
                out += [f"{self.g[p.name]}: {p.type.mlir}" for p in a.params]
        return out


def _hp_arg(em: _Emitter, a: Abi) -> str:
    """The hp vector argument; its entries sliced into named scalars (hp_ssa)."""
    n = len(a.hp)
    for i, h in enumerate(a.hp):
        v = hp_ssa(h)
        em.lines.append(f"    {v}_1 = stablehlo.slice %hp [{i}:{i + 1}] : (tensor<{n}xf32>) -> tensor<1xf32>")
        em.lines.append(f"    {v} = stablehlo.reshape {v}_1 : (tensor<1xf32>) -> tensor<f32>")
    return f"%hp: tensor<{n}xf32>"


def _func(name: str, args: list[str], em: _Emitter, rets: list[tuple[str, str]]) -> str:
    body = "\n".join(em.lines)
    return (f"  func.func @{name}({', '.join(args)}) -> ({', '.join(t for _, t in rets)}) {{\n{body}\n"
            f"    return {', '.join(v for v, _ in rets)} : {', '.join(t for _, t in rets)}\n  }}")


def _template(em: _Emitter, path: str, kind: str, ctx: dict, what: str) -> str:
    """Render a (non-primitive) template once per context; returns its symbol."""
    ctx = dict(ctx)
    sym = f"{kind}_{sig(kind, ctx)}"
    ctx["name"] = sym
    em.add_funcs(sym, render_template(path, ctx, what))
    return sym


def _ones(em: _Emitter, masks) -> dict:
    """Value id → an all-ones constant for each mask (eval: dropout and drop path are the identity)."""
    out = {}
    for i, m in enumerate(masks):
        v = f"%ones_m{i}"
        em.lines.append(f"    {v} = stablehlo.constant dense<1.0> : {m.value.type.mlir}")
        out[m.value.id] = v
    return out


def _mask_args(a: Abi) -> list[str]:
    return [f"%m{i}: {m.value.type.mlir}" for i, m in enumerate(a.masks)]


def _grads(net: TypedNet, em: _Emitter, a: Abi, N: _Names, dx: list | None = None, cut: int = 0):
    """Forward, loss, reverse walk and running statistics.  Returns (grads: param name → SSA,
    new state: state name → SSA, (loss, correct)); with `dx` a list, the cotangents reaching
    the network input are appended to it (else the first layers' dx are dropped).  The masks
    are the function's %m arguments, except under `dx` (@input_grad: all ones, the eval net).
    cut > 0 (@grad_late): the reverse walk stops before the train graph's node `cut`; grads
    holds only Abi.late's, and a fourth result is the _Carry @grad_early continues from."""
    g, out = _placed(net, em)
    masks = _ones(em, g.masks) if dx is not None else {m.value.id: f"%m{i}" for i, m in enumerate(g.masks)}
    val = {g.x.id: "%x", **masks}
    saved, stats = {}, {}
    for node in g.nodes:
        r = _rendered(em, node)
        ins = [(val[v.id], v.type.mlir) for v in node.inputs] + [(N.p[p.name], p.type.mlir) for p in node.params]
        outs = [node.out.type.mlir] + [t.mlir for t in r.saved] + [t.mlir for t in r.stats]
        res = em.call(r.fwd, ins, outs, _loc(net, node.layer))
        val[node.out.id] = res[0]
        saved[id(node)] = list(zip(res[1:1 + len(r.saved)], r.saved))
        stats[id(node)] = list(zip(res[1 + len(r.saved):], r.stats))
    # loss: (logits, labels, hp...) -> (loss, dlogits, correct)
    loss = a.loss
    lctx = {"logits": a.logits.mlir, "labels": a.labels.mlir, **loss.context(a.logits, a.labels)}
    lsym = _template(em, f"losses/{loss.name}.mlir.j2", loss.name, lctx, f"loss {loss.name}")
    lres = em.call(lsym, [(val[out.id], out.type.mlir), ("%labels", a.labels.mlir)] +
                   [(hp_ssa(h), SCALAR) for h in loss.hp], [SCALAR, out.type.mlir, SCALAR])
    # backward: reverse walk, summing cotangents where a value fans out
    cot: dict[int, list[str]] = {out.id: [lres[1]]}
    grads: dict[str, list[str]] = {}
    k = g.copies[cut] if cut else 0
    _walk(net, em, g, g.nodes[k:], cot, saved, grads, N, dx)
    gsum = _summed(em, grads, [p for p in a.params if not cut or p.name in a.late])
    # running statistics: running = m·running + (1 − m)·batch (m = bn_momentum, weight on OLD)
    new_s = {}
    for node in g.nodes:
        for s, (b, t) in zip(node.state, stats.get(id(node), [])):
            esym = _template(em, "optim/ema.mlir.j2", "ema", {"c": t.mlir}, "running statistics")
            new_s[s.name] = em.call(esym, [(N.s[s.name], t.mlir), (b, t.mlir), (hp_ssa("bn_momentum"), SCALAR)],
                                    [t.mlir])[0]
    if not cut:
        return gsum, new_s, (lres[0], lres[2])
    early = g.nodes[:k]
    carry = _Carry([(v, _sum(em, ds, _type_of(g, v))) for v, ds in cot.items()],
                   [(id(n), j, s, t) for n in early for j, (s, t) in enumerate(saved[id(n)])],
                   [(name, _sum(em, ds, next(p.type.mlir for p in a.params if p.name == name)))
                    for name, ds in grads.items()])
    return gsum, new_s, (lres[0], lres[2]), carry


def _walk(net: TypedNet, em: _Emitter, g, nodes, cot: dict, saved: dict, grads: dict, N: _Names,
          dx: list | None):
    """The reverse walk over `nodes` (a prefix or suffix of g.nodes, walked last to first):
    each reached node's backward, its input cotangents added to `cot`, its params' to `grads`."""
    for node in reversed(nodes):
        if node.out.id not in cot:
            continue
        dy = _sum(em, cot.pop(node.out.id), node.out.type.mlir)
        r = _rendered(em, node)
        args_b = [(dy, node.out.type.mlir)] + [(s, t.mlir) for s, t in saved[id(node)]] + \
                 [(N.p[p.name], p.type.mlir) for p in node.params]
        outs = [v.type.mlir for v in node.inputs] + [p.type.mlir for p in node.params]
        res = em.call(r.bwd, args_b, outs, _loc(net, node.layer))
        for k, (v, d) in enumerate(zip(node.inputs, res)):
            if v.node is not None:
                cot.setdefault(v.id, []).append(d)
            elif dx is not None and v is g.x and node.prim.inputs[min(k, len(node.prim.inputs) - 1)] not in \
                    node.prim.constant_inputs:  # the network input (the train step drops it; masks have none)
                dx.append(d)
        for p, d in zip(node.params, res[len(node.inputs):]):
            grads.setdefault(p.name, []).append(d)


def _summed(em: _Emitter, grads: dict, params) -> dict:
    """Each param's gradient: its contributions (taken out of `grads`) summed, zeros where it
    has none."""
    return {p.name: (_sum(em, grads.pop(p.name), p.type.mlir) if p.name in grads else _zeros(em, p.type.mlir))
            for p in params}


def _type_of(g, vid: int) -> str:
    """The (physical) type of the value `vid` of the placed graph."""
    return next(n.out.type.mlir for n in g.nodes if n.out.id == vid)


@dataclass
class _Carry:
    """What @grad_late hands @grad_early (its C results, in this order): the cotangents of the
    values that cross the cut (value id, SSA), the early nodes' saved residuals (node id,
    position, SSA, type) and the late layers' share of a gradient an early node adds to (param
    name, SSA)."""
    cot: list
    saved: list
    grads: list

    def values(self, g, a: Abi) -> list[tuple[str, str]]:
        ptype = {p.name: p.type.mlir for p in a.params}
        return ([(s, _type_of(g, v)) for v, s in self.cot] + [(s, t.mlir) for _, _, s, t in self.saved] +
                [(s, ptype[name]) for name, s in self.grads])


def _update(net: TypedNet, em: _Emitter, a: Abi, N: _Names, grads: dict, only=None):
    """Clip, then each tensor's optimizer update, then the EMA of the new weights.
    Returns (new params, new optimizer state, new EMA), each keyed like N.  only: the names of
    the params to update (a half's, Abi.halves: never with a global clip), else all."""
    cfg = net.spec.train
    mine = (lambda name: True) if only is None else (lambda name: name in only)
    if cfg.grad_clip_norm > 0:
        # global L2 norm over every gradient (optimizers.md §3.5, the full set as the JAX reference)
        types = [p.type.mlir for p in a.params]
        csym = _template(em, "optim/grad_clip.mlir.j2", "grad_clip", {"types": types, "axes": [", ".join(str(d) for d in range(p.type.rank)) for p in a.params]},
                         "grad_clip_norm")
        res = em.call(csym, [(grads[p.name], p.type.mlir) for p in a.params] +
                      [(hp_ssa("grad_clip_norm"), SCALAR)], types)
        grads = {p.name: r for p, r in zip(a.params, res)}
    lr_head = None
    if a.head:
        lr_head = em.fresh("lr_head")
        em.lines.append(f"    {lr_head} = stablehlo.multiply {hp_ssa('lr')}, {hp_ssa('head_lr_mult')} : tensor<f32>")
    new_p, new_o = {}, {}
    for p in filter(lambda p: mine(p.name), a.params):
        o = a.optimizers[p.name]
        octx = {"p": p.type.mlir, "decay": a.decay(p.name), **o.context(p)}
        osym = _template(em, f"optim/{o.name}.mlir.j2", o.name, octx, f"optimizer {o.name}")
        st = [(N.o[(slot, p.name)], p.type.mlir) for slot in o.slots]
        lr = lr_head if p.name in a.head else hp_ssa("lr")
        hp = [(lr, SCALAR), (hp_ssa("weight_decay"), SCALAR)] + \
             [(hp_ssa(h if h in GLOBAL_HP else f"{o.name}.{h}"), SCALAR) for h in o.hp]
        res = em.call(osym, [(N.p[p.name], p.type.mlir), (grads[p.name], p.type.mlir)] + st + hp,
                      [p.type.mlir] * (1 + len(o.slots)))
        new_p[p.name] = res[0]
        for slot, rr in zip(o.slots, res[1:]):
            new_o[(slot, p.name)] = rr
    new_e = {}
    for p in filter(lambda p: mine(p.name), a.ema):
        esym = _template(em, "optim/ema.mlir.j2", "ema", {"c": p.type.mlir}, "use_ema")
        new_e[p.name] = em.call(esym, [(N.e[p.name], p.type.mlir), (new_p[p.name], p.type.mlir),
                                       (hp_ssa("ema_decay"), SCALAR)], [p.type.mlir])[0]
    return new_p, new_o, new_e


def _rets_poe(a: Abi, new_p, new_o, new_e, ps=None, opt=None, ema=None) -> list[tuple[str, str]]:
    """P', O', E' as results (of `ps`, `opt`, `ema`: a half's; default all of the ABI's)."""
    rets = [(new_p[p.name], p.type.mlir) for p in (a.params if ps is None else ps)]
    rets += [(new_o[(slot, p.name)], p.type.mlir) for slot, p in (a.opt if opt is None else opt)]
    rets += [(new_e[p.name], p.type.mlir) for p in (a.ema if ema is None else ema)]
    return rets


def _train_step(net: TypedNet, em: _Emitter, a: Abi) -> str:
    em.lines = []
    N = _Names(net, a)
    args = N.args(a, "POES") + [f"%x: {a.x.mlir}", f"%labels: {a.labels.mlir}", _hp_arg(em, a)] + _mask_args(a)
    grads, new_s, (loss, correct) = _grads(net, em, a, N)
    new_p, new_o, new_e = _update(net, em, a, N, grads)
    rets = _rets_poe(a, new_p, new_o, new_e)
    rets += [(new_s.get(s.name, N.s[s.name]), s.type.mlir) for s in a.state]
    rets += [(loss, SCALAR), (correct, SCALAR)]
    # new state tensors written over their arguments where every read is ordered first (inplace.py)
    n = len(N.args(a, "POES"))
    args = inplace.tie(args, em.lines, rets, [(k, k) for k in range(n)], em.funcs, em.options.tie)
    return _func("train_step", args, em, rets)


def _train_halves(net: TypedNet, em: _Emitter, a: Abi) -> tuple[str, str]:
    """@train_late and @train_early (Abi.halves): @train_step cut before the train graph's node
    a.cut (`halves_cut`), each half updating its own params (O and E alike):
      @train_late(P..., O_late..., E_late..., S..., x, labels, hp, M...)
          -> (P_late'..., O_late'..., E_late'..., S'..., loss, correct, C...)
      @train_early(P_early..., O_early..., E_early..., hp, C...) -> (P_early'..., O_early'..., E_early'...)
    X_late / X_early: the entries of P, O, E whose param is in Abi.late or not, in their order;
    C as @grad_late's."""
    em.lines = []
    N = _Names(net, a)
    late, early = a.late_index()
    Pl, Pe = [a.params[i] for i in late], [a.params[i] for i in early]
    Ol, Oe = ([(s_, p) for s_, p in a.opt if (p.name in a.late) == side] for side in (True, False))
    El, Ee = ([p for p in a.ema if (p.name in a.late) == side] for side in (True, False))
    opt = lambda pairs: [f"{N.o[(s_, p.name)]}: {p.type.mlir}" for s_, p in pairs]
    ema = lambda ps: [f"{N.e[p.name]}: {p.type.mlir}" for p in ps]
    args = N.args(a, "P") + opt(Ol) + ema(El) + N.args(a, "S") + \
        [f"%x: {a.x.mlir}", f"%labels: {a.labels.mlir}", _hp_arg(em, a)] + _mask_args(a)
    grads, new_s, (loss, correct), carry = _grads(net, em, a, N, cut=a.cut)
    new_p, new_o, new_e = _update(net, em, a, N, grads, a.late)
    rets = _rets_poe(a, new_p, new_o, new_e, Pl, Ol, El)
    rets += [(new_s.get(s.name, N.s[s.name]), s.type.mlir) for s in a.state]
    rets += [(loss, SCALAR), (correct, SCALAR)]
    g, _ = _placed(net, em)
    carried = carry.values(g, a)
    rets += carried
    nP, nT = len(a.params), len(Pl) + len(Ol) + len(El)
    ties = [(i, j) for j, i in enumerate(late)] + [(nP + j, len(Pl) + j) for j in range(nT - len(Pl))] + \
        [(nP + nT - len(Pl) + i, nT + i) for i in range(len(a.state))]
    args = inplace.tie(args, em.lines, rets, ties, em.funcs, em.options.tie)
    first = _func("train_late", args, em, rets)

    em.lines = []
    k = g.copies[a.cut]
    cs = [f"%c{j}" for j in range(len(carried))]
    args = [f"{N.p[p.name]}: {p.type.mlir}" for p in Pe] + opt(Oe) + ema(Ee) + [_hp_arg(em, a)] + \
        [f"{c}: {t}" for c, (_, t) in zip(cs, carried)]
    grads_e = _early_walk(net, em, g, k, carry, cs, N)
    new_p, new_o, new_e = _update(net, em, a, N, _summed(em, grads_e, Pe), frozenset(p.name for p in Pe))
    rets = _rets_poe(a, new_p, new_o, new_e, Pe, Oe, Ee)
    n = len(rets)
    args = inplace.tie(args, em.lines, rets, [(j, j) for j in range(n)], em.funcs, em.options.tie)
    return first, _func("train_early", args, em, rets)


def _input_grad(net: TypedNet, em: _Emitter, a: Abi) -> str:
    """The loss and its gradient with respect to the input x: the train step's forward, loss and
    reverse walk, summed where x fans out; parameter gradients and running statistics are
    computed in the walk but returned by no one (the compiler drops them)."""
    em.lines = []
    N = _Names(net, a)
    t = net.input.mlir             # the eval resolution (a.x is the training one under train_res)
    args = N.args(a, "PS") + [f"%x: {t}", f"%labels: {a.labels.mlir}", _hp_arg(em, a)]
    dxs: list[str] = []
    _, _, (loss, _) = _grads(net, em, a, N, dx=dxs)
    if not dxs:
        raise SpecError("@input_grad: no primitive passes a gradient back to the input (token ids are "
                        "looked up, not differentiated)", net.spec.layers[0].loc)
    d = _sum(em, dxs, t)
    return _func("input_grad", args, em, [(loss, SCALAR), (d, t)])


def _grad_step(net: TypedNet, em: _Emitter, a: Abi) -> str:
    """One micro-batch: forward + backward, the gradient added into the accumulators G."""
    em.lines = []
    N = _Names(net, a)
    args = N.args(a, "PSG") + [f"%x: {a.x.mlir}", f"%labels: {a.labels.mlir}", _hp_arg(em, a)] + _mask_args(a)
    grads, new_s, (loss, correct) = _grads(net, em, a, N)
    rets = _accumulated(em, a.params, N, grads)
    rets += [(new_s.get(s.name, N.s[s.name]), s.type.mlir) for s in a.state]
    rets += [(loss, SCALAR), (correct, SCALAR)]
    # S' over S (args P, S, G; results G', S').  G' gets a fresh buffer: the G a cycle starts
    # from is @apply_step's zeros, a constant IREE may hand out shared and read-only
    nP, nS = len(a.params), len(a.state)
    args = inplace.tie(args, em.lines, rets, [(nP + i, nP + i) for i in range(nS)], em.funcs, em.options.tie)
    return _func("grad_step", args, em, rets)


def _grad_halves(net: TypedNet, em: _Emitter, a: Abi) -> tuple[str, str]:
    """@grad_late and @grad_early (the module docstring): @grad_step cut before the train graph's
    node a.cut (`backward_cut`), the cut's carried values passed from one to the other."""
    em.lines = []
    N = _Names(net, a)
    late, early = a.late_index()
    args = N.args(a, "PS") + [f"{N.g[a.params[i].name]}: {a.params[i].type.mlir}" for i in late] + \
        [f"%x: {a.x.mlir}", f"%labels: {a.labels.mlir}", _hp_arg(em, a)] + _mask_args(a)
    grads, new_s, (loss, correct), carry = _grads(net, em, a, N, cut=a.cut)
    rets = _accumulated(em, [a.params[i] for i in late], N, grads)
    rets += [(new_s.get(s.name, N.s[s.name]), s.type.mlir) for s in a.state]
    rets += [(loss, SCALAR), (correct, SCALAR)]
    g, _ = _placed(net, em)
    carried = carry.values(g, a)
    rets += carried
    nP, nS = len(a.params), len(a.state)
    args = inplace.tie(args, em.lines, rets, [(nP + i, len(late) + i) for i in range(nS)], em.funcs, em.options.tie)
    first = _func("grad_late", args, em, rets)

    em.lines = []
    k = g.copies[a.cut]
    used = {p.name for n in g.nodes[:k] for p in n.params}
    if used != {a.params[i].name for i in early}:
        raise AssertionError(f"backward cut {a.cut}: the early nodes read {sorted(used)[:4]}…, the ABI "
                             f"gives them {[a.params[i].name for i in early][:4]}…")
    cs = [f"%c{j}" for j in range(len(carried))]
    args = [f"{N.p[a.params[i].name]}: {a.params[i].type.mlir}" for i in early] + \
        [f"{N.g[a.params[i].name]}: {a.params[i].type.mlir}" for i in early] + \
        [f"{c}: {t}" for c, (_, t) in zip(cs, carried)]
    grads_e = _early_walk(net, em, g, k, carry, cs, N)
    params = [a.params[i] for i in early]
    second = _func("grad_early", args, em, _accumulated(em, params, N, _summed(em, grads_e, params)))
    return first, second


def _early_walk(net: TypedNet, em: _Emitter, g, k: int, carry: _Carry, cs: list[str], N: _Names) -> dict:
    """The backward of the placed graph's nodes before k (@grad_early's, @train_early's) from
    the carried values, named `cs` in _Carry order; returns their params' gradient parts."""
    it = iter(cs)
    cot = {v: [next(it)] for v, _ in carry.cot}
    saved: dict[int, list] = {id(n): [] for n in g.nodes[:k]}
    for nid, _, _, t in carry.saved:
        saved[nid].append((next(it), t))
    grads = {name: [next(it)] for name, _ in carry.grads}
    _walk(net, em, g, g.nodes[:k], cot, saved, grads, N, None)
    return grads


def _accumulated(em: _Emitter, params, N: _Names, grads: dict) -> list[tuple[str, str]]:
    """G + g for `params`: the accumulators' new values, as results."""
    rets = []
    for p in params:
        acc = em.fresh("acc")
        em.lines.append(f"    {acc} = stablehlo.add {N.g[p.name]}, {grads[p.name]} : {p.type.mlir}")
        rets.append((acc, p.type.mlir))
    return rets


def _apply_step(net: TypedNet, em: _Emitter, a: Abi) -> str:
    """The optimizer update from the accumulated gradients (scaled by grad_scale = 1/(k·world): the
    mean over the k micro-batches), and the accumulators zeroed for the next cycle."""
    em.lines = []
    N = _Names(net, a)
    args = N.args(a, "POEG") + [_hp_arg(em, a)]
    grads = {}
    for p in a.params:
        t = p.type.mlir
        sb, gs = em.fresh("scale"), em.fresh("gmean")
        em.lines.append(f"    {sb} = stablehlo.broadcast_in_dim {hp_ssa('grad_scale')}, dims = [] : (tensor<f32>) -> {t}")
        em.lines.append(f"    {gs} = stablehlo.multiply {N.g[p.name]}, {sb} : {t}")
        grads[p.name] = gs
    new_p, new_o, new_e = _update(net, em, a, N, grads)
    rets = _rets_poe(a, new_p, new_o, new_e) + [(_zeros(em, p.type.mlir), p.type.mlir) for p in a.params]
    # P', O', E' over their arguments (G stays: its zeros would be written while G is read)
    n = len(N.args(a, "POE"))
    args = inplace.tie(args, em.lines, rets, [(k, k) for k in range(n + len(a.params))], em.funcs, em.options.tie)
    return _func("apply_step", args, em, rets)


def _average(net: TypedNet, em: _Emitter, a: Abi) -> str:
    """SWA's running mean A (and SWAG's running mean of squares Q): X ← X + w·(value − X)."""
    em.lines = []
    swag = net.spec.train.use_swag
    ps = a.params
    args = [f"%a{i}: {p.type.mlir}" for i, p in enumerate(ps)]
    if swag:
        args += [f"%q{i}: {p.type.mlir}" for i, p in enumerate(ps)]
    args += [f"%p{i}: {p.type.mlir}" for i, p in enumerate(ps)] + ["%w: tensor<f32>"]
    rets_a, rets_q = [], []
    for i, p in enumerate(ps):
        t = p.type.mlir
        sym = _template(em, "optim/average.mlir.j2", "average", {"p": t, "sq": swag}, "use_swa")
        if swag:
            r = em.call(sym, [(f"%a{i}", t), (f"%q{i}", t), (f"%p{i}", t), ("%w", SCALAR)], [t, t])
            rets_a.append((r[0], t))
            rets_q.append((r[1], t))
        else:
            rets_a.append((em.call(sym, [(f"%a{i}", t), (f"%p{i}", t), ("%w", SCALAR)], [t])[0], t))
    return _func("average", args, em, rets_a + rets_q)


def _spectral_project(net: TypedNet, em: _Emitter) -> str:
    """train.spectral_cap: each capped weight projected by templates/trust/spectral.mlir.j2."""
    em.lines = []
    caps = capped(net)
    args = [f"%w{i}: {c.param.type.mlir}" for i, c in enumerate(caps)] + \
           [f"%u{i}: {c.u_type.mlir}" for i, c in enumerate(caps)] + ["%cap: tensor<f32>"]
    rets_w, rets_u = [], []
    for i, c in enumerate(caps):
        t, ut = c.param.type.mlir, c.u_type.mlir
        sym = _template(em, "trust/spectral.mlir.j2", "spectral", context(c), "train.spectral_cap")
        r = em.call(sym, [(f"%w{i}", t), (f"%u{i}", ut), ("%cap", SCALAR)], [t, ut])
        rets_w.append((r[0], t))
        rets_u.append((r[1], ut))
    return _func("spectral_project", args, em, rets_w + rets_u)


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
    with an eval function (batch norm), @eval(ins..., ps..., state...) -> y.
    Its functions take and return NCHW whatever the primitive's layout: an HBWC form
    (prim.layout) gets its 4-D inputs, output and cotangents transposed at the edges."""
    out, _ = prim.infer(ins, ps)
    pins, pout = [physical(t, prim.layout) for t in ins], physical(out, prim.out_layout)
    r = render_prim(prim, pins, ps, pout)
    a = [f"%i{k}: {t.mlir}" for k, t in enumerate(ins)] + [f"%q{k}: {t.mlir}" for k, t in enumerate(ps)]

    def moved(lines, v, name, src, dst, perm):
        """v (type src) as type dst: a transpose appended to lines as `name`, or v itself."""
        if src == dst:
            return v
        lines.append(f"    {name} = stablehlo.transpose {v}, dims = {list(perm)} : ({src.mlir}) -> {dst.mlir}")
        return name
    edge = []           # the inputs in the primitive's layout
    names = [moved(edge, f"%i{k}", f"%ip{k}", t, pt, TO_HBWC) for k, (t, pt) in enumerate(zip(ins, pins))] + \
            [f"%q{k}" for k in range(len(ps))]
    types = [t.mlir for t in pins] + [t.mlir for t in ps]
    fouts = [pout.mlir] + [t.mlir for t in r.saved] + [t.mlir for t in r.stats]
    call_f = (f"    %f:{len(fouts)} = func.call @{r.fwd}({', '.join(names)}) : ({', '.join(types)}) -> ({', '.join(fouts)})"
              if len(fouts) > 1 else
              f"    %f0 = func.call @{r.fwd}({', '.join(names)}) : ({', '.join(types)}) -> {pout.mlir}")
    y_edge, dy_edge = [], []
    y = moved(y_edge, "%f#0" if len(fouts) > 1 else "%f0", "%yl", pout, out, TO_NCHW)
    dy = moved(dy_edge, "%dy", "%dyp", out, pout, TO_HBWC)
    saved = [f"%f#{1 + k}" for k in range(len(r.saved))]
    bargs = [dy] + saved + [f"%q{k}" for k in range(len(ps))]
    btypes = [pout.mlir] + [t.mlir for t in r.saved] + [t.mlir for t in ps]
    pbouts = [t.mlir for t in pins] + [t.mlir for t in ps]
    bouts = [t.mlir for t in ins] + [t.mlir for t in ps]
    nb = len(bouts)
    call_b = (f"    %g:{nb} = func.call @{r.bwd}({', '.join(bargs)}) : ({', '.join(btypes)}) -> ({', '.join(pbouts)})"
              if nb > 1 else f"    %g0 = func.call @{r.bwd}({', '.join(bargs)}) : ({', '.join(btypes)}) -> {pbouts[0]}")
    g_edge = []
    gouts = [moved(g_edge, gv, f"%gl{k}", pt, t, TO_NCHW)
             for k, (gv, t, pt) in enumerate(zip([f"%g#{k}" for k in range(nb)] if nb > 1 else ["%g0"],
                                                 list(ins) + list(ps), list(pins) + list(ps)))]
    statsf = []
    if r.stats:
        touts = [t.mlir for t in r.stats]
        statsf = [f"  func.func @stats({', '.join(a)}) -> ({', '.join(touts)}) {{", *edge, call_f,
                  f"    return {', '.join(f'%f#{1 + len(r.saved) + k}' for k in range(len(r.stats)))} : "
                  f"{', '.join(touts)}", "  }"]
    evalf = []
    if r.eval:
        state = prim.state(pins, ps, pout)
        st = [f"%st{k}: {t.mlir}" for k, t in enumerate(state)]
        enames = names + [f"%st{k}" for k in range(len(state))]
        etypes = types + [t.mlir for t in state]
        e_edge = []
        e = moved(e_edge, "%e", "%el", pout, out, TO_NCHW)
        evalf = [f"  func.func @eval({', '.join(a + st)}) -> {out.mlir} {{", *edge,
                 f"    %e = func.call @{r.eval}({', '.join(enames)}) : ({', '.join(etypes)}) -> {pout.mlir}",
                 *e_edge, f"    return {e} : {out.mlir}", "  }"]
    return "\n".join([
        "module @model {", r.text,
        f"  func.func @forward({', '.join(a)}) -> {out.mlir} {{", *edge, call_f, *y_edge,
        f"    return {y} : {out.mlir}", "  }",
        f"  func.func @vjp(%dy: {out.mlir}, {', '.join(a)}) -> ({', '.join(bouts)}) {{", *edge, call_f, *dy_edge,
        call_b, *g_edge, f"    return {', '.join(gouts)} : {', '.join(bouts)}", "  }", *statsf, *evalf, "}"]) + "\n"


def optim_test_module(o, p, decay: bool) -> str:
    """A module exposing one optimizer's update of one tensor for the tests:
    @step(w, g, slots..., lr, wd, hp...) -> (w', slots'...), the template's own signature."""
    t = p.type.mlir
    ctx = {"p": t, "decay": decay, **o.context(p)}
    sym = f"{o.name}_{sig(o.name, ctx)}"
    text = render_template(f"optim/{o.name}.mlir.j2", {**ctx, "name": sym}, f"optimizer {o.name}")
    args = [f"%w: {t}", f"%g: {t}"] + [f"%s{i}: {t}" for i in range(len(o.slots))] + \
           [f"%h{i}: tensor<f32>" for i in range(2 + len(o.hp))]
    names = ", ".join(a.split(":")[0] for a in args)
    types = ", ".join(a.split(": ")[1] for a in args)
    outs = ", ".join([t] * (1 + len(o.slots)))
    n = 1 + len(o.slots)
    res = "%r" if n == 1 else ", ".join(f"%r#{i}" for i in range(n))
    call = f"%r = func.call @{sym}({names}) : ({types}) -> ({outs})" if n == 1 else \
           f"%r:{n} = func.call @{sym}({names}) : ({types}) -> ({outs})"
    return "\n".join(["module @model {", text, f"  func.func @step({', '.join(args)}) -> ({outs}) {{",
                      f"    {call}", f"    return {res} : {outs}", "  }", "}"]) + "\n"
