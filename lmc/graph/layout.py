"""Activation layouts: how the lowering lays out each 4-D value in memory.

Every shape the user, `infer`, `lmc info`, the ABI and the tests see is NCHW (the *logical*
layout).  The conv primitive computes in [H, B, W, C] (HBWC: the rows of all images contiguous,
so a kernel row's patches are one offset block — lmc/prims/conv.py); converting back to NCHW
after every conv and again before the next costs 15–28% of a conv net's step
(benchmarks/NOTES.md).  So the lowering keeps activations in HBWC between the primitives that
have an HBWC form and converts only where one does not:

- each primitive states the layouts it can take (`Prim.layouts`, for its logical types);
- walking the graph forward, a node takes HBWC when it can and one of its inputs already is
  HBWC; a conv (`mixes_layouts`: it converts inside its matmuls, on either side) takes its
  input as it comes and gives its output in HBWC when that run would reach another conv or a
  pool through primitives that can continue it (`_reach`), else NCHW;
- a value a node needs in the other layout gets a `transpose` node (one per value and layout,
  shared by its consumers); the graph output is always NCHW; the network input and the masks
  enter NCHW (the ABI does not change);
- the reverse walk needs nothing new: a cotangent has its primal's (physical) type, and the
  transpose primitive's backward is the inverse transpose.

`place(graph, output)` returns the physically laid-out graph the lowering walks; the logical
graph is untouched.  `place(..., hbwc=False)` turns the pass off (every value NCHW: the layout
each template converts from itself), for A/B measurements: the lowering's `layout` option
(lmc/lower/options.py, LMC_LAYOUT=nchw at the command line) — a plain flag here, since the
graph stage sits below the lowering and does not know its options."""
from __future__ import annotations

import copy

from lmc.graph.ir import Graph, Node, Value
from lmc.prims.axes import HBWC, NCHW, TO_HBWC, TO_NCHW, physical
from lmc.prims import make_prim


def _reach(g: Graph, prims: dict, can: dict) -> dict[int, bool]:
    """value id → whether an HBWC run through it would end in a consumer that pulls it: a
    primitive that prefers HBWC (conv), shrinks the tensor (a pool: a later transpose is
    smaller) or joins it with another value (a residual add, whose other operand comes from a
    run), possibly through primitives that can continue the run (norms, activations)."""
    users: dict[int, list[Node]] = {}
    for n in g.nodes:
        for v in n.inputs:
            users.setdefault(v.id, []).append(n)
    reach: dict[int, bool] = {}
    for n in reversed(g.nodes):
        def pulls(u):
            shrinks = u.out.type.size < max(v.type.size for v in u.inputs)
            join = len(u.inputs) > 1         # a residual add: its other operand is in a run
            return can[id(u)] and (prims[id(u)].prefer_hbwc or shrinks or join or reach.get(u.out.id, False))
        reach[n.out.id] = any(pulls(u) for u in users.get(n.out.id, []))
    return reach


def place(g: Graph, output: Value, prim_for=lambda n: n.prim, hbwc: bool = True) -> tuple[Graph, Value]:
    """The graph with layouts assigned (module docstring): a shallow copy whose nodes are new
    (HBWC forms of the primitives, transposes inserted); params, state, input and masks are the
    same objects.  Its `copies[i]` is the position of logical node i's copy (the transposes
    inserted sit between them, in front of the node that reads them).  prim_for: the
    lowering's choice of spelling per node (its conv form); hbwc=False: every value stays NCHW."""
    out = copy.copy(g)
    out.nodes = []
    out.copies = []
    versions: dict[int, dict[str, Value]] = {g.x.id: {NCHW: g.x}}
    for m in g.masks:
        versions[m.value.id] = {NCHW: m.value}

    def get(v: Value, layout: str, layer: int) -> Value:
        """v (logical) as a value in `layout`, converting once."""
        have = versions[v.id]
        if v.type.rank != 4:
            return have[NCHW]
        if layout not in have:
            src = next(iter(have.values()))
            perm = TO_HBWC if layout == HBWC else TO_NCHW
            t = make_prim("transpose", perm=perm)
            node = Node(t, [src], [], [], layer=layer)
            node.out = out._value(physical(v.type, layout), node)
            out.nodes.append(node)
            have[layout] = node.out
        return have[layout]

    prims = {id(n): prim_for(n) for n in g.nodes}
    can = {id(n): hbwc and HBWC in prims[id(n)].layouts([v.type for v in n.inputs], [p.type for p in n.params])
           for n in g.nodes}
    reach = _reach(g, prims, can)
    for node in g.nodes:
        prim = prims[id(node)]
        held = any(HBWC in versions[v.id] for v in node.inputs)
        # a conv starts an HBWC run only where the run reaches another conv or a pool (else
        # its own transposes, inside its matmuls' dispatches, are cheaper than a standalone one
        # further down); every other primitive continues a run it is handed
        if prim.mixes_layouts and can[id(node)]:
            # conv: its input as it comes, its output in HBWC where the run reaches a puller
            layout = HBWC if held else NCHW
            out_layout = HBWC if reach[node.out.id] else NCHW
        else:
            layout = HBWC if can[id(node)] and (held or (prim.prefer_hbwc and reach[node.out.id])) else NCHW
            out_layout = layout
        if HBWC in (layout, out_layout):
            prim = make_prim(prim.name, layout=layout, out_layout=out_layout, **prim.attrs)
        new = Node(prim, [get(v, layout, node.layer) for v in node.inputs], node.params, node.state,
                   layer=node.layer, flops=node.flops, mixed=node.mixed)
        new.out = out._value(physical(node.out.type, out_layout), new)
        out.nodes.append(new)
        out.copies.append(len(out.nodes) - 1)
        versions[node.out.id] = {out_layout if node.out.type.rank == 4 else NCHW: new.out}
    return out, get(output, NCHW, -1)
