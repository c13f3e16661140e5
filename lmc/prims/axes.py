"""Activation layouts at the level of one tensor type: NCHW (logical) and HBWC (physical) axis
orders, and what a layout-aware template needs to know about them (`Axes`, `channel_sums`).
The graph pass that chooses a layout per value is lmc/graph/layout.py."""
from __future__ import annotations

from dataclasses import dataclass

from lmc.core.types import TensorType

NCHW, HBWC = "nchw", "hbwc"
# physical axis k of an HBWC tensor holds logical (NCHW) axis TO_HBWC[k]; TO_NCHW inverts it
TO_HBWC = (2, 0, 3, 1)
TO_NCHW = (1, 3, 0, 2)


def physical(t: TensorType, layout: str) -> TensorType:
    """The in-memory type of a logical 4-D type t in `layout`."""
    if layout == NCHW or t.rank != 4:
        return t
    return TensorType(tuple(t.dims[i] for i in TO_HBWC), t.dtype)


def logical(t: TensorType, layout: str) -> TensorType:
    """The NCHW type of an in-memory 4-D type t in `layout`."""
    if layout == NCHW or t.rank != 4:
        return t
    return TensorType(tuple(t.dims[i] for i in TO_NCHW), t.dtype)


@dataclass(frozen=True)
class Axes:
    """Where batch, channels, height and width sit in a 4-D tensor of `layout`: what the
    templates of layout-aware primitives need (broadcast dims, reduced axes, pads, slices)."""
    layout: str

    @property
    def order(self) -> str:
        return "bchw" if self.layout == NCHW else "hbwc"

    def pos(self, axis: str) -> int:
        return self.order.index(axis)

    def dims(self, **size) -> tuple:
        """Values per axis name (b, c, h, w) in this layout's order."""
        return tuple(size[a] for a in self.order)

    def vec(self, b=0, c=0, h=0, w=0) -> str:
        """An MLIR integer list (pads) in this layout's order."""
        return "[" + ", ".join(str(v) for v in self.dims(b=b, c=c, h=h, w=w)) + "]"

    def slice(self, b: int, c: int, h: tuple, w: tuple) -> str:
        """A stablehlo.slice bracket: full b and c, (start, stop[, step]) along h and w."""
        def rng(r):
            return ":".join(str(v) for v in r)
        parts = {"b": f"0:{b}", "c": f"0:{c}", "h": rng(h), "w": rng(w)}
        return "[" + ", ".join(parts[a] for a in self.order) + "]"

    def split(self, **size) -> tuple[tuple, dict]:
        """The 6-D view that splits h into (h, s) and w into (w, s): its dims (size holds b, c,
        h, w, s) and the positions of the 'h', 'hs', 'w', 'ws' axes and of the kept ones."""
        order = []
        for a in self.order:
            order.append(a)
            if a in "hw":
                order.append(a + "s")
        dims = tuple(size["s"] if a.endswith("s") else size[a] for a in order)
        return dims, {a: i for i, a in enumerate(order)}

    def kept(self, pos: dict) -> str:
        """broadcast_in_dim dims of a 4-D tensor into the split 6-D view (the window axes dropped)."""
        return "[" + ", ".join(str(pos[a]) for a in self.order) + "]"


SPLIT = 32      # rows per partial sum in channel_sums' two-step form


def channel_sums(t: TensorType, layout: str) -> dict:
    """How a template sums a 4-D activation (physical type t) over all but its channels
    (templates/prims/_channel_sum.j2): `axes` for one reduction; in HBWC, where C is innermost,
    `split` = the [n/k, k, C] view and the [n/k, C] partial sums (k = SPLIT rows), measured
    2–3× faster than IREE 3.13's one-step reduction of the outer axes, or where k does not
    divide n, `flat` = the [n, C] view reduced over its axis 0."""
    ax = Axes(layout)
    c = t.dims[ax.pos("c")]
    n = t.size // c
    split = flat = None
    if layout == HBWC and n % SPLIT == 0 and n > SPLIT:
        split = {"x3": TensorType((n // SPLIT, SPLIT, c)).mlir, "p": TensorType((n // SPLIT, c)).mlir}
    elif layout == HBWC:
        # as [n, C], one reduction of axis 0: IREE 3.13 failed to compile the [0, 1, 2] reduction
        # of a small HBWC tensor fused into the backward ("'vector.contract' op invalid
        # accumulator/result vector shape", B 2, 4×4, C 4)
        flat = TensorType((n, c)).mlir
    return {"axes": str(sorted(ax.pos(a) for a in "bhw")), "split": split, "flat": flat}
