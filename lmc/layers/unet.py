"""U-Net kinds: unet_down (a primitive graph: it lowers), unet_up and bilinear_upsample
(spec-only: bilinear resize and channel concat are not primitives yet).

Skip pairing (the reference's rule): each unet_up takes the skip of the most recent unpaired
unet_down (last in, first out); with none pending it takes the first unused earlier tap of
exactly [B, oc, 2H, 2W] — a residual_block / bottleneck_block stage output or the input of
a max_pool that needs no padding — so a ResNet can serve as the contracting path."""
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShapeError
from ..types import TensorType
from . import Layer, register
from ._common import check_channels, conv_bn
from ._shape import STAGE_KINDS, Params, image, types_before


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

    def build(self, g, x, net):
        check_channels(x, self.ic)
        x = conv_bn(g, x, "conv1.", self.ic, self.oc, 3, 1, "symmetric", "relu")
        x = conv_bn(g, x, "conv2.", self.oc, self.oc, 3, 1, "symmetric", "relu")
        return g.op("max_pool", x, size=2, stride=2)


def _skip_type(layer, net, x: TensorType) -> TensorType | None:
    """The skip tensor `layer` (a unet_up) pairs with; None when used outside a net.  Replays
    the pairing of every unet_up up to this one so that taps are consumed in order."""
    found = types_before(layer, net, x.dims[0])
    if found is None:
        return None
    pos, types = found
    pending, taps, used = [], [], set()
    for j in range(pos + 1):
        kind = net.layers[j].layer.kind
        t_in = types[j]
        if kind == "unet_down":
            pending.append(j)
        elif kind in STAGE_KINDS and j < pos:
            taps.append(types[j + 1])
        elif kind == "max_pool" and t_in.rank == 4:
            s = net.layers[j].layer.stride
            if t_in.dims[2] % s == 0 and t_in.dims[3] % s == 0:
                taps.append(t_in)
        elif kind == "unet_up":
            up = net.layers[j].layer
            if pending:
                d = pending.pop()
                b, _, h, w = types[d].dims
                skip = TensorType((b, net.layers[d].layer.oc, h, w))
                where = f"the matching unet_down (layer {d})"
            else:
                b, _, h, w = t_in.dims
                want = (b, up.oc, 2 * h, 2 * w)
                k = next((k for k, t in enumerate(taps) if k not in used and t.dims == want), None)
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
    return None


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

    def infer(self, x, net):
        b, _, h, w = image(x, self.ic)
        found = _skip_type(self, net, x)
        if found is not None:
            skip, where = found
            if skip.dims[1] != self.oc:
                raise ShapeError(f"oc={self.oc} but {where} gives a skip with {skip.dims[1]} channels")
            if skip.dims[2:] != (2 * h, 2 * w):
                raise ShapeError(f"upsampling {h}x{w} gives {2 * h}x{2 * w} but {where} gives a "
                                 f"{skip.dims[2]}x{skip.dims[3]} skip",
                                 hint="U-Net inputs need sides divisible by 2 per unet_down")
        p = Params()
        p.flops += 4 * b * self.ic * 4 * h * w
        p.conv_bn("conv1.", self.ic + self.oc, self.oc, 3, b, 2 * h, 2 * w)
        p.conv_bn("conv2.", self.oc, self.oc, 3, b, 2 * h, 2 * w)
        return p.result(TensorType((b, self.oc, 2 * h, 2 * w)))


@register("bilinear_upsample")
@dataclass(frozen=True)
class BilinearUpsample(Layer):
    """Bilinear resize by an integer factor: [B, C, H, W] → [B, C, scale·H, scale·W];
    half-pixel centres (align_corners = false), edges clamped (PyTorch / JAX default).
    Assumptions: NCHW input."""
    scale: int
    examples: ClassVar = [(dict(scale=2), TensorType((2, 3, 4, 5)))]

    def infer(self, x, net):
        b, c, h, w = image(x)
        out = TensorType((b, c, self.scale * h, self.scale * w))
        p = Params()
        p.flops += 4 * out.size
        return p.result(out)
