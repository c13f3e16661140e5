"""Primitive ops: the building blocks every layer expands into.  Each primitive has a shape
rule (`infer`), a float64 reference written against an array namespace `xp` (NumPy for the
finite-difference oracle, jax.numpy for the autodiff oracle — the same formula, so the
tests compare our hand-derived backward templates with an independent derivative), and a
template `templates/prims/<name>.mlir.j2` holding `fwd`, `bwd` and optionally `eval` (one
kernel per template: a primitive with two forms names the other form's template in
`template()`, as conv does for its depthwise taps).

Template contract (Python owns it; the template only spells it):
    fwd(inputs..., params...)          -> (y, saved..., stats...)
    bwd(dy, saved..., params...)       -> (d_inputs..., d_params...)
    eval(inputs..., params..., state...) -> y          (only where eval differs: batch norm)

Everything the lowering and the tests need to know about a primitive lives on its class, so a
new primitive is one class and one template and touches no other file:
    stats() / state()        the types of the batch statistics fwd returns and of the running
                             state they are folded into (`running = m·running + (1 − m)·stat`)
    stats_reference(xp, …)   those statistics in float64;  eval_reference(xp, …, *state) the
                             eval form (the plain reference when there is no state)
    draw(rng, t, is_input)   a random test argument away from the primitive's kinks and ties

A *declared* primitive has no template yet: its shape rule and FLOPs (and, where cheap, its
reference) let layers be built from it and counted by `lmc info`, but a layer using it does
not lower (`lmc render` refuses it) and the per-primitive tests skip it.  Adding the template
file is what makes it lower.
"""
from __future__ import annotations

import functools
from typing import ClassVar

import numpy as np

from lmc.core.registry import discover, registrar
from lmc.core.render import TEMPLATES
from lmc.core.types import TensorType
from lmc.prims.axes import logical

PRIMS: dict[str, type] = {}


primitive = registrar(PRIMS, "primitive")


