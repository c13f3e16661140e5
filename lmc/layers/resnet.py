"""ResNet stages as graphs of primitives: the lowering derives their backward (including the
summed gradient at the residual join) by walking the graph in reverse."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import act, check_channels, conv_bn, drop_path

# Block-internal convs use torchvision's symmetric padding (the seed: only top-level strided
# convs follow the net's conv_pad_style).
STYLE = "symmetric"


@register("residual_block")
@dataclass(frozen=True)
class ResidualBlock(Layer):
    """n_blocks basic blocks: relu(bn(conv3x3(relu(bn(conv3x3(x))))) + shortcut(x)); the first
    block has stride first_stride and a 1×1 conv-BN projection when the shape changes.
    Params per block: conv1 (w, γ, β), conv2 (w, γ, β), then the projection (last)."""
    ic: int
    oc: int
    n_blocks: int
    first_stride: int = 1
    examples: ClassVar = [(dict(ic=2, oc=2, n_blocks=1, first_stride=1), TensorType((2, 2, 5, 5))),
                          (dict(ic=2, oc=4, n_blocks=2, first_stride=2), TensorType((2, 2, 6, 6))),
                          # ResNet's stride-1 blocks: both convs in conv's Winograd form
                          (dict(ic=8, oc=8, n_blocks=1, first_stride=1), TensorType((2, 8, 6, 6)))]
    rejects: ClassVar = [(dict(ic=4, oc=4, n_blocks=1), (2, 3, 5, 5), ["ic=4", "3 channels"])]

    def build(self, g, x, net):
        check_channels(x, self.ic)
        for i in range(self.n_blocks):
            s = self.first_stride if i == 0 else 1
            bic = self.ic if i == 0 else self.oc
            h = conv_bn(g, x, f"{i}.conv1.", bic, self.oc, 3, s, STYLE, "relu")
            h = conv_bn(g, h, f"{i}.conv2.", self.oc, self.oc, 3, 1, STYLE, "identity")
            if s != 1 or bic != self.oc:
                x = conv_bn(g, x, f"{i}.proj.", bic, self.oc, 1, s, STYLE, "identity")
            x = act(g, g.op("add", drop_path(g, h, net), x), "relu")
        return x


@register("bottleneck_block")
@dataclass(frozen=True)
class BottleneckBlock(Layer):
    """n_blocks ResNet-v1.5 bottlenecks (stride on the 3×3): 1×1 → mid, 3×3 (stride) → mid,
    1×1 → oc with mid = oc/4, plus a projection when the shape changes; relu after the add."""
    ic: int
    oc: int
    n_blocks: int
    first_stride: int = 1
    examples: ClassVar = [(dict(ic=4, oc=8, n_blocks=1, first_stride=2), TensorType((2, 4, 6, 6))),
                          (dict(ic=8, oc=8, n_blocks=1, first_stride=1), TensorType((1, 8, 5, 5)))]
    rejects: ClassVar = [(dict(ic=8, oc=8, n_blocks=1), (2, 6, 5, 5), ["ic=8", "6 channels"])]

    def build(self, g, x, net):
        check_channels(x, self.ic)
        mid = max(self.oc // 4, 1)
        for i in range(self.n_blocks):
            s = self.first_stride if i == 0 else 1
            bic = self.ic if i == 0 else self.oc
            h = conv_bn(g, x, f"{i}.conv1.", bic, mid, 1, 1, STYLE, "relu")
            h = conv_bn(g, h, f"{i}.conv2.", mid, mid, 3, s, STYLE, "relu")
            h = conv_bn(g, h, f"{i}.conv3.", mid, self.oc, 1, 1, STYLE, "identity")
            if s != 1 or bic != self.oc:
                x = conv_bn(g, x, f"{i}.proj.", bic, self.oc, 1, s, STYLE, "identity")
            x = act(g, g.op("add", drop_path(g, h, net), x), "relu")
        return x
