"""Sequence and scientific-model kinds from the reference's bestiary (spec-only there):
mamba_block, wave_net_block, evoformer_block, structure_module, built from primitives (conv1d,
selective_scan, rms_norm, tanh, mul, matmul, softmax, outer_product_mean…).  Their parameter lists add up
to the Lean kit's `Layer.nParams`, which the reference calls approximate by design (layers.md
§3.19, 3.29, 3.30, 3.35): the docstrings name what each tensor stands for."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import attention, linear
from lmc.layers._shape import tokens


@register("mamba_block")
@dataclass(frozen=True)
class MambaBlock(Layer):
    """n_blocks Mamba (selective SSM) blocks on [B, L, dim], e = expand·dim, shape kept:
    x + out_proj(SSM(conv1d(in_proj(RMSNorm(x)))) · gate).
    Params per block: norm.gamma [dim], in_proj.weight [dim, 2e], conv.weight [e, 4] (causal
    depthwise, kernel 4), x_proj.weight [e, 2·state_size] (B and C), a_log [e, state_size],
    d [e], out_proj.weight [e, dim] — the Lean kit's count n·(3·e·dim + 3·e·N + 5·e + dim):
    no Δ projection and no biases.  Assumptions: input [B, L, dim]."""
    inferred: ClassVar = {"dim": -1}      # filled from the input when left out or `auto`
    dim: int
    state_size: int
    expand: int
    n_blocks: int
    examples: ClassVar = [(dict(dim=4, state_size=3, expand=2, n_blocks=1), TensorType((2, 5, 4)))]
    rejects: ClassVar = [(dict(dim=4, state_size=3, expand=2, n_blocks=1), (2, 5, 6), ["dim=4", "6 features"])]

    def build(self, g, x, net):
        b, n, d = tokens(x.type, self.dim)
        e, st = self.expand * d, self.state_size
        # the seed's FLOPs: the three projections, and e·(8 + 6·N) per token for everything
        # else (norm, conv, activations, scan, gate, residual), counted on the scan
        for i in range(self.n_blocks):
            h = g.op("rms_norm", x, params=[g.param(f"{i}.norm.gamma", (d,), "ones")], flops=0)
            h = linear(g, h, f"{i}.in_proj.", d, 2 * e, bias=False)
            u = g.op("slice", h, start=(0, 0, 0), limit=(b, n, e))
            z = g.op("slice", h, start=(0, 0, e), limit=(b, n, 2 * e))
            cw = g.param(f"{i}.conv.weight", (e, 4), "he", fan_in=4, fan_out=4)
            u = g.op("conv1d", g.op("transpose", u, perm=(0, 2, 1)), params=[cw], dilation=1, pad=(3, 0), flops=0)
            u = g.op("act", g.op("transpose", u, perm=(0, 2, 1)), kind="swish", flops=0)
            bc = linear(g, u, f"{i}.x_proj.", e, 2 * st, bias=False)
            a_log = g.param(f"{i}.a_log", (e, st), "zeros")
            dd = g.param(f"{i}.d", (e,), "ones")
            y = g.op("selective_scan", u, bc, params=[a_log, dd], flops=b * n * e * (8 + 6 * st))
            y = g.op("mul", y, g.op("act", z, kind="swish", flops=0), flops=0)
            wo = g.param(f"{i}.out_proj.weight", (e, d), "he", fan_in=e, fan_out=d)
            x = g.op("add", x, g.op("linear", y, params=[wo]), flops=0)
        return x


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
    rejects: ClassVar = [(dict(residual_ch=4, skip_ch=3, n_layers=1), (2, 5, 16), ["residual_ch=4", "5 channels"]),
                          (dict(residual_ch=4, skip_ch=3, n_layers=1), (2, 4, 4, 4), ["[2, 4, 4, 4]"])]

    def build(self, g, x, net):
        t_ = x.type
        if t_.rank != 3:
            raise ShapeError(f"expected a 1-D signal [batch, channels, time], got {t_.shape_str()}")
        b, c, t = t_.dims
        r, s = self.residual_ch, self.skip_ch
        if c != r:
            raise ShapeError(f"residual_ch={r} but the incoming signal has {c} channels ({t_.shape_str()})")
        skip = None
        for i in range(self.n_layers):
            dil = 2 ** i
            wd = g.param(f"{i}.dilated.weight", (2 * r, r, 2), "he", fan_in=2 * r, fan_out=4 * r)
            bd = g.param(f"{i}.dilated.bias", (2 * r,), "zeros")
            wr = g.param(f"{i}.res.weight", (r, r, 1), "he", fan_in=r, fan_out=r)
            br = g.param(f"{i}.res.bias", (r,), "zeros")
            ws = g.param(f"{i}.skip.weight", (s, r, 1), "he", fan_in=r, fan_out=s)
            bs = g.param(f"{i}.skip.bias", (s,), "zeros")
            # causal: lo padding (k − 1)·d
            h = g.op("bias", g.op("conv1d", x, params=[wd], dilation=dil, pad=(dil, 0), groups=1), params=[bd], flops=0)
            f = g.op("tanh", g.op("slice", h, start=(0, 0, 0), limit=(b, r, t)), flops=0)
            gt = g.op("act", g.op("slice", h, start=(0, r, 0), limit=(b, 2 * r, t)), kind="sigmoid", flops=0)
            # the seed's count for the gate, both activations and the adds: 10 per gated element
            z = g.op("mul", f, gt, flops=10 * b * t * r)
            one = lambda w_, b_: g.op("bias", g.op("conv1d", z, params=[w_], dilation=1, pad=(0, 0), groups=1),
                                       params=[b_], flops=0)
            x = g.op("add", x, one(wr, br), flops=0)
            sk = one(ws, bs)
            skip = sk if skip is None else g.op("add", skip, sk, flops=0)
        return skip


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
    # small and one block: without the LayerNorms AlphaFold has, activations grow with width and
    # depth, and an oracle net with logits ~50 apart has only f32 rounding noise for gradients
    examples: ClassVar = [(dict(msa_channels=4, pair_channels=8, n_blocks=1), TensorType((2, 2, 3, 4)))]
    rejects: ClassVar = [(dict(msa_channels=8, pair_channels=4, n_blocks=1), (1, 3, 5, 6),
                        ["msa_channels=8", "6 channels"])]

    def build(self, g, x, net):
        t_ = x.type
        if t_.rank != 4:
            raise ShapeError(f"expected an MSA representation [batch, sequences, residues, msa_channels], got {t_.shape_str()}")
        b, s, r, c = t_.dims
        cm, cz = self.msa_channels, self.pair_channels
        if c != cm:
            raise ShapeError(f"msa_channels={cm} but the MSA representation has {c} channels ({t_.shape_str()})")
        lin = lambda t, name, fi, fo: linear(g, t, name, fi, fo, bias=False)
        # the seed's FLOPs: projections, attention, the outer product and the triangle products;
        # no activations, gates or residual adds

        def attend(m, name, ch):
            """Self-attention along axis 2 of [B, X, N, ch] (one head), projections q, k, v, o."""
            bb, xx, nn, _ = m.type.dims
            q, k, v = (g.op("reshape", lin(m, f"{name}.{p}.", ch, ch), dims=(bb * xx, nn, ch)) for p in "qkv")
            o = g.op("reshape", attention(g, q, k, v, 1), dims=(bb, xx, nn, ch))
            return g.op("add", m, lin(o, f"{name}.o.", ch, ch), flops=0)

        pair = None
        for i in range(self.n_blocks):
            x = attend(x, f"{i}.msa_row_attn", cm)                              # over residues
            col = attend(g.op("transpose", x, perm=(0, 2, 1, 3)), f"{i}.msa_col_attn", cm)
            x = g.op("transpose", col, perm=(0, 2, 1, 3))                       # over sequences
            h = g.op("act", lin(x, f"{i}.msa_transition.fc1.", cm, 4 * cm), kind="relu", flops=0)
            x = g.op("add", x, lin(h, f"{i}.msa_transition.fc2.", 4 * cm, cm), flops=0)
            wo = g.param(f"{i}.outer_product_mean.weight", (cm, max(1, cm * cz // 32)), "he", fan_in=cm, fan_out=cz)
            upd = g.op("outer_product_mean", x, params=[wo], channels=cz)
            pair = upd if pair is None else g.op("add", pair, upd, flops=0)
            for mod, outgoing in (("tri_mul_out", True), ("tri_mul_in", False)):
                a_, b_ = (g.op("transpose", lin(pair, f"{i}.{mod}.{p}.", cz, cz), perm=(0, 3, 1, 2)) for p in "ab")
                # outgoing: Σ_k a_ik·b_jk; incoming: Σ_k a_ki·b_kj (per channel, [B, cz, R, R])
                if outgoing:
                    prod = g.op("matmul", a_, g.op("transpose", b_, perm=(0, 1, 3, 2)))
                else:
                    prod = g.op("matmul", g.op("transpose", a_, perm=(0, 1, 3, 2)), b_)
                gate = g.op("act", lin(pair, f"{i}.{mod}.g.", cz, cz), kind="sigmoid", flops=0)
                upd = lin(g.op("transpose", prod, perm=(0, 2, 3, 1)), f"{i}.{mod}.o.", cz, cz)
                pair = g.op("add", pair, g.op("mul", upd, gate, flops=0), flops=0)
            pair = attend(pair, f"{i}.tri_attn_start", cz)                       # around starting nodes
            end = attend(g.op("transpose", pair, perm=(0, 2, 1, 3)), f"{i}.tri_attn_end", cz)
            pair = g.op("transpose", end, perm=(0, 2, 1, 3))                    # around ending nodes
        return x           # the pair representation is internal (computed, the seed's count)


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
    rejects: ClassVar = [(dict(single_channels=8, pair_channels=4, n_blocks=1), (2, 5, 7),
                         ["single_channels=8", "7 features"])]

    def build(self, g, x, net):
        b, r, cs = tokens(x.type, self.single_channels, "single_channels")
        cz = self.pair_channels
        w = {p: g.param(f"ipa.{p}.weight", (cs, cs), "he", fan_in=cs, fan_out=cs) for p in "qkvo"}
        # no pair representation reaches this layer: the bias weight is kept for the count only
        g.param("pair_bias.weight", (cz, max(1, cs // 4)), "he", fan_in=cz, fan_out=cs // 4 or 1)
        fc1 = g.param("transition.fc1.weight", (cs, cs), "he", fan_in=cs, fan_out=cs)
        fc2 = g.param("transition.fc2.weight", (cs, cs), "he", fan_in=cs, fan_out=cs)
        # weights shared across rounds; the seed's FLOPs: projections and attention per round
        for _ in range(self.n_blocks):
            q, k, v = (g.op("linear", x, params=[w[p]]) for p in "qkv")
            x = g.op("add", x, g.op("linear", attention(g, q, k, v, 1), params=[w["o"]]), flops=0)
            h = g.op("act", g.op("linear", x, params=[fc1]), kind="relu", flops=0)
            x = g.op("add", x, g.op("linear", h, params=[fc2]), flops=0)
        return x