class Prim:
    name: ClassVar[str]
    n_inputs: ClassVar[int] = 1
    has_eval: ClassVar[bool] = False    # the template has an `eval` (it differs from fwd: state)
    # its matmuls take bfloat16 operands (f32 accumulation) under the recipe's `bf16`: the
    # template reads `bf16` from the render context (templates/prims/_dot.j2)
    mixed_precision: ClassVar[bool] = False
    # inputs whose cotangent is zero by construction (embedding's integer ids): @input_grad
    # refuses a net whose input reaches the loss only through such inputs
    constant_inputs: ClassVar[tuple[str, ...]] = ()
    # (attrs, input types, param types) triples used by the per-primitive oracle tests; an
    # attrs entry `layout="hbwc"` tests the HBWC form (the test module converts at its edges)
    examples: ClassVar[list] = []
    # Activation layouts (lmc/graph/layout.py).  Shapes, references and tests are NCHW (logical).  A
    # primitive whose `layouts()` includes "hbwc" also has a form taking its 4-D inputs and
    # returning its 4-D output as [H, B, W, C] — the conv matmuls' own layout, so a chain of
    # convs, norms, activations and pools needs no transposes between them.  That form is the
    # instance made with layout="hbwc" (`self.layout`; the template reads `hbwc`): it is
    # rendered with those physical types, and its context()/saved() receive them too
    # (`self.logical(t)` gives the NCHW type back).  prefer_hbwc: it pulls an HBWC run toward
    # it, even from an NCHW input (conv: its matmuls need HBWC patches either way).
    # mixes_layouts: its output's layout may differ from its inputs' (`out_layout`; the
    # template reads `hbwc_out`) — conv converts on either side for free, inside its matmuls.
    prefer_hbwc: ClassVar[bool] = False
    mixes_layouts: ClassVar[bool] = False

    def __init__(self, layout: str = "nchw", out_layout: str | None = None, **attrs):
        self.attrs = attrs
        self.layout = layout
        self.out_layout = out_layout or layout
        for k, v in attrs.items():
            setattr(self, k, v)

    # as an alternative spelling: whether it may stand in for the original where the lowering
    # gives the node bf16 matmul operands (train.bf16 / bf16_conv); where not, the original stays
    takes_bf16: ClassVar[bool] = True

    def covers(self, ins, ps) -> bool:
        """As an alternative spelling of another primitive (the lowering's forms): whether it
        takes an instance with these (logical) types; where not, the original stays."""
        return True

    def conv_matmuls(self, ins, ps) -> bool:
        """Whether this instance computes a convolution as patch matmuls (conv's matmul form)."""
        return False

    def bf16_conv(self, ins, ps) -> bool:
        """Whether train.bf16_conv gives this instance's matmuls bf16 operands: its conv matmuls."""
        return self.conv_matmuls(ins, ps)

    def layouts(self, ins: list[TensorType], ps: list[TensorType]) -> tuple[str, ...]:
        """The layouts this instance can take for its (logical) input types."""
        return ("nchw",)

    def logical(self, t: TensorType) -> TensorType:
        """The NCHW type of a 4-D activation type this instance receives (identity under NCHW)."""
        return logical(t, self.layout) if t.rank == 4 else t

    def logical_out(self, t: TensorType) -> TensorType:
        """The NCHW type of its 4-D output type (in `out_layout`)."""
        return logical(t, self.out_layout) if t.rank == 4 else t

    @classmethod
    def lowered(cls) -> bool:
        """Whether the primitive has its template (else it is declared only)."""
        return _has_template(cls.name)

    def infer(self, ins: list[TensorType], ps: list[TensorType]) -> tuple[TensorType, int]:
        raise NotImplementedError

    def saved(self, ins, ps, out) -> list[TensorType]:
        """Types of what fwd saves for bwd (after y)."""
        return list(ins)

    def context(self, ins, ps, out) -> dict:
        """Extra template variables (numbers computed here, never in the template)."""
        return {}

    def template(self, ctx: dict) -> str:
        """The template (under templates/) that spells this instance, given its render context:
        `prims/<name>.mlir.j2`.  One kernel per template: a primitive with two forms (conv's
        depthwise taps and patch matmuls) picks the form's template here, not in Jinja."""
        return f"prims/{self.name}.mlir.j2"

    def stats(self, ins, ps, out) -> list[TensorType]:
        """Types of the batch statistics fwd returns after the saved values (BN: μ, σ²)."""
        return []

    def state(self, ins, ps, out) -> list[TensorType]:
        """Types of the running state eval reads, one per stat (each stat is folded into its
        state by the train step)."""
        return self.stats(ins, ps, out)

    @staticmethod
    def reference(xp, *args, **attrs):
        raise NotImplementedError

    @classmethod
    def stats_reference(cls, xp, *args, **attrs) -> list:
        """The batch statistics of `stats()` in float64 (the running state's targets)."""
        return []

    @classmethod
    def eval_reference(cls, xp, *args, **attrs):
        """y in eval mode: `args` are the inputs, params, then the running state."""
        return cls.reference(xp, *args, **attrs)

    def onnx(self, b, ins: list[str], ps: list[str], st: list[str]) -> str:
        """Its eval form as ONNX nodes (`lmc export --format onnx`, lmc/export/onnx.py): `b` is
        the builder (b.op, b.const, b.shape, b.sym, and b.ins / b.out, the types at batch 2),
        ins/ps/st the ONNX names of its inputs, parameters and running state; returns its
        output's name.  A primitive that does not override this is refused by ONNX export."""
        raise NotImplementedError

    def draw(self, rng: np.random.Generator, t: TensorType, is_input: bool) -> np.ndarray:
        """A random f32 test argument of type t (an input, else a param).  Override to keep
        inputs away from non-differentiable points, where the template and the reference may
        legitimately pick different sub-gradients."""
        return rng.standard_normal(t.dims).astype(np.float32)

    def draw_state(self, rng: np.random.Generator, ts: list[TensorType]) -> list[np.ndarray]:
        """Random f32 running state of types ts (for the eval test)."""
        return [rng.standard_normal(t.dims).astype(np.float32) for t in ts]

    def key(self) -> str:
        return self.name + repr(sorted(self.attrs.items())) + ("" if self.layout == "nchw" else self.layout) + \
            ("" if self.out_layout == self.layout else ">" + self.out_layout)


class Elementwise(Prim):
    """Mixin for primitives whose template only spells its operands' types (elementwise over
    same-shaped inputs): any layout works unchanged, so they take their inputs' layout."""

    def layouts(self, ins, ps):
        same = all(t.rank == 4 and t.dims == ins[0].dims for t in ins)
        return ("nchw", "hbwc") if ins and same else ("nchw",)


@functools.lru_cache(maxsize=None)
def _has_template(name: str) -> bool:
    """Whether templates/prims/NAME.mlir.j2 exists (asked for every node of every infer: stat once)."""
    return (TEMPLATES / "prims" / f"{name}.mlir.j2").is_file()


def make_prim(name: str, **attrs) -> Prim:
    _load()
    if name not in PRIMS:
        raise RuntimeError(f"lmc bug: unknown primitive {name!r}")
    return PRIMS[name](**attrs)


def _load():
    discover(__name__, __path__)


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
