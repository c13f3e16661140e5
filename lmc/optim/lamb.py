"""LAMB (You et al. 2019; the Lean kit's JAX path and timm's Lamb): Adam moments with
bias correction form the direction r = m̂/(√v̂ + ε) + λ·θ (decoupled weight decay λ folded into
the direction, where the tensor takes decay), then a per-tensor trust ratio ‖θ‖/‖r‖ scales the
step: θ' = θ − lr·trust·r.  trust is 1 where ‖θ‖ or ‖r‖ is 0 (a zero-initialised bias on the
first step), and 1 for the tensors excluded from decay (wd_exclude_norm_bias's no-decay group,
as timm and the Lean kit do).  β1 0.9, β2 0.999, ε 1e-6 (runtime values, never baked in)."""
from __future__ import annotations

import numpy as np

from lmc.optim import Optimizer, register
from lmc.optim.adam import Adam, adam_direction


@register("lamb")
class Lamb(Optimizer):
    seed_index = 3
    digits_mlp = {"lamb": ("train.optimizer=lamb", "train.use_adam=false", "train.learning_rate=0.01")}
    slots = ("m", "v")
    hp = ("beta1", "beta2", "eps", "t")
    examples = [({"learning_rate": 0.01, "optimizer": "lamb"}, [("", {}), ("wd", {"weight_decay": 0.05})]),
                ({"learning_rate": 0.01, "optimizer": "lamb", "wd_exclude_norm_bias": True},
                 [("wd_excl", {"weight_decay": 0.05})])]

    def hp_values(self, cfg):
        return {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6}

    def context(self, p):
        # the norms reduce over every dim of the tensor
        return {"axes": ", ".join(str(d) for d in range(p.type.rank))}

    @classmethod
    def step_gain(cls, old, new, noise=0.0, w=None, wd=0.0, decay=False, beta1=0.9, beta2=0.999, eps=1e-6, t=1):
        # Adam's gain g_i = 1/(√v̂ + ε) carries an error δ of the gradient's scale into the
        # direction, δr_i ∝ g_i.  Where the trust ratio applies, the step is lr·‖θ‖·r/‖r‖, and to
        # first order its error is lr·trust·(δr_i + |r_i|·‖δr‖/‖r‖): the trust multiplies the
        # gain, and the normalisation spreads the whole tensor's error onto each element.  Both
        # matter where r is rounding noise (attention's key bias, whose true gradient is exactly
        # zero: the trust ratio then turns noise into a step of norm lr·‖θ‖).
        gain = Adam.error_gain(new, beta1=beta1, beta2=beta2, eps=eps, t=t)
        if not decay or w is None:
            return gain
        w = np.asarray(w, np.float64)
        m, v = np.asarray(new["m"], np.float64), np.asarray(new["v"], np.float64)
        r = (m / (1 - beta1 ** t)) / (np.sqrt(v / (1 - beta2 ** t)) + eps) + wd * w
        wn, rn = float(np.linalg.norm(w)), float(np.linalg.norm(r))
        if wn == 0 or rn == 0:
            return gain
        return wn / rn * (gain + np.abs(r) * float(np.linalg.norm(gain)) / rn)

    @staticmethod
    def reference(xp, w, g, slots, lr, wd, decay, beta1, beta2, eps, t):
        m, v, r = adam_direction(xp, g, slots, beta1, beta2, eps, t)
        if decay:
            r = r + wd * w
            wn, rn = xp.sqrt(xp.sum(w * w)), xp.sqrt(xp.sum(r * r))
            trust = xp.where((wn > 0) & (rn > 0), wn / xp.where(rn > 0, rn, 1.0), 1.0)
        else:
            trust = 1.0
        return w - lr * trust * r, {"m": m, "v": v}
