"""Shared building blocks for layers: padding conventions and the conv → BN → act unit."""
from __future__ import annotations

from lmc.core.errors import ShapeError
from lmc.prims import same_pad


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


def drop_path(g, branch, net):
    """A stochastic-depth site: the residual branch times a per-example keep mask [B, 1, …]
    drawn by the host (0 or 1/keep; the rate ramps linearly over the net's sites, lmc/train/masks.py).
    Without train.drop_path the branch is returned as is; in eval the mask is all ones."""
    cfg = getattr(net, "train", None)
    if cfg is None or not cfg.drop_path:
        return branch
    t = branch.type
    return g.op("mul", branch, g.mask("drop_path", (t.dims[0],) + (1,) * (t.rank - 1)), flops=0)


def act(g, x, kind):
    kind = kind.value if hasattr(kind, "value") else kind
    if kind == "identity":
        return x
    return g.op("act", x, kind=kind)


def conv(g, x, name, ic, oc, k, stride, style, groups=1, bias=False, bias_flops=None, mixed=False):
    """A convolution (optionally with bias).  Weight [oc, ic/groups, k, k], He init (fan-out).
    bias_flops=0: the bias is not counted (the seed's FLOP count for the kinds that were
    spec-only, which `lmc info` keeps).  mixed: bf16 operands under train.bf16 (Node.mixed)."""
    h, w = x.type.dims[2:]
    wt = g.param(f"{name}weight", (oc, ic // groups, k, k), "he",
                 fan_in=(ic // groups) * k * k, fan_out=(oc // groups) * k * k)
    y = g.op("conv", x, params=[wt], stride=stride, pad=pads(h, w, k, stride, style), groups=groups, mixed=mixed)
    if bias:
        b = g.param(f"{name}bias", (oc,), "zeros")
        y = g.op("bias", y, params=[b], flops=bias_flops)
    return y


def bn(g, x, name, flops=None):
    c = x.type.dims[1]
    gamma = g.param(f"{name}gamma", (c,), "ones")
    beta = g.param(f"{name}beta", (c,), "zeros")
    rm = g.stat(f"{name}running_mean", (c,), "zeros")
    rv = g.stat(f"{name}running_var", (c,), "ones")
    return g.op("batch_norm", x, params=[gamma, beta], state=[rm, rv], flops=flops)


def conv_bn(g, x, name, ic, oc, k, stride, style, activation, groups=1, seed_act_flops=False):
    """conv (no bias) → batch norm → activation; params weight, gamma, beta (Lean kit order).
    seed_act_flops: the unit is counted as if it had an activation (one FLOP per element) even
    when it has none — the seed's count for the kinds that were spec-only, which `lmc info` keeps."""
    y = conv(g, x, name, ic, oc, k, stride, style, groups)
    no_act = getattr(activation, "value", activation) == "identity"
    y = bn(g, y, name, flops=9 * y.type.size if seed_act_flops and no_act else None)
    return act(g, y, activation)


def linear(g, x, name, fi, fo, bias=True):
    """y = x·w (+ b) over the last axis: weight [fi, fo] (He fan-in, the Lean kit's transformer
    init), bias [fo] (zeros).  A `dense` on [B, F] (it lowers), a `linear` on token streams."""
    w = g.param(f"{name}weight", (fi, fo), "he", fan_in=fi, fan_out=fo)
    ps = [w, g.param(f"{name}bias", (fo,), "zeros")] if bias else [w]
    return g.op("dense" if x.type.rank == 2 and bias else "linear", x, params=ps)


def channel_shuffle(g, x, groups):
    """ShuffleNet's channel shuffle of NCHW x: [B, g·n, H, W] → view [B, g, n, H, W] →
    swap the two → [B, n·g, H, W] (channel i·n + j goes to j·g + i)."""
    return g.op("channel_shuffle", x, groups=groups)


def heads_split(g, x, heads):
    """[B, N, D] → [B, heads, N, D/heads]."""
    b, n, d = x.type.dims
    return g.op("transpose", g.op("reshape", x, dims=(b, n, heads, d // heads)), perm=(0, 2, 1, 3))


# keys per block of the flash_attn form: each block's scores are [Nq, FLASH_BLOCK] per head
FLASH_BLOCK = 128


def attention(g, q, k, v, heads, causal=False, rope=False, bias=None, flash=False):
    """Multi-head scaled dot-product attention: q [B, Nq, D], k, v [B, Nk, D] → [B, Nq, D];
    heads of D/heads, softmax(q·kᵀ/√dh (+ bias)) · v, optionally causal and with rotary q, k.
    `bias` [.., heads, Nq, Nk] is added to the scores of each trailing group of batches (Swin's
    windows).  flash: the fused `flash_attn` primitive (keys in blocks, online softmax, no
    [Nq, Nk] probabilities kept for the backward) — the same function.
    FLOPs 4·B·Nq·Nk·D + 5·B·Nq·Nk (the seed's count: the softmax per query-key
    pair, not per head; the rotation and the bias not counted)."""
    b, nq, d = q.type.dims
    nk = k.type.dims[1]
    qh, kh, vh = (heads_split(g, t, heads) for t in (q, k, v))
    if rope:
        qh, kh = g.op("rope", qh, flops=0), g.op("rope", kh, flops=0)
    if flash:
        # the bias (if any) is flash_attn's 4th input, added per key block inside the softmax's
        # scale like the add below
        o = g.op("flash_attn", qh, kh, vh, *([bias] if bias is not None else []), scale=1.0 / (d // heads) ** 0.5,
                 causal=causal, block=FLASH_BLOCK, flops=4 * b * nq * nk * d + 5 * b * nq * nk)
        return g.op("reshape", g.op("transpose", o, perm=(0, 2, 1, 3)), dims=(b, nq, d))
    s = g.op("matmul", qh, g.op("transpose", kh, perm=(0, 1, 3, 2)))
    if bias is not None:
        dims = s.type.dims
        grouped = (s.type.size // bias.type.size,) + bias.type.dims
        s5 = g.op("reshape", s, dims=grouped)
        s = g.op("reshape", g.op("add", s5, g.op("broadcast", bias, dims=grouped), flops=0), dims=dims)
    p = g.op("softmax", s, scale=1.0 / (d // heads) ** 0.5, causal=causal, flops=5 * b * nq * nk)
    o = g.op("transpose", g.op("matmul", p, vh), perm=(0, 2, 1, 3))
    return g.op("reshape", o, dims=(b, nq, d))


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
