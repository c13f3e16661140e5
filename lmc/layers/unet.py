"""U-Net kinds: unet_down, unet_up and bilinear_upsample.

Skip pairing (the reference's rule): each unet_up takes the skip of the most recent unpaired
unet_down (last in, first out); with none pending it takes the first unused earlier tap of
exactly [B, oc, 2H, 2W] — a residual_block / bottleneck_block stage output or the input of
a max_pool that needs no padding — so a ResNet can serve as the contracting path."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import STAGE_KINDS, check_channels, conv_bn, layer_input, position
from lmc.layers._shape import image


@register("unet_down")
@dataclass(frozen=True)
class UnetDown(Layer):
    """U-Net contracting step: conv 3×3 ic→oc → BN → relu → conv 3×3 oc→oc → BN → relu (this
    feature map is the skip for the matching unet_up) → max-pool 2×2/2 → [B, oc, ⌈H/2⌉, ⌈W/2⌉].
    Params: conv1.{weight [oc,ic,3,3], γ, β}, conv2.{weight [oc,oc,3,3], γ, β}.
    Assumptions: NCHW input with ic channels; pad 1 (stride 1, so every pad style agrees)."""
    ic: int
    oc: int
    examples: ClassVar = [(dict(ic=3, oc=4), TensorType((2, 3, 6, 6))),
                          (dict(ic=2, oc=3), TensorType((1, 2, 5, 7)))]
    rejects: ClassVar = [(dict(ic=3, oc=4), (2, 5, 6, 6), ["ic=3", "5 channels"])]

    def build(self, g, x, net):
        check_channels(x, self.ic)
        x = conv_bn(g, x, "conv1.", self.ic, self.oc, 3, 1, "symmetric", "relu")
        x = conv_bn(g, x, "conv2.", self.oc, self.oc, 3, 1, "symmetric", "relu")
        return g.op("max_pool", x, size=2, stride=2)


def _skip(layer, g, net, x):
    """(value, where) of the skip `layer` (a unet_up) pairs with, read from the graph: replays
    the pairing of every unet_up up to this one so that taps are consumed in order.  Used on
    its own (not inside a net), the skip is a free value of the shape it needs."""
    pos = position(layer, net)
    b, _, h, w = x.type.dims
    if pos is None:
        return g.free(TensorType((b, layer.oc, 2 * h, 2 * w))), "its skip"
    pending, taps, used = [], [], set()
    for j in range(pos + 1):
        kind = net.layers[j].layer.kind
        t_in = layer_input(g, j).type
        if kind == "unet_down":
            pending.append(j)
        elif kind in STAGE_KINDS and j < pos:
            taps.append(g.layer_outputs[j])
        elif kind == "max_pool" and t_in.rank == 4:
            s = net.layers[j].layer.stride
            if t_in.dims[2] % s == 0 and t_in.dims[3] % s == 0:
                taps.append(layer_input(g, j))
        elif kind == "unet_up":
            up = net.layers[j].layer
            if pending:
                d = pending.pop()
                # the unet_down's output is its max_pool; the skip is what that pool read
                skip, where = g.layer_outputs[d].node.inputs[0], f"the matching unet_down (layer {d})"
            else:
                bj, _, hj, wj = t_in.dims
                want = (bj, up.oc, 2 * hj, 2 * wj)
                k = next((k for k, t in enumerate(taps) if k not in used and t.type.dims == want), None)
                if k is None:
                    if j == pos:
                        raise ShapeError(f"no skip to pair with: no unet_down is pending and no earlier stage output "
                                         f"or pooled map has shape {list(want)}",
                                         hint="each unet_up needs a unet_down before it (paired last in, first out)")
                    continue
                used.add(k)
                skip, where = taps[k], "its skip tap"
            if j == pos:
                return skip, where
    raise AssertionError("lmc bug: unet_up not found in its own net")


@register("unet_up")
@dataclass(frozen=True)
class UnetUp(Layer):
    """U-Net expanding step: bilinear ×2 of the input (ic channels) → concat [upsampled, skip]
    on channels (upsampled first; the skip has oc channels and 2H×2W, see the module doc) →
    conv 3×3 (ic+oc)→oc → BN → relu → conv 3×3 oc→oc → BN → relu → [B, oc, 2H, 2W].
    Params: conv1.{weight [oc,ic+oc,3,3], γ, β}, conv2.{weight [oc,oc,3,3], γ, β}.
    Assumptions: NCHW input with ic channels; a skip of [B, oc, 2H, 2W] exists."""
    ic: int
    oc: int
    examples: ClassVar = [(dict(ic=4, oc=2), TensorType((2, 4, 3, 3)))]
    rejects: ClassVar = [(dict(ic=4, oc=2), (2, 6, 3, 3), ["ic=4", "6 channels"])]

    @classmethod
    def net_before(cls, fields, x):
        # a unet_down giving the [B, oc, 2H, 2W] skip, then a conv_bn to ic channels
        b, ic, h, w = x.dims
        oc = fields["oc"]
        return ([("unet_down", dict(ic=1, oc=oc)), ("conv_bn", dict(ic=oc, oc=ic, k_size=3))], (b, 1, 2 * h, 2 * w))

    def build(self, g, x, net):
        check_channels(x, self.ic)
        _, _, h, w = x.type.dims
        skip, where = _skip(self, g, net, x)
        st = skip.type
        if st.dims[1] != self.oc:
            raise ShapeError(f"oc={self.oc} but {where} gives a skip with {st.dims[1]} channels")
        if st.dims[2:] != (2 * h, 2 * w):
            raise ShapeError(f"upsampling {h}x{w} gives {2 * h}x{2 * w} but {where} gives a "
                             f"{st.dims[2]}x{st.dims[3]} skip",
                             hint="U-Net inputs need sides divisible by 2 per unet_down")
        y = g.op("concat", g.op("upsample", x, scale=2), skip, axis=1)
        y = conv_bn(g, y, "conv1.", self.ic + self.oc, self.oc, 3, 1, "symmetric", "relu")
        return conv_bn(g, y, "conv2.", self.oc, self.oc, 3, 1, "symmetric", "relu")


@register("bilinear_upsample")
@dataclass(frozen=True)
class BilinearUpsample(Layer):
    """Bilinear resize by an integer factor: [B, C, H, W] → [B, C, scale·H, scale·W];
    half-pixel centres (align_corners = false), edges clamped (PyTorch / JAX default).
    Assumptions: NCHW input."""
    scale: int
    examples: ClassVar = [(dict(scale=2), TensorType((2, 3, 4, 5)))]
    rejects: ClassVar = [(dict(scale=2), (2, 6), ["[2, 6]"])]

    def build(self, g, x, net):
        image(x.type)
        return g.op("upsample", x, scale=self.scale)
