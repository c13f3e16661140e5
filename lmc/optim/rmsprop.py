"""RMSprop with momentum (the Lean kit's OptimizerKind.rmsprop; the MobileNetV2 / EfficientNet
optimizer):  g' = g + wd·θ (coupled, as those papers);  v' = ρ·v + (1−ρ)·g'²;
buf' = μ·buf + g'/(√v' + ε);  θ' = θ − lr·buf'.  ρ = rmsprop_decay, ε = rmsprop_eps (the
recipes use 1.0 and 1e-3, not 1e-8), μ = momentum.  ε sits outside the square root, as the
Lean kit documents (its code puts it inside).  v starts at 1, as the Lean kit's and TF's
RMSProp the recipes come from (torch's starts at 0, whose first step is ≈ lr/√(1−ρ) per
element whatever the gradient's size)."""
from __future__ import annotations

from lmc.optim import Optimizer, register


@register("rmsprop")
class RMSprop(Optimizer):
    seed_index = 2
    digits_mlp = {"rmsprop": ("train.optimizer=rmsprop", "train.use_adam=false", "train.learning_rate=0.001",
                               "train.momentum=0.9")}
    slots = ("v", "buf")
    hp = ("rho", "eps", "mu")
    examples = [({"learning_rate": 0.01, "optimizer": "rmsprop", "momentum": 0.9},
                 [("", {}), ("wd", {"weight_decay": 0.05})]),
                ({"learning_rate": 0.01, "optimizer": "rmsprop", "rmsprop_eps": 1.0, "rmsprop_decay": 0.5,
                  "wd_exclude_norm_bias": True}, [("eps1+wd", {"weight_decay": 0.05})])]

    def hp_values(self, cfg):
        return {"rho": cfg.rmsprop_decay, "eps": cfg.rmsprop_eps, "mu": cfg.momentum}

    def slot_init(self, slot):
        return 1.0 if slot == "v" else 0.0

    @staticmethod
    def error_gain(slots, rho, eps, mu):
        return 1.0 / (slots["v"] ** 0.5 + eps)

    @staticmethod
    def reference(xp, w, g, slots, lr, wd, decay, rho, eps, mu):
        gd = g + wd * w if decay else g
        v = rho * slots["v"] + (1 - rho) * gd * gd
        buf = mu * slots["buf"] + gd / (xp.sqrt(v) + eps)
        return w - lr * buf, {"v": v, "buf": buf}
