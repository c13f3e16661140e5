"""Primitives of the NeRF, diffusion, Mamba and AlphaFold kinds: fourier_features, rms_norm,
selective_scan (a log-step scan and its reverse-time adjoint) and outer_product_mean."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType, flt
from lmc.prims import Prim, primitive


@primitive("fourier_features")
class FourierFeatures(Prim):
    """Per value p of the last axis: (sin(2⁰πp), cos(2⁰πp), …, sin(2^(L−1)πp), cos(2^(L−1)πp)),
    L = num_frequencies: [..., D] → [..., D·2L], coordinate-major.  FLOPs 20 per output element
    (the seed's count).  Saves y (its sines and cosines).  bwd: dp = Σ_k 2^k π (cos·dy_sin − sin·dy_cos).
    Inputs are drawn in [−1, 1] (NeRF's normalised coordinates, diffusion's t/T): the f32 phase
    2^k·π·p carries a rounding of |phase|·2⁻²⁴, which the forward tolerance must cover."""
    inputs = ("x",)
    params = ()
    examples = [(dict(num_frequencies=4), [TensorType((2, 7, 3))], []),      # positional_encoding [B, N, D]
                (dict(num_frequencies=3), [TensorType((2, 1))], [])]         # time_cond_add's scalar

    def infer(self, ins, ps):
        (x,) = ins
        out = TensorType(x.dims[:-1] + (x.dims[-1] * 2 * self.num_frequencies,))
        return out, 20 * out.size

    def saved(self, ins, ps, out):
        return [out]

    def context(self, ins, ps, out):
        (x,) = ins
        n, r = self.num_frequencies, x.rank
        a = x.dims + (n,)
        return {"a": TensorType(a).mlir, "a1": TensorType(a + (1,)).mlir, "a2": TensorType(a + (2,)).mlir,
                "w": TensorType((n,)).mlir, "freqs": ", ".join(flt(np.pi * 2.0 ** k) for k in range(n)),
                "xdims": list(range(r)), "ldim": r, "pair": r + 1,
                "lo": ", ".join("0:" + str(d) for d in a) + ", 0:1",
                "hi": ", ".join("0:" + str(d) for d in a) + ", 1:2"}

    def draw(self, rng, t, is_input):
        return rng.uniform(-1.0, 1.0, t.dims).astype(np.float32)

    @staticmethod
    def reference(xp, x, num_frequencies):
        w = np.pi * 2.0 ** np.arange(num_frequencies)                    # [L]
        a = x[..., :, None] * w                                          # [..., D, L]
        y = xp.stack([xp.sin(a), xp.cos(a)], axis=-1)                    # [..., D, L, 2]
        return y.reshape(x.shape[:-1] + (-1,))

    def onnx(self, b, ins, ps, st):
        x = b.ins[0]
        w = np.pi * 2.0 ** np.arange(self.num_frequencies)
        a = b.op("Mul", b.op("Unsqueeze", ins[0], b.ints([-1])), b.const(w))                 # [..., D, L]
        y = b.op("Concat", b.op("Unsqueeze", b.op("Sin", a), b.ints([-1])),
                 b.op("Unsqueeze", b.op("Cos", a), b.ints([-1])), axis=-1)                 # [..., D, L, 2]
        return b.op("Reshape", y, b.ints([0] * (x.rank - 1) + [-1]))


@primitive("rms_norm")
class RmsNorm(Prim):
    """y = γ·x/√(mean(x²) + ε) over the last axis (ε = 1e-5), γ [D].  FLOPs 4 per element.
    Saves x̂ = x·rstd and rstd = 1/√(mean(x²) + ε) (x's shape without the last axis).
    bwd: dγ = Σ_rest dy·x̂,  dx̂ = dy·γ,  dx = rstd·(dx̂ − x̂·mean(dx̂·x̂))."""
    inputs = ("x",)
    params = ("gamma",)
    examples = [({}, [TensorType((2, 5, 4))], [TensorType((4,))]),           # mamba: [B, L, dim]
                ({}, [TensorType((3, 6))], [TensorType((6,))])]
    # (not D = 1: there y ≈ γ·sign(x) and dx ∝ ε is a difference of O(1) terms, below f32's
    # resolution — the template's dx is then right only to ~1e-4 relative)

    def saved(self, ins, ps, out):
        (x,) = ins
        return [x, TensorType(x.dims[:-1])]

    def context(self, ins, ps, out):
        (x,) = ins
        ax = x.rank - 1
        return {"ax": ax, "rest": list(range(ax)), "inv_d": flt(1.0 / x.dims[ax]), "eps": flt(1e-5),
                "r": TensorType(x.dims[:-1]).mlir, "c": ps[0].mlir}

    def infer(self, ins, ps):
        (x,), (g,) = ins, ps
        if g.dims != (x.dims[-1],):
            raise ShapeError(f"RMS norm over {x.dims[-1]} features got a parameter of shape {g.shape_str()}")
        return x, 4 * x.size

    @staticmethod
    def reference(xp, x, gamma):
        return x / xp.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5) * gamma

    def onnx(self, b, ins, ps, st):
        (x,) = ins
        ms = b.op("ReduceMean", b.op("Mul", x, x), axes=[-1])
        return b.op("Mul", b.op("Div", x, b.op("Sqrt", b.op("Add", ms, b.const(1e-5)))), ps[0])


@primitive("selective_scan")
class SelectiveScan(Prim):
    """Mamba's state-space scan without a Δ projection (the Lean kit's): u [B, L, E],
    bc [B, L, 2N] (B_t then C_t), A = −exp(a_log) [E, N], D [E]:
    h_t = exp(A)·h_{t−1} + B_t·u_t,  y_t = C_t·h_t + D·u_t  → [B, L, E].
    FLOPs 6·N + 2 per element of u.  λ = exp(A) is time-invariant (no Δ), so the recurrence
    h_t = λ·h_{t−1} + X_t, X_t = u_t ⊗ B_t, is computed by doubling (Hillis–Steele): ⌈log₂ L⌉
    unrolled steps H += λ^σ ⊙ (H shifted σ steps later), σ = 1, 2, 4, …, any L.  A
    `stablehlo.while` over L (one step per iteration) gave the same numbers 7–14× slower on
    IREE 3.13 llvm-cpu (it copies the carried [B, L, E, N] at every iteration's
    dynamic_update_slice: fwd + bwd 1,179 vs 159 ms at B 8, L 256, E 128, N 16; 679 vs 51 ms at
    B 2, L 1024, E 64, N 16).  y = Σ_n H·C + D·u batched over all steps.  Saves u, bc and every state
    H [B, L, E, N] (L·N floats per element of u; recomputing h backwards by dividing by exp(A)
    would be unstable where exp(A) is small).  bwd: the reverse-time adjoint scan
    G_t = dy_t ⊗ C_t + exp(A)·G_{t+1} (the same doubling, shifted the other way), then
    dC = Σ_e dy·H, dB = Σ_e G·u,
    du = Σ_n G·B + D·dy, d(exp A) = Σ_{b,t} G_t·h_{t−1}, da_log = −d(exp A)·exp(A)·exp(a_log),
    dD = Σ_{b,t} dy·u."""
    inputs = ("u", "bc")
    params = ("a_log", "d")
    n_inputs = 2
    examples = [({}, [TensorType((2, 5, 3)), TensorType((2, 5, 4))], [TensorType((3, 2)), TensorType((3,))]),
                ({}, [TensorType((2, 1, 3)), TensorType((2, 1, 2))], [TensorType((3, 1)), TensorType((3,))])]  # L = 1

    def saved(self, ins, ps, out):
        (u, bc), (a, _) = ins, ps
        return [u, bc, TensorType(u.dims + (a.dims[1],))]

    def context(self, ins, ps, out):
        (u, _), (a, _) = ins, ps
        b, l, e = u.dims
        n = a.dims[1]
        return {"H": TensorType((b, l, e, n)).mlir, "bt": TensorType((b, l, n)).mlir,
                "Hl": TensorType((b, l - 1, e, n)).mlir, "L": l,
                "b_sl": f"[0:{b}, 0:{l}, 0:{n}]", "c_sl": f"[0:{b}, 0:{l}, {n}:{2 * n}]",
                "prev_sl": f"[0:{b}, 0:{l - 1}, 0:{e}, 0:{n}]",
                # the doubling scan's shifts σ = 1, 2, 4, … < L: types and slices of H shifted by σ
                "shifts": [{"s": flt(sh), "t": TensorType((b, l - sh, e, n)).mlir, "pad": f"[0, {sh}, 0, 0]",
                            "early": f"[0:{b}, 0:{l - sh}, 0:{e}, 0:{n}]", "late": f"[0:{b}, {sh}:{l}, 0:{e}, 0:{n}]"}
                           for sh in (2 ** k for k in range(max(l - 1, 0).bit_length()))]}

    def draw(self, rng, t, is_input):
        # a_log in [−2, 1]: decays exp(−e^a) from 0.07 to 0.87, the state neither vanishing at
        # once nor (as at a_log ≪ 0) summing L steps undamped
        if not is_input and t.rank == 2:
            return rng.uniform(-2.0, 1.0, t.dims).astype(np.float32)
        return super().draw(rng, t, is_input)

    def infer(self, ins, ps):
        (u, bc), (a, d) = ins, ps
        e, n = a.dims
        if u.rank != 3 or u.dims[2] != e or bc.dims != u.dims[:2] + (2 * n,) or d.dims != (e,):
            raise ShapeError(f"a scan over {e} channels and {n} states does not fit {u.shape_str()}, {bc.shape_str()}")
        return u, u.size * (6 * n + 2)

    @staticmethod
    def reference(xp, u, bc, a_log, d):
        n = a_log.shape[1]
        decay = xp.exp(-xp.exp(a_log))                                   # [E, N]
        h = 0.0
        ys = []
        for t in range(u.shape[1]):
            bt, ct = bc[:, t, :n], bc[:, t, n:]                          # [B, N]
            h = decay * h + u[:, t, :, None] * bt[:, None, :]            # [B, E, N]
            ys.append((h * ct[:, None, :]).sum(-1) + d * u[:, t])
        return xp.stack(ys, axis=1)


@primitive("outer_product_mean")
class OuterProductMean(Prim):
    """AlphaFold's MSA → pair update, in the Lean kit's count: a = msa·w ([B, S, R, cm]·[cm, c]),
    o[b, i, j] = mean_s a[b, s, i] ⊗ a[b, s, j] flattened (c²), then its first `channels`
    entries (repeated cyclically when c² < channels) → pair [B, R, R, channels].
    FLOPs 2·B·S·R²·cm (the seed's count).  Saves msa and a.  bwd: with do the cotangent of o
    (dy's channels k summed onto k mod c², the cyclic repeat's adjoint) scaled by 1/S,
    da = Σ_{j,q} (do + doᵀ)[b, i, j, p, q]·a[b, s, j, q] (ᵀ: swap i↔j and p↔q: a is used on both
    sides), dmsa = da·wᵀ, dw = Σ_{b,s,r} msa ⊗ da."""
    inputs = ("msa",)
    params = ("w",)
    examples = [(dict(channels=4), [TensorType((1, 3, 4, 5))], [TensorType((5, 2))]),     # c² = channels
                (dict(channels=3), [TensorType((2, 2, 3, 4))], [TensorType((4, 2))]),     # the first 3 of c² = 4
                (dict(channels=6), [TensorType((1, 2, 3, 3))], [TensorType((3, 2))])]     # repeated, then cut

    def saved(self, ins, ps, out):
        (m,), (w,) = ins, ps
        return [m, TensorType(m.dims[:3] + (w.dims[1],))]

    def context(self, ins, ps, out):
        (m,), (w,) = ins, ps
        b, s, r, _ = m.dims
        c = w.dims[1]
        c2, ch = c * c, self.channels
        rep = -(-ch // c2)
        t = lambda *d: TensorType(d).mlir
        return {"a": t(b, s, r, c), "o5": t(b, r, c, r, c), "o5t": t(b, r, r, c, c), "o4": t(b, r, r, c2),
                "rep": rep, "c2": c2, "exact": ch == c2, "inv_s": flt(1.0 / s),
                "oc": t(b, r, r, rep * c2), "oc5": t(b, r, r, rep, c2),
                "cut": f"[0:{b}, 0:{r}, 0:{r}, 0:{ch}]", "pad_hi": f"[0, 0, 0, {rep * c2 - ch}]"}

    def infer(self, ins, ps):
        (m,), (w,) = ins, ps
        if m.rank != 4 or w.rank != 2 or w.dims[0] != m.dims[3]:
            raise ShapeError(f"a [{w.dims[0]}, {w.dims[1]}] projection does not fit {m.shape_str()}")
        b, s, r, cm = m.dims
        return TensorType((b, r, r, self.channels)), 2 * b * s * r * r * cm

    @staticmethod
    def reference(xp, msa, w, channels):
        a = msa @ w
        o = xp.einsum("bsic,bsjd->bijcd", a, a) / msa.shape[1]
        o = o.reshape(o.shape[:3] + (-1,))
        return o[..., np.arange(channels) % o.shape[-1]]

    def onnx(self, b, ins, ps, st):
        s, c = b.ins[0].dims[1], b.pt[0].dims[1]
        a = b.op("MatMul", ins[0], ps[0])                                                     # [B, S, R, c]
        o = b.op("Mul", b.op("Einsum", a, a, equation="bsic,bsjd->bijcd"), b.const(1.0 / s))   # [B, R, R, c, c]
        o = b.op("Reshape", o, b.ints([0, 0, 0, c * c]))                                       # 0: keep B, R, R
        return b.op("Gather", o, b.ints(np.arange(self.channels) % (c * c)), axis=3)
