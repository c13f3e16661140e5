"""MobileViT block (Mehta & Rastegari 2022), spec-only as in the reference."""
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShapeError
from ..types import TensorType
from . import Layer, register
from ._shape import Params, divides, image
from .transformer import encoder_block


@register("mobile_vit_block")
@dataclass(frozen=True)
class MobileVitBlock(Layer):
    """MobileViT block, ic → ic, shape kept: 3×3 conv → BN → swish, 1×1 conv ic→dim → BN;
    unfold into 2×2 patches, n_tx_blocks pre-LN transformer blocks (heads, mlp_dim) across
    patches, LayerNorm, fold; 1×1 conv dim→ic → BN → swish; concat with the block input and a
    3×3 conv 2·ic→ic → BN → swish.
    Params: local.{weight [ic,ic,3,3], γ, β}, proj_in.{weight [dim,ic,1,1], γ, β}, per
    transformer block the 16 tensors of transformer_encoder, ln.gamma, ln.beta,
    proj_out.{weight [ic,dim,1,1], γ, β}, fuse.{weight [ic,2ic,3,3], γ, β}.
    Assumptions: NCHW input with ic channels, even H and W; heads divides dim."""
    ic: int
    dim: int
    heads: int
    mlp_dim: int
    n_tx_blocks: int
    examples: ClassVar = [(dict(ic=4, dim=8, heads=2, mlp_dim=16, n_tx_blocks=2), TensorType((2, 4, 4, 4)))]

    def infer(self, x, net):
        b, c, h, w = image(x, self.ic)
        divides(self.heads, self.dim, f"heads={self.heads} must divide dim={self.dim}")
        if h % 2 or w % 2:
            raise ShapeError(f"2x2 unfolding needs even sides, got {h}x{w}")
        d, p = self.dim, Params()
        p.conv_bn("local.", c, c, 3, b, h, w)
        p.conv_bn("proj_in.", c, d, 1, b, h, w)
        for i in range(self.n_tx_blocks):
            # attention runs over the h·w/4 patches at each of the 4 pixel positions
            encoder_block(p, f"tx.{i}.", 4 * b, h * w // 4, d, self.mlp_dim)
        p.ln("ln.", d, b * h * w * d)
        p.conv_bn("proj_out.", d, c, 1, b, h, w)
        p.conv_bn("fuse.", 2 * c, c, 3, b, h, w)
        return p.result(x)
