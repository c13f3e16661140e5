"""Tensor types and their MLIR spelling (`tensor<32x784xf32>`)."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TensorType:
    dims: tuple[int, ...]
    dtype: str = "f32"

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    @property
    def mlir(self) -> str:
        if not self.dims:
            return f"tensor<{self.dtype}>"
        return "tensor<" + "x".join(str(d) for d in self.dims) + f"x{self.dtype}>"

    def with_dims(self, dims) -> "TensorType":
        return TensorType(tuple(dims), self.dtype)

    def __str__(self) -> str:
        return self.mlir

    def shape_str(self) -> str:
        return "[" + ", ".join(str(d) for d in self.dims) + "]"


def f32(*dims: int) -> TensorType:
    return TensorType(tuple(dims), "f32")


def i32(*dims: int) -> TensorType:
    return TensorType(tuple(dims), "i32")


def flt(v: float) -> str:
    """A float literal MLIR parses (never '1e-05', which it rejects)."""
    return f"{float(v):.9e}"
