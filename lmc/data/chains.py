"""A small synthetic structure task (embedded, drawn from a fixed seed: the data never changes):
recover the 3-D coordinates of a random chain from noisy measurements of its pairwise distances —
distance geometry, the problem an AlphaFold-style trunk solves from its pair features.

Each example is a chain of RESIDUES points with unit bond length, a persistent random walk: the
next bond direction is normalise(d + 0.9·n) for the previous direction d and n ~ N(0, I₃)
(neighbouring bonds turn by 50° on average; chains are neither straight nor balled up).
Its coordinates are put in the canonical frame the distances determine: residue 0 at the origin,
residue 1 on +x, residue 2 in the xy-plane with y > 0, and the chain reflected so that residue 3
has z ≥ 0 — rotations, translations and mirror images leave the distances unchanged, this frame
removes them, so the coordinates are a function of the distance matrix.

x [N, MEASUREMENTS, RESIDUES, RESIDUES] float32: MEASUREMENTS independent noisy copies of the
distance matrix, d_ij + N(0, NOISE²), divided by SCALE (an MSA-like stack: row s is measurement s,
column i residue i, channel j its measured distance to residue j); y [N, RESIDUES·3] float32: the
canonical coordinates (x, y, z per residue, in bond lengths).  Score: the RMSD over residues of
the predicted coordinates, √(3·MSE) in bond lengths (the MSE of the eval record is per coordinate)."""
from __future__ import annotations

import numpy as np

from lmc.data.dataset import Dataset
from lmc.losses import FLOAT

RESIDUES = 16
MEASUREMENTS = 4
NOISE = 0.1               # std of each measured distance, bond lengths
SCALE = 4.0               # distances enter the net divided by this
TURN = 0.9
N_TRAIN, N_VAL = 4000, 500
SEED = 7305


def chains(n: int, rng: np.random.Generator, residues: int = RESIDUES) -> np.ndarray:
    """n random chains [n, residues, 3] in the canonical frame (module docstring)."""
    d = rng.standard_normal((n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    pts = [np.zeros((n, 3)), d.copy()]
    for _ in range(residues - 2):
        d = d + TURN * rng.standard_normal((n, 3))
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        pts.append(pts[-1] + d)
    return canonical(np.stack(pts, 1))


def canonical(p: np.ndarray) -> np.ndarray:
    """Chains [n, R, 3] moved to the frame of residues 0-3 (origin, +x, xy-plane, z ≥ 0)."""
    p = p - p[:, :1]
    ex = p[:, 1] / np.linalg.norm(p[:, 1], axis=1, keepdims=True)
    v = p[:, 2] - (p[:, 2] * ex).sum(1, keepdims=True) * ex
    ey = v / np.linalg.norm(v, axis=1, keepdims=True)
    ez = np.cross(ex, ey)
    q = np.einsum("nrc,nkc->nrk", p, np.stack([ex, ey, ez], 1))
    q[:, :, 2] *= np.where(q[:, 3:4, 2] < 0, -1.0, 1.0)
    return q


def distances(p: np.ndarray) -> np.ndarray:
    return np.linalg.norm(p[:, :, None] - p[:, None], axis=-1)


def load() -> Dataset:
    rng = np.random.default_rng(SEED)

    def make(n):
        p = chains(n, rng)
        dist = distances(p)[:, None]
        x = (dist + NOISE * rng.standard_normal((n, MEASUREMENTS, RESIDUES, RESIDUES))) / SCALE
        return x.astype(np.float32), p.reshape(n, -1).astype(np.float32)

    xt, yt = make(N_TRAIN)
    xv, yv = make(N_VAL)
    src = "lmc.data.chains (embedded random chains: noisy distances → coordinates)"
    return Dataset("chain_structure", xt, yt, xv, yv, num_classes=1, label_format=FLOAT,
                   sources={a: src for a in ("x_train", "y_train", "x_val", "y_val")})
