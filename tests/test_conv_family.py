"""Conv-family facts the per-primitive and whole-step oracles cannot see: max-pool padding
against the published definitions (per conv_pad_style), bilinear upsampling against
jax.image.resize, and U-Net skip pairing on a ResNet-34 contracting path."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lmc.graph.infer import infer
from lmc.prims.pool import MaxPool
from lmc.spec.netspec import load_spec

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


def _drop_path_net(drop_path: float):
    text = ("name: sd\ninput: {channels: 2, height: 4, width: 4}\nlayers:\n"
            "  - conv_bn: {ic: 2, oc: 4, k_size: 3}\n"
            "  - residual_block: {ic: 4, oc: 4, n_blocks: 1}\n"
            "  - mb_conv: {ic: 4, oc: 4, expand: 2, k_size: 3, stride: 1, n_blocks: 2, use_se: true}\n"
            "  - fused_mb_conv: {ic: 4, oc: 4, expand: 2, k_size: 3, stride: 1, n_blocks: 1, use_se: false}\n"
            "  - mb_conv_v3: {ic: 4, oc: 4, expand_ch: 8, k_size: 3, stride: 1, use_se: true}\n"
            "  - global_avg_pool\n  - dense: {fan_in: 4, fan_out: 3}\n"
            f"train: {{batch_size: 2, epochs: 1, learning_rate: 0.1, momentum: 0.9, drop_path: {drop_path}}}\n")
    return infer(load_spec("sd.yaml", text=text))


def test_stochastic_depth_sites_exist_only_with_drop_path():
    # one site per residual join of residual_block, mb_conv, fused_mb_conv (not mb_conv_v3:
    # MobileNetV3 has no stochastic depth); no site, no extra argument, without drop_path
    from lmc.lower.lowering import lower
    on, off = _drop_path_net(0.2), _drop_path_net(0.0)
    assert [(m.kind, m.layer) for m in on.graph.masks] == [("drop_path", 1), ("drop_path", 2), ("drop_path", 2),
                                                           ("drop_path", 3)]
    assert off.graph.masks == []
    text = lower(on, "all")
    assert "%m3: tensor<2x1x1x1xf32>" in text.split("func.func @train_step")[1].split("\n")[0]
    assert "%ones_m0 = stablehlo.constant dense<1.0> : tensor<2x1x1x1xf32>" in text.split("func.func @forward")[1]
    assert "%m0: " not in lower(off, "all") and "%ones_m0" not in lower(off, "all")


@pytest.mark.iree
def test_all_ones_keep_masks_are_the_identity():
    # the train step with sites and keep = 1 everywhere gives bit for bit what the net without
    # sites gives; a dropped branch (keep = 0 for one example) changes it
    from lmc.compile import compile_module
    from lmc.graph.init import init_tensors
    from lmc.lower.lowering import abi, lower
    from lmc.run.runtime import Module
    on, off = _drop_path_net(0.2), _drop_path_net(0.0)
    P, S = init_tensors(off, 0)
    a = abi(off)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 4, 4)).astype(np.float32)
    y = np.array([0, 2], np.int32)
    hp = a.hp_vector(off.spec.train, 0.1, 1)

    mods = {id(n): Module(compile_module(lower(n, "train_step")).path, driver="local-sync") for n in (on, off)}

    def step(net, *keep):
        out = mods[id(net)].train_step(*P, *a.initial_opt(), *S, x, y, hp, *keep)
        return [np.asarray(r).copy() for r in out]

    ones = [np.ones((2, 1, 1, 1), np.float32)] * len(on.graph.masks)
    want = step(off)
    got = step(on, *ones)
    assert len(got) == len(want)
    for g_, w_ in zip(got, want):
        np.testing.assert_array_equal(g_, w_)
    dropped = [np.array([1.0, 0.0], np.float32).reshape(2, 1, 1, 1)] + ones[1:]
    assert not np.array_equal(step(on, *dropped)[-2], want[-2])          # the loss moves


EVERY_PRIMITIVE = """
name: conv-family
input: {channels: 3, height: 16, width: 16}
layers:
  - conv_bn: {ic: 3, oc: 8, k_size: 3}
  - mb_conv: {ic: 8, oc: 8, expand: 2, k_size: 3, stride: 1, n_blocks: 1, use_se: true}
  - fire_module: {ic: 8, squeeze: 4, expand1x1: 4, expand3x3: 4}
  - inception_module: {ic: 8, b1out: 2, b2reduce: 2, b2out: 2, b3reduce: 2, b3out: 2, b4out: 2}
  - shuffle_v2_block: {ic: 8, oc: 8, n_units: 2}
  - shuffle_block: {ic: 8, oc: 16, groups: 2, n_units: 2}
  - darknet_block: {channels: 16, n_blocks: 1}
  - aspp_module: {ic: 16, oc: 8}
  - transition_layer: {ic: 8, oc: 8}
  - bilinear_upsample: {scale: 2}
  - global_avg_pool
  - dense: {fan_in: 8, fan_out: 10}
train: {batch_size: 4, epochs: 1, learning_rate: 0.01, use_adam: true}
"""


@pytest.mark.slow
@pytest.mark.iree
@pytest.mark.parametrize("backend,chip", [("cuda", "sm_86"), ("rocm", "gfx1100")])
def test_every_conv_family_primitive_cross_compiles(tmp_path, backend, chip):
    # concat, slice, mul, broadcast, avg_pool (tiled and general), grouped and dilated conv,
    # channel_shuffle, upsample, leaky_relu, max_pool with a pad: the train step and forward
    from lmc.compile import compile_module
    from lmc.lower.lowering import lower
    net = infer(load_spec("f.yaml", text=EVERY_PRIMITIVE))
    used = {n.prim.name for n in net.graph.nodes}
    assert {"concat", "slice", "mul", "broadcast", "avg_pool", "dilated_conv", "channel_shuffle", "upsample",
            "leaky_relu", "max_pool"} <= used
    c = compile_module(lower(net), tmp_path / f"f.{backend}.vmfb", backend=backend, chip=chip)
    assert c.path.stat().st_size > 1000
