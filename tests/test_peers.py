"""The benchmark peers (benchmarks/peers.py) compute lmc's function: the PyTorch peer's first
loss on the LM (embedding gather, causal attention, per-token CE over [B, V, T, 1]) equals the
loss from lmc's own float64 primitive references on the same parameters and batch."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_torch_peer_computes_lmcs_per_token_loss():
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import peers
    from lmc.graph.infer import infer
    from lmc.lower.lowering import abi
    from lmc.spec.netspec import load_spec
    net = infer(load_spec(ROOT / "specs" / "tiny_gpt.yaml", ["train.batch_size=2", "train.grad_clip_norm=0"]))
    loss = peers.torch_step(net, lr=1e-3)()
    rng = np.random.default_rng(0)            # the peer's draws, in its order
    P = {p.name: (rng.standard_normal(p.type.dims) * 0.05).astype(np.float32) for p in net.graph.params}
    rng.standard_normal(net.input.dims)
    x = net.spec.layers[0].layer.draw_input(rng, net.input)
    a = abi(net)
    y = a.loss.draw_labels(rng, a.labels, a.logits)
    vals = {net.graph.x.id: x.astype(np.float64)}
    for n in net.graph.nodes:
        args = [vals[v.id] for v in n.inputs] + [P[p.name].astype(np.float64) for p in n.params]
        vals[n.out.id] = n.prim.reference(np, *args, **n.prim.attrs)
    want = a.loss.reference(np, vals[net.output.id], y, label_smoothing=net.spec.train.label_smoothing)
    assert loss == pytest.approx(want, rel=1e-5)
