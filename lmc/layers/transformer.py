"""Transformer kinds: layer_norm, patch_embed (ViT), transformer_encoder, and the token-layout
converters spatial_flatten / spatial_unflatten.  layer_norm and the converters are built from
primitives (layer_norm and transpose are declared: no template yet); patch_embed and
transformer_encoder are still spec-only shape rules (matmul, softmax are not primitives yet).  LayerNorm ε = 1e-5, biased variance."""
import math
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShapeError
from ..types import TensorType
from . import Layer, register
from ._common import ln
from ._shape import Params, attention_flops, divides, image, tokens


@register("layer_norm")
@dataclass(frozen=True)
class LayerNorm(Layer):
    """LayerNorm over the last axis: y = γ·(x − μ)/√(σ² + 1e-5) + β, μ and σ² per row.
    Params: gamma [dim] (ones), beta [dim] (zeros).
    Assumptions: input [B, dim] or [B, N, dim]; the seed's snapshot has no codegen for this
    kind, so it follows the token LayerNorm of the transformer blocks."""
    dim: int
    examples: ClassVar = [(dict(dim=6), TensorType((2, 6))), (dict(dim=4), TensorType((2, 3, 4)))]

    def build(self, g, x, net):
        t = x.type
        if t.rank not in (2, 3):
            raise ShapeError(f"expected [batch, dim] or [batch, tokens, dim], got {t.shape_str()}",
                             hint="for [B, C, H, W] use conv_next_* (channel LayerNorm) or global_avg_pool first")
        if t.dims[-1] != self.dim:
            raise ShapeError(f"dim={self.dim} but the input's last axis has {t.dims[-1]} features ({t.shape_str()})")
        return ln(g, x, "")


