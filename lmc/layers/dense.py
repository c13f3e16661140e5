from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.fields import Activation
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import act


@register("dense")
@dataclass(frozen=True)
class Dense(Layer):
    """Fully connected: y = act(x·w + b), w [fan_in, fan_out] (Glorot init), b [fan_out].
    Assumptions: input [batch, features] (put `flatten` or `global_avg_pool` before it)."""
    fan_in: int
    fan_out: int
    act: Activation = Activation.identity
    examples: ClassVar = [(dict(fan_in=5, fan_out=3), TensorType((4, 5))),
                          (dict(fan_in=6, fan_out=4, act="relu"), TensorType((2, 6)))]
    rejects: ClassVar = [(dict(fan_in=5, fan_out=3), (4, 6), ["fan_in=5", "6 features"]),
                          (dict(fan_in=48, fan_out=3), (2, 3, 4, 4), ["[2, 3, 4, 4]"])]

    def build(self, g, x, net):
        if x.type.rank != 2:
            raise ShapeError(f"expected a rank-2 input [batch, features], got {x.type.shape_str()}",
                             hint="add a `flatten` (or `global_avg_pool`) layer before it")
        if x.type.dims[1] != self.fan_in:
            raise ShapeError(f"fan_in={self.fan_in} but the input has {x.type.dims[1]} features")
        w = g.param("weight", (self.fan_in, self.fan_out), "glorot", fan_in=self.fan_in, fan_out=self.fan_out)
        b = g.param("bias", (self.fan_out,), "zeros")
        return act(g, g.op("dense", x, params=[w, b]), self.act)
