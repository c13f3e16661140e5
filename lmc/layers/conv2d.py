from dataclasses import dataclass
from typing import ClassVar

from lmc.core.fields import Activation, Padding
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import act, check_channels, conv


@register("conv2d")
@dataclass(frozen=True)
class Conv2d(Layer):
    """Convolution with bias, stride 1: y = act(conv(x, w) + b), w [oc, ic, k, k].
    pad same: output H×W (the net's pad style; at stride 1 and odd k both are (k−1)/2);
    valid: no padding.  Honours every activation (the Lean kit's train step silently used relu)."""
    ic: int
    oc: int
    k_size: int
    pad: Padding = Padding.same
    act: Activation = Activation.relu
    examples: ClassVar = [(dict(ic=3, oc=4, k_size=3), TensorType((2, 3, 6, 6))),
                          (dict(ic=2, oc=3, k_size=3, pad="valid", act="gelu"), TensorType((2, 2, 7, 7))),
                          (dict(ic=2, oc=2, k_size=2, act="swish"), TensorType((1, 2, 5, 5)))]
    rejects: ClassVar = [(dict(ic=3, oc=4, k_size=3), (2, 5, 6, 6), ["ic=3", "5 channels"])]

    def build(self, g, x, net):
        check_channels(x, self.ic)
        style = "valid" if self.pad == Padding.valid else net.conv_pad_style.value
        y = conv(g, x, "", self.ic, self.oc, self.k_size, 1, style, bias=True)
        return act(g, y, self.act)
