"""Swin Transformer kinds (spec-only in the reference): swin_stage and patch_merging, built from
primitives (layer_norm, transpose, roll, slice, linear, matmul, softmax, window_bias).
Both work on the channels-first image layout [B, dim, H, W] that conv_next_stem produces
(Swin's patch partition + linear embedding + LayerNorm is exactly that stem)."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import attention, linear, ln
from lmc.layers._shape import divides, image


@register("swin_stage")
@dataclass(frozen=True)
class SwinStage(Layer):
    """n_blocks Swin blocks (Liu et al. 2021), alternating window and shifted-window
    multi-head self-attention over window_size×window_size windows (with a learned relative
    position bias), each x + W-MSA(LN(x)), then x + MLP(LN(x)) (GELU); shape kept.
    Params per block: ln1 γ β, attn.qkv.weight [dim,3dim] + bias, attn.proj.weight [dim,dim]
    + bias, attn.rel_pos_bias [(2ws−1)², heads], ln2 γ β, mlp.fc1 [dim,mlp_dim] + bias,
    mlp.fc2 [mlp_dim,dim] + bias (torchvision's Swin block, the Lean kit's count).
    flash_attn: the fused `flash_attn` primitive with the bias as its 4th input (same function).
    Assumptions: input [B, dim, H, W]; window_size divides H and W; heads divides dim."""
    dim: int
    heads: int
    mlp_dim: int
    window_size: int
    n_blocks: int
    flash_attn: bool = False
    # flash_attn's whole-step oracle: tests/test_transformer_family.py (an example here would
    # re-deal the oracle's rotating loss × optimizer combos of every later layer case)
    examples: ClassVar = [(dict(dim=8, heads=2, mlp_dim=16, window_size=2, n_blocks=2), TensorType((2, 8, 4, 4)))]
    rejects: ClassVar = [(dict(dim=8, heads=2, mlp_dim=16, window_size=3, n_blocks=1), (2, 8, 4, 4),
                   ["window_size=3", "4x4"])]

    def build(self, g, x, net):
        b, d, h, w = image(x.type, self.dim, "dim")
        divides(self.heads, d, f"heads={self.heads} must divide dim={d}")
        ws = self.window_size
        if h % ws or w % ws:
            raise ShapeError(f"window_size={ws} does not divide the {h}x{w} feature map")
        m, gh, gw, t = self.mlp_dim, h // ws, w // ws, ws * ws
        x = g.op("transpose", x, perm=(0, 2, 3, 1))                      # [B, H, W, dim]
        # the seed's FLOPs: no GELU and no residual adds
        for i in range(self.n_blocks):
            # odd blocks shift the windows by ws/2 (none when one window covers the map)
            shift = ws // 2 if i % 2 and (gh > 1 or gw > 1) else 0
            y = ln(g, x, f"{i}.ln1.")
            if shift:
                y = g.op("roll", y, shifts=(-shift, -shift), axes=(1, 2))
            y = g.op("reshape", y, dims=(b, gh, ws, gw, ws, d))
            y = g.op("reshape", g.op("transpose", y, perm=(0, 1, 3, 2, 4, 5)), dims=(b * gh * gw, t, d))
            qkv = linear(g, y, f"{i}.attn.qkv.", d, 3 * d)
            wp = g.param(f"{i}.attn.proj.weight", (d, d), "he", fan_in=d, fan_out=d)
            bp = g.param(f"{i}.attn.proj.bias", (d,), "zeros")
            table = g.param(f"{i}.attn.rel_pos_bias", ((2 * ws - 1) ** 2, self.heads), "normal", std=0.02,
                            role="position")
            q, k, v = (g.op("slice", qkv, start=(0, 0, j * d), limit=(b * gh * gw, t, (j + 1) * d)) for j in range(3))
            bias = g.op("window_bias", params=[table], ws=ws, grid=(gh, gw), shift=shift)
            y = g.op("linear", attention(g, q, k, v, self.heads, bias=bias, flash=self.flash_attn), params=[wp, bp])
            y = g.op("reshape", y, dims=(b, gh, gw, ws, ws, d))
            y = g.op("reshape", g.op("transpose", y, perm=(0, 1, 3, 2, 4, 5)), dims=(b, h, w, d))
            if shift:
                y = g.op("roll", y, shifts=(shift, shift), axes=(1, 2))
            x = g.op("add", x, y, flops=0)
            y = linear(g, ln(g, x, f"{i}.ln2."), f"{i}.mlp.fc1.", d, m)
            y = linear(g, g.op("act", y, kind="gelu", flops=0), f"{i}.mlp.fc2.", m, d)
            x = g.op("add", x, y, flops=0)
        return g.op("transpose", x, perm=(0, 3, 1, 2))


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
    rejects: ClassVar = [(dict(in_dim=4, out_dim=8), (2, 4, 5, 6), ["5x6"])]

    def build(self, g, x, net):
        b, c, h, w = image(x.type, self.in_dim, "in_dim")
        if h % 2 or w % 2:
            raise ShapeError(f"2x2 patch merging needs even sides, got {h}x{w}")
        # neighbourhood features in torchvision's order: (0,0), (1,0), (0,1), (1,1) (row, col offset)
        y = g.op("reshape", g.op("transpose", x, perm=(0, 2, 3, 1)), dims=(b, h // 2, 2, w // 2, 2, c))
        y = g.op("transpose", y, perm=(0, 1, 3, 4, 2, 5))
        y = ln(g, g.op("reshape", y, dims=(b, h // 2, w // 2, 4 * c)), "norm.")
        y = linear(g, y, "", 4 * c, self.out_dim)
        return g.op("transpose", y, perm=(0, 3, 1, 2))
