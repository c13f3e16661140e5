"""NetSpec → TypedNet: runs every layer's shape rule (by building its primitive graph) and adds
the layer's location to any error.  A layer is lowered when every primitive it expands into has a template."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from lmc.core.errors import LmcError, Loc, NotImplementedKind, ShapeError, SpecError
from lmc.graph.ir import Graph, Param, State, Value
from lmc.layers import Layer
from lmc.losses import CLASS
from lmc.spec.config import dataset_labels
from lmc.spec.netspec import NetSpec, parse_layer
from lmc.core.types import TensorType


@dataclass
class LayerInfo:
    index: int
    kind: str
    describe: str
    out: TensorType
    params: list[Param]
    state: list[State]
    flops: int
    lowered: bool
    loc: object


@dataclass
class TypedNet:
    spec: NetSpec
    batch: int
    input: TensorType
    graph: Graph
    layers: list[LayerInfo]
    output: Value
    _train: "TypedNet | None" = field(default=None, repr=False, compare=False)   # train_net's cache

    @property
    def params(self) -> list[Param]:
        return self.graph.params

    @property
    def state(self) -> list[State]:
        return self.graph.state

    @property
    def total_params(self) -> int:
        return sum(p.type.size for p in self.params)

    @property
    def total_flops(self) -> int:
        return sum(l.flops for l in self.layers)

    @property
    def num_classes(self) -> int | None:
        o = self.output.type
        return o.dims[1] if o.rank == 2 else None

    @property
    def unlowered(self) -> list[LayerInfo]:
        return [l for l in self.layers if not l.lowered]


def param_prefix(entry) -> str:
    """The name prefix of a spec entry's parameters and state: `03.residual_block.`."""
    return f"{entry.index:02d}.{entry.layer.kind}."


def infer(spec: NetSpec, batch: int | None = None) -> TypedNet:
    """Shape-check every layer for a batch of `batch` (default: the recipe's batch_size, else 1)."""
    if batch is None:
        batch = spec.train.batch_size if spec.train is not None else 1
    g = Graph()
    x0 = g.input(TensorType((batch,) + tuple(spec.input)))
    x = x0
    infos, filled = [], []
    for entry in spec.layers:
        layer = entry.layer
        g.prefix = param_prefix(entry)
        g.layer = entry.index
        n_params, n_state, n_nodes = len(g.params), len(g.state), len(g.nodes)
        where = f"layer {entry.index} ({layer.kind})"
        try:
            if entry is spec.layers[-1] and spec.train is not None and spec.train.dropout:
                x = _dropout(g, x, entry, spec)
            layer = layer.filled(x.type)          # `auto` input sizes from the incoming shape
            filled.append(dataclasses.replace(entry, layer=layer))
            x = layer.build(g, x, spec)
            lowered = all(n.prim.lowered() for n in g.nodes[n_nodes:])
        except ShapeError as e:
            e.message = f"{where}: {e.message}"
            raise e.located(entry.loc)
        except NotImplementedKind:
            raise
        except LmcError as e:
            raise e.located(entry.loc)
        except OverflowError:
            raise ShapeError(f"{where}: sizes overflow", entry.loc) from None
        for d in x.type.dims:
            if d <= 0:
                raise ShapeError(f"{where}: output shape {x.type.shape_str()} has an empty dimension", entry.loc)
        if x.type.size > 2**40:
            raise ShapeError(f"{where}: output {x.type.shape_str()} is absurdly large", entry.loc)
        for p in g.params[n_params:]:
            if p.type.size > 2**40:
                raise ShapeError(f"{where}: parameter {p.name} {p.type.shape_str()} is absurdly large", entry.loc)
        g.layer_outputs[entry.index] = x
        nodes = g.nodes[n_nodes:]
        infos.append(LayerInfo(entry.index, layer.kind, layer.describe(), x.type, g.params[n_params:],
                               g.state[n_state:], sum(n.flops for n in nodes), lowered, entry.loc))
    if spec.train is not None and spec.train.drop_path and not any(m.kind == "drop_path" for m in g.masks):
        raise SpecError("train.drop_path: the net has no stochastic-depth site (the residual branches of "
                        "residual, bottleneck, inverted-residual, MBConv, UIB, ConvNeXt and transformer blocks)",
                        spec.loc("train", "drop_path"))
    if any(f.layer is not e.layer for f, e in zip(filled, spec.layers)):
        spec = dataclasses.replace(spec, layers=tuple(filled))     # the net as inferred: sizes filled
    return TypedNet(spec, batch, x0.type, g, infos, x)


