"""dense: y = x·w + b with w laid out [fan_in, fan_out] (the Lean kit's layout)."""
from __future__ import annotations

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.prims import Prim, primitive

# fan_out up to which the products are a broadcast multiply + sum rather than a dot_general
# (templates/prims/dense.mlir.j2; a classifier head's 10 classes: benchmarks/NOTES.md)
NARROW_N = 16


@primitive("dense")
class Dense(Prim):
    """y = x·w + b.  x [B, K], w [K, N], b [N].  Saves x."""
    mixed_precision = True
    inputs = ("x",)
    params = ("w", "b")
    examples = [({}, [TensorType((4, 5))], [TensorType((5, 3)), TensorType((3,))]),
                ({}, [TensorType((1, 7))], [TensorType((7, 2)), TensorType((2,))]),
                # wider than NARROW_N: the dot_general form
                ({}, [TensorType((3, 6))], [TensorType((6, 20)), TensorType((20,))])]

    def infer(self, ins, ps):
        (x,), (w, _) = ins, ps
        if x.rank != 2:
            raise ShapeError(f"expected a rank-2 input [batch, features], got {x.shape_str()}")
        if x.dims[1] != w.dims[0]:
            raise ShapeError(f"fan_in={w.dims[0]} but the input has {x.dims[1]} features")
        return TensorType((x.dims[0], w.dims[1])), 2 * x.dims[0] * w.dims[0] * w.dims[1]

    def context(self, ins, ps, out):
        (x,), (w, _) = ins, ps
        narrow = w.dims[1] <= NARROW_N
        bkn = TensorType((x.dims[0], w.dims[0], w.dims[1])).mlir if narrow else None
        return {"narrow": narrow, "bkn": bkn}

    @staticmethod
    def reference(xp, x, w, b):
        return x @ w + b

    def onnx(self, b, ins, ps, st):
        return b.op("Gemm", ins[0], *ps)
