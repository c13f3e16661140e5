"""ConvNeXt kinds: conv_next_stem, conv_next_stage, conv_next_downsample, built from
primitives (conv, bias, layer_norm over channels or batch_norm, act, scale).  `norm: ln` is a
LayerNorm over the channels at every pixel (ε = 1e-5); `norm: bn` a batch norm."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.fields import Activation, Normalization
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import conv, drop_path, ln, norm
from lmc.layers._shape import image


@register("conv_next_stem")
@dataclass(frozen=True)
class ConvNextStem(Layer):
    """ConvNeXt patchify stem: conv patch×patch, stride patch, no padding, + bias → channel
    LayerNorm, no activation → [B, oc, H/patch, W/patch].
    Params: weight [oc,ic,p,p], bias [oc], norm.gamma [oc], norm.beta [oc].
    Assumptions: NCHW input with ic channels; patch divides H and W."""
    ic: int
    oc: int
    patch: int
    examples: ClassVar = [(dict(ic=3, oc=8, patch=4), TensorType((2, 3, 8, 8)))]
    rejects: ClassVar = [(dict(ic=3, oc=8, patch=4), (2, 3, 8, 10), ["patch=4", "8x10"])]

    def build(self, g, x, net):
        _, _, h, w = image(x.type, self.ic)
        if h % self.patch or w % self.patch:
            raise ShapeError(f"patch={self.patch} does not divide the {h}x{w} input")
        y = conv(g, x, "", self.ic, self.oc, self.patch, self.patch, "valid", bias=True, bias_flops=0)
        return ln(g, y, "norm.", axis=1)


@register("conv_next_stage")
@dataclass(frozen=True)
class ConvNextStage(Layer):
    """n_blocks ConvNeXt blocks on `channels` channels, spatial size kept: depthwise 7×7 (pad 3)
    + bias → norm → 1×1 c→4c + bias → act → 1×1 4c→c + bias → × LayerScale [c] → + input.
    Params per block (9): dw.weight [c,1,7,7], dw.bias, norm.gamma, norm.beta, pw1.weight
    [4c,c,1,1], pw1.bias [4c], pw2.weight [c,4c,1,1], pw2.bias, layer_scale [c] (init constant
    1e-6, held in Param.std); norm bn also keeps running mean/var.
    Assumptions: NCHW input with `channels` channels; no stochastic depth."""
    inferred: ClassVar = {"channels": 1}      # filled from the input when left out or `auto`
    channels: int
    n_blocks: int
    norm: Normalization = Normalization.ln
    act: Activation = Activation.gelu
    examples: ClassVar = [(dict(channels=4, n_blocks=2), TensorType((2, 4, 5, 5))),
                          (dict(channels=3, n_blocks=1, norm="bn", act="relu"), TensorType((2, 3, 7, 7)))]
    rejects: ClassVar = [(dict(channels=4, n_blocks=1), (2, 3, 5, 5), ["channels=4", "3 channels"])]

    def build(self, g, x, net):
        image(x.type, self.channels, "channels")
        c = self.channels
        for i in range(self.n_blocks):
            # the seed's FLOPs: no biases, 8 per element for the activation (its GELU count)
            h = conv(g, x, f"{i}.dw.", c, c, 7, 1, "symmetric", groups=c, bias=True, bias_flops=0)
            h = norm(g, h, f"{i}.norm.", self.norm)
            h = conv(g, h, f"{i}.pw1.", c, 4 * c, 1, 1, "valid", bias=True, bias_flops=0)
            if self.act != Activation.identity:
                h = g.op("act", h, kind=self.act.value, flops=8 * h.type.size)
            h = conv(g, h, f"{i}.pw2.", 4 * c, c, 1, 1, "valid", bias=True, bias_flops=0)
            h = g.op("scale", h, params=[g.param(f"{i}.layer_scale", (c,), "constant", std=1e-6)])
            x = g.op("add", drop_path(g, h, net), x)
        return x


@register("conv_next_downsample")
@dataclass(frozen=True)
class ConvNextDownsample(Layer):
    """ConvNeXt downsampling: norm over ic channels → conv 2×2, stride 2, no padding, + bias →
    [B, oc, ⌊H/2⌋, ⌊W/2⌋].  Params: norm.gamma [ic], norm.beta [ic], weight [oc,ic,2,2], bias [oc].
    Assumptions: NCHW input with ic channels, at least 2×2."""
    ic: int
    oc: int
    norm: Normalization = Normalization.ln
    examples: ClassVar = [(dict(ic=4, oc=8), TensorType((2, 4, 6, 6))),
                          (dict(ic=3, oc=5, norm="bn"), TensorType((2, 3, 5, 4)))]
    rejects: ClassVar = [(dict(ic=4, oc=8), (2, 5, 6, 6), ["ic=4", "5 channels"]),
                          (dict(ic=4, oc=8), (2, 4, 1, 6), ["1x6"])]

    def build(self, g, x, net):
        _, _, h, w = image(x.type, self.ic)
        if h < 2 or w < 2:
            raise ShapeError(f"a 2x2 stride-2 conv needs at least 2x2 pixels, got {h}x{w}")
        y = norm(g, x, "norm.", self.norm)
        return conv(g, y, "", self.ic, self.oc, 2, 2, "valid", bias=True, bias_flops=0)
