"""Multi-branch CNN blocks from the reference's bestiary: fire_module, inception_module,
aspp_module, darknet_block, csp_block, dense_block, transition_layer, shuffle_block,
shuffle_v2_block, built from conv / batch_norm / act units and concat, slice, avg_pool,
dilated_conv, broadcast, channel_shuffle, leaky_relu and max_pool.  Convolutions are unbiased and followed by batch norm
unless stated; "same" padding keeps H×W at stride 1 and gives ⌈H/2⌉ at stride 2.

Parameter lists follow the Lean kit's `Layer.nParams` (layers.md §3) where it describes a
real architecture; where it is marked approximate or is inconsistent (shuffle blocks) the
published architecture is used and the docstring says so."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import bn, channel_shuffle, conv, conv_bn
from lmc.layers._shape import image


@register("fire_module")
@dataclass(frozen=True)
class FireModule(Layer):
    """SqueezeNet fire module: squeeze 1×1 ic→squeeze → BN → relu, then expand1x1 (1×1) and
    expand3x3 (3×3, pad 1) on the squeezed map, each → BN → relu, concatenated [e1, e3] on
    channels → [B, expand1x1 + expand3x3, H, W].
    Params: squeeze.{weight [sq,ic,1,1], γ, β}, expand1x1.{weight [e1,sq,1,1], γ, β},
    expand3x3.{weight [e3,sq,3,3], γ, β} (the reference's JAX version: BN instead of the
    paper's conv biases).  Assumptions: NCHW input with ic channels."""
    ic: int
    squeeze: int
    expand1x1: int
    expand3x3: int
    examples: ClassVar = [(dict(ic=8, squeeze=2, expand1x1=4, expand3x3=4), TensorType((2, 8, 5, 5)))]
    rejects: ClassVar = [(dict(ic=8, squeeze=2, expand1x1=4, expand3x3=4), (2, 6, 5, 5), ["ic=8", "6 channels"])]

    def build(self, g, x, net):
        image(x.type, self.ic)
        s = conv_bn(g, x, "squeeze.", self.ic, self.squeeze, 1, 1, "symmetric", "relu")
        e1 = conv_bn(g, s, "expand1x1.", self.squeeze, self.expand1x1, 1, 1, "symmetric", "relu")
        e3 = conv_bn(g, s, "expand3x3.", self.squeeze, self.expand3x3, 3, 1, "symmetric", "relu")
        return g.op("concat", e1, e3, axis=1)


@register("inception_module")
@dataclass(frozen=True)
class InceptionModule(Layer):
    """GoogLeNet inception module, four branches concatenated on channels: 1×1 → b1out;
    1×1 → b2reduce → 3×3 → b2out; 1×1 → b3reduce → 5×5 → b3out; 3×3 max-pool (stride 1) →
    1×1 → b4out; every conv → BN → relu.  Output [B, b1out+b2out+b3out+b4out, H, W].
    Params: b1, b2_reduce, b2, b3_reduce, b3, b4, each {weight, γ, β}.
    Assumptions: NCHW input with ic channels."""
    ic: int
    b1out: int
    b2reduce: int
    b2out: int
    b3reduce: int
    b3out: int
    b4out: int
    examples: ClassVar = [(dict(ic=6, b1out=2, b2reduce=2, b2out=3, b3reduce=1, b3out=2, b4out=2),
                           TensorType((2, 6, 5, 5)))]
    rejects: ClassVar = [(dict(ic=6, b1out=2, b2reduce=2, b2out=3, b3reduce=1, b3out=2, b4out=2), (2, 5, 5, 5),
                         ["ic=6", "5 channels"])]

    def build(self, g, x, net):
        b, _, h, w = image(x.type, self.ic)
        u = lambda t, name, ic, oc, k: conv_bn(g, t, name, ic, oc, k, 1, "symmetric", "relu")
        b1 = u(x, "b1.", self.ic, self.b1out, 1)
        b2 = u(u(x, "b2_reduce.", self.ic, self.b2reduce, 1), "b2.", self.b2reduce, self.b2out, 3)
        b3 = u(u(x, "b3_reduce.", self.ic, self.b3reduce, 1), "b3.", self.b3reduce, self.b3out, 5)
        # torchvision's MaxPool2d(3, 1, padding=1): pad given, so maps smaller than 3×3 work too
        pool = g.op("max_pool", x, size=3, stride=1, pad=(1, 1, 1, 1))
        b4 = u(pool, "b4.", self.ic, self.b4out, 1)
        return g.op("concat", b1, b2, b3, b4, axis=1)


@register("aspp_module")
@dataclass(frozen=True)
class AsppModule(Layer):
    """DeepLab v3+ atrous spatial pyramid pooling: five branches ic→oc — 1×1; 3×3 dilated by
    6, 12, 18; global average pool → 1×1 → broadcast — each conv with bias → BN → relu,
    concatenated (5·oc) → 1×1 → oc (bias, BN, relu).  Output [B, oc, H, W].
    Params: b0, b1, b2, b3, pool, project, each {weight, bias, γ, β} (the Lean kit's count).
    Assumptions: NCHW input with ic channels; dilated convs pad to keep H×W."""
    ic: int
    oc: int
    examples: ClassVar = [(dict(ic=4, oc=3), TensorType((2, 4, 6, 6)))]
    rejects: ClassVar = [(dict(ic=4, oc=3), (2, 2, 6, 6), ["ic=4", "2 channels"])]

    def build(self, g, x, net):
        b, _, h, w = image(x.type, self.ic)
        ic, oc = self.ic, self.oc

        def unit(t, name, cin, k, dilation=1):
            # the seed's FLOPs: convs and BN only (no biases, relus, pooling, broadcast)
            if dilation == 1:
                y = conv(g, t, name, cin, oc, k, 1, "symmetric", bias=True, bias_flops=0)
            else:
                wt = g.param(f"{name}weight", (oc, cin, k, k), "he", fan_in=cin * k * k, fan_out=oc * k * k)
                p = dilation * (k - 1) // 2
                y = g.op("dilated_conv", t, params=[wt], stride=1, pad=(p, p, p, p), groups=1, dilation=dilation)
                y = g.op("bias", y, params=[g.param(f"{name}bias", (oc,), "zeros")], flops=0)
            return g.op("act", bn(g, y, name), kind="relu", flops=0)

        branches = [unit(x, "b0.", ic, 1)] + [unit(x, f"b{i}.", ic, 3, d) for i, d in ((1, 6), (2, 12), (3, 18))]
        pooled = g.op("reshape", g.op("global_avg_pool", x, flops=0), dims=(b, ic, 1, 1))
        branches.append(g.op("broadcast", unit(pooled, "pool.", ic, 1), dims=(b, oc, h, w)))
        return unit(g.op("concat", *branches, axis=1), "project.", 5 * oc, 1)


def _leaky(g, x, name, ic, oc, k):
    """conv (no bias, stride 1, "same") → BN → leaky relu (0.1)."""
    y = bn(g, conv(g, x, name, ic, oc, k, 1, "symmetric"), name)
    return g.op("leaky_relu", y, alpha=0.1)


def _darknet_unit(g, x, name: str):
    c = x.type.dims[1]
    half = max(1, c // 2)
    y = _leaky(g, x, f"{name}conv1.", c, half, 1)
    return g.op("add", _leaky(g, y, f"{name}conv2.", half, c, 3), x)


@register("darknet_block")
@dataclass(frozen=True)
class DarknetBlock(Layer):
    """n_blocks Darknet-53 residual units on `channels` channels: 1×1 c→c/2 → BN → leaky relu
    (0.1) → 3×3 c/2→c → BN → leaky relu → + input.  Output [B, c, H, W].
    Params per unit: conv1.{weight [c/2,c,1,1], γ, β}, conv2.{weight [c,c/2,3,3], γ, β}.
    Assumptions: NCHW input with `channels` channels (spec-only: leaky relu is not a primitive)."""
    inferred: ClassVar = {"channels": 1}      # filled from the input when left out or `auto`
    channels: int
    n_blocks: int
    examples: ClassVar = [(dict(channels=4, n_blocks=2), TensorType((2, 4, 5, 5)))]
    rejects: ClassVar = [(dict(channels=4, n_blocks=1), (2, 6, 5, 5), ["channels=4", "6 channels"])]

    def build(self, g, x, net):
        image(x.type, self.channels, "channels")
        for i in range(self.n_blocks):
            x = _darknet_unit(g, x, f"{i}.")
        return x


@register("csp_block")
@dataclass(frozen=True)
class CspBlock(Layer):
    """Cross-stage-partial stage: two 1×1 convs split ic into halves (half = max(1, ic/2));
    one half runs n_blocks Darknet units; concat [units, other half] → 1×1 → oc; each conv →
    BN → leaky relu.  Output [B, oc, H, W].
    Params: split1, split2 {weight [half,ic,1,1], γ, β}, n × darknet unit on half channels,
    fuse.{weight [oc,2·half,1,1], γ, β}.  Assumptions: NCHW input with ic channels."""
    ic: int
    oc: int
    n_blocks: int
    examples: ClassVar = [(dict(ic=4, oc=6, n_blocks=1), TensorType((2, 4, 5, 5)))]
    rejects: ClassVar = [(dict(ic=4, oc=6, n_blocks=1), (2, 3, 5, 5), ["ic=4", "3 channels"])]

    def build(self, g, x, net):
        image(x.type, self.ic)
        half = max(1, self.ic // 2)
        a = _leaky(g, x, "split1.", self.ic, half, 1)
        c = _leaky(g, x, "split2.", self.ic, half, 1)
        for i in range(self.n_blocks):
            a = _darknet_unit(g, a, f"{i}.")
        return _leaky(g, g.op("concat", a, c, axis=1), "fuse.", 2 * half, self.oc, 1)


@register("dense_block")
@dataclass(frozen=True)
class DenseBlock(Layer):
    """DenseNet-BC dense block: n_layers × (BN → relu → 1×1 conv c_i → 4·growth_rate → BN →
    relu → 3×3 conv → growth_rate), each output concatenated to the input; c_i = ic + i·gr.
    Output [B, ic + n_layers·growth_rate, H, W].
    Params per layer: norm1 γ, β [c_i], conv1.weight [4gr,c_i,1,1], conv1.bias [4gr], norm2 γ, β
    [4gr], conv2.weight [gr,4gr,3,3], conv2.bias [gr] (the Lean kit's count has conv biases;
    torchvision's DenseNet has none).  Assumptions: NCHW input with ic channels."""
    ic: int
    growth_rate: int
    n_layers: int
    examples: ClassVar = [(dict(ic=4, growth_rate=2, n_layers=3), TensorType((2, 4, 5, 5)))]
    rejects: ClassVar = [(dict(ic=4, growth_rate=2, n_layers=1), (2, 3, 5, 5), ["ic=4", "3 channels"])]

    def build(self, g, x, net):
        image(x.type, self.ic)
        gr = self.growth_rate
        c = self.ic
        # the seed's FLOPs: BN and convs only (no biases, relus)
        for i in range(self.n_layers):
            y = g.op("act", bn(g, x, f"{i}.norm1."), kind="relu", flops=0)
            y = conv(g, y, f"{i}.conv1.", c, 4 * gr, 1, 1, "symmetric", bias=True, bias_flops=0)
            y = g.op("act", bn(g, y, f"{i}.norm2."), kind="relu", flops=0)
            y = conv(g, y, f"{i}.conv2.", 4 * gr, gr, 3, 1, "symmetric", bias=True, bias_flops=0)
            x = g.op("concat", x, y, axis=1)
            c += gr
        return x


@register("transition_layer")
@dataclass(frozen=True)
class TransitionLayer(Layer):
    """DenseNet transition: BN → relu → 1×1 conv ic→oc (+ bias) → 2×2 average pool, stride 2
    → [B, oc, ⌊H/2⌋, ⌊W/2⌋].  Params: norm.gamma, norm.beta [ic], weight [oc,ic,1,1], bias [oc].
    Assumptions: NCHW input with ic channels, at least 2×2."""
    ic: int
    oc: int
    examples: ClassVar = [(dict(ic=6, oc=3), TensorType((2, 6, 4, 5)))]
    rejects: ClassVar = [(dict(ic=6, oc=3), (2, 4, 4, 4), ["ic=6", "4 channels"]),
                          (dict(ic=4, oc=8), (2, 4, 1, 1), ["1x1"])]

    def build(self, g, x, net):
        _, _, h, w = image(x.type, self.ic)
        if h < 2 or w < 2:
            raise ShapeError(f"a 2x2 average pool needs at least 2x2 pixels, got {h}x{w}")
        # the seed's FLOPs: BN and the conv only (no relu, bias, pooling)
        y = g.op("act", bn(g, x, "norm."), kind="relu", flops=0)
        y = conv(g, y, "", self.ic, self.oc, 1, 1, "symmetric", bias=True, bias_flops=0)
        return g.op("avg_pool", y, size=2, stride=2, pad=(0, 0, 0, 0), flops=0)


@register("shuffle_block")
@dataclass(frozen=True)
class ShuffleBlock(Layer):
    """ShuffleNet v1 stage of n_units: unit 0 has stride 2 and concatenates a 3×3/2 average
    pool of its input (ic channels) with its branch (oc − ic channels); units 1.. are residual
    (branch oc, + input).  Branch: 1×1 group conv (groups) → mid → BN → relu → channel
    shuffle → depthwise 3×3 (stride) → BN → 1×1 group conv → BN; relu after the join.
    mid = max(1, oc/4).  Output [B, oc, ⌈H/2⌉, ⌈W/2⌉].
    Params per unit: gconv1.{weight [mid,c/g,1,1], γ, β}, dw.{weight [mid,1,3,3], γ, β},
    gconv2.{weight [out,mid/g,1,1], γ, β}.  The paper's concat unit (the Lean kit's count
    gives unit 0 a full oc-wide branch, which could not be joined to an ic-wide shortcut).
    Assumptions: NCHW input with ic channels; oc > ic; groups divides ic, mid, oc − ic and oc."""
    ic: int
    oc: int
    groups: int
    n_units: int
    examples: ClassVar = [(dict(ic=4, oc=16, groups=2, n_units=2), TensorType((2, 4, 6, 6)))]
    rejects: ClassVar = [(dict(ic=4, oc=16, groups=3, n_units=1), (2, 4, 6, 6), ["groups=3", "4 channels"]),
                          (dict(ic=8, oc=8, groups=2, n_units=1), (2, 8, 6, 6), ["oc=8", "ic=8"])]

    def build(self, g, x, net):
        image(x.type, self.ic)
        if self.oc <= self.ic:
            raise ShapeError(f"oc={self.oc} must exceed ic={self.ic}: the strided unit concatenates "
                             f"the pooled input ({self.ic} channels) with its branch")
        gr, mid = self.groups, max(1, self.oc // 4)
        # the seed's FLOPs: three conv_bn units with an activation each; no pool, add, final relu
        u = lambda t, name, ic, oc, k, s, groups, a: conv_bn(g, t, name, ic, oc, k, s, "symmetric", a, groups,
                                                            seed_act_flops=True)
        for i in range(self.n_units):
            cin, out = (self.ic, self.oc - self.ic) if i == 0 else (self.oc, self.oc)
            for c in (cin, mid, out):
                if c % gr:
                    raise ShapeError(f"groups={gr} does not divide {c} channels")
            s = 2 if i == 0 else 1
            y = u(x, f"{i}.gconv1.", cin, mid, 1, 1, gr, "relu")
            y = u(channel_shuffle(g, y, gr), f"{i}.dw.", mid, mid, 3, s, mid, "identity")
            y = u(y, f"{i}.gconv2.", mid, out, 1, 1, gr, "identity")
            if i == 0:
                y = g.op("concat", g.op("avg_pool", x, size=3, stride=2, pad=(1, 1, 1, 1), flops=0), y, axis=1)
            else:
                y = g.op("add", y, x, flops=0)
            x = g.op("act", y, kind="relu", flops=0)
        return x


@register("shuffle_v2_block")
@dataclass(frozen=True)
class ShuffleV2Block(Layer):
    """ShuffleNet v2 stage of n_units (torchvision's InvertedResidual), h = oc/2.  Unit 0
    (stride 2): branch1 = depthwise 3×3/2 on ic → BN → 1×1 ic→h → BN → relu; branch2 = 1×1
    ic→h → BN → relu → depthwise 3×3/2 → BN → 1×1 h→h → BN → relu; concat, shuffle.  Units 1..:
    split channels in half, branch2 (h→h) on one half, concat, shuffle.
    Output [B, oc, ⌈H/2⌉, ⌈W/2⌉].  Params: unit 0 branch1.dw, branch1.pw, then per unit
    branch2.pw1, branch2.dw, branch2.pw2, each {weight, γ, β} (the exact architecture; the
    Lean kit's count is an approximation).  Assumptions: NCHW input with ic channels; oc even."""
    ic: int
    oc: int
    n_units: int
    examples: ClassVar = [(dict(ic=4, oc=8, n_units=2), TensorType((2, 4, 6, 6)))]
    rejects: ClassVar = [(dict(ic=4, oc=8, n_units=1), (2, 5, 6, 6), ["ic=4", "5 channels"]),
                          (dict(ic=4, oc=7, n_units=1), (2, 4, 6, 6), ["oc=7"])]

    def build(self, g, x, net):
        b, _, h, w = image(x.type, self.ic)
        if self.oc % 2:
            raise ShapeError(f"oc={self.oc} must be even (two branches of oc/2 = {self.oc / 2} channels)")
        half = self.oc // 2
        # the seed's FLOPs: every conv_bn unit counted with an activation
        u = lambda t, name, ic, oc, k, s, a, groups=1: conv_bn(g, t, name, ic, oc, k, s, "symmetric", a, groups,
                                                              seed_act_flops=True)
        b1 = u(x, "0.branch1.dw.", self.ic, self.ic, 3, 2, "identity", self.ic)
        b1 = u(b1, "0.branch1.pw.", self.ic, half, 1, 1, "relu")
        for i in range(self.n_units):
            if i == 0:
                keep, t, cin, s = b1, x, self.ic, 2
            else:
                bb, _, hh, ww = x.type.dims
                keep = g.op("slice", x, start=(0, 0, 0, 0), limit=(bb, half, hh, ww))
                t = g.op("slice", x, start=(0, half, 0, 0), limit=(bb, self.oc, hh, ww))
                cin, s = half, 1
            y = u(t, f"{i}.branch2.pw1.", cin, half, 1, 1, "relu")
            y = u(y, f"{i}.branch2.dw.", half, half, 3, s, "identity", half)
            y = u(y, f"{i}.branch2.pw2.", half, half, 1, 1, "relu")
            x = channel_shuffle(g, g.op("concat", keep, y, axis=1), 2)
        return x