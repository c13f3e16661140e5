"""Muon (Jordan 2024): heavy-ball momentum buf' = μ·buf + g, orthogonalised
by 5 Newton–Schulz iterations, for the 2-D dense weights with both dims ≥ 16; every other tensor
falls back to AdamW.

    X₀ = buf'/(‖buf'‖_F + ε);   5×: A = X·Xᵀ;  X ← a·X + b·A·X + c·A·A·X   (a, b, c) = (3.4445, −4.7750, 2.0315)
    θ' = θ − lr·s·X  [− lr·wd·θ where the tensor takes decay],   s = √max(1, rows/cols)

μ is the recipe's `momentum`, honoured as given (the Lean kit's code fixes 0.9, against its
docs): at the default 0 Muon orthogonalises the raw gradient; the published Muon uses 0.95,
so set `momentum: 0.95`.  ε = 1e-7.  Both are runtime values.

Conventions (say which, they are easy to get silently wrong):
- rows/cols are the STORED dims, [fan_in, fan_out] for a dense weight, as the Lean kit's IREE path
  — the transpose of PyTorch's [out, in], so s = √max(1, fan_in/fan_out) here where the
  published Muon scales by √max(1, fan_out/fan_in).
- The template iterates on the smaller Gram side, as the published Muon does: for rows > cols
  it uses A = Xᵀ·X (cols×cols) and X ← a·X + b·X·A + c·X·A·A, which is the same polynomial
  (X·p(XᵀX) = p(XXᵀ)·X) with smaller matmuls.  The reference keeps the documented rows×rows form,
  so the oracle checks that equivalence as well."""
from __future__ import annotations

from lmc.core.types import f32
from lmc.optim import Optimizer, dense_weights, register

NS_COEFFS = (3.4445, -4.7750, 2.0315)
NS_ITERS = 5
MIN_DIM = 16


@register("muon")
class Muon(Optimizer):
    seed_index = 4
    digits_mlp = {"muon": ("train.optimizer=muon", "train.learning_rate=0.02", "train.momentum=0.95")}
    slots = ("momentum",)
    hp = ("mu", "eps")
    fallback = "adam"
    applies_to = f"2-D dense weights with both dims ≥ {MIN_DIM}"
    examples = [({"learning_rate": 0.02, "optimizer": "muon", "momentum": 0.95}, [("", {}), ("wd", {"weight_decay": 0.05})]),
                ({"learning_rate": 0.02, "use_muon": True, "momentum": 0.8, "wd_exclude_norm_bias": True},
                 [("mu+wd_excl", {"weight_decay": 0.05})])]
    # the oracle's grid net: one weight with rows > cols, one with rows < cols (both Gram sides)
    oracle_net = ([("dense", {"fan_in": 24, "fan_out": 16, "act": "relu"}),
                   ("dense", {"fan_in": 16, "fan_out": 20, "act": "relu"})], (3, 24))

    def applies(self, p, net):
        return p.type.rank == 2 and min(p.type.dims) >= MIN_DIM and p.name in dense_weights(net)

    def hp_values(self, cfg):
        return {"mu": cfg.momentum, "eps": 1e-7}

    def context(self, p):
        rows, cols = p.type.dims
        a, b, c = NS_COEFFS
        return {"right": rows > cols, "gram": f32(min(rows, cols), min(rows, cols)).mlir, "iters": NS_ITERS,
                "a": f"{a:.9e}", "b": f"{b:.9e}", "c": f"{c:.9e}", "scale": f"{max(1.0, rows / cols) ** 0.5:.9e}"}

    @staticmethod
    def reference(xp, w, g, slots, lr, wd, decay, mu, eps):
        buf = mu * slots["momentum"] + g
        x = buf / (xp.sqrt(xp.sum(buf * buf)) + eps)
        a, b, c = NS_COEFFS
        for _ in range(NS_ITERS):
            A = x @ x.T
            ax = A @ x
            x = a * x + b * ax + c * (A @ ax)
        rows, cols = w.shape
        w2 = w - lr * max(1.0, rows / cols) ** 0.5 * x
        if decay:
            w2 = w2 - lr * wd * w
        return w2, {"momentum": buf}
