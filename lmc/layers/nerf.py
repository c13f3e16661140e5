"""NeRF kinds (Mildenhall et al. 2020), spec-only in the reference: positional_encoding (the
fourier_features primitive) and nerf_mlp (dense layers, slice and concat)."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import linear
from lmc.layers._shape import features


@register("positional_encoding")
@dataclass(frozen=True)
class PositionalEncoding(Layer):
    """Fourier features of each input coordinate p: (sin(2⁰πp), cos(2⁰πp), …,
    sin(2^(L−1)πp), cos(2^(L−1)πp)), L = num_frequencies → last axis input_dim·2·L.  No params.
    Assumptions: input [B, input_dim] or [B, N, input_dim]."""
    input_dim: int
    num_frequencies: int
    examples: ClassVar = [(dict(input_dim=3, num_frequencies=4), TensorType((5, 3))),
                          (dict(input_dim=2, num_frequencies=2), TensorType((2, 7, 2)))]
    rejects: ClassVar = [(dict(input_dim=3, num_frequencies=4), (5, 2), ["input_dim=3", "2 values"])]

    def build(self, g, x, net):
        t = x.type
        if t.rank not in (2, 3):
            raise ShapeError(f"expected [batch, input_dim] or [batch, points, input_dim], got {t.shape_str()}")
        if t.dims[-1] != self.input_dim:
            raise ShapeError(f"input_dim={self.input_dim} but the input's last axis has {t.dims[-1]} values")
        return g.op("fourier_features", x, num_frequencies=self.num_frequencies)


@register("nerf_mlp")
@dataclass(frozen=True)
class NerfMlp(Layer):
    """NeRF MLP: 8 relu layers of hidden_dim on the encoded position (the 5th re-reads it:
    skip), density head (1, softplus), a feature layer, then with the encoded direction a 128-wide
    relu layer and an RGB head (3, sigmoid) → [B, 4] (σ, r, g, b).
    Params: fc0 [eP,h], fc1..fc3 [h,h], fc4 [h+eP,h], fc5..fc7 [h,h], sigma [h,1], feature
    [h,h] (no activation), dir [h+eD,128], rgb [128,3], each with a bias (the Lean kit's count);
    fc4 and dir read [hidden, encoded input] in that order.
    Assumptions: input [B, encoded_pos_dim + encoded_dir_dim] (position features first)."""
    encoded_pos_dim: int
    encoded_dir_dim: int
    hidden_dim: int
    examples: ClassVar = [(dict(encoded_pos_dim=6, encoded_dir_dim=4, hidden_dim=8), TensorType((3, 10)))]
    rejects: ClassVar = [(dict(encoded_pos_dim=6, encoded_dir_dim=4, hidden_dim=8), (3, 9), ["6 + 4 = 10", "9 features"])]

    def build(self, g, x, net):
        ep, ed, h = self.encoded_pos_dim, self.encoded_dir_dim, self.hidden_dim
        b, n = features(x.type)
        if n != ep + ed:
            raise ShapeError(f"encoded_pos_dim + encoded_dir_dim = {ep} + {ed} = {ep + ed} but the input has "
                             f"{n} features ({x.type.shape_str()})")
        pos = g.op("slice", x, start=(0, 0), limit=(b, ep))
        dirs = g.op("slice", x, start=(0, ep), limit=(b, n))
        # the seed's FLOPs count the matmuls only (no activations)
        fc = lambda t, name, fi, fo, kind: (lambda y: y if kind is None else g.op("act", y, kind=kind, flops=0))(
            linear(g, t, name, fi, fo))
        y = pos
        for i in range(8):
            if i == 4:
                y = g.op("concat", y, pos, axis=1)                       # the skip: [h, encoded position]
            y = fc(y, f"fc{i}.", ep if i == 0 else h + ep if i == 4 else h, h, "relu")
        # softplus, not relu: a relu density head on a relu trunk starts dead on about half the
        # seeds (its pre-activation is dominated by one input-independent offset) and never
        # recovers; mip-NeRF made the same change for the same reason
        sigma = fc(y, "sigma.", h, 1, "softplus")
        y = fc(y, "feature.", h, h, None)
        y = fc(g.op("concat", y, dirs, axis=1), "dir.", h + ed, 128, "relu")
        rgb = fc(y, "rgb.", 128, 3, "sigmoid")
        return g.op("concat", sigma, rgb, axis=1)
