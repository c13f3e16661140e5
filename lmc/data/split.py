"""Fixed train/validation splits that never change between runs, numpy versions or seeds.

The permutation is the reference's Fisher-Yates with a 64-bit LCG (training.md §2), written
out here so a held-out set is defined by this file alone, not by a library's RNG stream.
"""
from __future__ import annotations

import numpy as np

_MASK = (1 << 64) - 1


def lcg_permutation(n: int, seed: int) -> np.ndarray:
    """Permutation of range(n): rng0 = seed ^ 0x5DEECE66D; for i = n-1..1:
    rng = rng*6364136223846793005 + 1442695040888963407 (mod 2^64), j = (rng >> 16) % (i+1), swap."""
    perm = list(range(n))
    rng = (seed ^ 0x5DEECE66D) & _MASK
    for i in range(n - 1, 0, -1):
        rng = (rng * 6364136223846793005 + 1442695040888963407) & _MASK
        j = (rng >> 16) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return np.asarray(perm, dtype=np.int64)


def holdout(n: int, n_val: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, val): n_val examples chosen by lcg_permutation(n, seed), the rest train.
    Both index lists are sorted, so each split keeps the file's order (shuffle=False sees it)."""
    perm = lcg_permutation(n, seed)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])
