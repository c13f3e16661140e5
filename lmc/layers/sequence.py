"""Sequence and scientific-model kinds from the reference's bestiary, spec-only as there:
mamba_block, wave_net_block, evoformer_block, structure_module.  Their parameter lists add up
to the Lean kit's `Layer.nParams`, which the reference calls approximate by design (layers.md
§3.19, 3.29, 3.30, 3.35): the docstrings name what each tensor stands for."""
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShapeError
from ..types import TensorType
from . import Layer, register
from ._shape import Params, attention_flops, tokens


@register("mamba_block")
@dataclass(frozen=True)
class MambaBlock(Layer):
    """n_blocks Mamba (selective SSM) blocks on [B, L, dim], e = expand·dim, shape kept:
    x + out_proj(SSM(conv1d(in_proj(RMSNorm(x)))) · gate).
    Params per block: norm.gamma [dim], in_proj.weight [dim, 2e], conv.weight [e, 4] (causal
    depthwise, kernel 4), x_proj.weight [e, 2·state_size] (B and C), a_log [e, state_size],
    d [e], out_proj.weight [e, dim] — the Lean kit's count n·(3·e·dim + 3·e·N + 5·e + dim):
    no Δ projection and no biases.  Assumptions: input [B, L, dim]."""
    dim: int
    state_size: int
    expand: int
    n_blocks: int
    examples: ClassVar = [(dict(dim=4, state_size=3, expand=2, n_blocks=2), TensorType((2, 5, 4)))]

    def infer(self, x, net):
        b, n, d = tokens(x, self.dim)
        e, s, p = self.expand * d, self.state_size, Params()
        for i in range(self.n_blocks):
            p.add(f"{i}.norm.gamma", (d,), "ones")
            p.dense(f"{i}.in_proj.", d, 2 * e, b * n, bias=False)
            p.add(f"{i}.conv.weight", (e, 4), "he", fan_in=4, fan_out=4)
            p.dense(f"{i}.x_proj.", e, 2 * s, b * n, bias=False)
            p.add(f"{i}.a_log", (e, s), "zeros")
            p.add(f"{i}.d", (e,), "ones")
            p.dense(f"{i}.out_proj.", e, d, b * n, bias=False)
            p.flops += b * n * e * (8 + 6 * s)
        return p.result(x)


@register("wave_net_block")
@dataclass(frozen=True)
class WaveNetBlock(Layer):
    """WaveNet stack of n_layers gated residual layers with dilations 1, 2, 4, …: causal conv
    (kernel 2) residual_ch → 2·residual_ch (+ bias), tanh ⊙ sigmoid gate, 1×1 residual
    projection (+ bias) added to the input, 1×1 skip projection (+ bias) → skip_ch; the output
    is the sum of the skips [B, skip_ch, T].
    Params per layer: dilated.weight [2r, r, 2], dilated.bias [2r], res.weight [r, r, 1],
    res.bias [r], skip.weight [s, r, 1], skip.bias [s].
    Assumptions: 1-D channels-first input [B, residual_ch, T]."""
    residual_ch: int
    skip_ch: int
    n_layers: int
    examples: ClassVar = [(dict(residual_ch=4, skip_ch=3, n_layers=3), TensorType((2, 4, 16)))]

    def infer(self, x, net):
        if x.rank != 3:
            raise ShapeError(f"expected a 1-D signal [batch, channels, time], got {x.shape_str()}")
        b, c, t = x.dims
        r, s = self.residual_ch, self.skip_ch
        if c != r:
            raise ShapeError(f"residual_ch={r} but the incoming signal has {c} channels ({x.shape_str()})")
        p = Params()
        for i in range(self.n_layers):
            p.add(f"{i}.dilated.weight", (2 * r, r, 2), "he", fan_in=2 * r, fan_out=4 * r)
            p.add(f"{i}.dilated.bias", (2 * r,), "zeros")
            p.add(f"{i}.res.weight", (r, r, 1), "he", fan_in=r, fan_out=r)
            p.add(f"{i}.res.bias", (r,), "zeros")
            p.add(f"{i}.skip.weight", (s, r, 1), "he", fan_in=r, fan_out=s)
            p.add(f"{i}.skip.bias", (s,), "zeros")
            p.flops += 2 * b * t * (4 * r * r + r * r + r * s) + 10 * b * t * r
        return p.result(TensorType((b, s, t)))


