"""EfficientNet / MobileNetV3 blocks: mb_conv, mb_conv_v3, fused_mb_conv.

Built from the lowered conv / batch_norm / act / add / global_avg_pool primitives and, for
squeeze-excite, the declared broadcasting `mul` (x · gate): blocks without SE lower, blocks with
SE lower once `mul` has its template.  Internal convs pad as the net's `conv_pad_style` says:
XLA-SAME by default (TF-origin blocks, the seed's IREE path), `symmetric` in the specs that
claim torchvision's EfficientNets / MobileNetV3 (their strided convs pad (k−1)//2 each side)."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.fields import Activation
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import conv, conv_bn, drop_path
from lmc.layers.mobile import style
from lmc.layers._shape import image, make_divisible

def _se(g, x, name: str, r: int, inner: str, gate: str):
    """Squeeze-excite on x's c channels with r hidden: GAP → 1×1 conv (c→r, bias) → inner act →
    1×1 conv (r→c, bias) → gate act → x·gate (the gate [B, c, 1, 1] broadcast over H, W).  The
    1×1 weights are conv-shaped [r, c, 1, 1] / [c, r, 1, 1].  FLOPs: the seed's 2·B·c·H·W
    (pool, multiply) + 4·B·c·r (the two 1×1 convs); biases and activations not counted."""
    b, c = x.type.dims[:2]
    s = g.op("reshape", g.op("global_avg_pool", x), dims=(b, c, 1, 1))
    s = conv(g, s, f"{name}reduce.", c, r, 1, 1, "valid", bias=True, bias_flops=0)   # 1×1 on 1×1: no padding
    s = g.op("act", s, kind=inner, flops=0)
    s = conv(g, s, f"{name}expand.", r, c, 1, 1, "valid", bias=True, bias_flops=0)
    return g.op("mul", x, g.op("act", s, kind=gate, flops=0))


def _unit(g, x, net, name, ic, oc, k, stride, activation, groups=1):
    """conv_bn padded per the net's conv_pad_style, counted as the seed does (one FLOP per
    element for the activation, present or not)."""
    return conv_bn(g, x, name, ic, oc, k, stride, style(net), activation, groups, seed_act_flops=True)


def _join(g, h, x, residual: bool, net):
    """+ input when the block keeps its shape (the seed does not count the add); the branch is a
    stochastic-depth site."""
    return g.op("add", drop_path(g, h, net), x, flops=0) if residual else h


@register("mb_conv")
@dataclass(frozen=True)
class MbConv(Layer):
    """EfficientNet MBConv stage of n_blocks.  Block i (stride for i = 0, else 1; bic = ic then
    oc; mid = bic·expand): [1×1 expand → BN → act if expand ≠ 1] → depthwise k×k → BN → act →
    [squeeze-excite if use_se: GAP → 1×1 mid→r + bias → swish → 1×1 r→mid + bias → sigmoid →
    multiply, r = max(1, bic/4)] → 1×1 project → BN (linear) → + input if stride 1 and bic = oc.
    Params per block: [expand.weight [mid,bic,1,1], γ, β], dw.weight [mid,1,k,k], γ, β,
    [se.reduce.weight [r,mid,1,1], se.reduce.bias [r], se.expand.weight [mid,r,1,1],
    se.expand.bias [mid]], project.weight [oc,mid,1,1], γ, β.
    Assumptions: NCHW input with ic channels.  The SE width is the canonical bic/4 (the
    paper, torchvision and the Lean kit's JAX reference), not the Lean IREE path's mid/4."""
    ic: int
    oc: int
    expand: int
    k_size: int
    stride: int
    n_blocks: int
    use_se: bool
    act: Activation = Activation.swish
    examples: ClassVar = [(dict(ic=4, oc=4, expand=2, k_size=3, stride=1, n_blocks=2, use_se=True), TensorType((2, 4, 5, 5))),
                          (dict(ic=3, oc=6, expand=1, k_size=5, stride=2, n_blocks=1, use_se=False, act="relu"),
                           TensorType((2, 3, 7, 6)))]
    rejects: ClassVar = [(dict(ic=4, oc=4, expand=2, k_size=3, stride=1, n_blocks=1, use_se=True), (2, 5, 5, 5),
                ["ic=4", "5 channels"])]

    def build(self, g, x, net):
        image(x.type, self.ic)
        for i in range(self.n_blocks):
            s = self.stride if i == 0 else 1
            bic = self.ic if i == 0 else self.oc
            mid = bic * self.expand
            h = x
            if self.expand != 1:
                h = _unit(g, h, net, f"{i}.expand.", bic, mid, 1, 1, self.act)
            h = _unit(g, h, net, f"{i}.dw.", mid, mid, self.k_size, s, self.act, groups=mid)
            if self.use_se:
                h = _se(g, h, f"{i}.se.", max(1, bic // 4), "swish", "sigmoid")
            h = _unit(g, h, net, f"{i}.project.", mid, self.oc, 1, 1, "identity")
            x = _join(g, h, x, s == 1 and bic == self.oc, net)
        return x


@register("mb_conv_v3")
@dataclass(frozen=True)
class MbConvV3(Layer):
    """One MobileNetV3 bneck block, e = expand_ch (absolute width): [1×1 expand ic→e → BN →
    act if e ≠ ic] → depthwise k×k (stride) → BN → act → [squeeze-excite if use_se: GAP →
    1×1 e→r + bias → relu → 1×1 r→e + bias → h_sigmoid → multiply] → 1×1 project → BN (linear)
    → + input if stride 1 and ic = oc.  act is relu or h_swish (paper: RE / HS columns).
    r = make_divisible(e/4, 8), as the paper's TF code and torchvision (the Lean kit uses
    max(1, e/4), which changes the count of the 72- and 120-wide blocks).
    Params: [expand.weight [e,ic,1,1], γ, β], dw.weight [e,1,k,k], γ, β, [se.reduce.weight
    [r,e,1,1], se.reduce.bias [r], se.expand.weight [e,r,1,1], se.expand.bias [e]],
    project.weight [oc,e,1,1], γ, β.
    Assumptions: NCHW input with ic channels."""
    ic: int
    oc: int
    expand_ch: int
    k_size: int
    stride: int
    use_se: bool
    act: Activation = Activation.relu
    examples: ClassVar = [(dict(ic=4, oc=4, expand_ch=8, k_size=3, stride=1, use_se=True), TensorType((2, 4, 5, 5))),
                          (dict(ic=4, oc=6, expand_ch=4, k_size=5, stride=2, use_se=False, act="h_swish"),
                           TensorType((2, 4, 6, 6)))]
    rejects: ClassVar = [(dict(ic=4, oc=4, expand_ch=8, k_size=3, stride=1, use_se=False), (2, 7, 5, 5),
                   ["ic=4", "7 channels"])]

    def build(self, g, x, net):
        image(x.type, self.ic)
        e = self.expand_ch
        h = x
        if e != self.ic:
            h = _unit(g, h, net, "expand.", self.ic, e, 1, 1, self.act)
        h = _unit(g, h, net, "dw.", e, e, self.k_size, self.stride, self.act, groups=e)
        if self.use_se:
            h = _se(g, h, "se.", make_divisible(e / 4), "relu", "h_sigmoid")
        h = _unit(g, h, net, "project.", e, self.oc, 1, 1, "identity")
        # no stochastic depth in MobileNetV3 (torchvision has none): no site
        return _join(g, h, x, self.stride == 1 and self.ic == self.oc, None)


@register("fused_mb_conv")
@dataclass(frozen=True)
class FusedMbConv(Layer):
    """EfficientNetV2 Fused-MBConv stage of n_blocks.  Block i (stride for i = 0; bic = ic then
    oc; mid = oc if expand = 1 else bic·expand): k×k conv bic→mid (stride) → BN → swish →
    [squeeze-excite if use_se: r = max(1, bic/4), swish / sigmoid] → [1×1 project mid→oc → BN
    (linear), only if expand ≠ 1] → + input if stride 1 and bic = oc.
    Params per block: fused.weight [mid,bic,k,k], γ, β, [se.* as mb_conv],
    [project.weight [oc,mid,1,1], γ, β].
    Assumptions: NCHW input with ic channels.  SE width bic/4 as in the TF reference (the
    Lean kit uses mid/4 here); EfficientNetV2-S uses no SE in its fused stages."""
    ic: int
    oc: int
    expand: int
    k_size: int
    stride: int
    n_blocks: int
    use_se: bool
    examples: ClassVar = [(dict(ic=4, oc=4, expand=1, k_size=3, stride=1, n_blocks=2, use_se=False), TensorType((2, 4, 5, 5))),
                          (dict(ic=3, oc=6, expand=4, k_size=3, stride=2, n_blocks=2, use_se=True), TensorType((2, 3, 6, 6)))]
    rejects: ClassVar = [(dict(ic=4, oc=4, expand=1, k_size=3, stride=1, n_blocks=1, use_se=False), (2, 3, 5, 5),
                      ["ic=4", "3 channels"])]

    def build(self, g, x, net):
        image(x.type, self.ic)
        for i in range(self.n_blocks):
            s = self.stride if i == 0 else 1
            bic = self.ic if i == 0 else self.oc
            mid = self.oc if self.expand == 1 else bic * self.expand
            h = _unit(g, x, net, f"{i}.fused.", bic, mid, self.k_size, s, "swish")
            if self.use_se:
                h = _se(g, h, f"{i}.se.", max(1, bic // 4), "swish", "sigmoid")
            if self.expand != 1:
                h = _unit(g, h, net, f"{i}.project.", mid, self.oc, 1, 1, "identity")
            x = _join(g, h, x, s == 1 and bic == self.oc, net)
        return x
