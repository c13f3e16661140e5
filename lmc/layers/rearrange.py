"""lmc's own layout kinds (not constructors of the Lean kit's `Layer`): `permute` and `reshape`,
Keras's `Permute(dims)` and `Reshape(target_shape)` — the batch axis is never named and never
moves.  They join kinds whose layouts differ: a token embedding [B, T, D] into a 1-D conv stack
[B, C, T] (wave_net_block) and back, or an MSA representation [B, S, R, c] into a single
representation [B, R, S·c] (evoformer_block → structure_module).  Each is one primitive
(transpose, reshape): no parameters, no FLOPs."""
from dataclasses import dataclass
from typing import ClassVar

from lmc.core.errors import ShapeError
from lmc.core.types import TensorType
from lmc.layers import Layer, register


@register("permute")
@dataclass(frozen=True)
class Permute(Layer):
    """Permute the example axes: output axis i (1-based, the batch is axis 0 and stays) is input
    axis dims[i−1] — Keras's `Permute(dims)`, torch's `x.permute(0, *dims)`.  `dims: [2, 1]`
    turns tokens [B, T, D] into a channels-first signal [B, D, T] and back.
    Assumptions: dims is a permutation of 1 … rank−1 of the input."""
    from_seed: ClassVar = False
    dims: list[int]
    examples: ClassVar = [(dict(dims=[2, 1]), TensorType((2, 3, 4))),
                          (dict(dims=[2, 1, 3]), TensorType((2, 3, 4, 5)))]
    rejects: ClassVar = [(dict(dims=[2, 1]), (2, 3, 4, 5), ["dims=[2, 1]", "3 example axes", "[2, 3, 4, 5]"]),
                          (dict(dims=[1, 1]), (2, 3, 4), ["dims=[1, 1]", "permutation of 1, 2"])]

    def build(self, g, x, net):
        t = x.type
        n = t.rank - 1
        dims = list(self.dims)
        if len(dims) != n:
            raise ShapeError(f"dims={dims} names {len(dims)} axes but the input has {n} example axes "
                             f"({t.shape_str()})")
        if sorted(dims) != list(range(1, n + 1)):
            raise ShapeError(f"dims={dims} is not a permutation of {', '.join(map(str, range(1, n + 1)))} "
                             f"(the batch axis 0 is not named)")
        return g.op("transpose", x, perm=(0, *dims))


@register("reshape")
@dataclass(frozen=True)
class Reshape(Layer):
    """View each example as `shape` (row-major, the batch kept): [B, *in] → [B, *shape] —
    Keras's `Reshape(target_shape)`; the element counts must agree.  After `permute` it merges
    axes: [B, R, S, c] → shape [R, S·c].
    Assumptions: prod(shape) equals the input's elements per example."""
    from_seed: ClassVar = False
    shape: list[int]
    examples: ClassVar = [(dict(shape=[3, 8]), TensorType((2, 3, 2, 4))),
                          (dict(shape=[4, 3]), TensorType((2, 12)))]
    rejects: ClassVar = [(dict(shape=[5, 3]), (2, 3, 4), ["shape=[5, 3]", "15", "12", "[2, 3, 4]"])]

    def build(self, g, x, net):
        t = x.type
        shape = [int(d) for d in self.shape]
        have = 1
        for d in t.dims[1:]:
            have *= d
        want = 1
        for d in shape:
            want *= d
        if not shape or want != have:
            raise ShapeError(f"shape={shape} holds {want} values per example but the input has {have} "
                             f"({t.shape_str()})")
        return g.op("reshape", x, dims=(t.dims[0], *shape))
