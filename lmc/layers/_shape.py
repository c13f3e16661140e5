"""Helpers for the spec-only layer kinds (those with `infer`, not `build`): input checks whose
messages name both numbers, and `Params`, which lists parameter tensors with the same names,
shapes and init as `_common.conv` / `_common.bn` would create, and adds up rough forward FLOPs."""
from __future__ import annotations

import dataclasses

from ..errors import ShapeError
from ..graph import Param, State
from ..types import TensorType
from . import Inferred


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of `divisor`, never more than 10% down (the TF /
    torchvision / timm `_make_divisible` used for MobileNet SE widths)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new < 0.9 * v:
        new += divisor
    return new


def image(x: TensorType, c: int | None = None, name: str = "ic") -> tuple[int, int, int, int]:
    """Check an NCHW image tensor (and its channel count); return (B, C, H, W)."""
    if x.rank != 4:
        raise ShapeError(f"expected an image tensor [batch, channels, height, width], got {x.shape_str()}",
                         hint="image layers need an `input: {channels, height, width}` and must come before `flatten`")
    if c is not None and x.dims[1] != c:
        raise ShapeError(f"{name}={c} but the incoming tensor has {x.dims[1]} channels ({x.shape_str()})")
    return x.dims


def tokens(x: TensorType, d: int | None = None, name: str = "dim") -> tuple[int, int, int]:
    """Check a token stream [B, N, D] (and D); return (B, N, D)."""
    if x.rank != 3:
        hint = "add `spatial_flatten` to turn [B, C, H, W] into tokens [B, H·W, C]" if x.rank == 4 else None
        raise ShapeError(f"expected a token tensor [batch, tokens, {name}], got {x.shape_str()}", hint=hint)
    if d is not None and x.dims[2] != d:
        raise ShapeError(f"{name}={d} but the incoming tokens have {x.dims[2]} features ({x.shape_str()})")
    return x.dims


def features(x: TensorType, d: int | None = None, name: str = "features") -> tuple[int, int]:
    """Check a flat tensor [B, D] (and D); return (B, D)."""
    if x.rank != 2:
        raise ShapeError(f"expected a rank-2 input [batch, {name}], got {x.shape_str()}")
    if d is not None and x.dims[1] != d:
        raise ShapeError(f"{name}={d} but the input has {x.dims[1]} features ({x.shape_str()})")
    return x.dims


def divides(d: int, n: int, what: str) -> None:
    """`what` reads like "heads=3 must divide dim=192"; raised when d does not divide n."""
    if n % d:
        raise ShapeError(f"{what} ({n} is not a multiple of {d})")


class Params:
    """Collects a spec-only layer's parameter tensors (in order), BN state and FLOPs."""

    def __init__(self):
        self.params: list[Param] = []
        self.state: list[State] = []
        self.flops = 0

    def add(self, name, dims, init, fan_in=0, fan_out=0, std=0.0) -> None:
        dims = tuple(int(d) for d in dims)
        if any(d <= 0 for d in dims):
            raise ShapeError(f"parameter {name} would have shape {list(dims)}")
        self.params.append(Param(name, TensorType(dims), init, fan_in=fan_in, fan_out=fan_out, std=std))

    def conv(self, name, ic, oc, k, b, oh, ow, groups=1, bias=False) -> None:
        """weight [oc, ic/groups, k, k] (He), optional bias [oc]; FLOPs at output b×oh×ow."""
        if ic % groups or oc % groups:
            raise ShapeError(f"{name}: groups={groups} must divide both {ic} input and {oc} output channels")
        self.add(f"{name}weight", (oc, ic // groups, k, k), "he",
                 fan_in=(ic // groups) * k * k, fan_out=(oc // groups) * k * k)
        if bias:
            self.add(f"{name}bias", (oc,), "zeros")
        self.flops += 2 * b * oc * oh * ow * (ic // groups) * k * k

    def bn(self, name, c, n) -> None:
        """BN over c channels of an n-element tensor: gamma, beta; running mean/var state."""
        self.add(f"{name}gamma", (c,), "ones")
        self.add(f"{name}beta", (c,), "zeros")
        self.state.append(State(f"{name}running_mean", TensorType((c,)), "zeros"))
        self.state.append(State(f"{name}running_var", TensorType((c,)), "ones"))
        self.flops += 8 * n

    def ln(self, name, d, n) -> None:
        """LayerNorm over d features of an n-element tensor: gamma, beta (no state)."""
        self.add(f"{name}gamma", (d,), "ones")
        self.add(f"{name}beta", (d,), "zeros")
        self.flops += 8 * n

    def norm(self, name, kind, c, n) -> None:
        (self.bn if getattr(kind, "value", kind) == "bn" else self.ln)(name, c, n)

    def conv_bn(self, name, ic, oc, k, b, oh, ow, groups=1) -> None:
        """conv (no bias) → BN → act, the _common.conv_bn tensor list."""
        self.conv(name, ic, oc, k, b, oh, ow, groups)
        self.bn(name, oc, b * oc * oh * ow)
        self.flops += b * oc * oh * ow

    def dense(self, name, fi, fo, rows, bias=True) -> None:
        """weight [fi, fo] (He fan-in, the Lean kit's transformer/head init), bias [fo]."""
        self.add(f"{name}weight", (fi, fo), "he", fan_in=fi, fan_out=fo)
        if bias:
            self.add(f"{name}bias", (fo,), "zeros")
        self.flops += 2 * rows * fi * fo

    def result(self, out: TensorType) -> Inferred:
        return Inferred(out=out, params=self.params, flops=self.flops, state=self.state)


def attention_flops(b: int, n_q: int, n_kv: int, d: int) -> int:
    """Scores q·kᵀ and the weighted sum P·v (the projections are counted as dense layers)."""
    return 2 * 2 * b * n_q * n_kv * d + 5 * b * n_q * n_kv


def position(layer, net) -> int | None:
    """Index of `layer` in `net.layers` (by identity), or None when used on its own."""
    for pos, entry in enumerate(getattr(net, "layers", ()) or ()):
        if entry.layer is layer:
            return pos
    return None


def types_before(layer, net, batch: int):
    """(pos, types): `types[j]` is the type entering layer j for j ≤ pos (types[pos] enters
    `layer`), found by re-running the shape rules of the layers before it.  For the kinds that
    reach back to earlier tensors (unet_up's skip, the FPN taps).  None when `layer` is not one
    of `net`'s layers (a unit test using it on its own)."""
    pos = position(layer, net)
    if pos is None:
        return None
    from ..infer import infer
    prefix = infer(dataclasses.replace(net, layers=net.layers[:pos]), batch)
    return pos, [prefix.input] + [info.out for info in prefix.layers]


STAGE_KINDS = ("residual_block", "bottleneck_block")


def stage_taps(net, pos: int, types) -> list[tuple[int, TensorType]]:
    """Outputs of the ResNet stages (residual_block / bottleneck_block) before layer `pos`."""
    return [(j, types[j + 1]) for j in range(pos) if net.layers[j].layer.kind in STAGE_KINDS]
