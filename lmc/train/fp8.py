"""train.fp8: e4m3 — training on float8 E4M3 operands with f32 master weights (the seed's
trainE4M3 / trainAdamSchedE4M3, host-side operand preparation).

Each step: every dense weight [in, out] is projected onto the E4M3 grid per output column,
every conv kernel [OC, IC, KH, KW] per output channel (scale = amax/448, E4M3's largest
finite value; ml_dtypes.float8_e4m3fn rounds to nearest even), the input batch per tensor;
biases, norm scales and every other parameter stay f32.  The unchanged compiled @train_step
runs on the projected operands (its matmuls accumulate in f32), and its update is folded back
into the f32 master: master += out − projected, so a weight moves by exactly the step the
optimizer computed from the fp8 forward/backward.  Optimizer moments stay f32.

Honest scope (as the seed's): only the weights and the input are fp8; every intermediate
activation and every cotangent inside the step stays f32 — quantizing those needs in-graph
E4M3 ops, which lmc does not emit.  Eval runs the f32 master."""
from __future__ import annotations

import numpy as np

E4M3_MAX = 448.0


def project(a: np.ndarray, reduce_axes: tuple | None) -> np.ndarray:
    """a on the scaled E4M3 grid: one scale per slice kept by `reduce_axes` (None: per tensor),
    scale = amax/448 (a zero slice keeps scale 1 and stays 0)."""
    import ml_dtypes
    a = np.asarray(a, np.float32)
    amax = np.max(np.abs(a), axis=reduce_axes, keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1.0)).astype(np.float32)
    q = np.clip(a / scale, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return (q * scale).astype(np.float32)


def weight_axes(net) -> dict:
    """param name → the axes its amax reduces over: dense weights over `in` (a scale per output
    column), conv kernels over (IC, KH, KW) (per output channel).  Absent: stays f32."""
    out = {}
    for node in net.graph.nodes:
        if node.prim.name == "dense":
            out[node.params[0].name] = (0,)
        elif node.prim.name == "conv":
            out[node.params[0].name] = (1, 2, 3)
    return out


def project_params(net, params: list[np.ndarray], axes: dict) -> list[np.ndarray]:
    return [project(a, axes[p.name]) if p.name in axes else a for p, a in zip(net.params, params)]
