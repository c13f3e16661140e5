"""The train step's random masks, drawn on the host each step (lower.Abi.masks, graph.Mask).

- dropout p (the seed's classifier dropout, before the final dense layer): every element kept
  with probability 1 − p, a kept one scaled by 1/(1 − p), so the expectation is the identity.
- drop_path r (stochastic depth, Huang et al.; timm's `drop_path_rate`): site i of n (in graph
  order, i = 0 … n − 1) drops a whole example's residual branch with rate r·i/(n − 1) — the
  linear ramp from 0 at the first site to r at the last — and scales a kept branch by
  1/(1 − rate).  One site alone gets r.

Draws come from (seed, epoch, step in the epoch) only, so a resumed run draws what an
uninterrupted one would.  Eval (@forward, @input_grad) uses all ones: the exact identity.
"""
from __future__ import annotations

import numpy as np

_MASKS = 3         # mixed into the seed: never the stream of the shuffle, augmentation or mixing


def site_rates(masks, cfg) -> list[float]:
    """The drop rate of each mask, in ABI order."""
    sites = [m for m in masks if m.kind == "drop_path"]
    n = len(sites)
    ramp = {id(m): cfg.drop_path * (i / (n - 1) if n > 1 else 1.0) for i, m in enumerate(sites)}
    return [cfg.dropout if m.kind == "dropout" else ramp[id(m)] for m in masks]


def draw(masks, cfg, seed: int, epoch: int, batch: int, rank: int = 0, ranks: int = 1) -> list[np.ndarray]:
    """The masks of step `batch` of epoch `epoch`: 0 or 1/keep, float32.  Data-parallel
    `ranks` > 1: the masks of the whole global batch (ranks × the step's batch, axis 0) are
    drawn as one process would, and rank `rank` gets its slice."""
    if not masks:
        return []
    rng = np.random.default_rng([seed % 2**64, _MASKS, epoch, batch])
    out = []
    for m, rate in zip(masks, site_rates(masks, cfg)):
        dims = m.value.type.dims
        full = (dims[0] * ranks,) + tuple(dims[1:])
        keep = 1.0 - rate
        kept = rng.random(full) < keep
        a = (kept / np.float32(keep)).astype(np.float32) if keep > 0 else np.zeros(full, np.float32)
        out.append(np.ascontiguousarray(a[rank * dims[0]:(rank + 1) * dims[0]]) if ranks > 1 else a)
    return out
