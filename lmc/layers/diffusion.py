"""DDPM time conditioning, spec-only for now (sin/cos of the per-image time are not primitives)."""
from dataclasses import dataclass
from typing import ClassVar

from ..types import TensorType
from . import Layer, register
from ._shape import Params, image


@register("time_cond_add")
@dataclass(frozen=True)
class TimeCondAdd(Layer):
    """Adds a learned projection of the diffusion time to a feature map: s = the first element
    of the network input's last channel (the host fills it with t/T_max), emb = [sin(ω_k·s)]
    ++ [cos(ω_k·s)], ω_k = π·2^k, k < n_freq → [B, 2·n_freq]; y = x + (emb·W + b) broadcast
    over H, W.  Params: weight [2·n_freq, channels], bias [channels], both initialised to zero
    (the conditioning grows in).  Assumptions: NCHW input with `channels` channels."""
    channels: int
    n_freq: int
    examples: ClassVar = [(dict(channels=4, n_freq=3), TensorType((2, 4, 5, 5)))]

    def infer(self, x, net):
        b, c, h, w = image(x, self.channels, "channels")
        p = Params()
        p.add("weight", (2 * self.n_freq, c), "zeros", fan_in=2 * self.n_freq, fan_out=c)
        p.add("bias", (c,), "zeros")
        p.flops += 2 * b * 2 * self.n_freq * c + x.size
        return p.result(x)
