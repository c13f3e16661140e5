"""`lmc lipschitz`: an upper bound L on the L2 Lipschitz constant of the logits as a function
of the input, and the margin certificate it gives (Tsuzuku et al. 2018; the seed's
lipschitz_margin_certified_radius): if ‖f(x) − f(x')‖₂ ≤ L‖x − x'‖₂, no logit difference can
move by more than √2·L·‖x − x'‖₂, so a correct prediction with margin m = f_top − f_second
cannot change within the L2 radius m/(√2·L).

The bound walks the primitive graph (eval mode): each primitive's own bound multiplies the
bound of its input, and a sum (residual add) adds its inputs' bounds.
  dense            ‖W‖₂ (largest singular value, exact: numpy's SVD); the bias adds nothing
  conv             the seed's tap-sum bound Σ_taps ‖W[:, :, i, j]‖₂ (each group's block: the
                   max over groups); stride and zero padding only drop terms
  batch_norm       max |γ|/√(running var + ε) (eval mode: a per-channel affine map)
  act              relu, relu6: 1; sigmoid: ¼; h_sigmoid: ⅙; h_swish: 1.5 (max |φ'|)
  max_pool         ⌈size/stride⌉ (1 for non-overlapping windows: each input in ≤ ⌈k/s⌉² windows)
  global_avg_pool  1/√(H·W);   reshape (flatten): 1;   add: the sum of its inputs' bounds
Anything else is refused (no bound is known here), never guessed."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lmc.core.errors import TrustError
from lmc.prims.norm import EPS

ACT_BOUND = {"relu": 1.0, "relu6": 1.0, "sigmoid": 0.25, "h_sigmoid": 1.0 / 6.0, "h_swish": 1.5}


def spectral_norm(w: np.ndarray) -> float:
    """Largest singular value of a matrix, in float64."""
    return float(np.linalg.norm(np.asarray(w, np.float64), 2))


def conv_tap_sum(w: np.ndarray, groups: int = 1) -> float:
    """Σ over the kernel taps (i, j) of the tap's operator norm: W[:, :, i, j] is [oc, ic/groups]
    per group, block-diagonal over the groups, so its norm is the max over the groups."""
    w = np.asarray(w, np.float64)
    oc = w.shape[0]
    total = 0.0
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            tap = w[:, :, i, j]
            total += max(spectral_norm(tap[g * oc // groups:(g + 1) * oc // groups]) for g in range(groups))
    return total


@dataclass
class Bound:
    layer: int         # spec index of the layer the primitive belongs to
    prim: str
    bound: float


def _prim_bound(node, params: dict, state: dict, net) -> float:
    name, attrs = node.prim.name, node.prim.attrs
    p = [params[q.name] for q in node.params]
    if name == "dense":
        return spectral_norm(p[0])
    if name == "conv":
        return conv_tap_sum(p[0], int(attrs.get("groups", 1)))
    if name == "batch_norm":
        mean_var = [state[s.name] for s in node.state]
        var = mean_var[1] if len(mean_var) == 2 else None
        if var is None:
            raise TrustError(f"layer {node.layer}: batch_norm without running statistics has no eval-mode bound")
        return float(np.max(np.abs(p[0].astype(np.float64)) / np.sqrt(var.astype(np.float64) + EPS)))
    if name == "act" and attrs.get("kind") in ACT_BOUND:
        return ACT_BOUND[attrs["kind"]]
    if name == "max_pool":
        return float(math.ceil(attrs["size"] / attrs["stride"]))
    if name == "global_avg_pool":
        h, w = node.inputs[0].type.dims[2:]
        return 1.0 / math.sqrt(h * w)
    if name == "reshape":
        return 1.0
    what = f"{name} ({attrs.get('kind')})" if name == "act" else name
    kind = net.layers[node.layer].kind if node.layer >= 0 else "?"
    raise TrustError(f"layer {node.layer} ({kind}): no Lipschitz bound for the primitive {what}",
                     hint="lmc lipschitz bounds dense, conv, batch_norm (eval), relu/relu6/sigmoid/h_sigmoid/"
                          "h_swish, max_pool, global_avg_pool, flatten and residual adds")


def lipschitz(net, params: list[np.ndarray], state: list[np.ndarray]) -> tuple[float, list[Bound], list[dict]]:
    """(L, each primitive's bound, each layer's {name, bound}) for `net` with these tensors.
    A layer's bound is its own walk from its input (bound 1), so for a chain the product of the
    layers' bounds is L."""
    P = {p.name: a for p, a in zip(net.params, params)}
    S = {s.name: a for s, a in zip(net.state, state)}
    g = net.graph
    lip = {g.x.id: 1.0}
    local = {g.x.id: 1.0}          # the bound from the current layer's input
    layer_of = {}
    prims = []
    for node in g.nodes:
        ins = node.inputs
        # a value made by an earlier layer (or the input) enters this layer with local bound 1
        loc_in = [local[v.id] if layer_of.get(v.id) == node.layer else 1.0 for v in ins]
        if node.prim.name == "add":
            lip[node.out.id] = sum(lip[v.id] for v in ins)
            local[node.out.id] = sum(loc_in)
            prims.append(Bound(node.layer, "add", float(len(ins))))
        else:
            if len(ins) != 1:
                raise TrustError(f"layer {node.layer}: no Lipschitz bound for {node.prim.name} with {len(ins)} inputs")
            b = _prim_bound(node, P, S, net)
            lip[node.out.id] = b * lip[ins[0].id]
            local[node.out.id] = b * loc_in[0]
            prims.append(Bound(node.layer, node.prim.name, b))
        layer_of[node.out.id] = node.layer
    layers = []
    for l in net.layers:
        outs = [n for n in g.nodes if n.layer == l.index]
        if outs:
            layers.append({"name": f"{l.index:02d}.{l.kind}", "bound": local[outs[-1].out.id]})
    return lip[net.output.id], prims, layers


def margin_radii(logits: np.ndarray, labels: np.ndarray, L: float) -> np.ndarray:
    """Per example: the certified L2 radius margin/(√2·L) when the prediction is right, else 0
    (−∞ margins do not occur: a wrong prediction certifies nothing)."""
    top2 = np.sort(logits.astype(np.float64), axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    right = np.argmax(logits, axis=1) == labels
    return np.where(right, margin / (math.sqrt(2.0) * L), 0.0)


def certified(radii: np.ndarray, right: np.ndarray, at: list[float]) -> list[dict]:
    n = len(radii)
    return [{"radius": r, "top1": float(np.sum(right & (radii >= r)) / n), "correct": int(np.sum(right & (radii >= r))),
             "n": n} for r in at]
