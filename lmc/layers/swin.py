"""Swin Transformer kinds (spec-only, as in the reference): swin_stage and patch_merging.
Both work on the channels-first image layout [B, dim, H, W] that conv_next_stem produces
(Swin's patch partition + linear embedding + LayerNorm is exactly that stem)."""
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShapeError
from ..types import TensorType
from . import Layer, register
from ._shape import Params, attention_flops, divides, image


@register("swin_stage")
@dataclass(frozen=True)
class SwinStage(Layer):
    """n_blocks Swin blocks (Liu et al. 2021), alternating window and shifted-window
    multi-head self-attention over window_size×window_size windows (with a learned relative
    position bias), each x + W-MSA(LN(x)), then x + MLP(LN(x)) (GELU); shape kept.
    Params per block: ln1 γ β, attn.qkv.weight [dim,3dim] + bias, attn.proj.weight [dim,dim]
    + bias, attn.rel_pos_bias [(2ws−1)², heads], ln2 γ β, mlp.fc1 [dim,mlp_dim] + bias,
    mlp.fc2 [mlp_dim,dim] + bias (torchvision's Swin block, the Lean kit's count).
    Assumptions: input [B, dim, H, W]; window_size divides H and W; heads divides dim."""
    dim: int
    heads: int
    mlp_dim: int
    window_size: int
    n_blocks: int
    examples: ClassVar = [(dict(dim=8, heads=2, mlp_dim=16, window_size=2, n_blocks=2), TensorType((2, 8, 4, 4)))]

    def infer(self, x, net):
        b, d, h, w = image(x, self.dim, "dim")
        divides(self.heads, d, f"heads={self.heads} must divide dim={d}")
        ws = self.window_size
        if h % ws or w % ws:
            raise ShapeError(f"window_size={ws} does not divide the {h}x{w} feature map")
        n, m, p = h * w, self.mlp_dim, Params()
        for i in range(self.n_blocks):
            p.ln(f"{i}.ln1.", d, b * n * d)
            p.dense(f"{i}.attn.qkv.", d, 3 * d, b * n)
            p.flops += attention_flops(b * n // (ws * ws), ws * ws, ws * ws, d)
            p.dense(f"{i}.attn.proj.", d, d, b * n)
            p.add(f"{i}.attn.rel_pos_bias", ((2 * ws - 1) ** 2, self.heads), "normal", std=0.02)
            p.ln(f"{i}.ln2.", d, b * n * d)
            p.dense(f"{i}.mlp.fc1.", d, m, b * n)
            p.dense(f"{i}.mlp.fc2.", m, d, b * n)
        return p.result(x)


@register("patch_merging")
@dataclass(frozen=True)
class PatchMerging(Layer):
    """Swin patch merging: concatenate each 2×2 neighbourhood (4·in_dim) → LayerNorm →
    linear → out_dim: [B, in_dim, H, W] → [B, out_dim, H/2, W/2].
    Params: norm.gamma, norm.beta [4·in_dim], weight [4·in_dim, out_dim], bias [out_dim] (the
    Lean kit's count; torchvision's reduction has no bias).
    Assumptions: input [B, in_dim, H, W] with H and W even."""
    in_dim: int
    out_dim: int
    examples: ClassVar = [(dict(in_dim=4, out_dim=8), TensorType((2, 4, 4, 6)))]

    def infer(self, x, net):
        b, c, h, w = image(x, self.in_dim, "in_dim")
        if h % 2 or w % 2:
            raise ShapeError(f"2x2 patch merging needs even sides, got {h}x{w}")
        p = Params()
        n = b * (h // 2) * (w // 2)
        p.ln("norm.", 4 * c, n * 4 * c)
        p.dense("", 4 * c, self.out_dim, n)
        return p.result(TensorType((b, self.out_dim, h // 2, w // 2)))
