"""Conv-family facts the per-primitive and whole-step oracles cannot see: max-pool padding
against the published definitions (per conv_pad_style), bilinear upsampling against
jax.image.resize, and U-Net skip pairing on a ResNet-34 contracting path."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lmc.infer import infer
from lmc.prims.pool import MaxPool
from lmc.spec import load_spec

SPECS = Path(__file__).resolve().parent.parent / "specs"


def _nodes(net, prim, layer=None):
    return [n for n in net.graph.nodes if n.prim.name == prim and (layer is None or n.layer == layer)]


def _pool_spec(style: str, h: int = 8) -> str:
    return (f"name: p\ninput: {{channels: 1, height: {h}, width: {h}}}\nconv_pad_style: {style}\n"
            "layers:\n  - max_pool: {size: 3, stride: 2}\n")


def test_max_pool_pads_as_torchvision_in_symmetric_nets():
    # nn.MaxPool2d(3, 2, padding=1): window (i, j) covers rows 2i−1 .. 2i+1 (−∞ outside)
    (node,) = _nodes(infer(load_spec("p.yaml", text=_pool_spec("symmetric"))), "max_pool")
    assert node.prim.pad == (1, 1, 1, 1) and node.out.type.dims == (1, 1, 4, 4)
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8))
    y = MaxPool.reference(np, x, **node.prim.attrs)
    want = np.array([[x[0, 0, max(2 * i - 1, 0):2 * i + 2, max(2 * j - 1, 0):2 * j + 2].max() for j in range(4)]
                     for i in range(4)])
    np.testing.assert_array_equal(y[0, 0], want)


def test_max_pool_pads_xla_same_in_xla_same_nets():
    # XLA SAME on an even map: pad (0, 1), window (i, j) covers rows 2i .. 2i+2
    (node,) = _nodes(infer(load_spec("p.yaml", text=_pool_spec("xla_same"))), "max_pool")
    assert node.prim.pad is None and node.out.type.dims == (1, 1, 4, 4)
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8))
    y = MaxPool.reference(np, x, **node.prim.attrs)
    want = np.array([[x[0, 0, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max() for j in range(4)] for i in range(4)])
    np.testing.assert_array_equal(y[0, 0], want)


@pytest.mark.parametrize("stem", ["resnet18", "resnet34", "resnet50"])
def test_resnet_stem_pool_is_torchvisions(stem):
    net = infer(load_spec(SPECS / f"{stem}.yaml"), 2)
    (node,) = _nodes(net, "max_pool")
    assert node.prim.pad == (1, 1, 1, 1)                       # torchvision: MaxPool2d(3, 2, 1)
    assert node.inputs[0].type.dims[2:] == (112, 112) and node.out.type.dims[2:] == (56, 56)


def test_bilinear_upsample_matches_jax_image_resize():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    from lmc.prims.tensor import Upsample
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 5))
    for s in (2, 3):
        want = np.asarray(jax.image.resize(x, (2, 3, 4 * s, 5 * s), "bilinear"))
        np.testing.assert_allclose(Upsample.reference(np, x, scale=s), want, rtol=0, atol=1e-12)


UNET_ON_RESNET34 = """
name: unet-r34
input: {channels: 3, height: 64, width: 64}
conv_pad_style: symmetric
layers:
  - conv_bn: {ic: 3, oc: 64, k_size: 7, stride: 2}
  - max_pool: {size: 3, stride: 2}
  - residual_block: {ic: 64, oc: 64, n_blocks: 3, first_stride: 1}
  - residual_block: {ic: 64, oc: 128, n_blocks: 4, first_stride: 2}
  - residual_block: {ic: 128, oc: 256, n_blocks: 6, first_stride: 2}
  - residual_block: {ic: 256, oc: 512, n_blocks: 3, first_stride: 2}
  - unet_up: {ic: 512, oc: 256}
  - unet_up: {ic: 256, oc: 128}
  - unet_up: {ic: 128, oc: 64}
  - unet_up: {ic: 64, oc: 64}
  - conv2d: {ic: 64, oc: 3, k_size: 1, act: identity}
"""


def test_unet_up_pairs_skips_on_a_resnet34_contracting_path():
    # no unet_down: each unet_up takes the first unused stage output (or pooled map) of
    # [B, oc, 2H, 2W]: C4, C3, C2, then the stem's 32x32 map the max_pool reads
    net = infer(load_spec("u.yaml", text=UNET_ON_RESNET34), 2)
    g = net.graph
    want = {6: g.layer_outputs[4], 7: g.layer_outputs[3], 8: g.layer_outputs[2], 9: g.layer_outputs[0]}
    for layer, skip in want.items():
        (cat,) = _nodes(net, "concat", layer)
        up, s = cat.inputs
        assert up.node.prim.name == "upsample" and s is skip, f"layer {layer} paired with the wrong skip"
    assert net.output.type.dims == (2, 3, 32, 32)           # the stem's stride is not undone
