"""Primitives for attention and token models: matmul (batched), softmax (scaled, optionally
causal), rope, embedding (a table lookup); window_bias (Swin's relative position bias and
shifted-window mask) is declared (no template yet)."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType, flt
from lmc.prims import Prim, primitive


@primitive("matmul")
class Matmul(Prim):
    """y = a·b over the last two axes, batched over the leading ones (equal in a and b):
    a [..., M, K], b [..., K, N] → [..., M, N].  FLOPs 2·batch·M·K·N.
    bwd: da = dy·bᵀ, db = aᵀ·dy."""
    mixed_precision = True
    inputs = ("a", "b_in")
    params = ()
    n_inputs = 2
    examples = [({}, [TensorType((2, 3, 4, 5)), TensorType((2, 3, 5, 2))], []),
                ({}, [TensorType((3, 4)), TensorType((4, 2))], [])]

    def infer(self, ins, ps):
        a, b = ins
        if a.rank < 2 or a.rank != b.rank or a.dims[:-2] != b.dims[:-2] or a.dims[-1] != b.dims[-2]:
            raise ShapeError(f"cannot multiply {a.shape_str()} by {b.shape_str()}")
        out = TensorType(a.dims[:-1] + (b.dims[-1],))
        return out, 2 * out.size * a.dims[-1]

    def context(self, ins, ps, out):
        r = ins[0].rank
        return {"batch": list(range(r - 2)), "m_ax": r - 2, "k_ax": r - 1}

    @staticmethod
    def reference(xp, a, b):
        return xp.matmul(a, b)

    def onnx(self, b, ins, ps, st):
        return b.op("MatMul", *ins)


@primitive("softmax")
class Softmax(Prim):
    """y = softmax(scale·x) over the last axis; causal: entries j > i of each [.., i, j] matrix
    masked (−∞) first, so a query sees no later key.  The row max is subtracted before exp.
    FLOPs 5 per element.  bwd: dx = scale·y·(dy − Σ_j dy·y)."""
    inputs = ("x",)
    params = ()
    examples = [(dict(scale=0.5, causal=False), [TensorType((2, 3, 4, 5))], []),
                (dict(scale=0.7, causal=True), [TensorType((2, 2, 4, 4))], []),
                (dict(scale=1.0, causal=False), [TensorType((3, 6))], [])]

    def infer(self, ins, ps):
        (x,) = ins
        if self.causal and (x.rank < 2 or x.dims[-1] != x.dims[-2]):
            raise ShapeError(f"a causal mask needs square [.., queries, keys] scores, got {x.shape_str()}")
        return x, 5 * x.size

    def saved(self, ins, ps, out):
        return [out]          # y: dx needs only the probabilities

    def context(self, ins, ps, out):
        (x,) = ins
        return {"last": x.rank - 1, "lead": list(range(x.rank - 1)), "r": TensorType(x.dims[:-1]).mlir,
                "scale_c": flt(self.scale), "qi": TensorType(x.dims, "i32").mlir}

    @staticmethod
    def reference(xp, x, scale, causal):
        s = x * scale
        if causal:
            n = x.shape[-1]
            s = xp.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
        s = s - s.max(axis=-1, keepdims=True)
        e = xp.exp(s)
        return e / e.sum(axis=-1, keepdims=True)

    def onnx(self, b, ins, ps, st):
        return onnx_softmax(b, ins[0], self.scale, self.causal, b.ins[0].dims[-1])


def onnx_softmax(b, s, scale, causal, n):
    """softmax(scale·s) over the last axis, entries above the diagonal masked when causal."""
    s = b.op("Mul", s, b.const(scale))
    if causal:
        s = b.op("Where", b.const(np.tril(np.ones((n, n), bool)), np.bool_), s, b.const(-np.inf))
    return b.op("Softmax", s, axis=-1)


@primitive("rope")
class Rope(Prim):
    """Rotary position embedding on [..., N, dh] (position = axis −2), non-interleaved halves,
    base 10000: (x₁, x₂) → (x₁·cos θ − x₂·sin θ, x₂·cos θ + x₁·sin θ), θ = n·10000^(−2i/dh).
    FLOPs 3 per element.  bwd: the inverse rotation of dy."""
    inputs = ("x",)
    params = ()
    examples = [({}, [TensorType((2, 2, 5, 6))], []), ({}, [TensorType((3, 4))], [])]

    def infer(self, ins, ps):
        (x,) = ins
        if x.rank < 2 or x.dims[-1] % 2:
            raise ShapeError(f"rope needs an even last axis, got {x.shape_str()}")
        return x, 3 * x.size

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        (x,) = ins
        n, dh = x.dims[-2:]
        h = TensorType(x.dims[:-1] + (dh // 2,))
        # θ[n, i] = n·10000^(−2i/dh): the frequencies in float64 here, the product in-graph
        freqs = [float(10000.0 ** (-2.0 * i / dh)) for i in range(dh // 2)]
        return {"h": h.mlir, "nd": TensorType((n, dh // 2)).mlir, "half": dh // 2, "dh": dh,
                "fr": TensorType((dh // 2,)).mlir, "freqs": ", ".join(flt(f) for f in freqs),
                "ax": x.rank - 1, "tab_dims": [x.rank - 2, x.rank - 1],
                "lo": ", ".join([f"0:{d}" for d in x.dims[:-1]] + [f"0:{dh // 2}"]),
                "hi": ", ".join([f"0:{d}" for d in x.dims[:-1]] + [f"{dh // 2}:{dh}"])}

    @staticmethod
    def reference(xp, x):
        n, dh = x.shape[-2:]
        theta = np.arange(n)[:, None] * 10000.0 ** (-np.arange(dh // 2) * 2.0 / dh)
        cos, sin = np.cos(theta), np.sin(theta)
        x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
        return xp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def onnx(self, b, ins, ps, st):
        n, dh = b.ins[0].dims[-2:]
        theta = np.arange(n)[:, None] * 10000.0 ** (-np.arange(dh // 2) * 2.0 / dh)
        cos, sin = b.const(np.cos(theta)), b.const(np.sin(theta))
        ax = b.ins[0].rank - 1
        x1 = b.op("Slice", ins[0], b.ints([0]), b.ints([dh // 2]), b.ints([ax]))
        x2 = b.op("Slice", ins[0], b.ints([dh // 2]), b.ints([dh]), b.ints([ax]))
        y1 = b.op("Sub", b.op("Mul", x1, cos), b.op("Mul", x2, sin))
        y2 = b.op("Add", b.op("Mul", x2, cos), b.op("Mul", x1, sin))
        return b.op("Concat", y1, y2, axis=-1)


def _window_index(ws: int) -> np.ndarray:
    """[ws², ws²] row of the (2ws−1)² relative-position table for each (query, key) pair."""
    c = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
    d = c[:, :, None] - c[:, None, :] + ws - 1
    return d[0] * (2 * ws - 1) + d[1]


# Swin's masked score (the official code and torchvision fill with −100, not −∞: exp(−100) is
# 0 in f32, and a finite value keeps the finite-difference oracle of window_bias defined)
MASKED = -100.0


def _regions(grid: tuple[int, int], ws: int, shift: int) -> np.ndarray:
    """[nW, ws²] region id of each token of each window after the cyclic shift (Swin's 3×3 cut
    of the map: the rows/columns that wrapped around are regions of their own)."""
    gh, gw = grid
    region = np.zeros((gh * ws, gw * ws), int)
    if shift:
        cuts = lambda n: (slice(0, n - ws), slice(n - ws, n - shift), slice(n - shift, n))
        for k, (hs, wsl) in enumerate((a, b) for a in cuts(gh * ws) for b in cuts(gw * ws)):
            region[hs, wsl] = k
    return region.reshape(gh, ws, gw, ws).transpose(0, 2, 1, 3).reshape(gh * gw, ws * ws)


def _shift_mask(grid: tuple[int, int], ws: int, shift: int) -> np.ndarray:
    """[nW, ws², ws²] of 0 / MASKED: after a cyclic shift, tokens of one window that came from
    different regions of the map do not attend to each other (Swin's attention mask)."""
    r = _regions(grid, ws, shift)
    return np.where(r[:, :, None] == r[:, None, :], 0.0, MASKED)


@primitive("window_bias")
class WindowBias(Prim):
    """Swin's additive attention bias for each of the nW = gh·gw windows: the learned relative
    position bias, table [(2ws−1)², heads] gathered to [heads, ws², ws²], plus (shift > 0) the
    shifted-window mask (0 / −100) → [nW, heads, ws², ws²].  Saves nothing.
    bwd: dtable = scatter-add of Σ_windows dy into the table rows."""
    inputs = ()
    params = ("table",)
    examples = [(dict(ws=2, grid=(2, 2), shift=1), [], [TensorType((9, 2))]),
                (dict(ws=3, grid=(1, 2), shift=0), [], [TensorType((25, 3))])]

    def infer(self, ins, ps):
        (t,) = ps
        ws, (gh, gw) = self.ws, self.grid
        if t.rank != 2 or t.dims[0] != (2 * ws - 1) ** 2:
            raise ShapeError(f"a relative position table for {ws}x{ws} windows needs {(2 * ws - 1) ** 2} rows, "
                             f"got {t.shape_str()}")
        return TensorType((gh * gw, t.dims[1], ws * ws, ws * ws)), 0

    def saved(self, ins, ps, out):
        return []

    def context(self, ins, ps, out):
        (t,) = ps
        ws, (gh, gw) = self.ws, self.grid
        n, h, nw = ws * ws, t.dims[1], gh * gw
        idx = _window_index(ws).reshape(-1)
        ctx = {"idx": "[" + ", ".join(f"[{int(i)}]" for i in idx) + "]", "it": TensorType((n * n, 1), "i32").mlir,
               "g2": TensorType((n * n, h)).mlir, "g3": TensorType((n, n, h)).mlir, "ht": TensorType((h, n, n)).mlir,
               "h": h, "yi": TensorType(out.dims, "i32").mlir, "masked": flt(MASKED)}
        if self.shift:
            r = _regions(self.grid, ws, self.shift)
            ctx.update(reg="[" + ", ".join("[" + ", ".join(str(int(v)) for v in row) + "]" for row in r) + "]",
                       rt=TensorType((nw, n), "i32").mlir)
        return ctx

    @staticmethod
    def reference(xp, table, ws, grid, shift):
        bias = xp.transpose(table[_window_index(ws)], (2, 0, 1))          # [heads, T, T]
        return bias[None] + _shift_mask(grid, ws, shift)[:, None]

    def onnx(self, b, ins, ps, st):
        ws = self.ws
        n, h = ws * ws, b.out.dims[1]
        g = b.op("Gather", ps[0], b.const(_window_index(ws).reshape(-1), np.int64), axis=0)    # [T·T, heads]
        bias = b.op("Transpose", b.op("Reshape", g, b.ints([n, n, h])), perm=[2, 0, 1])
        return b.op("Add", b.op("Unsqueeze", bias, b.ints([0])), b.const(_shift_mask(self.grid, ws, self.shift)[:, None]))


@primitive("embedding")
class Embedding(Prim):
    """y[b, t] = table[ids[b, t]]: ids [B, T] (integers held in f32), table [V, D] → [B, T, D].
    gather: rows gathered (scatter-add backward); else a one-hot built in-graph times the table
    (the same function; a lowering choice).  FLOPs 1 per output element (the seed's count)."""
    inputs = ("ids",)
    params = ("table",)
    constant_inputs = ("ids",)
    examples = [(dict(gather=True), [TensorType((2, 3))], [TensorType((5, 4))]),
                (dict(gather=False), [TensorType((2, 3))], [TensorType((5, 4))])]

    def infer(self, ins, ps):
        (ids,), (t,) = ins, ps
        if ids.rank != 2 or t.rank != 2:
            raise ShapeError(f"an embedding takes ids [batch, tokens], got {ids.shape_str()}")
        out = TensorType(ids.dims + (t.dims[1],))
        return out, out.size

    def context(self, ins, ps, out):
        (ids,), (t,) = ins, ps
        b, n = ids.dims
        v = t.dims[0]
        return {"ii": TensorType(ids.dims, "i32").mlir, "hot": TensorType((b, n, v)).mlir,
                "hoti": TensorType((b, n, v), "i32").mlir, "hotm": TensorType((b, n, v), "i1").mlir,
                "vmax": v - 1, "d": t.dims[1]}

    def draw(self, rng, t, is_input):
        if is_input:      # token ids (held in f32); ids are rounded, so this is far from a tie
            return rng.integers(0, 5, t.dims).astype(np.float32)
        return super().draw(rng, t, is_input)

    @staticmethod
    def reference(xp, ids, table, gather):
        # ids rounded to the nearest integer and clamped to the table (the template's order)
        idx = xp.clip(xp.floor(ids + 0.5), 0, table.shape[0] - 1).astype(np.int32)
        return table[idx]

    def onnx(self, b, ins, ps, st):
        v = b.pt[0].dims[0]                 # the table's rows: ids clamped to them
        i = b.op("Clip", b.op("Floor", b.op("Add", ins[0], b.const(0.5))), b.const(0.0), b.const(float(v - 1)))
        return b.op("Gather", ps[0], b.op("Cast", i, to=7), axis=0)        # 7: INT64


@primitive("flash_attn")
class FlashAttn(Prim):
    """Fused attention in its memory-saving form: o = softmax(scale·(q·kᵀ (+ bias)) (causal: keys
    after the query masked))·v per head, q [B, H, Nq, dh], k, v [B, H, Nk, dh] → [B, H, Nq, dh].
    The optional 4th input bias [nW, H, Nq, Nk] (Swin's relative position bias + shift mask) is
    added to the scores of each trailing group of nW batches (batch g·nW + w gets bias[w]), inside
    the softmax's scale: the composed form's order (`_common.attention`: matmul, add, softmax).
    The keys are processed in blocks of `block` with an online softmax (running max m and sum l),
    so no [Nq, Nk] probability matrix is kept: fwd saves q, k, v (, bias), o and the row
    logsumexp lse = m + log l [B, H, Nq]; bwd recomputes each block's scores (its bias block
    added again) and probabilities p = exp(s − lse).
    bwd: D = Σ_d do·o;  per block dv = pᵀ·do, ds = p·(do·vᵀ − D), dq += scale·ds·k, dk = scale·dsᵀ·q,
    dbias[.., block] = scale·Σ_groups ds.
    FLOPs 4·B·H·Nq·Nk·dh + 5·B·H·Nq·Nk (as the composed matmul, softmax, matmul; the bias add
    not counted, as there)."""
    mixed_precision = True
    inputs = ("q", "k", "v", "bias")      # bias optional: 3 or 4 inputs
    params = ()
    n_inputs = 3
    examples = [(dict(scale=0.5, causal=False, block=2), [TensorType((2, 2, 3, 4))] + [TensorType((2, 2, 5, 4))] * 2, []),
                (dict(scale=0.6, causal=True, block=2), [TensorType((1, 2, 5, 4))] * 3, []),
                (dict(scale=0.4, causal=True, block=8), [TensorType((2, 1, 4, 2))] * 3, []),
                # with a bias: 2 groups of 2 windows, 3 keys in blocks of 2 (the second block partial)
                (dict(scale=0.5, causal=False, block=2), [TensorType((4, 2, 3, 2))] * 3 + [TensorType((2, 2, 3, 3))], []),
                (dict(scale=0.7, causal=True, block=2), [TensorType((2, 1, 4, 2))] * 3 + [TensorType((1, 1, 4, 4))], [])]

    def infer(self, ins, ps):
        if len(ins) not in (3, 4):
            raise ShapeError(f"flash_attn takes q, k, v and an optional bias, got {len(ins)} inputs")
        q, k, v = ins[:3]
        if q.rank != 4 or k.dims != v.dims or k.rank != 4 or q.dims[:2] != k.dims[:2] or q.dims[3] != k.dims[3]:
            raise ShapeError(f"attention needs q [B, H, Nq, dh] and k, v [B, H, Nk, dh], got "
                             f"{q.shape_str()}, {k.shape_str()}, {v.shape_str()}")
        if self.causal and q.dims[2] != k.dims[2]:
            raise ShapeError(f"a causal mask needs as many queries as keys, got {q.dims[2]} and {k.dims[2]}")
        b, h, nq, dh = q.dims
        nk = k.dims[2]
        if len(ins) == 4:
            t = ins[3]
            if t.rank != 4 or t.dims[1:] != (h, nq, nk) or b % t.dims[0]:
                raise ShapeError(f"an attention bias for scores [{b}, {h}, {nq}, {nk}] must be [nW, {h}, {nq}, {nk}] "
                                 f"with nW dividing {b}, got {t.shape_str()}")
        return q, 4 * b * h * nq * nk * dh + 5 * b * h * nq * nk

    def saved(self, ins, ps, out):
        return list(ins) + [out, TensorType(ins[0].dims[:3])]

    # from this many whole key blocks on, they run in a stablehlo.while (one block's scores
    # live at a time, a module that does not grow with Nk) instead of unrolled
    LOOP_BLOCKS = 2

    def context(self, ins, ps, out):
        q, k = ins[:2]
        b, h, nq, dh = q.dims
        nk = k.dims[2]
        nw = ins[3].dims[0] if len(ins) == 4 else 1

        def block(j, s, n, dyn=False):          # dyn: at the loop's dynamic offset (s unused)
            return {"j": j, "start": s, "dyn": dyn, "kb": TensorType((b, h, n, dh)).mlir,
                    "sb": TensorType((b, h, nq, n)).mlir, "si": TensorType((b, h, nq, n), "i32").mlir,
                    "sm": TensorType((b, h, nq, n), "i1").mlir,
                    "sl": f"0:{b}, 0:{h}, {s}:{s + n}, 0:{dh}", "kdims": f"{b}, {h}, {n}, {dh}",
                    # the bias block [nW, H, Nq, n] and the scores grouped [B/nW, nW, H, Nq, n]
                    "bb": TensorType((nw, h, nq, n)).mlir, "s5": TensorType((b // nw, nw, h, nq, n)).mlir,
                    "bsl": f"0:{nw}, 0:{h}, 0:{nq}, {s}:{s + n}", "bdims": f"{nw}, {h}, {nq}, {n}"}

        whole = nk // self.block
        kloop = None
        if whole >= self.LOOP_BLOCKS:
            kloop = {"n": whole, "block": self.block, "bk": block("L", 0, self.block, dyn=True)}
            starts = range(whole * self.block, nk, self.block)            # the partial last block
        else:
            starts = range(0, nk, self.block)
        first = whole if kloop else 0
        blocks = [block(first + i, s, min(self.block, nk - s)) for i, s in enumerate(starts)]
        return {"blocks": blocks, "kloop": kloop, "r": TensorType((b, h, nq)).mlir, "scale_c": flt(self.scale)}

    @staticmethod
    def reference(xp, q, k, v, bias=None, scale=1.0, causal=False, block=128):
        s = xp.matmul(q, xp.swapaxes(k, -1, -2))
        if bias is not None:           # the composed form's grouped add (_common.attention)
            s = (s.reshape((-1,) + bias.shape) + bias[None]).reshape(s.shape)
        return xp.matmul(Softmax.reference(xp, s, scale, causal), v)

    def onnx(self, b, ins, ps, st):
        q, k, v = ins[:3]
        s = b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2]))
        if len(ins) == 4:
            bt = b.ins[3]
            _, h, nq, nk = b.ins[0].dims[:3] + (b.ins[1].dims[2],)
            g = b.op("Reshape", s, b.ints([-1] + list(bt.dims)))
            s = b.op("Reshape", b.op("Add", g, ins[3]), b.ints([-1, h, nq, nk]))
        return b.op("MatMul", onnx_softmax(b, s, self.scale, self.causal, b.ins[1].dims[2]), v)