@register("evoformer_block")
@dataclass(frozen=True)
class EvoformerBlock(Layer):
    """n_blocks AlphaFold-2 Evoformer blocks: MSA row- and column-attention and transition on
    the MSA representation, outer-product mean into the pair representation, triangle
    multiplicative updates and triangle attention on the pair representation; shapes kept.
    Params per block: msa_row_attn.{q,k,v,o} [cm,cm], msa_col_attn.{q,k,v,o} [cm,cm],
    msa_transition.fc1 [cm,4cm], fc2 [4cm,cm], outer_product_mean [cm, cm·cz/32],
    tri_mul_out.{a,b,g,o}, tri_mul_in.{…}, tri_attn_start.{q,k,v,o}, tri_attn_end.{…} [cz,cz]
    — the Lean kit's n·(16·cm² + cm²·cz/32 + 16·cz²) (no biases, no pair transition).
    Assumptions: input is the MSA representation [B, S, R, msa_channels] (channels last, as
    AlphaFold); the pair representation [B, R, R, pair_channels] is internal to the stack."""
    msa_channels: int
    pair_channels: int
    n_blocks: int
    examples: ClassVar = [(dict(msa_channels=8, pair_channels=4, n_blocks=2), TensorType((1, 3, 5, 8)))]

    def infer(self, x, net):
        if x.rank != 4:
            raise ShapeError(f"expected an MSA representation [batch, sequences, residues, msa_channels], got {x.shape_str()}")
        b, s, r, c = x.dims
        cm, cz = self.msa_channels, self.pair_channels
        if c != cm:
            raise ShapeError(f"msa_channels={cm} but the MSA representation has {c} channels ({x.shape_str()})")
        p = Params()
        for i in range(self.n_blocks):
            for att in ("msa_row_attn", "msa_col_attn"):
                for proj in ("q", "k", "v", "o"):
                    p.dense(f"{i}.{att}.{proj}.", cm, cm, b * s * r, bias=False)
            p.flops += attention_flops(b * s, r, r, cm) + attention_flops(b * r, s, s, cm)
            p.dense(f"{i}.msa_transition.fc1.", cm, 4 * cm, b * s * r, bias=False)
            p.dense(f"{i}.msa_transition.fc2.", 4 * cm, cm, b * s * r, bias=False)
            p.add(f"{i}.outer_product_mean.weight", (cm, max(1, cm * cz // 32)), "he", fan_in=cm, fan_out=cz)
            p.flops += 2 * b * s * r * r * cm
            for mod, projs in (("tri_mul_out", "abgo"), ("tri_mul_in", "abgo"),
                               ("tri_attn_start", "qkvo"), ("tri_attn_end", "qkvo")):
                for proj in projs:
                    p.dense(f"{i}.{mod}.{proj}.", cz, cz, b * r * r, bias=False)
            p.flops += 2 * attention_flops(b * r, r, r, cz) + 4 * b * r * r * r * cz
        return p.result(x)


@register("structure_module")
@dataclass(frozen=True)
class StructureModule(Layer):
    """AlphaFold-2 structure module: n_blocks rounds (weights shared across rounds) of
    invariant point attention over the single representation [B, R, single_channels] with a
    pair bias, then a transition; shape kept.
    Params (once): ipa.{q,k,v,o} [cs,cs], pair_bias.weight [cz, cs/4], transition.fc1, fc2
    [cs,cs] — the Lean kit's 6·cs² + cs·cz/4, independent of n_blocks.
    Assumptions: input [B, R, single_channels]; the pair representation is internal."""
    single_channels: int
    pair_channels: int
    n_blocks: int
    examples: ClassVar = [(dict(single_channels=8, pair_channels=4, n_blocks=3), TensorType((2, 5, 8)))]

    def infer(self, x, net):
        b, r, cs = tokens(x, self.single_channels, "single_channels")
        cz, p = self.pair_channels, Params()
        for proj in ("q", "k", "v", "o"):
            p.dense(f"ipa.{proj}.", cs, cs, b * r, bias=False)
        p.add("pair_bias.weight", (cz, max(1, cs // 4)), "he", fan_in=cz, fan_out=cs // 4 or 1)
        p.dense("transition.fc1.", cs, cs, b * r, bias=False)
        p.dense("transition.fc2.", cs, cs, b * r, bias=False)
        p.flops = p.flops * self.n_blocks + self.n_blocks * attention_flops(b, r, r, cs)
        return p.result(x)
