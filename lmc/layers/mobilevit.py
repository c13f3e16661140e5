"""MobileViT block (Mehta & Rastegari 2022), spec-only in the reference; built from conv_bn units,
transformer blocks and primitives (transpose, concat, layer_norm, …)."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import conv_bn, ln
from lmc.layers._shape import divides, image
from lmc.layers.transformer import encoder_block


@register("mobile_vit_block")
@dataclass(frozen=True)
class MobileVitBlock(Layer):
    """MobileViT block, ic → ic, shape kept: 3×3 conv → BN → swish, 1×1 conv ic→dim → BN;
    unfold into 2×2 patches, n_tx_blocks pre-LN transformer blocks (heads, mlp_dim) across
    patches, LayerNorm, fold; 1×1 conv dim→ic → BN → swish; concat [block input, that] and a
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
    rejects: ClassVar = [(dict(ic=4, dim=8, heads=3, mlp_dim=16, n_tx_blocks=1), (2, 4, 4, 4), ["heads=3", "dim=8"]),
                          (dict(ic=4, dim=8, heads=2, mlp_dim=8, n_tx_blocks=1), (2, 4, 5, 4), ["5x4"])]

    def build(self, g, x, net):
        b, c, h, w = image(x.type, self.ic)
        divides(self.heads, self.dim, f"heads={self.heads} must divide dim={self.dim}")
        if h % 2 or w % 2:
            raise ShapeError(f"2x2 unfolding needs even sides, got {h}x{w}")
        d = self.dim
        y = conv_bn(g, x, "local.", c, c, 3, 1, "symmetric", "swish")
        y = conv_bn(g, y, "proj_in.", c, d, 1, 1, "symmetric", "identity", seed_act_flops=True)
        # unfold: pixel (2i + p, 2j + q) → sequence p·2 + q (of 4·B), token i·(W/2) + j
        y = g.op("reshape", y, dims=(b, d, h // 2, 2, w // 2, 2))
        y = g.op("reshape", g.op("transpose", y, perm=(0, 3, 5, 2, 4, 1)), dims=(4 * b, h * w // 4, d))
        for i in range(self.n_tx_blocks):
            y = encoder_block(g, y, f"tx.{i}.", self.heads, self.mlp_dim)
        y = ln(g, y, "ln.")
        y = g.op("reshape", y, dims=(b, 2, 2, h // 2, w // 2, d))          # fold back
        y = g.op("reshape", g.op("transpose", y, perm=(0, 5, 3, 1, 4, 2)), dims=(b, d, h, w))
        y = conv_bn(g, y, "proj_out.", d, c, 1, 1, "symmetric", "swish")
        y = g.op("concat", x, y, axis=1)
        return conv_bn(g, y, "fuse.", 2 * c, c, 3, 1, "symmetric", "swish")
