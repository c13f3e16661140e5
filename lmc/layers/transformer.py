"""Transformer kinds: layer_norm, patch_embed (ViT), transformer_encoder, and the token-layout
converters spatial_flatten / spatial_unflatten, all built from primitives (layer_norm,
linear, matmul, softmax, rope or the fused flash_attn, transpose, concat, broadcast, slice).
LayerNorm ε = 1e-5, biased variance."""
import math
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import attention, conv, drop_path, linear, ln
from lmc.layers._shape import divides, image, tokens


@register("layer_norm")
@dataclass(frozen=True)
class LayerNorm(Layer):
    """LayerNorm over the last axis: y = γ·(x − μ)/√(σ² + 1e-5) + β, μ and σ² per row.
    Params: gamma [dim] (ones), beta [dim] (zeros).
    Assumptions: input [B, dim] or [B, N, dim]; the Lean kit has no codegen for this
    kind, so it follows the token LayerNorm of the transformer blocks."""
    inferred: ClassVar = {"dim": -1}      # filled from the input when left out or `auto`
    dim: int
    examples: ClassVar = [(dict(dim=6), TensorType((2, 6))), (dict(dim=4), TensorType((2, 3, 4)))]
    rejects: ClassVar = [(dict(dim=6), (2, 5), ["dim=6", "5 features"]),
                          (dict(dim=4), (2, 4, 3, 3), ["[2, 4, 3, 3]"])]

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
    rejects: ClassVar = [(dict(ic=3, dim=8, patch_size=4, n_patches=4), (2, 3, 8, 12), ["n_patches=4", "6 patches"]),
                          (dict(ic=3, dim=8, patch_size=3, n_patches=4), (2, 3, 8, 8), ["patch_size=3", "8x8"])]

    def build(self, g, x, net):
        b, _, h, w = image(x.type, self.ic)
        ps = self.patch_size
        if h % ps or w % ps:
            raise ShapeError(f"patch_size={ps} does not divide the {h}x{w} input")
        n = (h // ps) * (w // ps)
        if n != self.n_patches:
            raise ShapeError(f"n_patches={self.n_patches} but a {h}x{w} input in {ps}x{ps} patches has "
                             f"{h // ps}x{w // ps} = {n} patches")
        d = self.dim
        # He fan-in: conv's (ic·p·p); the seed's FLOPs count the conv and the position add only
        # mixed: its matmuls are the token path's (bf16 under train.bf16, as the linears)
        y = conv(g, x, "", self.ic, d, ps, ps, "valid", bias=True, bias_flops=0, mixed=True)
        y = g.op("reshape", g.op("transpose", y, perm=(0, 2, 3, 1)), dims=(b, n, d))
        cls = g.op("broadcast", params=[g.param("cls", (d,), "zeros")], dims=(b, 1, d))
        pos = g.param("pos", (n + 1, d), "normal", std=math.sqrt(2.0 / (n + 1)), role="position")
        y = g.op("concat", cls, y, axis=1)
        return g.op("add", y, g.op("broadcast", params=[pos], dims=(b, n + 1, d)))


def encoder_block(g, x, name: str, heads: int, m: int, causal=False, rope=False, flash=False, net=None):
    """One pre-LN block on tokens [B, N, d], tensors in the Lean kit's order (16): ln1 γ β;
    q, k, v, out (weight [d,d], bias [d]); ln2 γ β; mlp.fc1 [d,m] + [m]; mlp.fc2 [m,d] + [d].
    FLOPs: the seed's (GELU 8 per element).  `net`: the spec, whose train.drop_path makes the
    two residual branches stochastic-depth sites."""
    d = x.type.dims[2]
    h = ln(g, x, f"{name}ln1.")
    q, k, v = (linear(g, h, f"{name}attn.{p}.", d, d) for p in ("q", "k", "v"))
    h = linear(g, attention(g, q, k, v, heads, causal, rope, flash=flash), f"{name}attn.out.", d, d)
    x = g.op("add", x, drop_path(g, h, net))
    h = linear(g, ln(g, x, f"{name}ln2."), f"{name}mlp.fc1.", d, m)
    h = g.op("act", h, kind="gelu", flops=8 * h.type.size)
    return g.op("add", x, drop_path(g, linear(g, h, f"{name}mlp.fc2.", m, d), net))


@register("transformer_encoder")
@dataclass(frozen=True)
class TransformerEncoder(Layer):
    """n_blocks pre-LN transformer blocks on tokens [B, N, dim]: x + attn(LN1(x)), then
    x + fc2(GELU(fc1(LN2(x)))); multi-head attention with heads of dim/heads, softmax(q·kᵀ/√dh)
    (causal_mask: keys after the query masked), rope: rotary embedding on q and k
    (non-interleaved halves, base 10000), flash_attn: same math as the fused `flash_attn`
    primitive (keys in blocks of 128, online softmax, the logsumexp saved instead of the
    probabilities and the probabilities recomputed in the backward).
    A final LayerNorm follows the blocks.  Output: the class token (token 0) [B, dim], or every
    token [B, N, dim] when causal_mask or keep_sequence.
    Params per block (16): ln1.γ, ln1.β, attn.{q,k,v,out}.{weight [dim,dim], bias [dim]},
    ln2.γ, ln2.β, mlp.fc1.weight [dim,mlp_dim], fc1.bias, mlp.fc2.weight [mlp_dim,dim],
    fc2.bias; then ln.gamma, ln.beta.
    Assumptions: heads divides dim (and dim/heads is even with rope); no dropout."""
    inferred: ClassVar = {"dim": -1}      # filled from the input when left out or `auto`
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
                           TensorType((2, 4, 8))),
                          (dict(dim=8, heads=2, mlp_dim=8, n_blocks=1, keep_sequence=True, flash_attn=True),
                           TensorType((2, 5, 8))),
                          (dict(dim=4, heads=1, mlp_dim=8, n_blocks=1, causal_mask=True, flash_attn=True, rope=True),
                           TensorType((2, 3, 4)))]
    rejects: ClassVar = [(dict(dim=8, heads=3, mlp_dim=16, n_blocks=1), (2, 5, 8), ["heads=3", "dim=8"]),
                          (dict(dim=8, heads=2, mlp_dim=16, n_blocks=1), (2, 5, 6), ["dim=8", "6 features"]),
                          (dict(dim=6, heads=2, mlp_dim=8, n_blocks=1, rope=True), (2, 4, 6), ["rope", "dim=6", "heads=2", "= 3"]),
                          (dict(dim=8, heads=2, mlp_dim=16, n_blocks=1), (2, 8, 4, 4), ["[2, 8, 4, 4]"])]

    def build(self, g, x, net):
        b, n, d = tokens(x.type, self.dim)
        divides(self.heads, d, f"heads={self.heads} must divide dim={d}")
        if self.rope and (d // self.heads) % 2:
            raise ShapeError(f"rope needs an even head dimension, but dim={d} / heads={self.heads} = {d // self.heads}")
        for i in range(self.n_blocks):
            x = encoder_block(g, x, f"{i}.", self.heads, self.mlp_dim, self.causal_mask, self.rope, self.flash_attn,
                              net=net)
        x = ln(g, x, "ln.")
        if self.causal_mask or self.keep_sequence:
            return x
        cls = g.op("slice", x, start=(0, 0, 0), limit=(b, 1, d))
        return g.op("reshape", cls, dims=(b, d))


@register("spatial_flatten")
@dataclass(frozen=True)
class SpatialFlatten(Layer):
    """Image to tokens: [B, C, H, W] → transpose (0, 2, 3, 1) → [B, H·W, C], token n = h·W + w.
    Assumptions: NCHW input."""
    examples: ClassVar = [({}, TensorType((2, 3, 4, 5)))]
    rejects: ClassVar = [({}, (2, 20, 3), ["[2, 20, 3]"])]

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
    rejects: ClassVar = [(dict(channels=3, height=4, width=5), (2, 21, 3), ["= 20", "21 tokens"])]

    def build(self, g, x, net):
        b, n, c = tokens(x.type, self.channels, "channels")
        if n != self.height * self.width:
            raise ShapeError(f"height·width = {self.height}·{self.width} = {self.height * self.width} "
                             f"but the input has {n} tokens")
        y = g.op("reshape", x, dims=(b, self.height, self.width, c))
        return g.op("transpose", y, perm=(0, 3, 1, 2))
