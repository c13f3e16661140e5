from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShapeError
from ..types import TensorType
from . import Layer, register


@register("max_pool")
@dataclass(frozen=True)
class MaxPool(Layer):
    """Max pooling, output ceil(in/stride), −∞ XLA-SAME padding; any size and stride."""
    size: int
    stride: int
    examples: ClassVar = [(dict(size=2, stride=2), TensorType((2, 3, 6, 6))),
                          (dict(size=3, stride=2), TensorType((2, 2, 7, 7)))]

    def build(self, g, x, net):
        if x.type.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.type.shape_str()}")
        return g.op("max_pool", x, size=self.size, stride=self.stride)


@register("global_avg_pool")
@dataclass(frozen=True)
class GlobalAvgPool(Layer):
    """Mean over height and width: [B, C, H, W] → [B, C]."""
    examples: ClassVar = [({}, TensorType((2, 3, 4, 4)))]

    def build(self, g, x, net):
        if x.type.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.type.shape_str()}")
        return g.op("global_avg_pool", x)


@register("flatten")
@dataclass(frozen=True)
class Flatten(Layer):
    """[B, C, H, W] → [B, C·H·W] (row-major, channel-major: the Lean kit's order)."""
    examples: ClassVar = [({}, TensorType((2, 3, 4, 4)))]

    def build(self, g, x, net):
        if x.type.rank == 2:
            return x
        b = x.type.dims[0]
        return g.op("reshape", x, dims=(b, x.type.size // b))
