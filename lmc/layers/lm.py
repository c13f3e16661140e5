"""Language-model kinds: token_position_embed (first layer; built from the embedding, linear
and broadcast primitives) and lm_head (built from the linear and transpose primitives)."""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._shape import tokens


@register("token_position_embed")
@dataclass(frozen=True)
class TokenPositionEmbed(Layer):
    """Token + position embedding: e[b, t] = embed[token(b, t)] (+ pos[t] if pos_emb) →
    [B, seq_len, d_model].  Input: one-hot tokens, flat [B, seq_len·vocab_size] (token-major)
    by default; token ids [B, seq_len] (f32) with ids_input (one-hot built in-graph) or gather
    (rows gathered, scatter-add backward).
    Params: embed.weight [vocab_size, d_model], then pos [seq_len, d_model] unless pos_emb is
    false (RoPE models); both normal, std 0.02.  Assumptions: the first layer of the net."""
    vocab_size: int
    seq_len: int
    d_model: int
    ids_input: bool = False
    gather: bool = False
    pos_emb: bool = True
    examples: ClassVar = [(dict(vocab_size=7, seq_len=4, d_model=6, ids_input=True), TensorType((2, 4))),
                          (dict(vocab_size=5, seq_len=3, d_model=4), TensorType((2, 15))),
                          (dict(vocab_size=5, seq_len=3, d_model=4, gather=True, pos_emb=False), TensorType((2, 3)))]
    rejects: ClassVar = [(dict(vocab_size=7, seq_len=4, d_model=6, ids_input=True), (2, 5), ["4 token ids", "[2, 5]"]),
                          (dict(vocab_size=5, seq_len=3, d_model=4), (2, 14), ["3·5 = 15", "[2, 14]"])]

    def draw_input(self, rng, t: TensorType):
        """A random input of type t for tests and benchmarks: token ids in [0, vocab_size) (f32),
        or their one-hot rows."""
        ids = rng.integers(0, self.vocab_size, (t.dims[0], self.seq_len))
        if self.ids_input or self.gather:
            return ids.astype(np.float32)
        return np.eye(self.vocab_size, dtype=np.float32)[ids].reshape(t.dims)

    def build(self, g, x, net):
        v, t, d = self.vocab_size, self.seq_len, self.d_model
        ids = self.ids_input or self.gather
        want = t if ids else t * v
        xt = x.type
        if xt.rank != 2 or xt.dims[1] != want:
            what = (f"{t} token ids [batch, seq_len]" if ids else
                    f"one-hot tokens [batch, seq_len·vocab_size] = [batch, {t}·{v} = {want}]")
            raise ShapeError(f"expected {what}, got {xt.shape_str()}",
                             hint="set `input: {features: N}` to match; ids_input/gather take ids")
        b = xt.dims[0]
        table = g.param("embed.weight", (v, d), "normal", std=0.02)
        if ids:
            e = g.op("embedding", x, params=[table], gather=self.gather)
        else:      # one-hot rows times the table: 2·V FLOPs per output element
            e = g.op("linear", g.op("reshape", x, dims=(b, t, v)), params=[table])
        if not self.pos_emb:
            return e
        pos = g.param("pos", (t, d), "normal", std=0.02, role="position")
        # the seed's FLOPs do not count the position add
        return g.op("add", e, g.op("broadcast", params=[pos], dims=(b, t, d)), flops=0)


@register("lm_head")
@dataclass(frozen=True)
class LmHead(Layer):
    """Per-position vocabulary logits: [B, seq_len, d_model]·W + b → [B, seq_len, vocab_size],
    laid out as the per-pixel logits [B, vocab_size, seq_len, 1] (classes × H × W, so the
    per-pixel cross-entropy applies with labels [B, seq_len, 1]; the reference's train graph).
    Params: weight [d_model, vocab_size] (He fan-in), bias [vocab_size].
    Assumptions: input [B, seq_len, d_model] (a causal or keep_sequence encoder)."""
    inferred: ClassVar = {"d_model": -1}      # filled from the input when left out or `auto`
    d_model: int
    vocab_size: int
    seq_len: int
    examples: ClassVar = [(dict(d_model=6, vocab_size=7, seq_len=4), TensorType((2, 4, 6)))]
    rejects: ClassVar = [(dict(d_model=6, vocab_size=7, seq_len=4), (2, 3, 6), ["seq_len=4", "3 tokens"])]

    def build(self, g, x, net):
        b, t, _ = tokens(x.type, self.d_model, "d_model")
        if t != self.seq_len:
            raise ShapeError(f"seq_len={self.seq_len} but the input has {t} tokens ({x.type.shape_str()})")
        d, v = self.d_model, self.vocab_size
        w = g.param("weight", (d, v), "he", fan_in=d, fan_out=v)
        y = g.op("linear", x, params=[w, g.param("bias", (v,), "zeros")])
        return g.op("reshape", g.op("transpose", y, perm=(0, 2, 1)), dims=(b, v, t, 1))
