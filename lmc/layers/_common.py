"""Shared building blocks for layers: padding conventions and the conv → BN → act unit."""
from __future__ import annotations

from ..errors import ShapeError
from ..prims import same_pad


def pads(h: int, w: int, k: int, s: int, style: str) -> tuple[int, int, int, int]:
    """(ph_lo, ph_hi, pw_lo, pw_hi).  xla_same: XLA SAME (extra row on the high side);
    symmetric: (k−1)//2 on both sides (torchvision); valid: none."""
    if style == "valid":
        return (0, 0, 0, 0)
    if style == "symmetric":
        p = (k - 1) // 2
        return (p, p, p, p)
    return same_pad(h, k, s) + same_pad(w, k, s)


def check_channels(x, ic: int, what: str = "ic"):
    if x.type.rank != 4:
        raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.type.shape_str()}",
                         hint="image layers need an `input: {channels, height, width}` and must come before `flatten`")
    c = x.type.dims[1]
    if c != ic:
        raise ShapeError(f"{what}={ic} but the incoming tensor has {c} channels ({x.type.shape_str()})")


def act(g, x, kind):
    kind = kind.value if hasattr(kind, "value") else kind
    if kind == "identity":
        return x
    return g.op("act", x, kind=kind)


def conv(g, x, name, ic, oc, k, stride, style, groups=1, bias=False, bias_flops=None):
    """A convolution (optionally with bias).  Weight [oc, ic/groups, k, k], He init (fan-out).
    bias_flops=0: the bias is not counted (the seed's FLOP count for the kinds that were
    spec-only, which `lmc info` keeps)."""
    h, w = x.type.dims[2:]
    wt = g.param(f"{name}weight", (oc, ic // groups, k, k), "he",
                 fan_in=(ic // groups) * k * k, fan_out=(oc // groups) * k * k)
    y = g.op("conv", x, params=[wt], stride=stride, pad=pads(h, w, k, stride, style), groups=groups)
    if bias:
        b = g.param(f"{name}bias", (oc,), "zeros")
        y = g.op("bias", y, params=[b], flops=bias_flops)
    return y


def bn(g, x, name):
    c = x.type.dims[1]
    gamma = g.param(f"{name}gamma", (c,), "ones")
    beta = g.param(f"{name}beta", (c,), "zeros")
    rm = g.stat(f"{name}running_mean", (c,), "zeros")
    rv = g.stat(f"{name}running_var", (c,), "ones")
    return g.op("batch_norm", x, params=[gamma, beta], state=[rm, rv])


def conv_bn(g, x, name, ic, oc, k, stride, style, activation, groups=1):
    """conv (no bias) → batch norm → activation; params weight, gamma, beta (Lean kit order)."""
    y = conv(g, x, name, ic, oc, k, stride, style, groups)
    y = bn(g, y, name)
    return act(g, y, activation)


def ln(g, x, name, axis=-1):
    """LayerNorm over `axis` (the last: tokens; 1: channels of NCHW): params gamma, beta."""
    d = x.type.dims[axis]
    gamma = g.param(f"{name}gamma", (d,), "ones")
    beta = g.param(f"{name}beta", (d,), "zeros")
    return g.op("layer_norm", x, params=[gamma, beta], axis=axis)


def norm(g, x, name, kind):
    """Channel norm of NCHW x: `bn` (batch norm, running state) or `ln` (LayerNorm over C)."""
    return bn(g, x, name) if getattr(kind, "value", kind) == "bn" else ln(g, x, name, axis=1)


STAGE_KINDS = ("residual_block", "bottleneck_block")


def position(layer, net) -> int | None:
    """Index of `layer` in `net.layers` (by identity), or None when used on its own."""
    for pos, entry in enumerate(getattr(net, "layers", ()) or ()):
        if entry.layer is layer:
            return pos
    return None


def layer_input(g, j: int):
    """The value entering spec layer j (the graph input for layer 0)."""
    return g.layer_outputs[j - 1] if j > 0 else g.x


def stage_taps(g, net, pos: int) -> list:
    """(index, output value) of the ResNet stages (residual_block / bottleneck_block) before
    layer `pos`, read from the graph."""
    return [(j, g.layer_outputs[j]) for j in range(pos) if net.layers[j].layer.kind in STAGE_KINDS]
