"""Primitive ops: the building blocks every layer expands into.  Each primitive has a shape
rule (`infer`), a float64 reference written against an array namespace `xp` (NumPy for the
finite-difference oracle, jax.numpy for the autodiff oracle — the same formula, so the
tests compare our hand-derived backward templates with an independent derivative), and a
template `templates/prims/<name>.mlir.j2` holding `fwd`, `bwd` and optionally `eval`.

Template contract (Python owns it; the template only spells it):
    fwd(inputs..., params...)          -> (y, saved..., stats...)
    bwd(dy, saved..., params...)       -> (d_inputs..., d_params...)
    eval(inputs..., params..., state...) -> y          (only where eval differs: batch norm)
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import ClassVar

from ..types import TensorType

PRIMS: dict[str, type] = {}


def primitive(name: str):
    def deco(cls):
        if name in PRIMS:
            raise RuntimeError(f"primitive {name!r} registered twice")
        cls.name = name
        PRIMS[name] = cls
        return cls
    return deco


class Prim:
    name: ClassVar[str]
    n_inputs: ClassVar[int] = 1
    n_stats: ClassVar[int] = 0          # extra fwd outputs folded into state (BN batch mean/var)
    has_eval: ClassVar[bool] = False
    # (attrs, input types, param types) triples used by the per-primitive oracle tests
    examples: ClassVar[list] = []

    def __init__(self, **attrs):
        self.attrs = attrs
        for k, v in attrs.items():
            setattr(self, k, v)

    def infer(self, ins: list[TensorType], ps: list[TensorType]) -> tuple[TensorType, int]:
        raise NotImplementedError

    def saved(self, ins, ps, out) -> list[TensorType]:
        """Types of what fwd saves for bwd (after y)."""
        return list(ins)

    def context(self, ins, ps, out) -> dict:
        """Extra template variables (numbers computed here, never in the template)."""
        return {}

    @staticmethod
    def reference(xp, *args, **attrs):
        raise NotImplementedError

    def key(self) -> str:
        return self.name + repr(sorted(self.attrs.items()))


def make_prim(name: str, **attrs) -> Prim:
    _load()
    if name not in PRIMS:
        raise RuntimeError(f"lmc bug: unknown primitive {name!r}")
    return PRIMS[name](**attrs)


_loaded = False


def _load():
    global _loaded
    if not _loaded:
        _loaded = True
        for m in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{m.name}")


def all_prims() -> dict[str, type]:
    _load()
    return dict(PRIMS)


def same_pad(size: int, k: int, s: int) -> tuple[int, int]:
    """XLA SAME: out = ceil(in/s), the extra row/col on the high side."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def conv_out(size: int, k: int, s: int, lo: int, hi: int) -> int:
    return (size + lo + hi - k) // s + 1
