"""specs/*.yaml: every reference net validates (load_spec + infer + the recipe's net checks, as
`lmc validate`), and its parameter count equals the published one for a 10-class head.

Sources: torchvision 0.28 / timm 1.0 models built with num_classes=10 and counted with
sum(p.numel() for p in model.parameters()); the reference's layers.md §6 for tensor and
batch-norm counts.  Where a spec deviates from the library model, the difference is derived
in the comment next to its number."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmc.check.net import check_against_net
from lmc.graph.infer import infer
from lmc.losses import CLASS, loss_class
from lmc.spec.config import effective_loss
from lmc.spec.netspec import load_spec

SPECS = Path(__file__).resolve().parent.parent / "specs"
# digits_vit: patch conv 4·64 + 64, class token 64, positions 17·64; per block 4·(64² + 64)
# attention + (64·128 + 128) + (128·64 + 64) MLP + 2·2·64 LN; final LN 2·64; head 64·10 + 10
DIGITS_VIT = 4 * 64 + 64 + 64 + 17 * 64 + 4 * (4 * (64 * 64 + 64) + 64 * 128 + 128 + 128 * 64 + 64 + 4 * 64) \
    + 2 * 64 + 64 * 10 + 10
ALL = sorted(p.stem for p in SPECS.glob("*.yaml"))

# spec: (parameters, tensors or None, BN layers or None, BN running-stat floats or None)
PUBLISHED = {
    # torchvision resnet18(num_classes=10): 11,689,512 with the 1000-class head, minus
    # 513,000 + 5,130.
    "resnet18": (11_181_642, None, 20, None),
    # torchvision resnet34(num_classes=10); layers.md §6: 110 tensors, 36 BN, 17,024 floats.
    "resnet34": (21_289_802, 110, 36, 17_024),
    # torchvision resnet50(num_classes=10) (v1.5); layers.md §6: 161 tensors, 53 BN, 53,120.
    "resnet50": (23_528_522, 161, 53, 53_120),
    # torchvision mobilenet_v2(num_classes=10); layers.md §6: 158 tensors, 52 BN, 34,112.
    "mobilenet_v2": (2_236_682, 158, 52, 34_112),
    # torchvision mobilenet_v3_large(num_classes=10) = the paper (SE width make_divisible(e/4, 8),
    # 960 → 1280 h-swish → 10 head).  layers.md §6's 2,990,480 / 172 tensors is the Lean kit's
    # spec: no 1280 layer (−1,230,080 − 12,810 + 9,610, 2 tensors fewer), SE width e/4 (−1,834 on
    # the 72- and 120-wide blocks) and a 5×5 depthwise in the 112 → 112 block where the paper has
    # 3×3 (+16·672 = 10,752); BN layers and running-stat floats agree (46, 24,400).
    "mobilenet_v3_large": (4_214_842, 174, 46, 24_400),
    # torchvision efficientnet_b0(num_classes=10), canonical SE width bic/4 — layers.md §6's
    # "canonical SE" row (4,020,358, 213 tensors, 49 BN, 42,016); the Lean IREE path's mid/4
    # SE would give 7,155,658.
    "efficientnet_b0": (4_020_358, 213, 49, 42_016),
    # torchvision efficientnet_v2_s(num_classes=10), SE width bic/4.  layers.md §6's
    # 38,177,682 is the Lean IREE path's mid/4 SE width; tensors and BN agree (452, 110, 153,872).
    "efficientnet_v2_s": (20_190_298, 452, 110, 153_872),
    # timm mobilenetv4_conv_small(num_classes=10) is 2,505,834; its post-pooling 1×1 960 → 1280
    # has BN (γ, β: 2,560) where this spec's dense has a bias (1,280): 2,505,834 − 1,280.
    "mobilenet_v4_conv_s": (2_504_554, None, None, None),
    # torchvision swin_t(num_classes=10): 28,288,354 − 769,000 + 7,690 = 27,527,044, plus the
    # Lean kit's bias on each patch-merging reduction (192 + 384 + 768; torchvision has none).
    "swin_tiny": (27_528_388, None, 0, 0),
    # timm mobilevit_xxs: 1,272,024 with the 1000-class head → 954,234 with 10; the spec's
    # MobileViT blocks batch-norm their 1×1 projection into the transformer: + 2·(64 + 80 + 96).
    "mobilevit_xxs": (954_714, None, None, None),
    # timm vit_tiny_patch16_224(num_classes=10); layers.md §6: 200 tensors, no BN.
    "vit_tiny": (5_526_346, 200, 0, 0),
    # torchvision convnext_tiny(num_classes=10): patchify stem with bias + LayerNorm and a
    # LayerNorm before the head.  layers.md §6's 27,826,186 / 179 tensors is the Lean IREE spec
    # (conv-BN stem: −96 bias, no head LayerNorm: −1,536; 3 tensors fewer).
    "convnext_tiny": (27_827_818, 182, 0, 0),
    # torchvision squeezenet1_0(num_classes=10) is 740,554 with conv biases and no BN; the
    # reference's fire modules (and this stem) are batch-normed: γ, β instead of a bias adds one
    # per output channel of the 25 BN convs, 96 + 2·(144 + 288 + 432 + 576) = 2,976.
    "squeezenet": (743_530, 77, 25, None),
    # torchvision densenet121 is 7,978,856 with the 1000-class head (−1,025,000 + 10,250 for 10
    # classes); the seed's dense_block / transition_layer have conv biases (+ 58·(128 + 32) +
    # 128 + 256 + 512) and there is no norm5 (−2·1,024).  BN layers: 58·2 + 3 + the stem.
    "densenet121": (6_972_234, None, 120, None),
    # torchvision shufflenet_v2_x1_0: 2,278,604 with the 1000-class head, 1,263,854 with 10.
    "shufflenet_v2_x1_0": (1_263_854, None, 56, None),
    # torchvision googlenet(aux_logits=False): 6,624,904 with the 1000-class head (−1,025,000 +
    # 10,250); the inception modules' third branch is the paper's 5×5 where torchvision has a
    # 3×3: + 16·Σ b3reduce·b3out = + 380,928.  BN layers: 3 + 9·6.
    "googlenet": (5_991_082, None, 57, None),
    # from the seed's nParams (layers.md §3.38–3.39) and conv_bn's; no library model to count.
    "csp_darknet53": (17_683_466, None, None, None),
    # the torchvision resnet18 trunk (11,181,642 − 5,130) + ASPP 512 → 256 (§3.41: 4,133,376)
    # + a 1×1 256 → 3 classifier with bias (771); 3 classes.
    "deeplabv3_resnet18": (15_310_659, None, None, None),
    # layers.md §6: MNIST MLP 784-512-512-10, 6 tensors.
    "mnist_mlp": (669_706, 6, 0, 0),
    # 784·10 + 10.
    "mnist_linear": (7_850, 2, 0, 0),
    # CIFAR CNN without BN, 14 tensors.  layers.md §6 prints 2,430,018, an arithmetic slip:
    # 896 + 9,248 + 18,496 + 36,928 (convs) + 2,097,664 + 262,656 + 5,130 (dense) = 2,431,018.
    "cifar_cnn": (2_431_018, 14, 0, 0),
    # the same with conv-BN (no conv bias; γ, β): 2,431,018 + 192.
    "cifar_cnn_bn": (2_431_210, 18, 4, 384),
    # training.md §10 MNIST-CNN: convs 288 + 9,216 + 18,432 + 36,864, BN 2·(32 + 32 + 64 + 64),
    # dense 3136·512 + 512 = 1,606,144 and 5,130.
    "mnist_cnn": (1_676_458, 16, 4, 384),
}


def _validate(stem: str):
    spec = load_spec(SPECS / f"{stem}.yaml")
    net = infer(spec)
    if spec.train is not None:
        check_against_net(spec.train, net.num_classes, lambda f: spec.layers[-1].loc)
    return net


@pytest.mark.parametrize("stem", ALL)
def test_spec_validates(stem):
    net = _validate(stem)
    assert net.total_params > 0
    assert all(d > 0 for d in net.output.type.dims)
    spec = net.spec
    if stem == "detr_small":          # inference only: a recipe without COCO-sized data would be a guess
        assert spec.train is None
        return
    assert spec.train is not None and spec.dataset is not None, "every reference spec has a recipe and a dataset"


def test_every_reference_net_is_present():
    expected = {"mnist_linear", "mnist_mlp", "mnist_cnn", "cifar_cnn", "cifar_cnn_bn", "resnet18", "resnet34",
                "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_s",
                "mobilenet_v4_conv_s", "vit_tiny", "convnext_tiny", "squeezenet", "tiny_gpt", "unet",
                "digits_mlp", "digits_cnn"}
    assert expected <= set(ALL)


# the nets whose head is not a 10-class classifier's (segmenters: per-pixel logits; the detector)
NOT_CLASSIFIERS = {"unet", "tiny_gpt", "tiny_gpt_char", "detr_small", "deeplabv3_resnet18", "digits_seg_fcn",
                   "denoise_digits", "unet_digits", "yolo_digits", "detr_digits", "digits_fpn_det", "digits_fpn_yolo"}


@pytest.mark.parametrize("stem", sorted(PUBLISHED))
def test_parameter_count(stem):
    params, tensors, bn_layers, bn_floats = PUBLISHED[stem]
    net = _validate(stem)
    assert net.total_params == params
    if stem not in NOT_CLASSIFIERS:
        assert net.num_classes == 10
    if tensors is not None:
        assert len(net.params) == tensors
    if bn_layers is not None:
        assert len(net.state) == 2 * bn_layers
    if bn_floats is not None:
        assert sum(s.type.size for s in net.state) == bn_floats


# classifiers of other than ten classes
CLASSES = {"resnet34_imagenet": 1000}


def _class_labels(net) -> bool:
    cfg = net.spec.train
    return cfg is not None and loss_class(effective_loss(cfg, net.spec.dataset).kind).label_format == CLASS


def test_classifier_heads_end_in_ten_classes():
    for stem in ALL:
        if stem in NOT_CLASSIFIERS:
            continue
        net = _validate(stem)
        if not _class_labels(net):      # a spec added since NOT_CLASSIFIERS was written: masks, boxes, tokens
            continue
        assert net.output.type.dims[1:] == (CLASSES.get(stem, 10),), stem


def test_segmentation_and_language_model_outputs():
    unet = _validate("unet")
    assert unet.output.type.dims == (16, 3, 224, 224)        # per-pixel logits, 3 trimap classes
    assert _validate("deeplabv3_resnet18").output.type.dims == (16, 3, 224, 224)
    gpt = _validate("tiny_gpt")
    assert gpt.output.type.dims == (32, 256, 64, 1)          # [B, vocab (bytes), seq, 1] for per-pixel CE
    # 256·128 + 64·128 embeddings, 4 blocks of 12·128² + 13·128 (attention, MLP 512, LNs),
    # final LN, head 128·256 + 256
    assert gpt.total_params == 867_328
    detr = _validate("detr_small")                            # 100 queries × (91 + 1 classes, 4 box)
    assert detr.output.type.dims == (1, 100, 96) and detr.total_params == 28_853_152
    vit = _validate("digits_vit")
    assert vit.output.type.dims == (64, 10) and vit.total_params == DIGITS_VIT


@pytest.mark.parametrize("stem", ["mnist_linear", "mnist_mlp", "mnist_cnn", "cifar_cnn", "cifar_cnn_bn",
                                  "digits_mlp", "digits_cnn", "resnet18", "resnet34", "resnet50",
                                  "mobilenet_v2", "mobilenet_v4_conv_s"])
def test_lowerable_specs_use_only_lowering_kinds(stem):
    assert not _validate(stem).unlowered


def test_paper_faithful_activations():
    assert load_spec(SPECS / "mobilenet_v2.yaml").conv_bn_act.value == "relu6"
    assert load_spec(SPECS / "efficientnet_b0.yaml").conv_bn_act.value == "swish"
    assert load_spec(SPECS / "mobilenet_v3_large.yaml").conv_bn_act.value == "h_swish"
    for stem in ("resnet18", "resnet34", "resnet50"):
        assert load_spec(SPECS / f"{stem}.yaml").conv_pad_style.value == "symmetric"


# Further architectures assembled from the kinds, against torchvision (not reference specs).
SWIN_T = """
name: swin-t
input: {channels: 3, height: 224, width: 224}
layers:
  - conv_next_stem: {ic: 3, oc: 96, patch: 4}
  - swin_stage: {dim: 96, heads: 3, mlp_dim: 384, window_size: 7, n_blocks: 2}
  - patch_merging: {in_dim: 96, out_dim: 192}
  - swin_stage: {dim: 192, heads: 6, mlp_dim: 768, window_size: 7, n_blocks: 2}
  - patch_merging: {in_dim: 192, out_dim: 384}
  - swin_stage: {dim: 384, heads: 12, mlp_dim: 1536, window_size: 7, n_blocks: 6}
  - patch_merging: {in_dim: 384, out_dim: 768}
  - swin_stage: {dim: 768, heads: 24, mlp_dim: 3072, window_size: 7, n_blocks: 2}
  - global_avg_pool
  - layer_norm: {dim: 768}
  - dense: {fan_in: 768, fan_out: 10}
