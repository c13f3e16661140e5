from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register


@register("max_pool")
@dataclass(frozen=True)
class MaxPool(Layer):
    """Max pooling, any size and stride, −∞ padding per the net's `conv_pad_style`:
    xla_same — XLA SAME (output ceil(in/stride), the extra row/col on the high side);
    symmetric — (size−1)//2 on every side, torchvision's nn.MaxPool2d(k, s, (k−1)//2) (the
    ResNet stem's 3×3/2 pads (1, 1), where SAME pads (0, 1) on an even map)."""
    size: int
    stride: int
    examples: ClassVar = [(dict(size=2, stride=2), TensorType((2, 3, 6, 6))),
                          (dict(size=3, stride=2), TensorType((2, 2, 7, 7))),
                          (dict(size=3, stride=2), TensorType((1, 2, 8, 8)))]
    rejects: ClassVar = [(dict(size=2, stride=2), (2, 12), ["[2, 12]"])]

    def build(self, g, x, net):
        if x.type.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.type.shape_str()}")
        if net.conv_pad_style.value == "symmetric":
            p = (self.size - 1) // 2
            return g.op("max_pool", x, size=self.size, stride=self.stride, pad=(p, p, p, p))
        return g.op("max_pool", x, size=self.size, stride=self.stride)


@register("global_avg_pool")
@dataclass(frozen=True)
class GlobalAvgPool(Layer):
    """Mean over height and width: [B, C, H, W] → [B, C]."""
    examples: ClassVar = [({}, TensorType((2, 3, 4, 4)))]
    rejects: ClassVar = [({}, (3, 7), ["[3, 7]"])]

    def build(self, g, x, net):
        if x.type.rank != 4:
            raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.type.shape_str()}")
        return g.op("global_avg_pool", x)


@register("flatten")
@dataclass(frozen=True)
class Flatten(Layer):
    """[B, C, H, W] → [B, C·H·W] (row-major, channel-major: the Lean kit's order)."""
    examples: ClassVar = [({}, TensorType((2, 3, 4, 4)))]
    rejects: ClassVar = []        # accepts any shape

    def build(self, g, x, net):
        if x.type.rank == 2:
            return x
        b = x.type.dims[0]
        return g.op("reshape", x, dims=(b, x.type.size // b))
