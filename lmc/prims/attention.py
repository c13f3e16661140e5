"""Declared primitives (shape rule, FLOPs, float64 reference; no template yet) for attention and
token models: matmul (batched), softmax (scaled, optionally causal), rope, window_bias (Swin's
relative position bias and shifted-window mask) and embedding (a table lookup)."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..types import TensorType
from . import Prim, primitive


@primitive("matmul")
class Matmul(Prim):
    """y = a·b over the last two axes, batched over the leading ones (equal in a and b):
    a [..., M, K], b [..., K, N] → [..., M, N].  FLOPs 2·batch·M·K·N.
    bwd: da = dy·bᵀ, db = aᵀ·dy."""
    inputs = ("a", "b_in")
    params = ()
    n_inputs = 2

    def infer(self, ins, ps):
        a, b = ins
        if a.rank < 2 or a.rank != b.rank or a.dims[:-2] != b.dims[:-2] or a.dims[-1] != b.dims[-2]:
            raise ShapeError(f"cannot multiply {a.shape_str()} by {b.shape_str()}")
        out = TensorType(a.dims[:-1] + (b.dims[-1],))
        return out, 2 * out.size * a.dims[-1]

    @staticmethod
    def reference(xp, a, b):
        return xp.matmul(a, b)


@primitive("softmax")
class Softmax(Prim):
    """y = softmax(scale·x) over the last axis; causal: entries j > i of each [.., i, j] matrix
    masked (−∞) first, so a query sees no later key.  The row max is subtracted before exp.
    FLOPs 5 per element.  bwd: dx = scale·y·(dy − Σ_j dy·y)."""
    inputs = ("x",)
    params = ()

    def infer(self, ins, ps):
        (x,) = ins
        if self.causal and (x.rank < 2 or x.dims[-1] != x.dims[-2]):
            raise ShapeError(f"a causal mask needs square [.., queries, keys] scores, got {x.shape_str()}")
        return x, 5 * x.size

    @staticmethod
    def reference(xp, x, scale, causal):
        s = x * scale
        if causal:
            n = x.shape[-1]
            s = xp.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
        s = s - s.max(axis=-1, keepdims=True)
        e = xp.exp(s)
        return e / e.sum(axis=-1, keepdims=True)


@primitive("rope")
class Rope(Prim):
    """Rotary position embedding on [..., N, dh] (position = axis −2), non-interleaved halves,
    base 10000: (x₁, x₂) → (x₁·cos θ − x₂·sin θ, x₂·cos θ + x₁·sin θ), θ = n·10000^(−2i/dh).
    FLOPs 3 per element.  bwd: the inverse rotation of dy."""
    inputs = ("x",)
    params = ()

    def infer(self, ins, ps):
        (x,) = ins
        if x.rank < 2 or x.dims[-1] % 2:
            raise ShapeError(f"rope needs an even last axis, got {x.shape_str()}")
        return x, 3 * x.size

    @staticmethod
    def reference(xp, x):
        n, dh = x.shape[-2:]
        theta = np.arange(n)[:, None] * 10000.0 ** (-np.arange(dh // 2) * 2.0 / dh)
        cos, sin = np.cos(theta), np.sin(theta)
        x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
        return xp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _window_index(ws: int) -> np.ndarray:
    """[ws², ws²] row of the (2ws−1)² relative-position table for each (query, key) pair."""
    c = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
    d = c[:, :, None] - c[:, None, :] + ws - 1
    return d[0] * (2 * ws - 1) + d[1]


def _shift_mask(grid: tuple[int, int], ws: int, shift: int) -> np.ndarray:
    """[nW, ws², ws²] of 0 / −∞: after a cyclic shift, tokens of one window that came from
    different regions of the map do not attend to each other (Swin's attention mask)."""
    gh, gw = grid
    region = np.zeros((gh * ws, gw * ws), int)
    if shift:
        cuts = lambda n: (slice(0, n - ws), slice(n - ws, n - shift), slice(n - shift, n))
        for k, (hs, wsl) in enumerate((a, b) for a in cuts(gh * ws) for b in cuts(gw * ws)):
            region[hs, wsl] = k
    r = region.reshape(gh, ws, gw, ws).transpose(0, 2, 1, 3).reshape(gh * gw, ws * ws)
    return np.where(r[:, :, None] == r[:, None, :], 0.0, -np.inf)


@primitive("window_bias")
class WindowBias(Prim):
    """Swin's additive attention bias for each of the nW = gh·gw windows: the learned relative
    position bias, table [(2ws−1)², heads] gathered to [heads, ws², ws²], plus (shift > 0) the
    shifted-window mask → [nW, heads, ws², ws²].  bwd: dtable = scatter-add of dy."""
    inputs = ()
    params = ("table",)

    def infer(self, ins, ps):
        (t,) = ps
        ws, (gh, gw) = self.ws, self.grid
        if t.rank != 2 or t.dims[0] != (2 * ws - 1) ** 2:
            raise ShapeError(f"a relative position table for {ws}x{ws} windows needs {(2 * ws - 1) ** 2} rows, "
                             f"got {t.shape_str()}")
        return TensorType((gh * gw, t.dims[1], ws * ws, ws * ws)), 0

    @staticmethod
    def reference(xp, table, ws, grid, shift):
        bias = xp.transpose(table[_window_index(ws)], (2, 0, 1))          # [heads, T, T]
        return bias[None] + _shift_mask(grid, ws, shift)[:, None]


@primitive("embedding")
class Embedding(Prim):
    """y[b, t] = table[ids[b, t]]: ids [B, T] (integers held in f32), table [V, D] → [B, T, D].
    gather: rows gathered (scatter-add backward); else a one-hot built in-graph times the table
    (the same function; a lowering choice).  FLOPs 1 per output element (the seed's count)."""
    inputs = ("ids",)
    params = ("table",)

    def infer(self, ins, ps):
        (ids,), (t,) = ins, ps
        if ids.rank != 2 or t.rank != 2:
            raise ShapeError(f"an embedding takes ids [batch, tokens], got {ids.shape_str()}")
        out = TensorType(ids.dims + (t.dims[1],))
        return out, out.size

    @staticmethod
    def reference(xp, ids, table, gather):
        return table[np.clip(np.asarray(ids), 0, table.shape[0] - 1).astype(np.int64)]
