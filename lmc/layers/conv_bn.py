from dataclasses import dataclass
from typing import ClassVar

from lmc.core.fields import Padding
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import check_channels, conv_bn


@register("conv_bn")
@dataclass(frozen=True)
class ConvBn(Layer):
    """conv (no bias) → batch norm → the net's `conv_bn_act`.  Params weight [oc, ic, k, k],
    gamma, beta [oc]; BN running mean/var.  Strided `same` padding follows the net's
    `conv_pad_style` (xla_same: extra row high; symmetric: (k−1)//2 both sides)."""
    ic: int
    oc: int
    k_size: int
    stride: int = 1
    pad: Padding = Padding.same
    examples: ClassVar = [(dict(ic=3, oc=4, k_size=3, stride=1), TensorType((2, 3, 5, 5))),
                          (dict(ic=2, oc=3, k_size=3, stride=2), TensorType((2, 2, 6, 6))),
                          (dict(ic=2, oc=3, k_size=7, stride=2), TensorType((1, 2, 9, 9))),
                          # enough channels for conv's Winograd form (lmc/prims/conv_winograd.py)
                          (dict(ic=8, oc=8, k_size=3, stride=1), TensorType((2, 8, 5, 5)))]
    rejects: ClassVar = [(dict(ic=3, oc=4, k_size=3), (2, 4, 6, 6), ["ic=3", "4 channels"])]

    def build(self, g, x, net):
        check_channels(x, self.ic)
        style = "valid" if self.pad == Padding.valid else net.conv_pad_style.value
        return conv_bn(g, x, "", self.ic, self.oc, self.k_size, self.stride, style, net.conv_bn_act)
