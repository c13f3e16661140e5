"""The benchmark peers (benchmarks/peers.py) compute lmc's function: the PyTorch peer's first
loss equals the loss from lmc's own float64 primitive references on the same parameters and
batch — on the LM (embedding gather, causal attention, per-token CE over [B, V, T, 1]), and on
ConvNeXt (LayerScale `scale`) and Swin (`roll`, `window_bias`: shifted windows, relative
position bias) at a reduced size."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _torch_and_reference_loss(spec, sets):
    """(the PyTorch peer's first loss, lmc's float64 reference loss) for the same draws."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import peers
    from lmc.graph.infer import infer
    from lmc.lower.lowering import abi
    from lmc.spec.netspec import load_spec
    net = infer(load_spec(ROOT / "specs" / spec, sets))
    loss = peers.torch_step(net, lr=1e-3)()
    rng = np.random.default_rng(0)            # the peer's draws, in its order
    P = {p.name: (rng.standard_normal(p.type.dims) * 0.05).astype(np.float32) for p in net.graph.params}
    x = rng.standard_normal(net.input.dims).astype(np.float32)
    first = net.spec.layers[0].layer
    if getattr(first, "draw_input", None):
        x = first.draw_input(rng, net.input)
    a = abi(net)
    if a.loss.name == "class_ce":
        y = rng.integers(0, net.output.type.dims[-1], net.batch)
    else:
        y = a.loss.draw_labels(rng, a.labels, a.logits)
    vals = {net.graph.x.id: x.astype(np.float64)}
    for n in net.graph.nodes:
        args = [vals[v.id] for v in n.inputs] + [P[p.name].astype(np.float64) for p in n.params]
        vals[n.out.id] = n.prim.reference(np, *args, **n.prim.attrs)
    return loss, a.loss.reference(np, vals[net.output.id], y, label_smoothing=net.spec.train.label_smoothing)


def test_torch_peer_computes_lmcs_per_token_loss():
    loss, want = _torch_and_reference_loss("tiny_gpt.yaml", ["train.batch_size=2", "train.grad_clip_norm=0"])
    assert loss == pytest.approx(want, rel=1e-5)


# Swin-T with 2×2 windows on a 64×64 input: maps 16, 8, 4, 2 → 8×8 … 1×1 windows, shifted
# (by 1) on the odd blocks of the first three stages
SWIN_SMALL = (["input.height=64", "input.width=64"]
              + [f"layers.{i}.swin_stage.window_size=2" for i in (1, 3, 5, 7)]
              + ["layers.10.spatial_unflatten.height=2", "layers.10.spatial_unflatten.width=2"])


@pytest.mark.parametrize("spec, sets", [("convnext_tiny.yaml", ["input.height=32", "input.width=32"]),
                                        ("swin_tiny.yaml", SWIN_SMALL)], ids=["convnext_tiny", "swin_tiny"])
def test_torch_peer_computes_lmcs_loss_on_convnext_and_swin(spec, sets):
    loss, want = _torch_and_reference_loss(spec, ["train.batch_size=2"] + sets)
    assert loss == pytest.approx(want, rel=1e-5)