@register("patch_embed")
@dataclass(frozen=True)
class PatchEmbed(Layer):
    """ViT patchify: conv patch_size×patch_size, stride patch_size, no padding, + bias →
    [B, dim, H/p, W/p] → tokens [B, n_patches, dim] (row-major) → a learned class token in
    front (token 0) → + learned position embedding → [B, n_patches + 1, dim].
    Params: weight [dim,ic,p,p] (He fan-in), bias [dim], cls [dim] (zeros),
    pos [n_patches+1, dim] (normal, std √(2/(n_patches+1)), the Lean kit's IREE init).
    Assumptions: NCHW input with ic channels; p divides H and W; n_patches = (H/p)·(W/p)."""
    ic: int
    dim: int
    patch_size: int
    n_patches: int
    examples: ClassVar = [(dict(ic=3, dim=8, patch_size=4, n_patches=4), TensorType((2, 3, 8, 8))),
                          (dict(ic=1, dim=6, patch_size=2, n_patches=6), TensorType((1, 1, 4, 6)))]

    def infer(self, x, net):
        b, _, h, w = image(x, self.ic)
        ps = self.patch_size
        if h % ps or w % ps:
            raise ShapeError(f"patch_size={ps} does not divide the {h}x{w} input")
        n = (h // ps) * (w // ps)
        if n != self.n_patches:
            raise ShapeError(f"n_patches={self.n_patches} but a {h}x{w} input in {ps}x{ps} patches has "
                             f"{h // ps}x{w // ps} = {n} patches")
        p = Params()
        p.conv("", self.ic, self.dim, ps, b, h // ps, w // ps, bias=True)
        p.add("cls", (self.dim,), "zeros")
        p.add("pos", (n + 1, self.dim), "normal", std=math.sqrt(2.0 / (n + 1)))
        p.flops += b * (n + 1) * self.dim
        return p.result(TensorType((b, n + 1, self.dim)))


def encoder_block(p: Params, name: str, b: int, n: int, d: int, m: int) -> None:
    """Pre-LN block tensors in the Lean kit's order (16): ln1 γ β; q, k, v, out (weight
    [d,d], bias [d]); ln2 γ β; mlp.fc1 [d,m] + [m]; mlp.fc2 [m,d] + [d]."""
    p.ln(f"{name}ln1.", d, b * n * d)
    for proj in ("q", "k", "v", "out"):
        p.dense(f"{name}attn.{proj}.", d, d, b * n)
    p.flops += attention_flops(b, n, n, d)
    p.ln(f"{name}ln2.", d, b * n * d)
    p.dense(f"{name}mlp.fc1.", d, m, b * n)
    p.flops += 8 * b * n * m                     # GELU
    p.dense(f"{name}mlp.fc2.", m, d, b * n)
    p.flops += 2 * b * n * d                     # the two residual adds


@register("transformer_encoder")
@dataclass(frozen=True)
class TransformerEncoder(Layer):
    """n_blocks pre-LN transformer blocks on tokens [B, N, dim]: x + attn(LN1(x)), then
    x + fc2(GELU(fc1(LN2(x)))); multi-head attention with heads of dim/heads, softmax(q·kᵀ/√dh)
    (causal_mask: keys after the query masked), rope: rotary embedding on q and k
    (non-interleaved halves, base 10000), flash_attn: same math, tiled (a lowering choice).
    A final LayerNorm follows the blocks.  Output: the class token (token 0) [B, dim], or every
    token [B, N, dim] when causal_mask or keep_sequence.
    Params per block (16): ln1.γ, ln1.β, attn.{q,k,v,out}.{weight [dim,dim], bias [dim]},
    ln2.γ, ln2.β, mlp.fc1.weight [dim,mlp_dim], fc1.bias, mlp.fc2.weight [mlp_dim,dim],
    fc2.bias; then ln.gamma, ln.beta.
    Assumptions: heads divides dim (and dim/heads is even with rope); no dropout."""
    dim: int
    heads: int
    mlp_dim: int
    n_blocks: int
    causal_mask: bool = False
    keep_sequence: bool = False
    flash_attn: bool = False
    rope: bool = False
    examples: ClassVar = [(dict(dim=8, heads=2, mlp_dim=16, n_blocks=2), TensorType((2, 5, 8))),
                          (dict(dim=8, heads=2, mlp_dim=12, n_blocks=1, causal_mask=True, rope=True),
                           TensorType((2, 4, 8)))]

    def infer(self, x, net):
        b, n, d = tokens(x, self.dim)
        divides(self.heads, d, f"heads={self.heads} must divide dim={d}")
        if self.rope and (d // self.heads) % 2:
            raise ShapeError(f"rope needs an even head dimension, but dim={d} / heads={self.heads} = {d // self.heads}")
        p = Params()
        for i in range(self.n_blocks):
            encoder_block(p, f"{i}.", b, n, d, self.mlp_dim)
        p.ln("ln.", d, b * n * d)
        if self.causal_mask or self.keep_sequence:
            return p.result(TensorType((b, n, d)))
        return p.result(TensorType((b, d)))


@register("spatial_flatten")
@dataclass(frozen=True)
class SpatialFlatten(Layer):
    """Image to tokens: [B, C, H, W] → transpose (0, 2, 3, 1) → [B, H·W, C], token n = h·W + w.
    Assumptions: NCHW input."""
    examples: ClassVar = [({}, TensorType((2, 3, 4, 5)))]

    def build(self, g, x, net):
        b, c, h, w = image(x.type)
        return g.op("reshape", g.op("transpose", x, perm=(0, 2, 3, 1)), dims=(b, h * w, c))


@register("spatial_unflatten")
@dataclass(frozen=True)
class SpatialUnflatten(Layer):
    """Tokens to image: [B, height·width, channels] → [B, height, width, channels] → transpose
    (0, 3, 1, 2) → [B, channels, height, width] (the inverse of spatial_flatten).
    Assumptions: the token count is height·width."""
    channels: int
    height: int
    width: int
    examples: ClassVar = [(dict(channels=3, height=4, width=5), TensorType((2, 20, 3)))]

    def build(self, g, x, net):
        b, n, c = tokens(x.type, self.channels, "channels")
        if n != self.height * self.width:
            raise ShapeError(f"height·width = {self.height}·{self.width} = {self.height * self.width} "
                             f"but the input has {n} tokens")
        y = g.op("reshape", x, dims=(b, self.height, self.width, c))
        return g.op("transpose", y, perm=(0, 3, 1, 2))
