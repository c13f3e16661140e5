"""Every registered optimizer's template, one tensor at a time, against its float64 reference
[iree]: a matrix (16×16, and 24×16 where the optimizer acts on 2-D weights: both Gram sides of
Muon) and a vector, with and without weight decay, from fresh slots and from random slots; and
the zero gradient from fresh slots, which must give finite state and, for every optimizer, the
reference's step (Shampoo: exactly no step — its guard for tr(GGᵀ) = 0).  Cases come from the
registry: a new optimizer is tested with no edit here."""
from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("iree.runtime")

from lmc.graph.ir import Param  # noqa: E402
from lmc.lower.lowering import optim_test_module  # noqa: E402
from lmc.optim import all_optimizers  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402
from lmc.core.types import TensorType  # noqa: E402

pytestmark = pytest.mark.iree
SHAPES = [(16, 16), (24, 16), (16,)]


@functools.lru_cache(maxsize=None)
def _module(text: str):
    from lmc.compile import compile_module
    from lmc.run.runtime import Module
    return Module(compile_module(text).path, driver="local-sync")


def _cfg(fields: dict):
    f = {"batch_size": 2, "epochs": 1, **fields}
    text = "name: o\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 2}\ntrain: {" + \
        ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in f.items()) + "}\n"
    return load_spec("o.yaml", text=text).train


def _cases():
    out = []
    for name, cls in sorted(all_optimizers().items()):
        shapes = [s for s in SHAPES if cls.fallback is None or (len(s) == 2 and (s[0] == s[1] or name != "shampoo"))]
        for dims in shapes:
            for decay in (False, True):
                out.append(pytest.param(name, dims, decay, id=f"{name}-{'x'.join(map(str, dims))}-{'wd' if decay else 'nowd'}"))
    return out


@pytest.mark.parametrize("name,dims,decay", _cases())
def test_update_matches_reference(name, dims, decay):
    cls = all_optimizers()[name]
    fields = dict(cls.examples[0][0], weight_decay=0.05)
    o = cls(_cfg(fields))
    p = Param("w", TensorType(dims), "he")
    mod = _module(optim_test_module(o, p, decay))
    rng = np.random.default_rng(0)
    hp = {"t": 3.0, **o.hp_values(o.cfg)}
    hpv = [F32(fields["learning_rate"]), F32(0.05)] + [F32(hp[h]) for h in o.hp]
    w = rng.standard_normal(dims).astype(np.float32)
    for what, g, slots in (
            ("fresh", rng.standard_normal(dims).astype(np.float32), {s: np.full(dims, o.slot_init(s), np.float32)
                                                                     for s in o.slots}),
            ("zero gradient", np.zeros(dims, np.float32), {s: np.full(dims, o.slot_init(s), np.float32)
                                                           for s in o.slots}),
            ("warm", rng.standard_normal(dims).astype(np.float32), _warm(o, dims, rng))):
        out = [np.asarray(r).copy() for r in _call(mod, w, g, slots, o, hpv)]
        assert all(np.isfinite(a).all() for a in out), f"{what}: non-finite result"
        want_w, want_s = cls.reference(np, w.astype(np.float64), g.astype(np.float64),
                                       {s: v.astype(np.float64) for s, v in slots.items()}, hpv[0], hpv[1], decay,
                                       **{h: hpv[2 + i] for i, h in enumerate(o.hp)})
        step = np.abs(want_w - w).max()
        tol = 1e-4 * cls.oracle_tolerance * step + 2e-7 * np.abs(w).max()
        assert np.abs(out[0] - want_w).max() <= tol, f"{what}: w' off by {np.abs(out[0] - want_w).max():.3g} (step {step:.3g})"
        for s, got in zip(o.slots, out[1:]):
            scale = np.abs(want_s[s]).max()
            assert np.abs(got - want_s[s]).max() <= 1e-4 * scale + 1e-30, f"{what}: slot {s}"
        if what == "zero gradient" and not decay and all(o.slot_init(s) == 0 for s in o.slots):
            assert np.array_equal(out[0], w), f"{what}: a zero gradient from zero state moved the weights"


def F32(v) -> float:
    return float(np.float32(v))


def _warm(o, dims, rng):
    """Slots as after some steps: second moments and Gram accumulators positive (semi)definite."""
    out = {}
    for s in o.slots:
        if s in ("v",):
            out[s] = rng.uniform(0.1, 1.0, dims).astype(np.float32)
        elif s in ("L", "R"):
            a = rng.standard_normal((dims[0], dims[0]))
            out[s] = (a @ a.T / dims[0]).astype(np.float32)
        else:
            out[s] = rng.standard_normal(dims).astype(np.float32)
    return out


def _call(mod, w, g, slots, o, hpv):
    res = mod.step(w, g, *[slots[s] for s in o.slots], *[np.asarray(h, np.float32) for h in hpv])
    return res if isinstance(res, (list, tuple)) else [res]
