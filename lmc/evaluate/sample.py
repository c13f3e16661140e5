"""`lmc sample`: autoregressive text from a trained language model, byte- or character-level.

Input: an LM spec (token_position_embed taking ids first, lm_head last: per-position logits
[B, V, T, 1]) and its parameters.  The vocabulary is the one the run trained on: the
characters an lmc checkpoint's metadata carries (a `vocab: char` text run), else the 256
byte values.  The spec's @forward is compiled at batch 1; each new token is drawn from the
logits at the last filled position of a T-token window holding the most recent context
(left-aligned: positions after it are padding, which a causal net never lets the earlier
positions see).  Output: the prompt and the sampled continuation, decoded as text (bytes as
UTF-8 with invalid sequences replaced)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmc.data import text as textdata
from lmc.core.errors import EvalError, LmcError
from lmc.compile import compile_module, resolve_backend
from lmc.lower.lowering import lower
from lmc.lower.options import LowerOptions
from lmc.run.checkpoint import load_init, read_tensors
from lmc.run.runtime import Module


def check_lm(net, vocab: str | None = None) -> int:
    """The context length T of a language-model spec whose vocabulary is `vocab` (characters;
    None: the 256 bytes), or a clear error."""
    layers = net.spec.layers
    first, last = layers[0].layer, layers[-1].layer
    if first.kind != "token_position_embed" or not (first.ids_input or first.gather):
        raise EvalError("lmc sample needs a language model whose first layer is token_position_embed with "
                       "ids_input or gather (it feeds token ids)", hint="see specs/tiny_gpt.yaml")
    if last.kind != "lm_head":
        raise EvalError(f"lmc sample needs a language model ending in lm_head, but the last layer is {last.kind}")
    if vocab is None and (first.vocab_size != textdata.VOCAB or last.vocab_size != textdata.VOCAB):
        raise EvalError(f"lmc sample decodes bytes here: the vocabulary must be the {textdata.VOCAB} byte values "
                       f"(a `vocab: byte` text dataset's), got vocab_size {first.vocab_size}",
                       hint="a `vocab: char` run's checkpoint carries its characters: pass it to --init")
    if vocab is not None and min(first.vocab_size, last.vocab_size) < len(vocab):
        raise EvalError(f"the checkpoint's vocabulary has {len(vocab)} characters, more than the spec's "
                       f"vocab_size {min(first.vocab_size, last.vocab_size)}")
    causal = [l.layer for l in layers if l.layer.kind == "transformer_encoder"]
    if not causal or not all(l.causal_mask for l in causal):
        raise EvalError("lmc sample needs causal transformer_encoder layers (causal_mask: true): with "
                       "bidirectional attention the padding after the context would leak into it")
    return first.seq_len


def run_vocab(net, init: Path) -> str | None:
    """The characters the run behind `init` trained on (None: bytes).  A `vocab: char` spec
    needs them from an lmc checkpoint: they are not recomputed from a corpus that may have
    changed since."""
    meta = read_tensors(Path(init))[1] if Path(init).suffix != ".bin" else None
    vocab = (meta or {}).get("vocab")
    if vocab is None and net.spec.dataset_vocab == "char":
        raise EvalError(f"{init} carries no character vocabulary, and the spec's text dataset is `vocab: char`",
                       hint="pass the run's lmc checkpoint (RUN_DIR/last.npz), which saves the characters")
    return vocab


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
           backend: str | None = None, chip: str | None = None, options: LowerOptions = LowerOptions()) -> str:
    vocab = run_vocab(net, init)
    t = check_lm(net, vocab)
    if net.batch != 1:
        raise EvalError(f"lmc bug: sample compiles @forward at batch 1, got {net.batch}")
    if tokens < 0:
        raise EvalError(f"--tokens must be at least 0, got {tokens}")
    try:
        ctx = [int(i) for i in textdata.encode((prompt or "\n").encode("utf-8"), vocab)]
    except LmcError as e:
        raise EvalError(f"--prompt: {e.message}", hint="the model knows only the characters of its corpus") from None
    got = load_init(Path(init), net)
    b = resolve_backend(backend)
    mod = Module(compile_module(lower(net, "forward", backend=b, options=options), None, b, chip, options=options).path, b)
    P = [mod.upload(a) for a in got.params]
    S = [mod.upload(a) for a in (got.state or [])]
    n = textdata.VOCAB if vocab is None else len(vocab)    # ids past a char vocabulary are never targets
    rng = np.random.default_rng(seed)
    out = list(ctx)
    for _ in range(tokens):
        window = out[-t:]
        x = np.zeros((1, t), np.float32)
        x[0, :len(window)] = window
        logits = np.asarray(mod.forward(*P, *S, x)).copy()    # [1, V, T, 1], off the device buffer
        out.append(pick(logits[0, :n, len(window) - 1, 0], temperature, top_k, rng))
    return textdata.decode(out, vocab)
