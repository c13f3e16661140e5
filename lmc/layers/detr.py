"""DETR kinds (spec-only in the reference): transformer_decoder and detr_heads, built from
primitives (layer_norm, linear, matmul, softmax, transpose, broadcast, concat)."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import attention, linear, ln
from lmc.layers._shape import divides, tokens


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
    inferred: ClassVar = {"dim": -1}      # filled from the input when left out or `auto`
    dim: int
    heads: int
    mlp_dim: int
    n_blocks: int
    n_queries: int
    examples: ClassVar = [(dict(dim=8, heads=2, mlp_dim=16, n_blocks=2, n_queries=3), TensorType((2, 6, 8)))]
    rejects: ClassVar = [(dict(dim=8, heads=3, mlp_dim=16, n_blocks=1, n_queries=2), (2, 5, 8),
                            ["heads=3", "dim=8"])]

    def build(self, g, x, net):
        b, n, d = tokens(x.type, self.dim)
        divides(self.heads, d, f"heads={self.heads} must divide dim={d}")
        q, m = self.n_queries, self.mlp_dim
        h = g.op("broadcast", params=[g.param("queries", (q, d), "normal", std=0.02)], dims=(b, q, d))
        # the seed's FLOPs: no GELU and no residual adds
        for i in range(self.n_blocks):
            t = ln(g, h, f"{i}.ln1.")
            qkv = [linear(g, t, f"{i}.self_attn.{p}.", d, d) for p in ("q", "k", "v")]
            h = g.op("add", h, linear(g, attention(g, *qkv, self.heads), f"{i}.self_attn.out.", d, d), flops=0)
            t = ln(g, h, f"{i}.ln2.")
            qkv = [linear(g, src, f"{i}.cross_attn.{p}.", d, d) for p, src in (("q", t), ("k", x), ("v", x))]
            h = g.op("add", h, linear(g, attention(g, *qkv, self.heads), f"{i}.cross_attn.out.", d, d), flops=0)
            t = linear(g, ln(g, h, f"{i}.ln3."), f"{i}.mlp.fc1.", d, m)
            t = g.op("act", t, kind="gelu", flops=0)
            h = g.op("add", h, linear(g, t, f"{i}.mlp.fc2.", m, d), flops=0)
        return h


@register("detr_heads")
@dataclass(frozen=True)
class DetrHeads(Layer):
    """DETR prediction heads per query: class logits dim → n_classes + 1 (the last is "no
    object") and a box MLP dim → dim → dim → 4 (relu, relu, sigmoid: cx, cy, w, h), concatenated
    → [B, Q, n_classes + 5], the layout DETR's set loss reads (lmc/losses: Hungarian matching
    on the host, class CE + L1 + GIoU in the graph).
    Params: class.weight [dim,n_classes+1], class.bias, box.fc1 [dim,dim] + bias, box.fc2
    [dim,dim] + bias, box.fc3 [dim,4] + bias.  Assumptions: input [B, Q, dim] decoder output."""
    inferred: ClassVar = {"dim": -1}      # filled from the input when left out or `auto`
    dim: int
    n_classes: int
    examples: ClassVar = [(dict(dim=8, n_classes=3), TensorType((2, 5, 8)))]
    rejects: ClassVar = [(dict(dim=8, n_classes=3), (2, 5, 6), ["dim=8", "6 features"])]

    def build(self, g, x, net):
        b, q, d = tokens(x.type, self.dim)
        cls = linear(g, x, "class.", d, self.n_classes + 1)
        # the seed's FLOPs count the matmuls only
        box = g.op("act", linear(g, x, "box.fc1.", d, d), kind="relu", flops=0)
        box = g.op("act", linear(g, box, "box.fc2.", d, d), kind="relu", flops=0)
        box = g.op("act", linear(g, box, "box.fc3.", d, 4), kind="sigmoid", flops=0)
        return g.op("concat", cls, box, axis=2)
