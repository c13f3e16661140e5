"""A UTF-8 text file as a language-modelling dataset, byte- or character-level.

`vocab: byte` (the default): the text is encoded as bytes, the vocabulary is the 256 byte
values, so nothing needs saving with the run and any text round-trips.  `vocab: char`: the
vocabulary is the corpus's distinct characters (Unicode code points) in code-point order, id i
the i-th of them, as nanoGPT's shakespeare_char; the spec's vocab_size must hold them all (ids
past them are never targets), and the trainer saves the characters with the run (checkpoint
metadata and RUN_DIR/vocab.json), where `lmc sample` reads them back.

Either way the ids are cut into windows of seq_len + 1 tokens, one every seq_len tokens
(consecutive windows share one token, so every token but the first is a target once):
x = window[:-1] [N, seq_len] (token ids held in f32, the model's input), y = window[1:]
[N, seq_len, 1] int32 (the next token at each position: per-pixel labels of the lm_head's
[B, V, seq_len, 1] logits, the per-pixel cross-entropy).  The last 10% of the windows (a
contiguous tail, so no validation text is also seen in training) are held out.

The embedded default corpus (`dataset: text` with no path) is the source of a fixed list of
Python standard-library modules (`CORPUS_MODULES`, read from the running interpreter's own
installation): 1.39 MB (Python 3.11.7) of English prose in docstrings and Python code, byte
unigram entropy 3.10 nats; 101 distinct characters (3.10 nats as characters); no download."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from lmc.data.dataset import Dataset
from lmc.core.errors import DataError

VOCAB = 256
# the vocabularies (`dataset: {kind: text, vocab: ...}`): the 256 byte values, or the corpus's characters
VOCABS = ("byte", "char")
VAL_FRACTION = 0.1
# stdlib modules with much prose in their docstrings; their concatenated source is the corpus
CORPUS_MODULES = ("argparse", "textwrap", "difflib", "inspect", "pydoc", "typing", "dataclasses",
                  "functools", "collections", "unittest.case", "logging", "email.message", "http.client",
                  "zipfile", "tarfile", "calendar", "string", "shutil", "subprocess", "threading")


def corpus_files() -> list[Path]:
    out = []
    for name in CORPUS_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            raise DataError(f"the embedded text corpus needs the standard-library module {name}, "
                            f"which this Python does not ship as source")
        out.append(Path(spec.origin))
    return out


def corpus_bytes(path: Path | None, hint: str | None = None) -> tuple[bytes, str]:
    """(the text's bytes, where they were read) of the file at `path`, or of the embedded corpus
    (None); `hint`: what to do when the file is missing."""
    if path is None:
        files = corpus_files()
        return b"\n".join(f.read_bytes() for f in files), f"embedded corpus ({len(files)} stdlib modules)"
    if not path.is_file():
        raise DataError(f"no such file: {path}, expected a UTF-8 text file", hint=hint)
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e})") from None
    return data, str(path)


def char_vocab(text: str) -> str:
    """The distinct characters of `text` in code-point order: id i is the i-th."""
    return "".join(sorted(set(text)))


def encode(data: bytes, vocab: str | None) -> np.ndarray:
    """Token ids of UTF-8 `data`: its bytes (vocab None), or each character's index in `vocab`
    (a character the vocabulary lacks is refused)."""
    if vocab is None:
        return np.frombuffer(data, np.uint8).astype(np.int64)
    points = np.frombuffer(data.decode("utf-8").encode("utf-32-le"), np.uint32)
    table = np.frombuffer(vocab.encode("utf-32-le"), np.uint32)
    ids = np.searchsorted(table, points)
    bad = (ids >= len(table)) | (table[np.minimum(ids, len(table) - 1)] != points)
    if bad.any():
        missing = sorted({chr(c) for c in points[bad]})
        raise DataError(f"text has {len(missing)} character(s) outside the vocabulary: "
                        f"{', '.join(map(repr, missing[:10]))}")
    return ids.astype(np.int64)


def decode(ids, vocab: str | None) -> str:
    """Text of token ids: bytes decoded as UTF-8 (invalid sequences replaced), or characters."""
    if vocab is None:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")
    return "".join(vocab[int(i)] for i in ids)


def windows(ids: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(x [N, seq_len] f32 ids, y [N, seq_len, 1] int32 next ids), one window every seq_len tokens."""
    n = (len(ids) - 1) // seq_len
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    w = ids[idx]
    return w[:, :-1].astype(np.float32), w[:, 1:, None].astype(np.int32)


def unigram_entropy(ids: np.ndarray) -> float:
    """The token unigram entropy in nats (the loss of the best position-blind model)."""
    counts = np.bincount(ids).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def load(path: Path | None, input_shape: tuple[int, ...], vocab: str = "byte",
         vocab_size: int | None = None, hint: str | None = None) -> Dataset:
    """`vocab`: byte or char; `vocab_size`: the head's, which a char vocabulary must fit in;
    `hint`: what to do when the file is missing."""
    if len(input_shape) != 1:
        raise DataError(f"a text dataset yields token ids [seq_len], but the spec's input is {input_shape}",
                        hint="give the spec `input: {features: SEQ_LEN}` and a token_position_embed "
                             "layer with ids_input or gather")
    (t,) = input_shape
    data, source = corpus_bytes(path, hint)
    chars = char_vocab(data.decode("utf-8")) if vocab == "char" else None
    if chars is not None and vocab_size is not None and len(chars) > vocab_size:
        raise DataError(f"{source}: {len(chars)} distinct characters, but the net's vocab_size is {vocab_size}",
                        hint=f"set vocab_size (token_position_embed and lm_head) to at least {len(chars)}")
    x, y = windows(encode(data, chars), t)
    n_val = max(1, int(len(x) * VAL_FRACTION))
    if len(x) - n_val < 1:
        raise DataError(f"{source}: {len(data)} bytes make only {len(x)} windows of {t + 1} tokens; "
                        f"too few to hold out a validation set", hint="use a longer text or a shorter seq_len")
    return Dataset("text", x[:-n_val], y[:-n_val], x[-n_val:], y[-n_val:],
                   num_classes=VOCAB if chars is None else len(chars),
                   sources={a: source for a in ("x_train", "y_train", "x_val", "y_val")}, vocab=chars)
