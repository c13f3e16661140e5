"""DETR kinds (spec-only, as in the reference): transformer_decoder and detr_heads."""
from dataclasses import dataclass
from typing import ClassVar

from ..types import TensorType
from . import Layer, register
from ._shape import Params, attention_flops, divides, tokens


@register("transformer_decoder")
@dataclass(frozen=True)
class TransformerDecoder(Layer):
    """DETR decoder: n_queries learned object queries attend to the encoder memory (the
    input tokens [B, N, dim]) through n_blocks pre-LN blocks of self-attention, cross-attention
    to the memory and an MLP (GELU), each with a residual → [B, n_queries, dim].
    Params: queries [n_queries, dim] (normal 0.02), then per block ln1 γ β, self_attn.{q,k,v,out}
    .{weight [dim,dim], bias}, ln2 γ β, cross_attn.{q,k,v,out}.{weight, bias}, ln3 γ β,
    mlp.fc1 [dim,mlp_dim] + bias, mlp.fc2 [mlp_dim,dim] + bias (the Lean kit's count).
    Assumptions: heads divides dim; no final LayerNorm."""
    dim: int
    heads: int
    mlp_dim: int
    n_blocks: int
    n_queries: int
    examples: ClassVar = [(dict(dim=8, heads=2, mlp_dim=16, n_blocks=2, n_queries=3), TensorType((2, 6, 8)))]

    def infer(self, x, net):
        b, n, d = tokens(x, self.dim)
        divides(self.heads, d, f"heads={self.heads} must divide dim={d}")
        q, m, p = self.n_queries, self.mlp_dim, Params()
        p.add("queries", (q, d), "normal", std=0.02)
        for i in range(self.n_blocks):
            p.ln(f"{i}.ln1.", d, b * q * d)
            for proj in ("q", "k", "v", "out"):
                p.dense(f"{i}.self_attn.{proj}.", d, d, b * q)
            p.flops += attention_flops(b, q, q, d)
            p.ln(f"{i}.ln2.", d, b * q * d)
            for proj, rows in (("q", q), ("k", n), ("v", n), ("out", q)):
                p.dense(f"{i}.cross_attn.{proj}.", d, d, b * rows)
            p.flops += attention_flops(b, q, n, d)
            p.ln(f"{i}.ln3.", d, b * q * d)
            p.dense(f"{i}.mlp.fc1.", d, m, b * q)
            p.dense(f"{i}.mlp.fc2.", m, d, b * q)
        return p.result(TensorType((b, q, d)))


@register("detr_heads")
@dataclass(frozen=True)
class DetrHeads(Layer):
    """DETR prediction heads per query: class logits dim → n_classes + 1 (the last is "no
    object") and a box MLP dim → dim → dim → 4 (relu, relu, sigmoid: cx, cy, w, h), concatenated
    → [B, Q, n_classes + 5].
    Params: class.weight [dim,n_classes+1], class.bias, box.fc1 [dim,dim] + bias, box.fc2
    [dim,dim] + bias, box.fc3 [dim,4] + bias.  Assumptions: input [B, Q, dim] decoder output."""
    dim: int
    n_classes: int
    examples: ClassVar = [(dict(dim=8, n_classes=3), TensorType((2, 5, 8)))]

    def infer(self, x, net):
        b, q, d = tokens(x, self.dim)
        p = Params()
        p.dense("class.", d, self.n_classes + 1, b * q)
        p.dense("box.fc1.", d, d, b * q)
        p.dense("box.fc2.", d, d, b * q)
        p.dense("box.fc3.", d, 4, b * q)
        return p.result(TensorType((b, q, self.n_classes + 5)))
