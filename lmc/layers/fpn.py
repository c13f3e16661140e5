"""Feature-pyramid kinds: fpn_module (Mask R-CNN FPN neck) and fpn_detect (the reference's
multi-scale anchor detection head).  Spec-only for now (bilinear upsampling, concat).

Both read the outputs of the last ResNet stages (residual_block / bottleneck_block layers,
C2..C5 at strides 4, 8, 16, 32) and must come right after the last one, so their input is C5.
Each level is twice the next one's size; the shape rule checks every tap's channels and size."""
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShapeError
from ..types import TensorType
from . import Layer, register
from ._shape import Params, image, stage_taps, types_before


def _check_taps(layer, net, x: TensorType, channels: tuple[int, ...], names: tuple[str, ...]) -> list[tuple[int, int]]:
    """Sizes (h, w) of the levels named `names` (finest first, the last being x = C5), checked
    against the ResNet stage outputs before `layer` when it is part of `net`."""
    b, _, h5, w5 = x.dims
    n = len(channels)
    sizes = [(h5 << (n - 1 - i), w5 << (n - 1 - i)) for i in range(n)]
    found = types_before(layer, net, b)
    if found is None:
        return sizes
    pos, types = found
    taps = stage_taps(net, pos, types)
    if len(taps) < n:
        raise ShapeError(f"{layer.kind} reads the last {n} ResNet stage outputs ({', '.join(names)}) "
                         f"but only {len(taps)} residual_block/bottleneck_block layers come before it")
    taps = taps[-n:]
    if taps[-1][1] != x:
        raise ShapeError(f"{layer.kind} must directly follow the last ResNet stage (layer {taps[-1][0]}), "
                         f"whose output {taps[-1][1].shape_str()} is its {names[-1]}")
    for (j, t), c, name, (h, w) in zip(taps, channels, names, sizes):
        if t.dims[1] != c:
            raise ShapeError(f"{name.lower()}={c} but {name} (layer {j}'s output) has {t.dims[1]} channels")
        if t.dims[2:] != (h, w):
            raise ShapeError(f"{name} (layer {j}'s output) is {t.dims[2]}x{t.dims[3]} but the pyramid needs "
                             f"{h}x{w} (twice the next level)")
    return sizes


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
    examples: ClassVar = [(dict(c2=2, c3=3, c4=4, c5=5, target=4), TensorType((2, 5, 2, 2)))]

    def infer(self, x, net):
        b, _, _, _ = image(x, self.c5, "c5")
        cs = (self.c2, self.c3, self.c4, self.c5)
        sizes = _check_taps(self, net, x, cs, ("C2", "C3", "C4", "C5"))
        t, p = self.target, Params()
        for lvl, c, (h, w) in zip((2, 3, 4, 5), cs, sizes):
            p.conv(f"lateral{lvl}.", c, t, 1, b, h, w, bias=True)
        for lvl, (h, w) in zip((2, 3, 4, 5), sizes):
            p.conv(f"smooth{lvl}.", t, t, 3, b, h, w, bias=True)
        h2, w2 = sizes[0]
        return p.result(TensorType((b, t, h2, w2)))


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
                          (dict(oc=3, c3=2, c4=3, c5=4, g5=1, a=2, tower=0), TensorType((1, 4, 1, 1)))]

    def infer(self, x, net):
        b, _, h, w = image(x, self.c5, "c5")
        if (h, w) != (self.g5, self.g5):
            raise ShapeError(f"g5={self.g5} but C5 is {h}x{w}")
        cs = (self.c3, self.c4, self.c5)
        sizes = _check_taps(self, net, x, cs, ("C3", "C4", "C5"))
        oc, na, p = self.oc, 15 * self.a, Params()
        for lvl, c, (gh, gw) in zip((3, 4, 5), cs, sizes):
            p.add(f"neck{lvl}.weight", (oc, c), "he", fan_in=c, fan_out=oc)
            p.flops += 2 * b * oc * c * gh * gw
        for lvl, (gh, gw) in zip((3, 4, 5), sizes):
            for t in range(self.tower):
                p.conv(f"tower{lvl}.{t}.", oc, oc, 3, b, gh, gw, bias=True)
        for lvl, (gh, gw) in zip((3, 4, 5), sizes):
            p.add(f"head{lvl}.weight", (na, oc), "he", fan_in=oc, fan_out=na)
            p.flops += 2 * b * na * oc * gh * gw
        for lvl in (3, 4, 5):
            p.add(f"head{lvl}.bias", (na,), "zeros")
        n = na * sum(gh * gw for gh, gw in sizes)
        return p.result(TensorType((b, n)))
