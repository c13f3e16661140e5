"""DDPM time conditioning, built from the slice, fourier_features, transpose and broadcast
primitives and a dense projection."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._shape import image


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
    rejects: ClassVar = [(dict(channels=4, n_freq=3), (2, 5, 5, 5), ["channels=4", "5 channels"])]

    @classmethod
    def net_before(cls, fields, x):
        # inside a net, as in a DDPM U-Net: a conv from the [image, t/T] input, so the layer's
        # own input is not the network input whose last channel it reads
        b, c, h, w = x.dims
        return [("conv2d", dict(ic=3, oc=c, k_size=3))], (b, 3, h, w)

    def build(self, g, x, net):
        b, c, h, w = image(x.type, self.channels, "channels")
        n = self.n_freq
        x0 = g.x                                                         # the network input
        d0 = x0.type.dims
        # s: the first element of the last channel; the seed's FLOPs count the projection and the add
        s = g.op("slice", x0, start=(0, d0[1] - 1) + (0,) * (len(d0) - 2), limit=(b, d0[1]) + (1,) * (len(d0) - 2))
        emb = g.op("fourier_features", g.op("reshape", s, dims=(b, 1)), num_frequencies=n, flops=0)
        # fourier_features interleaves (sin, cos) per frequency; this layer wants all sines first
        emb = g.op("reshape", g.op("transpose", g.op("reshape", emb, dims=(b, n, 2)), perm=(0, 2, 1)), dims=(b, 2 * n))
        wt = g.param("weight", (2 * n, c), "zeros", fan_in=2 * n, fan_out=c)
        y = g.op("dense", emb, params=[wt, g.param("bias", (c,), "zeros")])
        y = g.op("broadcast", g.op("reshape", y, dims=(b, c, 1, 1)), dims=(b, c, h, w))
        return g.op("add", x, y)
