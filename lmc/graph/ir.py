"""The primitive graph a layer expands into.

A layer's `build(g, x)` calls `g.param(...)` and `g.op(prim, ...)`; each `op` runs the
primitive's shape rule at once, so building the graph *is* shape inference.  The lowering
walks the same graph forward (calling each primitive's forward template) and in reverse
(calling each backward and summing cotangents where a value fans out)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.prims import make_prim

# A bound on primitive ops per net.  ResNet-152 is ~1,500; a block with `n_blocks: 2000000000`
# would otherwise build nodes until memory runs out.
MAX_NODES = 20_000


@dataclass(frozen=True)
class Param:
    """A trainable tensor.  `init`: he (normal, std √(2/fan)), glorot, zeros, ones, normal.
    `role`: what the layer declares the tensor is, where training treats it apart — "weight"
    (the default), or "position" (a learned positional embedding or relative-position table:
    with train.wd_exclude_norm_bias it takes no weight decay, as the Lean kit and timm's
    no_weight_decay; biases, norm scales and class tokens are the rank-1 tensors, excluded by
    rank)."""
    name: str
    type: TensorType
    init: str
    fan_in: int = 0
    fan_out: int = 0
    std: float = 0.0
    role: str = "weight"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.dims


@dataclass(frozen=True)
class State:
    """A non-trainable tensor the train step updates (BN running mean/var); init zeros/ones."""
    name: str
    type: TensorType
    init: str


@dataclass(eq=False)
class Value:
    type: TensorType
    node: "Node | None" = None   # None for the graph input
    id: int = 0


@dataclass(frozen=True, eq=False)
class Mask:
    """A per-step random input of the train step, drawn by the host (lmc/train/masks.py): dropout's
    per-element keep mask or a stochastic-depth site's per-example one, its values 0 or
    1/keep.  The eval functions (@forward, @input_grad) feed all ones: the exact identity."""
    value: Value
    kind: str                    # "dropout" | "drop_path"
    layer: int


@dataclass(eq=False)
class Node:
    prim: Any                    # a Prim instance (attributes bound)
    inputs: list[Value]
    params: list[Param]
    state: list[State]
    out: Value | None = None
    layer: int = -1              # index of the spec layer this node came from
    flops: int = 0
    # its matmuls take bf16 operands under train.bf16 although its primitive has no bf16 form
    # of its own (the patch embed's conv: ViT's patchify is a linear layer on patches)
    mixed: bool = False


class Graph:
    def __init__(self):
        self.nodes: list[Node] = []
        self.params: list[Param] = []
        self.state: list[State] = []
        self._ids = 0
        self.prefix = ""
        self.layer = -1
        # spec layer index → its output value, so a layer can read an earlier layer's output
        # (U-Net skips, FPN taps); filled by `infer` after each layer
        self.layer_outputs: dict[int, Value] = {}
        self.masks: list[Mask] = []      # the train step's random inputs, in ABI order

    def input(self, t: TensorType) -> Value:
        self.x = self._value(t, None)
        return self.x

    def free(self, t: TensorType) -> Value:
        """A value with no producer other than the graph input: what a block built on its own
        (not inside a net, e.g. a unit test) reads where a net would give an earlier layer's
        output.  Never lowered."""
        return self._value(t, None)

    def mask(self, kind: str, dims) -> Value:
        """A host-drawn random input (dropout, drop path) of shape dims."""
        v = self._value(TensorType(tuple(int(d) for d in dims)), None)
        self.masks.append(Mask(v, kind, self.layer))
        return v

    def _value(self, t, node) -> Value:
        self._ids += 1
        return Value(t, node, self._ids)

    def param(self, name: str, dims, init: str, **kw) -> Param:
        dims = tuple(int(d) for d in dims)
        if any(d <= 0 for d in dims):
            raise ShapeError(f"parameter {name} would have shape {list(dims)}")
        p = Param(self.prefix + name, TensorType(dims), init, **kw)
        self.params.append(p)
        return p

    def stat(self, name: str, dims, init: str) -> State:
        s = State(self.prefix + name, TensorType(tuple(dims)), init)
        self.state.append(s)
        return s

    def op(self, prim_name: str, *inputs: Value, params=(), state=(), flops: int | None = None,
           mixed: bool = False, **attrs) -> Value:
        """Add a primitive node.  `flops` overrides the primitive's count for this node: only
        where a layer keeps the seed's published count (which omits e.g. biases after convs,
        or counts GELU as 8 per element), so `lmc info` agrees with the reference's numbers.
        `mixed`: Node.mixed."""
        if len(self.nodes) >= MAX_NODES:
            raise ShapeError(f"the net expands to more than {MAX_NODES:,} primitive ops; is a count "
                             f"(n_blocks, …) far too large?")
        prim = make_prim(prim_name, **attrs)
        out_t, n = prim.infer([v.type for v in inputs], [p.type for p in params])
        flops = n if flops is None else flops
        node = Node(prim, list(inputs), list(params), list(state), layer=self.layer, flops=flops, mixed=mixed)
        node.out = self._value(out_t, node)
        self.nodes.append(node)
        return node.out
