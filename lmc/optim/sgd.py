"""SGD, with heavy-ball momentum μ = `momentum` when it is > 0 (torch.optim.SGD: no dampening,
not Nesterov); weight decay coupled into the gradient (g' = g + wd·θ), as torch.optim.SGD."""
from __future__ import annotations

from lmc.optim import Optimizer, register


@register("sgd")
class SGD(Optimizer):
    seed_index = 0
    digits_mlp = {"sgd": ("train.use_adam=false", "train.learning_rate=0.5"),
                   "momentum": ("train.use_adam=false", "train.learning_rate=0.05", "train.momentum=0.9")}
    hp = ("mu",)
    examples = [({"learning_rate": 0.1}, [("", {}), ("wd", {"weight_decay": 0.05})]),
                ({"learning_rate": 0.1, "momentum": 0.9, "wd_exclude_norm_bias": True},
                 [("momentum+wd", {"weight_decay": 0.05})])]

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.momentum > 0:
            self.slots = ("momentum",)

    def hp_values(self, cfg):
        return {"mu": cfg.momentum}

    def context(self, p):
        return {"momentum": bool(self.slots)}

    @staticmethod
    def reference(xp, w, g, slots, lr, wd, decay, mu):
        gd = g + wd * w if decay else g
        if "momentum" in slots:
            buf = mu * slots["momentum"] + gd
            return w - lr * buf, {"momentum": buf}
        return w - lr * gd, {}
