"""Shampoo (Gupta–Koren–Singer 2018) for the square 2-D dense weights with
n ≥ 16; every other tensor falls back to AdamW.  Slots L, R (n×n, start at 0):

    L' = β·L + (1−β)·G·Gᵀ;   R' = β·R + (1−β)·Gᵀ·G                        (EMA, β 0.95)
    M_reg = M + ε·(tr(M)/n)·I                                                (ε 1e-4, at inversion only)
    θ' = θ − lr·L_reg^{-1/4}·G·R_reg^{-1/4}  [− lr·wd·θ where the tensor takes decay]

Inverse square root by trace-scaled coupled Newton (Higham), matmuls only:
Ms = M/tr(M); Y₀ = Ms, Z₀ = I; 15×: T = 1.5·I − 0.5·Z·Y; Y ← Y·T; Z ← T·Z; M^{-1/2} = Z/√tr(M).
Inverse 4th root as the Lean kit documents it: A = M^{-1/2}, B = A^{-1/2} (= M^{1/4}), M^{-1/4} = A·B —
four Newton runs per step (two per factor).

Zero gradient (decided here; the Lean kit leaves it open): where tr(M) = 0 — only when M = 0, i.e. the
gradient and all earlier ones are 0 — the regulariser uses tr = 1, so M_reg = (ε/n)·I has finite
roots and the step is exactly 0 (G = 0) instead of 0/0.  β and ε are runtime values; the iteration
count and the Newton constants 1.5/0.5 are the algorithm's."""
from __future__ import annotations

from lmc.core.types import TensorType
from lmc.optim import Optimizer, dense_weights, register

NEWTON_ITERS = 15
MIN_DIM = 16


@register("shampoo")
class Shampoo(Optimizer):
    seed_index = 5
    digits_mlp = {"shampoo": ("train.optimizer=shampoo", "train.learning_rate=0.002")}
    slots = ("L", "R")
    hp = ("beta", "eps")
    fallback = "adam"
    applies_to = f"square 2-D dense weights with n ≥ {MIN_DIM}"
    examples = [({"learning_rate": 0.01, "optimizer": "shampoo"}, [("", {}), ("wd", {"weight_decay": 0.05})]),
                ({"learning_rate": 0.01, "use_shampoo": True, "wd_exclude_norm_bias": True},
                 [("wd_excl", {"weight_decay": 0.05})])]
    # batch-8 gradients of a 16×16 weight give L, R of rank ≤ 8: their regularised inverse roots
    # scale the gradient's f32 error by up to (tr/nε)^(1/2); measured ≤ 2.5× the plain bound
    oracle_tolerance = 4.0
    oracle_net = ([("dense", {"fan_in": 16, "fan_out": 16, "act": "relu"})], (3, 16))

    def applies(self, p, net):
        d = p.type.dims
        return p.type.rank == 2 and d[0] == d[1] and d[0] >= MIN_DIM and p.name in dense_weights(net)

    def hp_values(self, cfg):
        return {"beta": 0.95, "eps": 1e-4}

    def context(self, p):
        return {"iters": NEWTON_ITERS, "inv_n": f"{1.0 / p.type.dims[0]:.9e}",
                "idx": TensorType(p.type.dims, "i32").mlir, "mask": TensorType(p.type.dims, "i1").mlir}

    @staticmethod
    def reference(xp, w, g, slots, lr, wd, decay, beta, eps):
        n = w.shape[0]
        eye = xp.eye(n)

        def inv_sqrt(m):
            tr = xp.trace(m)
            y, z = m / tr, eye
            for _ in range(NEWTON_ITERS):
                t = 1.5 * eye - 0.5 * (z @ y)
                y, z = y @ t, t @ z
            return z / xp.sqrt(tr)

        def inv_4th_root(m):
            tr = xp.trace(m)
            m = m + eps * xp.where(tr > 0, tr, 1.0) / n * eye
            a = inv_sqrt(m)
            return a @ inv_sqrt(a)

        L = beta * slots["L"] + (1 - beta) * (g @ g.T)
        R = beta * slots["R"] + (1 - beta) * (g.T @ g)
        w2 = w - lr * (inv_4th_root(L) @ g @ inv_4th_root(R))
        if decay:
            w2 = w2 - lr * wd * w
        return w2, {"L": L, "R": R}
