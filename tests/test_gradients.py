"""Per-primitive oracle [iree]: every registered primitive × its `examples`, compiled alone
(`prim_test_module`, llvm-cpu).

- forward: the compiled f32 @forward against the float64 NumPy `reference`;
- one dot-product check per gradient output (`dx`, `dw`, `dgamma`, ...), each its own test so a
  failure names the gradient: with a random cotangent c and a random tangent t of that one
  argument, Σ vjp(c)[k]·t ≈ Σ c·(ref(a+εt) − ref(a−εt))/2ε, the difference quotient taken on
  the float64 reference (an independent derivative of the same formula);
- for primitives with batch statistics (batch norm), the statistics fwd returns against
  `stats_reference`, and the eval function (running state) against `eval_reference`.

Arguments come from each primitive's `draw` hook, which keeps inputs away from its kinks (act)
and ties (max_pool); otherwise the two sides may legitimately pick different sub-gradients.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from lmc.prims import all_prims, make_prim
from lmc.core.types import TensorType

pytestmark = pytest.mark.iree

# Per-primitive tolerances ("default" unless a primitive needs its own).
# Forward: |y − ref| ≤ FWD_RTOL·(|ref| + max|ref|) elementwise.  Observed worst (IREE 3.13,
# llvm-cpu): 1.8e-7 (batch_norm); others ≤ 1e-7.
FWD_RTOL = {"default": 1e-5}
# VJP: |Σ vjp·t − FD| ≤ VJP_RTOL·(Σ|vjp·t| + |FD|): the f32 rounding of a sum of products
# scales with the sum of their magnitudes.  Observed worst 6.4e-7 (batch_norm dx at N = 2,
# where the three terms of dx cancel); a wrong gradient (a dropped term, a missing transpose)
# is off by O(1).
VJP_RTOL = {"default": 1e-5}
FD_EPS = 1e-6            # central difference step in float64: truncation ~ε², rounding ~1e-16/ε


def _fmt(v) -> str:
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(_fmt(x) for x in v) + ")"
    return str(v)


def _dims(t: TensorType) -> str:
    return "x".join(str(d) for d in t.dims)


def _cases():
    out = []
    for name, cls in sorted(all_prims().items()):
        if not cls.lowered():          # declared only (no template yet): nothing to compile
            continue
        for attrs, ins, ps in cls.examples:
            parts = [f"{k}={_fmt(v)}" for k, v in attrs.items()]
            parts += [f"{n}={_dims(t)}" for n, t in zip(cls.inputs, ins)]
            out.append(pytest.param(name, attrs, ins, ps, id=f"{name}[{','.join(parts)}]"))
    return out


CASES = _cases()


def _vjp_cases():
    out = []
    for case in CASES:
        name, attrs, ins, ps = case.values
        cls = all_prims()[name]
        # one check per argument the case has: a variadic primitive (concat) names more inputs
        # than a case uses, and a parameter used as a value (broadcast) takes an input's name
        names = (list(cls.inputs) + list(cls.params))[:len(ins) + len(ps)]
        for k, arg in enumerate(names):
            out.append(pytest.param(name, attrs, ins, ps, k, id=f"{case.id}-d{arg}"))
    return out


@functools.lru_cache(maxsize=None)
def _module(text: str):
    """Compile (disk-cached by text) and load once per process."""
    from lmc.compile import compile_module
    from lmc.run.runtime import Module
    # local-sync: no worker threads to fight over the cores with the other test process
    return Module(compile_module(text).path, driver="local-sync")


def _setup(name, attrs, ins, ps, seed=0):
    from lmc.lower.lowering import prim_test_module
    prim = make_prim(name, **attrs)
    mod = _module(prim_test_module(prim, ins, ps))
    rng = np.random.default_rng(seed)
    args = [prim.draw(rng, t, is_input=k < len(ins)) for k, t in enumerate(list(ins) + list(ps))]
    return prim, mod, args, rng


def _ref(prim, args):
    return prim.reference(np, *[np.asarray(a, np.float64) for a in args], **prim.attrs)


def _tol(table, name):
    return table.get(name, table["default"])


@pytest.mark.parametrize("name,attrs,ins,ps", CASES)
def test_forward(name, attrs, ins, ps):
    prim, mod, args, _ = _setup(name, attrs, ins, ps)
    y = np.asarray(mod.forward(*args)).astype(np.float64)
    ref = _ref(prim, args)
    assert y.shape == ref.shape
    err = np.abs(y - ref)
    bound = _tol(FWD_RTOL, name) * (np.abs(ref) + np.abs(ref).max())
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (f"{name} forward: |y − ref| = {err[worst]:.3g} at {worst} "
                                  f"(y = {y[worst]:.7g}, ref = {ref[worst]:.7g}), bound {bound[worst]:.3g}")


@pytest.mark.parametrize("name,attrs,ins,ps,k", _vjp_cases())
def test_vjp(name, attrs, ins, ps, k):
    prim, mod, args, rng = _setup(name, attrs, ins, ps)
    arg = (list(prim.inputs) + list(prim.params))[k]
    y_type = prim.infer(list(ins), list(ps))[0]
    c = rng.standard_normal(y_type.dims).astype(np.float32)
    grads = mod.vjp(c, *args)
    grads = [grads] if not isinstance(grads, (tuple, list)) else list(grads)
    assert len(grads) == len(args)
    g = np.asarray(grads[k]).astype(np.float64)
    assert g.shape == args[k].shape, f"d{arg}: shape {g.shape}, expected {args[k].shape}"
    t = rng.standard_normal(args[k].shape)
    lhs = float(np.sum(g * t))
    a64 = [np.asarray(a, np.float64) for a in args]
    plus, minus = list(a64), list(a64)
    plus[k] = a64[k] + FD_EPS * t
    minus[k] = a64[k] - FD_EPS * t
    fd = (prim.reference(np, *plus, **prim.attrs) - prim.reference(np, *minus, **prim.attrs)) / (2 * FD_EPS)
    rhs = float(np.sum(c.astype(np.float64) * fd))
    scale = float(np.sum(np.abs(g * t))) + abs(rhs)
    tol = _tol(VJP_RTOL, name) * scale + 1e-9
    assert abs(lhs - rhs) <= tol, (f"{name}: d{arg} is wrong: Σ vjp(c).d{arg}·t = {lhs:.9g} but the central "
                                   f"difference of the reference gives {rhs:.9g} (|diff| {abs(lhs - rhs):.3g} > tol {tol:.3g})")


def _assert_close(what, y, ref, name):
    y = np.asarray(y).astype(np.float64)
    assert y.shape == ref.shape, f"{what}: shape {y.shape}, expected {ref.shape}"
    err = np.abs(y - ref)
    assert np.all(err <= _tol(FWD_RTOL, name) * (np.abs(ref) + np.abs(ref).max())), \
        f"{what}: max |y − ref| = {err.max():.3g}"


def _out_type(name, attrs, ins, ps):
    return make_prim(name, **attrs).infer(list(ins), list(ps))[0]


STATS_CASES = [c for c in CASES if make_prim(c.values[0], **c.values[1]).stats(c.values[2], c.values[3],
                                                                               _out_type(*c.values))]
EVAL_CASES = [c for c in CASES if all_prims()[c.values[0]].has_eval]


@pytest.mark.parametrize("name,attrs,ins,ps", STATS_CASES)
def test_stats(name, attrs, ins, ps):
    """The batch statistics fwd returns (folded into the running state) vs stats_reference."""
    prim, mod, args, _ = _setup(name, attrs, ins, ps)
    got = mod.stats(*args)
    got = [got] if not isinstance(got, (tuple, list)) else list(got)
    want = prim.stats_reference(np, *[np.asarray(a, np.float64) for a in args], **prim.attrs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        _assert_close(f"{name} stat {k}", g, w, name)


@pytest.mark.parametrize("name,attrs,ins,ps", EVAL_CASES)
def test_eval(name, attrs, ins, ps):
    """The eval function with random running state vs eval_reference."""
    prim, mod, args, rng = _setup(name, attrs, ins, ps)
    state = prim.draw_state(rng, prim.state(list(ins), list(ps), _out_type(name, attrs, ins, ps)))
    y = mod.eval(*args, *state)
    ref = prim.eval_reference(np, *[np.asarray(a, np.float64) for a in args + state], **prim.attrs)
    _assert_close(f"{name} eval", y, ref, name)
