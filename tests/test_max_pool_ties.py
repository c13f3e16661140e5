"""max_pool backward with tied window maxima [iree]: the gradient goes to the first maximal
position of each window in row-major order, in both template forms (tiled 2×2/2 and the
general overlapping/padded one).  The oracle tests draw tie-free inputs, so this is where the
tie rule is pinned down (after a ReLU, all-zero windows are common)."""
from __future__ import annotations

import numpy as np
import pytest

from lmc.prims import same_pad
from lmc.prims.pool import MaxPool
from lmc.core.types import TensorType

pytest.importorskip("iree.runtime")


def first_max_vjp(x, dy, k, s):
    b, c, h, w = x.shape
    ph, pw = same_pad(h, k, s), same_pad(w, k, s)
    xp = np.pad(x, ((0, 0), (0, 0), ph, pw), constant_values=-np.inf)
    dxp = np.zeros_like(xp)
    for bi, ci, a, e in np.ndindex(dy.shape):
        q = int(np.argmax(xp[bi, ci, a * s:a * s + k, e * s:e * s + k]))    # first maximum, row-major
        dxp[bi, ci, a * s + q // k, e * s + q % k] += dy[bi, ci, a, e]
    return dxp[:, :, ph[0]:ph[0] + h, pw[0]:pw[0] + w]


@pytest.mark.parametrize("k,s,shape", [(2, 2, (2, 3, 8, 8)), (2, 2, (2, 2, 5, 5)), (3, 2, (2, 2, 7, 7)),
                                       (3, 2, (1, 2, 8, 8)), (3, 1, (1, 2, 4, 5)), (5, 2, (1, 2, 9, 9))])
def test_ties_go_to_the_first_maximum(k, s, shape):
    from lmc.compile import compile_module
    from lmc.lower.lowering import prim_test_module
    from lmc.run.runtime import Module
    rng = np.random.default_rng(0)
    x = np.maximum(rng.integers(-3, 3, shape), 0).astype(np.float32)     # mostly zeros: many ties
    prim = MaxPool(size=k, stride=s)
    out, _ = prim.infer([TensorType(shape)], [])
    dy = rng.standard_normal(out.dims).astype(np.float32)
    m = Module(compile_module(prim_test_module(prim, [TensorType(shape)], [])).path)
    np.testing.assert_array_equal(np.asarray(m.forward(x)), MaxPool.reference(np, x, k, s))
    np.testing.assert_allclose(np.asarray(m.vjp(dy, x)), first_max_vjp(x, dy, k, s), atol=1e-6)
