"""train.spectral_cap c (every train.spectral_every K steps, and at the end): every dense weight
projected onto ‖W‖₂ ≤ c and every conv kernel onto the seed's tap-sum bound Σ_taps ‖W_tap‖₂ ≤ c,
by warm-started power iteration on the device (`@spectral_project`, templates/trust/spectral.mlir.j2).

Power iteration estimates each norm from below, so right after a projection ‖W‖₂ may exceed
c by the estimate's error (it shrinks as the warm start converges; the final projection runs
FINAL_CALLS more rounds).  `lmc lipschitz` computes the exact norms of what was trained: the
certificate never relies on the estimate."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmc.core.errors import NotImplementedKind
from lmc.core.types import TensorType

ITERS = 2          # power iterations per projection (warm-started from the last u)
FINAL_CALLS = 10   # projections at the end of training (2·10 more iterations)


@dataclass(frozen=True)
class Capped:
    param: object      # the Param
    conv: bool
    taps: int          # T
    m: int             # rows of each tap matrix
    n: int             # columns (the length of u)

    @property
    def u_type(self) -> TensorType:
        return TensorType((self.taps, self.n))


def capped(net) -> list[Capped]:
    """The tensors spectral_cap projects, in `lmc info --params` order: dense weights [in, out]
    and conv kernels [OC, IC, KH, KW] (groups = 1; grouped convs are refused)."""
    out: dict[str, Capped] = {}
    for node in net.graph.nodes:
        if node.prim.name == "dense":
            w = node.params[0]
            out.setdefault(w.name, Capped(w, False, 1, w.type.dims[0], w.type.dims[1]))
        elif node.prim.name == "conv":
            w = node.params[0]
            if int(node.prim.attrs.get("groups", 1)) != 1:
                raise NotImplementedKind(f"not implemented yet: train.spectral_cap on a grouped conv (layer {node.layer})",
                                         net.spec.loc("train", "spectral_cap"))
            oc, ic, kh, kw = w.type.dims
            out.setdefault(w.name, Capped(w, True, kh * kw, oc, ic))
    return [out[p.name] for p in net.params if p.name in out]


def initial_u(caps: list[Capped], seed: int) -> list[np.ndarray]:
    """Unit start vectors per tap, seeded (a fixed direction could be orthogonal to the top one)."""
    rng = np.random.default_rng([seed, 0x5BEC])
    out = []
    for c in caps:
        u = rng.standard_normal((c.taps, c.n))
        out.append((u / np.linalg.norm(u, axis=1, keepdims=True)).astype(np.float32))
    return out


def context(c: Capped) -> dict:
    w = c.param.type
    ctx = {"w": w.mlir, "u": c.u_type.mlir, "v": TensorType((c.taps, c.m)).mlir, "t": TensorType((c.taps,)).mlir,
           "a": TensorType((c.taps, c.m, c.n)).mlir, "conv": c.conv, "iters": ITERS}
    if c.conv:
        oc, ic, kh, kw = w.dims
        ctx["wt"] = TensorType((kh, kw, oc, ic)).mlir
    return ctx
