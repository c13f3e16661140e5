"""The layer registry: every YAML layer kind is a frozen dataclass (fields = YAML keys, in the
seed's argument order) registered under its snake_case kind.

A layer either *builds* (lowers) — `build(g, x, net)` expands it into primitives on the graph,
which is also its shape rule — or is spec-only for now and gives `infer(x, net)` (output type,
parameter tensors, FLOPs), so `lmc info` counts it and `lmc render` refuses it clearly.

Modules in this package are discovered automatically: adding a layer is one new file."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import NotImplementedKind
from ..graph import Param, State
from ..types import TensorType

LAYERS: dict[str, type] = {}


def register(kind: str):
    def deco(cls):
        if kind in LAYERS:
            raise RuntimeError(f"layer kind {kind!r} registered twice")
        cls.kind = kind
        LAYERS[kind] = cls
        return cls
    return deco


@dataclass(frozen=True)
class Inferred:
    """What a spec-only layer's shape rule returns."""
    out: TensorType
    params: list[Param] = field(default_factory=list)
    flops: int = 0
    state: list[State] = field(default_factory=list)


class Layer:
    """Base of every layer kind.  Subclasses are frozen dataclasses."""
    kind: ClassVar[str]
    # (fields, input type without... i.e. the full [B, ...] input type) for tests and docs
    examples: ClassVar[list] = []
    # int fields for which 0 is a legal value
    zero_ok: ClassVar[frozenset] = frozenset()

    @property
    def lowered(self) -> bool:
        return type(self).build is not Layer.build

    def build(self, g, x, net):
        """Expand into primitives on graph `g`; return the output Value."""
        raise NotImplementedKind(f"not implemented yet: {self.kind} (it is counted by `lmc info` "
                                 f"but cannot be lowered to StableHLO yet)")

    def infer(self, x: TensorType, net) -> Inferred:
        raise NotImplementedError(f"lmc bug: layer {self.kind} has neither build nor infer")

    def describe(self) -> str:
        vals = [f"{f.name}={_fmt(getattr(self, f.name))}" for f in dataclasses.fields(self)]
        return f"{self.kind}(" + ", ".join(vals) + ")"


def _fmt(v):
    return str(v.value) if hasattr(v, "value") else str(v)


_loaded = False


def all_layers() -> dict[str, type]:
    global _loaded
    if not _loaded:
        _loaded = True
        for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if not m.name.startswith("_"):
                importlib.import_module(f"{__name__}.{m.name}")
    return dict(LAYERS)
