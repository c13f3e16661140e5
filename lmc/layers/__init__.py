"""The layer registry: every YAML layer kind is a frozen dataclass (fields = YAML keys, in the
seed's argument order) registered under its snake_case kind.

A layer *builds*: `build(g, x, net)` expands it into primitives on the graph, which is also
its shape rule.  It lowers when all those primitives have templates; one built from declared
primitives (no template yet) is counted by `lmc info` and refused by `lmc render`.

Modules in this package are discovered automatically: adding a layer is one new file."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from lmc.core.errors import NotImplementedKind, ShapeError
from lmc.core.registry import discover, registrar

LAYERS: dict[str, type] = {}


class _Auto:
    """The value of an input-size field left out or written `auto`: shape inference fills it
    from the incoming tensor (Layer.filled) before the layer builds."""

    def __repr__(self) -> str:
        return "auto"

    __str__ = __repr__


AUTO = _Auto()


register = registrar(LAYERS, "layer kind", attr="kind")


class Layer:
    """Base of every layer kind.  Subclasses are frozen dataclasses."""
    kind: ClassVar[str]
    # (fields, input type without... i.e. the full [B, ...] input type) for tests and docs
    examples: ClassVar[list] = []
    # inputs it must refuse, for the registry tests: [(fields, input dims, [texts the message
    # holds])] — each a ShapeError located at the layer; [] for a kind that takes any shape.
    # None (undeclared) fails the tests: every kind says how it refuses a misfit.
    rejects: ClassVar[list | None] = None
    # whether the seed's `inductive Layer` names it (tests/test_layers_registry.py holds the
    # seed's list and checks fields and order against it); a kind of lmc's own sets False
    from_seed: ClassVar[bool] = True
    # int fields for which 0 is a legal value
    zero_ok: ClassVar[frozenset] = frozenset()
    # input-size fields: {field: axis of the input tensor [B, ...] whose size it must equal}.  Such a
    # field may be left out or written `auto` and is filled from the incoming shape; an explicit
    # value is still checked by build.  `ic` and `fan_in` are the channel / feature axis (1) of
    # every kind that has them; a kind adds its own (LayerNorm's `dim`: the last axis, -1).
    inferred: ClassVar[dict[str, int]] = {}
    _INFERRED_BY_NAME: ClassVar[dict[str, int]] = {"ic": 1, "fan_in": 1}

    @classmethod
    def inferred_fields(cls) -> dict[str, int]:
        """{field: input axis} of this kind's input-size fields."""
        names = {f.name for f in dataclasses.fields(cls)}
        out = {k: a for k, a in cls._INFERRED_BY_NAME.items() if k in names}
        out.update(cls.inferred)
        return out

    def filled(self, t) -> "Layer":
        """This layer with its `auto` input-size fields set from the incoming type `t`."""
        auto = {k: a for k, a in self.inferred_fields().items() if getattr(self, k) is AUTO}
        if not auto:
            return self
        vals = {}
        for k, a in auto.items():
            if not -t.rank <= a < t.rank or (a % t.rank) == 0:
                raise ShapeError(f"cannot infer {k} from the input {t.shape_str()}", hint=f"give {k} explicitly")
            vals[k] = t.dims[a]
        return dataclasses.replace(self, **vals)

    @classmethod
    def net_before(cls, fields: dict, x) -> tuple[list, tuple] | None:
        """For a kind that reads earlier layers' outputs (U-Net skips, FPN taps): the layers
        ([(kind, fields)]) and the net input dims that put an example of it in a net, so the
        whole-step oracle can test it there.  None: the example stands alone."""
        return None

    def build(self, g, x, net):
        """Expand into primitives on graph `g`; return the output Value."""
        raise NotImplementedKind(f"not implemented yet: {self.kind} (it is counted by `lmc info` "
                                 f"but cannot be lowered to StableHLO yet)")

    def describe(self) -> str:
        """`dense(fan_in=64, fan_out=10, act=identity)`: every field, the inferred ones filled
        (after shape inference) or `auto`."""
        vals = [f"{f.name}={_fmt(getattr(self, f.name))}" for f in dataclasses.fields(self)]
        return f"{self.kind}(" + ", ".join(vals) + ")"


def _fmt(v):
    return str(v.value) if hasattr(v, "value") else str(v)


def all_layers() -> dict[str, type]:
    discover(__name__, __path__)
    return dict(LAYERS)
