"""Mobile (TF-origin) blocks built from conv / batch_norm / act / add primitives, so they lower
and get their backward from the graph: separable_conv, inverted_residual (MobileNetV2) and uib
(MobileNetV4).  Their internal convs pad as the net's `conv_pad_style` says: XLA-SAME by
default, as the reference's mobile helpers do; `symmetric` ((k−1)//2 each side) in the specs
that claim torchvision's MobileNets, whose strided depthwise convs pad so
(tests/test_published.py)."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import check_channels, conv_bn, drop_path


def style(net) -> str:
    """Block-internal padding: the net's conv_pad_style (xla_same without a net)."""
    return net.conv_pad_style.value if net is not None else "xla_same"


@register("separable_conv")
@dataclass(frozen=True)
class SeparableConv(Layer):
    """Depthwise-separable conv: depthwise 3×3 (stride, groups = ic) → BN → relu6 → pointwise
    1×1 ic→oc → BN → relu6.  Output [B, oc, ⌈H/s⌉, ⌈W/s⌉].
    Params: dw.weight [ic,1,3,3], dw.gamma, dw.beta, pw.weight [oc,ic,1,1], pw.gamma, pw.beta.
    Assumptions: NCHW input with ic channels; padding per `conv_pad_style` (XLA-SAME by
    default: the reference's JAX `sep_conv`)."""
    ic: int
    oc: int
    stride: int = 1
    examples: ClassVar = [(dict(ic=3, oc=4, stride=1), TensorType((2, 3, 5, 5))),
                          (dict(ic=2, oc=5, stride=2), TensorType((2, 2, 6, 7)))]
    rejects: ClassVar = [(dict(ic=3, oc=4), (2, 2, 5, 5), ["ic=3", "2 channels"])]

    def build(self, g, x, net):
        check_channels(x, self.ic)
        x = conv_bn(g, x, "dw.", self.ic, self.ic, 3, self.stride, style(net), "relu6", groups=self.ic)
        return conv_bn(g, x, "pw.", self.ic, self.oc, 1, 1, style(net), "relu6")


@register("inverted_residual")
@dataclass(frozen=True)
class InvertedResidual(Layer):
    """MobileNetV2 stage of n_blocks inverted residuals.  Block i (stride `stride` for i = 0,
    else 1; input bic = ic, then oc; mid = bic·expand): 1×1 expand → BN → relu6 (only if
    expand ≠ 1), depthwise 3×3 → BN → relu6, 1×1 project → BN (linear), + input when the
    stride is 1 and bic = oc (no activation after the add).
    Params per block: [expand.weight [mid,bic,1,1], γ, β], dw.weight [mid,1,3,3], γ, β,
    project.weight [oc,mid,1,1], γ, β.
    Assumptions: NCHW input with ic channels; padding inside the block per `conv_pad_style`
    (XLA-SAME by default; torchvision's is symmetric)."""
    ic: int
    oc: int
    expand: int
    stride: int
    n_blocks: int
    examples: ClassVar = [(dict(ic=4, oc=4, expand=2, stride=1, n_blocks=2), TensorType((2, 4, 5, 5))),
                          (dict(ic=3, oc=5, expand=1, stride=2, n_blocks=1), TensorType((2, 3, 6, 6)))]
    rejects: ClassVar = [(dict(ic=4, oc=4, expand=2, stride=1, n_blocks=1), (2, 3, 5, 5), ["ic=4", "3 channels"])]

    def build(self, g, x, net):
        check_channels(x, self.ic)
        for i in range(self.n_blocks):
            s = self.stride if i == 0 else 1
            bic = self.ic if i == 0 else self.oc
            mid = bic * self.expand
            h = x
            if self.expand != 1:
                h = conv_bn(g, h, f"{i}.expand.", bic, mid, 1, 1, style(net), "relu6")
            h = conv_bn(g, h, f"{i}.dw.", mid, mid, 3, s, style(net), "relu6", groups=mid)
            h = conv_bn(g, h, f"{i}.project.", mid, self.oc, 1, 1, style(net), "identity")
            x = g.op("add", drop_path(g, h, net), x) if s == 1 and bic == self.oc else h
        return x


@register("uib")
@dataclass(frozen=True)
class Uib(Layer):
    """MobileNetV4 Universal Inverted Bottleneck, mid = ic·expand, ReLU:
    [pre_dw: depthwise pre_d_wk×pre_d_wk on ic → BN, no activation] → expand 1×1 ic→mid → BN →
    relu (always present) → [post_dw: depthwise post_d_wk×post_d_wk on mid → BN → relu] →
    project 1×1 mid→oc → BN (linear) → + input when stride = 1 and ic = oc.
    The stride is taken by post_dw when present, else by pre_dw (timm / the paper's code).
    Variants: ExtraDW (pre, post > 0), IB (pre = 0), ConvNeXt-like (post = 0), FFN (both 0).
    Params: [pre_dw.weight [ic,1,p,p], γ, β], expand.weight [mid,ic,1,1], γ, β,
    [post_dw.weight [mid,1,q,q], γ, β], project.weight [oc,mid,1,1], γ, β.
    Assumptions: NCHW input with ic channels; padding per `conv_pad_style`.  Deviates from the
    Lean kit, which applies ReLU after pre_dw and always strides there (same shapes and
    parameters); a stride > 1 with both kernels 0 is refused (nothing would apply it)."""
    ic: int
    oc: int
    expand: int
    stride: int
    pre_d_wk: int
    post_d_wk: int
    zero_ok: ClassVar = frozenset({"pre_d_wk", "post_d_wk"})
    examples: ClassVar = [(dict(ic=4, oc=4, expand=2, stride=1, pre_d_wk=3, post_d_wk=3), TensorType((2, 4, 5, 5))),
                          (dict(ic=3, oc=5, expand=2, stride=2, pre_d_wk=0, post_d_wk=3), TensorType((2, 3, 6, 6))),
                          (dict(ic=3, oc=4, expand=3, stride=2, pre_d_wk=5, post_d_wk=0), TensorType((1, 3, 7, 7))),
                          (dict(ic=4, oc=4, expand=2, stride=1, pre_d_wk=0, post_d_wk=0), TensorType((2, 4, 3, 3)))]
    rejects: ClassVar = [(dict(ic=4, oc=4, expand=2, stride=2, pre_d_wk=0, post_d_wk=0), (2, 4, 6, 6),
            ["stride=2", "pre_d_wk=0", "post_d_wk=0"])]

    def build(self, g, x, net):
        check_channels(x, self.ic)
        if self.stride != 1 and not self.pre_d_wk and not self.post_d_wk:
            raise ShapeError(f"stride={self.stride} needs a depthwise conv to apply it, but pre_d_wk=0 and post_d_wk=0")
        mid = self.ic * self.expand
        h = x
        if self.pre_d_wk:
            s = 1 if self.post_d_wk else self.stride
            h = conv_bn(g, h, "pre_dw.", self.ic, self.ic, self.pre_d_wk, s, style(net), "identity", groups=self.ic)
        h = conv_bn(g, h, "expand.", self.ic, mid, 1, 1, style(net), "relu")
        if self.post_d_wk:
            h = conv_bn(g, h, "post_dw.", mid, mid, self.post_d_wk, self.stride, style(net), "relu", groups=mid)
        h = conv_bn(g, h, "project.", mid, self.oc, 1, 1, style(net), "identity")
        return g.op("add", drop_path(g, h, net), x) if self.stride == 1 and self.ic == self.oc else h
