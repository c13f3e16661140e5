"""NeRF kinds (Mildenhall et al. 2020), spec-only as in the reference: positional_encoding
and nerf_mlp."""
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShapeError
from ..types import TensorType
from . import Layer, register
from ._shape import Params, features


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

    def infer(self, x, net):
        if x.rank not in (2, 3):
            raise ShapeError(f"expected [batch, input_dim] or [batch, points, input_dim], got {x.shape_str()}")
        if x.dims[-1] != self.input_dim:
            raise ShapeError(f"input_dim={self.input_dim} but the input's last axis has {x.dims[-1]} values")
        out = TensorType(x.dims[:-1] + (self.input_dim * 2 * self.num_frequencies,))
        p = Params()
        p.flops += 20 * out.size
        return p.result(out)


@register("nerf_mlp")
@dataclass(frozen=True)
class NerfMlp(Layer):
    """NeRF MLP: 8 relu layers of hidden_dim on the encoded position (the 5th re-reads it:
    skip), density head (1, relu), a feature layer, then with the encoded direction a 128-wide
    relu layer and an RGB head (3, sigmoid) → [B, 4] (σ, r, g, b).
    Params: fc0 [eP,h], fc1..fc3 [h,h], fc4 [h+eP,h], fc5..fc7 [h,h], sigma [h,1], feature
    [h,h], dir [h+eD,128], rgb [128,3], each with a bias (the Lean kit's count).
    Assumptions: input [B, encoded_pos_dim + encoded_dir_dim] (position features first)."""
    encoded_pos_dim: int
    encoded_dir_dim: int
    hidden_dim: int
    examples: ClassVar = [(dict(encoded_pos_dim=6, encoded_dir_dim=4, hidden_dim=8), TensorType((3, 10)))]

    def infer(self, x, net):
        ep, ed, h = self.encoded_pos_dim, self.encoded_dir_dim, self.hidden_dim
        b, n = features(x)
        if n != ep + ed:
            raise ShapeError(f"encoded_pos_dim + encoded_dir_dim = {ep} + {ed} = {ep + ed} but the input has "
                             f"{n} features ({x.shape_str()})")
        p = Params()
        p.dense("fc0.", ep, h, b)
        for i in (1, 2, 3):
            p.dense(f"fc{i}.", h, h, b)
        p.dense("fc4.", h + ep, h, b)
        for i in (5, 6, 7):
            p.dense(f"fc{i}.", h, h, b)
        p.dense("sigma.", h, 1, b)
        p.dense("feature.", h, h, b)
        p.dense("dir.", h + ed, 128, b)
        p.dense("rgb.", 128, 3, b)
        return p.result(TensorType((b, 4)))
