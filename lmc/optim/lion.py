"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the update is the
sign of an interpolation of the momentum and the gradient, so every element moves by exactly lr
(plus decay):  u = sign(β1·m + (1−β1)·g);  θ' = θ − lr·(u + λ·θ) (decoupled weight decay λ on
the old θ, where the tensor takes decay);  m' = β2·m + (1−β2)·g.  β1 = train.lion_beta1 (0.9),
β2 = train.lion_beta2 (0.99): the paper's defaults (it uses 0.95, 0.98 for language models);
runtime values, never baked in, and refused with any other optimizer.  The paper's advice: lr 3–10× smaller than AdamW's,
λ 3–10× larger.  sign(0) = 0 (stablehlo.sign, as jnp.sign and torch.sign)."""
from __future__ import annotations

import numpy as np

from lmc.core.fields import RecipeField
from lmc.optim import Optimizer, register


@register("lion")
class Lion(Optimizer):
    digits_mlp = {"lion": ("train.optimizer=lion", "train.use_adam=false", "train.learning_rate=0.001",
                           "train.weight_decay=0.001")}
    slots = ("m",)
    hp = ("beta1", "beta2")
    recipe_fields = (
        RecipeField("lion_beta1", float, 0.9, "lion hp β1 (the sign's interpolation); refused with other optimizers",
                    probe=(0.5, {"optimizer": "lion", "use_adam": False}), range="unit"),
        RecipeField("lion_beta2", float, 0.99, "lion hp β2 (the momentum's decay); refused with other optimizers",
                    probe=(0.5, {"optimizer": "lion", "use_adam": False}), range="unit"))
    examples = [({"learning_rate": 0.001, "optimizer": "lion"}, [("", {}), ("wd", {"weight_decay": 0.1}),
                                                                  ("betas", {"lion_beta1": 0.5, "lion_beta2": 0.9})]),
                ({"learning_rate": 0.001, "optimizer": "lion", "wd_exclude_norm_bias": True},
                 [("wd_excl", {"weight_decay": 0.1})])]

    def hp_values(self, cfg):
        return {"beta1": cfg.lion_beta1, "beta2": cfg.lion_beta2}

    @classmethod
    def step_gain(cls, old, new, beta1, beta2, noise=0.0, **_):
        # sign(c) is not continuous: where |c| is small, the f32 error of the gradient (the
        # oracle compares with float64) can flip it, a 2·lr difference no first-order bound
        # covers.  Measured on the oracle's nets, flips reach a few % of the tensor's largest |c|
        # (the transformer decoder, β1 0.5, step 2), so the oracle allows any step (gain ∞) where
        # |c| ≤ 10% of the largest, and elsewhere 1/|c|: the first-order rate at which an error
        # in c reaches the threshold (with the oracle's net-wide floor on the gradient scale this
        # covers a tensor whose true gradient is exactly zero, whose signs rounding noise sets).
        # The 10% is of the larger of the tensor's own largest |c| and the net-wide `noise`: a
        # tensor of one element (an SE block's 1-channel bias) is its own largest, and its c, of
        # rounding-noise size in the net, flipped sign on mb_conv's SE (step 2).
        # The template's arithmetic itself is checked exactly by tests/test_optim_units.py.
        # c = β1·m + (1−β1)·g, g recovered from m' = β2·m + (1−β2)·g.
        m, m2 = np.asarray(old["m"], np.float64), np.asarray(new["m"], np.float64)
        c = np.abs(beta1 * m + (1 - beta1) * (m2 - beta2 * m) / (1 - beta2))
        return np.where(c <= 0.1 * max(float(c.max()), noise), np.inf, 1.0 / np.where(c > 0, c, 1.0))

    @staticmethod
    def reference(xp, w, g, slots, lr, wd, decay, beta1, beta2):
        u = xp.sign(beta1 * slots["m"] + (1 - beta1) * g)
        if decay:
            u = u + wd * w
        return w - lr * u, {"m": beta2 * slots["m"] + (1 - beta2) * g}
