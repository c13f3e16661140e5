"""dense: y = x·w + b with w laid out [fan_in, fan_out] (the Lean kit's layout)."""
from __future__ import annotations

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.prims import Prim, primitive

# fan_out up to which the products are a broadcast multiply + sum rather than a dot_general
# (templates/prims/dense.mlir.j2; a classifier head's 10 classes: benchmarks/NOTES.md)
NARROW_N = 16
# fan_in from which the forward product is summed over chunks of the contraction (split-K): IREE
# 3.13's llvm-cpu matmul tiles only the output across workgroups and streams the whole K through
# each tile, so a long K falls out of cache (mnist_cnn's 3136 → 512 at batch 128: 52 GFLOP/s;
# in chunks of 196, 112 GFLOP/s; mnist_mlp's 784 → 512: 104 → 135; at 512 the split loses:
# benchmarks/NOTES.md, "Split-K")
SPLIT_K_MIN = 768
SPLIT_K_CHUNK = (64, 200)      # the chunk: the largest divisor of fan_in in this range


def _chunks(n: int, at_least: int, span: tuple[int, int]) -> int:
    """How many chunks of the largest size in `span` dividing n to split n into: 1 (none) below
    `at_least` or where no size in `span` divides n."""
    lo, hi = span
    if n < at_least:
        return 1
    chunk = max((d for d in range(lo, hi + 1) if n % d == 0), default=None)
    return 1 if chunk is None else n // chunk


def k_chunks(k: int) -> int:
    """How many chunks dense's forward splits a contraction of k into (1: none)."""
    return _chunks(k, SPLIT_K_MIN, SPLIT_K_CHUNK)


# rows (the batch, or batch × tokens) from which dW = xᵀ·dy, a contraction over the rows, is
# summed over chunks of rows: the same streaming as the long fan_in above, on the backward's
# product (tiny_gpt's fc1 at 2,048 rows: 3.6 → 1.6 ms; vit_tiny's at 4,160: 21 → 7 ms;
# benchmarks/NOTES.md, "dW over chunks of rows")
SPLIT_ROWS_MIN = 1024
SPLIT_ROWS_CHUNK = (128, 320)  # the chunk: the largest divisor of the row count in this range


def row_chunks(rows: int) -> int:
    """How many chunks a dW contraction over `rows` rows is split into (1: none)."""
    return _chunks(rows, SPLIT_ROWS_MIN, SPLIT_ROWS_CHUNK)


def row_split(rows: int, k: int, n: int) -> dict | None:
    """The render context of dW summed over row chunks: x and dy reshaped to [chunks, rows/chunks,
    ·], their batched product [chunks, k, n]; None where row_chunks leaves one chunk."""
    m = row_chunks(rows)
    if m == 1:
        return None
    r = rows // m
    return {"xs": TensorType((m, r, k)).mlir, "dys": TensorType((m, r, n)).mlir, "ps": TensorType((m, k, n)).mlir}


@primitive("dense")
class Dense(Prim):
    """y = x·w + b.  x [B, K], w [K, N], b [N].  Saves x."""
    mixed_precision = True
    inputs = ("x",)
    params = ("w", "b")
    examples = [({}, [TensorType((4, 5))], [TensorType((5, 3)), TensorType((3,))]),
                ({}, [TensorType((1, 7))], [TensorType((7, 2)), TensorType((2,))]),
                # wider than NARROW_N: the dot_general form
                ({}, [TensorType((3, 6))], [TensorType((6, 20)), TensorType((20,))]),
                # fan_in ≥ SPLIT_K_MIN: the forward summed over 12 chunks of 192
                ({}, [TensorType((3, 2304))], [TensorType((2304, 20)), TensorType((20,))]),
                # batch ≥ SPLIT_ROWS_MIN: dW summed over 4 chunks of 256 rows
                ({}, [TensorType((1024, 6))], [TensorType((6, 20)), TensorType((20,))])]

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
        (b, k), n = x.dims, w.dims[1]
        s = 1 if narrow else k_chunks(k)
        split = None if s == 1 else {"xs": TensorType((b, s, k // s)).mlir, "ws": TensorType((s, k // s, n)).mlir,
                                     "ps": TensorType((s, b, n)).mlir}
        return {"narrow": narrow, "bkn": bkn, "split": split, "dw_split": None if narrow else row_split(b, k, n)}

    @staticmethod
    def reference(xp, x, w, b):
        return x @ w + b

    def onnx(self, b, ins, ps, st):
        return b.op("Gemm", ins[0], *ps)
