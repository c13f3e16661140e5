"""`lmc sample`: autoregressive text from a trained byte-level language model.

Input: an LM spec (token_position_embed taking ids first, lm_head last: per-position logits
[B, 256, T, 1]) and its parameters.  The spec's @forward is compiled at batch 1; each new
byte is drawn from the logits at the last filled position of a T-byte window holding the
most recent context (left-aligned: positions after it are padding, which a causal net never
lets the earlier positions see).  Output: the prompt and the sampled continuation, decoded
as UTF-8 (invalid sequences replaced)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import LmcError

VOCAB = 256


def check_lm(net) -> int:
    """The context length T of a byte-level LM spec, or a clear error."""
    layers = net.spec.layers
    first, last = layers[0].layer, layers[-1].layer
    if first.kind != "token_position_embed" or not (first.ids_input or first.gather):
        raise LmcError("lmc sample needs a language model whose first layer is token_position_embed with "
                       "ids_input or gather (it feeds token ids)", hint="see specs/tiny_gpt.yaml")
    if last.kind != "lm_head":
        raise LmcError(f"lmc sample needs a language model ending in lm_head, but the last layer is {last.kind}")
    if first.vocab_size != VOCAB or last.vocab_size != VOCAB:
        raise LmcError(f"lmc sample decodes bytes: the vocabulary must be the {VOCAB} byte values (the text "
                       f"dataset's), got vocab_size {first.vocab_size}")
    causal = [l.layer for l in layers if l.layer.kind == "transformer_encoder"]
    if not causal or not all(l.causal_mask for l in causal):
        raise LmcError("lmc sample needs causal transformer_encoder layers (causal_mask: true): with "
                       "bidirectional attention the padding after the context would leak into it")
    return first.seq_len


def pick(logits: np.ndarray, temperature: float, top_k: int, rng: np.random.Generator) -> int:
    """One token from logits [V]: greedy at temperature 0, else softmax(logits/T) over the top k."""
    z = logits.astype(np.float64)
    if temperature <= 0:
        return int(np.argmax(z))
    if 0 < top_k < len(z):
        cut = np.sort(z)[-top_k]
        z = np.where(z >= cut, z, -np.inf)
    z = z / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    return int(rng.choice(len(z), p=p))


def sample(net, init: Path, prompt: str, tokens: int, temperature: float, top_k: int, seed: int,
           backend: str | None = None, chip: str | None = None) -> str:
    from .checkpoint import load_init
    from .compile import compile_module, resolve_backend
    from .lower import lower
    from .runtime import Module
    t = check_lm(net)
    if net.batch != 1:
        raise LmcError(f"lmc bug: sample compiles @forward at batch 1, got {net.batch}")
    if tokens < 0:
        raise LmcError(f"--tokens must be at least 0, got {tokens}")
    got = load_init(Path(init), net)
    b = resolve_backend(backend)
    mod = Module(compile_module(lower(net, "forward", backend=b), None, b, chip).path, b)
    P = [mod.upload(a) for a in got.params]
    S = [mod.upload(a) for a in (got.state or [])]
    ctx = list(prompt.encode("utf-8")) or [ord("\n")]
    rng = np.random.default_rng(seed)
    out = list(ctx)
    for _ in range(tokens):
        window = out[-t:]
        x = np.zeros((1, t), np.float32)
        x[0, :len(window)] = window
        logits = np.asarray(mod.forward(*P, *S, x))          # [1, V, T, 1]
        out.append(pick(logits[0, :, len(window) - 1, 0], temperature, top_k, rng))
    return bytes(out).decode("utf-8", errors="replace")