"""


def test_swin_t_matches_torchvision_plus_merge_biases(tmp_path):
    # torchvision swin_t(num_classes=10): 27,527,044; the reference's patchMerging count has a
    # bias on the reduction (torchvision's has none): + 192 + 384 + 768.
    f = tmp_path / "s.yaml"
    f.write_text(SWIN_T)
    assert infer(load_spec(f)).total_params == 27_527_044 + 1_344


@pytest.mark.parametrize("stem", ["digits_cnn", "digits_mlp", "mobilenet_v2", "mobilenet_v4_conv_s"])
def test_lowerable_specs_render(stem):
    # the primitive graphs of inverted_residual / uib render to a module (train step + forward)
    from lmc.lower.lowering import lower
    text = lower(infer(load_spec(SPECS / f"{stem}.yaml"), 2))
    assert "module @model" in text and "@train_step" in text and "@forward" in text


def test_unlowerable_spec_is_refused_clearly():
    # a spec around a kind that does not lower yet (whichever is first: the set shrinks)
    from lmc.core.errors import NotImplementedKind
    from lmc.graph.infer import lowers
    from lmc.layers import all_layers
    from lmc.lower.lowering import lower
    shape_only = [(k, c.examples[0]) for k, c in sorted(all_layers().items())
                  if not lowers(c) and c.examples and c.examples[0][1].rank == 4 and c.net_before(*c.examples[0]) is None]
    if not shape_only:
        pytest.skip("every layer kind lowers")
    kind, (fields, x) = shape_only[0]
    _, c, h, w = x.dims
    body = ", ".join(f"{k}: {getattr(v, 'value', v)}" for k, v in fields.items())
    text = f"name: t\ninput: {{channels: {c}, height: {h}, width: {w}}}\nlayers:\n  - {kind}: {{{body}}}\n"
    with pytest.raises(NotImplementedKind, match=f"not implemented yet: {kind}"):
        lower(infer(load_spec("t.yaml", text=text), 2), "forward")


def test_resnet18_fpn_detector_count():
    # tests/data/resnet18_fpn_detect.yaml (no recipe until the FPN anchor loss lowers): the
    # torchvision resnet18 trunk (11,181,642 − 5,130) + fpn_detect (§3.43): 128·(128 + 256 + 512)
    # neck, 3·(9·128² + 128) tower, 3·(45·128 + 45) heads; 9 + 6 tensors after the trunk's 60
    net = infer(load_spec(Path(__file__).parent / "data" / "resnet18_fpn_detect.yaml"), 16)
    assert net.total_params == 11_751_367 and len(net.params) == 60 + 15
    assert net.output.type.dims == (16, 315 * 3 * 7 ** 2)          # flat P3‖P4‖P5
