"""Adam / AdamW: bias-corrected moments, decoupled weight decay on the old θ
(AdamW when weight_decay > 0); β1 0.9, β2 0.999, ε 1e-8 (runtime values, never baked in)."""
from __future__ import annotations

from lmc.optim import Optimizer, register


def adam_direction(xp, g, slots, beta1, beta2, eps, t):
    """(m', v', m̂/(√v̂ + ε)): Adam's moments and bias-corrected direction (Adam, LAMB)."""
    m = beta1 * slots["m"] + (1 - beta1) * g
    v = beta2 * slots["v"] + (1 - beta2) * g * g
    mhat, vhat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
    return m, v, mhat / (xp.sqrt(vhat) + eps)


@register("adam")
class Adam(Optimizer):
    seed_index = 1
    digits_mlp = {"adam": ()}
    slots = ("m", "v")
    aliases = ("adamw",)      # the decay below is AdamW's (decoupled, on the old θ)
    hp = ("beta1", "beta2", "eps", "t")
    examples = [({"learning_rate": 0.01, "use_adam": True}, [("", {}), ("adamw", {"weight_decay": 0.05})]),
                ({"learning_rate": 0.01, "optimizer": "adam", "wd_exclude_norm_bias": True},
                 [("adamw_excl", {"weight_decay": 0.05})])]

    def hp_values(self, cfg):
        return {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

    @staticmethod
    def error_gain(slots, beta1, beta2, eps, t):
        return 1.0 / ((slots["v"] / (1 - beta2 ** t)) ** 0.5 + eps)

    @staticmethod
    def reference(xp, w, g, slots, lr, wd, decay, beta1, beta2, eps, t):
        m, v, direction = adam_direction(xp, g, slots, beta1, beta2, eps, t)
        w2 = w - lr * direction
        if decay:
            w2 = w2 - lr * wd * w
        return w2, {"m": m, "v": v}
