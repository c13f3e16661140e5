"""Feature-pyramid kinds: fpn_module (Mask R-CNN FPN neck) and fpn_detect (the reference's
multi-scale anchor detection head), built from conv, channel_matmul, upsample, add and concat.

Both read the outputs of the last ResNet stages (residual_block / bottleneck_block layers,
C2..C5 at strides 4, 8, 16, 32) and must come right after the last one, so their input is C5.
Each level is twice the next one's size; the shape rule checks every tap's channels and size."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register
from lmc.layers._common import conv, position, stage_taps
from lmc.layers._shape import image


def _taps(layer, g, net, x, channels: tuple[int, ...], names: tuple[str, ...]) -> list:
    """Values of the levels named `names` (finest first, the last being x = C5): the ResNet
    stage outputs before `layer`, read from the graph and checked (channels, each level twice
    the next one's size).  Used on its own (not inside a net), free values of those shapes."""
    b, _, h5, w5 = x.type.dims
    n = len(channels)
    sizes = [(h5 << (n - 1 - i), w5 << (n - 1 - i)) for i in range(n)]
    pos = position(layer, net)
    if pos is None:
        return [g.free(TensorType((b, c, h, w))) for c, (h, w) in zip(channels[:-1], sizes)] + [x]
    taps = stage_taps(g, net, pos)
    if len(taps) < n:
        raise ShapeError(f"{layer.kind} reads the last {n} ResNet stage outputs ({', '.join(names)}) "
                         f"but only {len(taps)} residual_block/bottleneck_block layers come before it")
    taps = taps[-n:]
    if taps[-1][1].type != x.type:
        raise ShapeError(f"{layer.kind} must directly follow the last ResNet stage (layer {taps[-1][0]}), "
                         f"whose output {taps[-1][1].type.shape_str()} is its {names[-1]}")
    for (j, v), c, name, (h, w) in zip(taps, channels, names, sizes):
        t = v.type
        if t.dims[1] != c:
            raise ShapeError(f"{name.lower()}={c} but {name} (layer {j}'s output) has {t.dims[1]} channels")
        if t.dims[2:] != (h, w):
            raise ShapeError(f"{name} (layer {j}'s output) is {t.dims[2]}x{t.dims[3]} but the pyramid needs "
                             f"{h}x{w} (twice the next level)")
    return [v for _, v in taps[:-1]] + [x]     # C5 is the input itself


def _resnet_before(channels: list[int], x) -> tuple[list, tuple]:
    """A small ResNet whose last stages give `channels` (finest first) down to x = C5: one
    residual_block per level, stride 2 between levels (for the oracle: net_before)."""
    b, _, h, w = x.dims
    n = len(channels)
    layers = [("residual_block", dict(ic=1, oc=channels[0], n_blocks=1))]
    layers += [("residual_block", dict(ic=ci, oc=co, n_blocks=1, first_stride=2))
               for ci, co in zip(channels, channels[1:])]
    return layers, (b, 1, h << (n - 1), w << (n - 1))


@register("fpn_module")
@dataclass(frozen=True)
class FpnModule(Layer):
    """FPN neck (Lin et al. 2017): 1×1 lateral conv (+ bias) of each C_l to `target` channels,
    top-down P5 = L5(C5), P_l = L_l(C_l) + up2(P_{l+1}), then a 3×3 smoothing conv (+ bias)
    per level.  Output: the finest level P2 [B, target, 8·H, 8·W] (P3..P5 are internal).
    Params: lateral2..5.{weight [t,c_l,1,1], bias [t]}, then smooth2..5.{weight [t,t,3,3], bias}.
    Assumptions: input is C5 (c5 channels); C2..C4 are the three stage outputs before it."""
    c2: int
    c3: int
    c4: int
    c5: int
    target: int
    examples: ClassVar = [(dict(c2=2, c3=3, c4=4, c5=5, target=4), TensorType((2, 5, 1, 1)))]
    rejects: ClassVar = [(dict(c2=2, c3=3, c4=4, c5=5, target=4), (2, 6, 2, 2), ["c5=5", "6 channels"])]

    @classmethod
    def net_before(cls, fields, x):
        return _resnet_before([fields[c] for c in ("c2", "c3", "c4", "c5")], x)

    def build(self, g, x, net):
        image(x.type, self.c5, "c5")
        cs = (self.c2, self.c3, self.c4, self.c5)
        taps = _taps(self, g, net, x, cs, ("C2", "C3", "C4", "C5"))
        t = self.target
        # the seed's FLOPs count the convs only (not biases, upsampling or the top-down adds)
        lat = [conv(g, c_l, f"lateral{lvl}.", c, t, 1, 1, "symmetric", bias=True, bias_flops=0)
               for lvl, c_l, c in zip((2, 3, 4, 5), taps, cs)]
        ps = [lat[3]]
        for l_i in reversed(lat[:3]):
            ps.insert(0, g.op("add", l_i, g.op("upsample", ps[0], scale=2, flops=0), flops=0))
        out = [conv(g, p_l, f"smooth{lvl}.", t, t, 3, 1, "symmetric", bias=True, bias_flops=0)
               for lvl, p_l in zip((2, 3, 4, 5), ps)]
        return out[0]           # P3..P5 are computed (the seed's count) but not returned


@register("fpn_detect")
@dataclass(frozen=True)
class FpnDetect(Layer):
    """Multi-scale anchor detector (the reference's FPN YOLO head): neck P5 = N5·C5,
    P4 = N4·C4 + up2(P5), P3 = N3·C3 + up2(P4) (1×1 channel matmuls, no bias); per level
    `tower` × (3×3 conv oc→oc + bias → relu), not shared; per level a 1×1 head (+ bias) to
    a·15 channels ([tx, ty, tw, th, obj, 10 class logits] per anchor), each flattened and
    concatenated P3, P4, P5 → [B, 15·a·(16 + 4 + 1)·g5²] = [B, 315·a·g5²].
    Params: neck3..5.weight [oc,c_l]; tower per level P3, P4, P5 (weight [oc,oc,3,3], bias);
    head3..5.weight [15a,oc]; then head3..5.bias [15a] (biases last: the objectness prior
    initialises the tail of the vector).
    Assumptions: input is C5 [B, c5, g5, g5]; C3 (4·g5) and C4 (2·g5) are the two stage outputs
    before it; 10 classes (VisDrone) as in the reference."""
    oc: int
    c3: int
    c4: int
    c5: int
    g5: int
    a: int
    tower: int
    zero_ok: ClassVar = frozenset({"tower"})
    examples: ClassVar = [(dict(oc=4, c3=2, c4=3, c5=5, g5=2, a=1, tower=1), TensorType((2, 5, 2, 2))),
                          (dict(oc=3, c3=2, c4=3, c5=4, g5=1, a=2, tower=0), TensorType((2, 4, 1, 1)))]
    rejects: ClassVar = [(dict(oc=4, c3=2, c4=3, c5=5, g5=2, a=1, tower=1), (2, 5, 3, 3), ["g5=2", "3x3"])]

    @classmethod
    def net_before(cls, fields, x):
        return _resnet_before([fields[c] for c in ("c3", "c4", "c5")], x)

    def build(self, g, x, net):
        b, _, h, w = image(x.type, self.c5, "c5")
        if (h, w) != (self.g5, self.g5):
            raise ShapeError(f"g5={self.g5} but C5 is {h}x{w}")
        cs = (self.c3, self.c4, self.c5)
        taps = _taps(self, g, net, x, cs, ("C3", "C4", "C5"))
        oc, na = self.oc, 15 * self.a
        # the seed's FLOPs count the matmuls and convs only (no biases, relus, upsampling, adds)
        necks = [g.op("channel_matmul", c_l, params=[g.param(f"neck{lvl}.weight", (oc, c), "he", fan_in=c, fan_out=oc)])
                 for lvl, c_l, c in zip((3, 4, 5), taps, cs)]
        ps = [necks[2]]
        for n_l in reversed(necks[:2]):
            ps.insert(0, g.op("add", n_l, g.op("upsample", ps[0], scale=2, flops=0), flops=0))
        for k, lvl in enumerate((3, 4, 5)):
            for t in range(self.tower):
                y = conv(g, ps[k], f"tower{lvl}.{t}.", oc, oc, 3, 1, "symmetric", bias=True, bias_flops=0)
                ps[k] = g.op("act", y, kind="relu", flops=0)
        heads = [g.op("channel_matmul", p_l, params=[g.param(f"head{lvl}.weight", (na, oc), "he", fan_in=oc, fan_out=na)])
                 for lvl, p_l in zip((3, 4, 5), ps)]
        biases = [g.param(f"head{lvl}.bias", (na,), "zeros") for lvl in (3, 4, 5)]   # last: see the docstring
        flat = [g.op("reshape", g.op("bias", y, params=[bb], flops=0), dims=(b, y.type.size // b))
                for y, bb in zip(heads, biases)]
        return g.op("concat", *flat, axis=1)
