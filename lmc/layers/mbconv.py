"""EfficientNet / MobileNetV3 blocks: mb_conv, mb_conv_v3, fused_mb_conv.

Spec-only for now: squeeze-excite needs a channel-wise multiply by a broadcast gate, which is
not a primitive yet, so these kinds give their shape rule and parameter list (`lmc info`
counts them) and `lmc render` refuses them.  Internal convs pad XLA-SAME (TF-origin blocks)."""
from dataclasses import dataclass
from typing import ClassVar

from ..fields import Activation
from ..types import TensorType
from . import Layer, register
from ._shape import Params, ceil_div, image, make_divisible


def _se(p: Params, name: str, b: int, c: int, r: int, hw: int) -> None:
    """Squeeze-excite on c channels with r hidden: GAP → 1×1 (c→r, bias) → act → 1×1 (r→c,
    bias) → gate → x·gate.  The 1×1 weights are stored conv-shaped [r, c, 1, 1] / [c, r, 1, 1]."""
    p.add(f"{name}reduce.weight", (r, c, 1, 1), "he", fan_in=c, fan_out=r)
    p.add(f"{name}reduce.bias", (r,), "zeros")
    p.add(f"{name}expand.weight", (c, r, 1, 1), "he", fan_in=r, fan_out=c)
    p.add(f"{name}expand.bias", (c,), "zeros")
    p.flops += 2 * b * c * hw + 4 * b * c * r


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

    def infer(self, x, net):
        b, _, h, w = image(x, self.ic)
        p = Params()
        for i in range(self.n_blocks):
            s = self.stride if i == 0 else 1
            bic = self.ic if i == 0 else self.oc
            mid = bic * self.expand
            if self.expand != 1:
                p.conv_bn(f"{i}.expand.", bic, mid, 1, b, h, w)
            h, w = ceil_div(h, s), ceil_div(w, s)
            p.conv_bn(f"{i}.dw.", mid, mid, self.k_size, b, h, w, groups=mid)
            if self.use_se:
                _se(p, f"{i}.se.", b, mid, max(1, bic // 4), h * w)
            p.conv_bn(f"{i}.project.", mid, self.oc, 1, b, h, w)
        return p.result(TensorType((b, self.oc, h, w)))


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

    def infer(self, x, net):
        b, _, h, w = image(x, self.ic)
        p = Params()
        e = self.expand_ch
        if e != self.ic:
            p.conv_bn("expand.", self.ic, e, 1, b, h, w)
        h, w = ceil_div(h, self.stride), ceil_div(w, self.stride)
        p.conv_bn("dw.", e, e, self.k_size, b, h, w, groups=e)
        if self.use_se:
            _se(p, "se.", b, e, make_divisible(e / 4), h * w)
        p.conv_bn("project.", e, self.oc, 1, b, h, w)
        return p.result(TensorType((b, self.oc, h, w)))


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

    def infer(self, x, net):
        b, _, h, w = image(x, self.ic)
        p = Params()
        for i in range(self.n_blocks):
            s = self.stride if i == 0 else 1
            bic = self.ic if i == 0 else self.oc
            mid = self.oc if self.expand == 1 else bic * self.expand
            h, w = ceil_div(h, s), ceil_div(w, s)
            p.conv_bn(f"{i}.fused.", bic, mid, self.k_size, b, h, w)
            if self.use_se:
                _se(p, f"{i}.se.", b, mid, max(1, bic // 4), h * w)
            if self.expand != 1:
                p.conv_bn(f"{i}.project.", mid, self.oc, 1, b, h, w)
        return p.result(TensorType((b, self.oc, h, w)))