def _dropout(g, x, entry, spec):
    """train.dropout: the classifier dropout of the seed — the final dense layer's input times a
    per-element keep mask the host draws each step (0 or 1/keep, lmc/train/masks.py; all ones in
    eval, the exact identity)."""
    if entry.layer.kind != "dense":
        raise SpecError(f"train.dropout drops the input of the final dense layer, but the net ends with "
                        f"{entry.layer.kind}", spec.loc("train", "dropout"))
    return g.op("mul", x, g.mask("dropout", x.type.dims), flops=0)


def train_net(net: TypedNet) -> TypedNet:
    """The net the training functions run: the net itself, or under train.train_res R the
    spec's layers inferred again on a [C, R, R] input at the same batch (lower emits the
    training functions from it and @forward from `net`).
    Both must hold exactly the same parameters and running state — nets whose head follows a
    global pool; a net whose weights depend on the input size (flatten → dense, a positional
    embedding) is refused, located at train.train_res.  The labels stay the dataset's, so only
    a classifier's [B, K] output can take it (a per-pixel mask would need resizing too)."""
    cfg = net.spec.train
    if cfg is None or not cfg.train_res:
        return net
    if net._train is not None:
        return net._train
    spec, r = net.spec, cfg.train_res
    loc = spec.loc("train", "train_res")
    why = image_classifier_problem(net)
    if why:
        raise SpecError(f"train.train_res {r} resizes the training images, not their labels: {why}", loc)
    if tuple(spec.input[1:]) == (r, r):
        net._train = net
        return net
    try:
        t = infer(dataclasses.replace(spec, input=(spec.input[0], r, r)), net.batch)
    except LmcError as e:
        where = f"{e.loc}: " if e.loc is not None else ""
        raise SpecError(f"train.train_res {r}: the net does not take a {r}×{r} input ({where}{e.message})", loc,
                        hint="a net that trains at one resolution and evaluates at another pools globally "
                             "before its head (global_avg_pool, not flatten); or choose another train_res") from None
    mine = [(p.name, p.type) for p in net.params + net.state]
    theirs = [(p.name, p.type) for p in t.params + t.state]
    if mine != theirs:
        (name, a), (_, b) = next(((m, o) for m, o in zip(mine, theirs) if m != o), (mine[-1], theirs[-1]))
        raise SpecError(f"train.train_res {r}: the net's parameters depend on the input resolution ({name} is "
                        f"{a.shape_str()} at {spec.input[1]}×{spec.input[2]}, {b.shape_str()} at {r}×{r}), so it "
                        f"cannot train at one resolution and evaluate at the other", loc,
                        hint="pool globally before the head (global_avg_pool instead of flatten), or drop train_res")
    net._train = t
    return t


def image_classifier_problem(net: TypedNet) -> str | None:
    """Why the resolution fields (train_res, test_crop_ratio: resize images, keep labels) cannot
    apply to `net`, or None: they need image inputs [C, H, W] and a class label per image."""
    if len(net.spec.input) != 3:
        return f"the spec's input {list(net.spec.input)} is not an image [C, H, W]"
    if net.output.type.rank != 2 or dataset_labels(net.spec.dataset) != CLASS:
        return (f"it needs a classifier (a class per image, output [batch, classes]), and this net's output is "
                f"{net.output.type.shape_str()}" + (f" on dataset {net.spec.dataset.value}" if net.spec.dataset else ""))
    return None


def lowers(cls) -> bool:
    """Whether layer kind `cls` lowers: it builds, and its examples expand into primitives
    that all have templates."""
    if cls.build is Layer.build:
        return False
    for fields, t in cls.examples:
        g = Graph()
        layer = parse_layer({cls.kind: fields}, 0, Loc("<lowers>"), lambda *a: Loc("<lowers>"))
        layer.build(g, g.input(t), NetSpec(name="t", input=t.dims[1:], layers=(), file="<lowers>"))
        if not all(n.prim.lowered() for n in g.nodes):
            return False
    return True


def head_params(net) -> frozenset:
    """The final dense head's tensors (head_lr_mult): the params of the last layer that has
    any, which must be a dense layer."""
    with_params = [l for l in net.layers if l.params]
    last = with_params[-1] if with_params else None
    if last is None or last.kind != "dense":
        what = f"layer {last.index} ({last.kind})" if last else "no layer"
        raise SpecError(f"head_lr_mult scales the lr of the final dense head, but the last layer with "
                        f"parameters is {what}", net.spec.loc("train", "head_lr_mult"))
    return frozenset(p.name for p in last.params)


def bf16_operands(node, conv: bool) -> bool:
    """Whether the node's matmuls take bf16 operands: its primitive's `mixed_precision`, the
    node's own `mixed` (the patch embed), or under train.bf16_conv its `bf16_conv` form (conv's
    matmuls; Prim.bf16_conv)."""
    p = node.prim
    return p.mixed_precision or node.mixed or \
        (conv and p.bf16_conv([v.type for v in node.inputs], [q.type for q in node.params]))
