"""Input checks for layer kinds, whose messages name both numbers (and the expected layout),
and small channel arithmetic."""
from __future__ import annotations

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType


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
