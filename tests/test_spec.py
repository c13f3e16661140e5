"""The spec language: every way a spec can be wrong gives an LmcError whose message (asserted as
text) says what is wrong and whose location (asserted as a line) says where; the forms a spec
may take (mapping, positional, bare string, camelCase); `--set`; TrainConfig's defaults, its
rules (losses.md §1) and LossKind."""
from __future__ import annotations

import time
from textwrap import dedent

import pytest

from lmc.check import check
from lmc.optim import optimizer_names
from lmc.check.net import check_against_net
from lmc.check.recipe import check_rules
from lmc.spec.config import (TRAIN_FIELDS, DatasetKind, LossKind, OptimizerKind, TrainConfig, _FIELDS, effective_loss,
    mixup_mode, parse_train)
from lmc.core.errors import LmcError, MultiError, ShapeError, SpecError
from lmc.core.fields import MAX_INT, Activation, Padding, PadStyle, coerce, snake
from lmc.graph.infer import infer
from lmc.layers._common import pads
from lmc.losses import all_losses
from lmc.spec.netspec import load_spec

FILE = "net.yaml"


def load(text: str, sets=None):
    return load_spec(FILE, sets, text=dedent(text))


def errors(text: str, sets=None) -> list[LmcError]:
    """The errors load_spec (then infer, then the check stage) reports, in order."""
    try:
        check(infer(load(text, sets))).raise_errors()
    except MultiError as e:
        return e.errors
    except LmcError as e:
        return [e]
    raise AssertionError("expected the spec to be refused")


def error(text: str, sets=None) -> LmcError:
    errs = errors(text, sets)
    assert len(errs) == 1, [e.render() for e in errs]
    return errs[0]


MLP = "name: mlp\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 3}\n"
CNN_HEAD = "name: cnn\ninput: {channels: 1, height: 8, width: 8}\nlayers:\n"


# ---------------------------------------------------------------- YAML itself


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(text):
    e = error(text)
    assert isinstance(e, SpecError)
    assert e.message == "the spec is empty; expected a mapping with `name`, `input` and `layers`"
    assert (e.loc.file, e.loc.line) == (FILE, 1)
    assert e.render().startswith("error: net.yaml:1:1: the spec is empty")


@pytest.mark.parametrize("text, what", [("- dense\n- flatten\n", "a list"), ("3\n", "the value 3"),
                                        ("just words\n", "the value 'just words'"),
                                        ("---\n...\n", "an empty document")])
def test_not_a_mapping(text, what):
    e = error(text)
    assert e.message == f"a spec must be a mapping with `name`, `input` and `layers`, got {what}"
    assert e.loc.line == 1


def test_tab_indentation():
    e = error("name: m\ninput: {features: 4}\nlayers:\n\t- flatten\n")
    assert e.message == "tab character used for indentation; YAML needs spaces"
    assert (e.loc.line, e.loc.col) == (4, 1)


def test_invalid_yaml_is_located():
    e = error("name: m\nlayers: [dense, flatten\ninput: {features: 4}\n")
    assert e.message.startswith("invalid YAML: ")
    assert e.loc.line == 3


def test_control_character_is_located():
    e = error("name: m\ninput: {features: 4}\nlayers: [fl\x00atten]\n")
    assert e.message == "invalid YAML: character 0x0000 is not allowed in YAML text"
    assert (e.loc.line, e.loc.col) == (3, 12)


def test_duplicate_top_level_key():
    e = error(MLP + "name: again\n")
    assert e.message == "duplicate key 'name' (first at line 1)"
    assert e.loc.line == 5


def test_duplicate_key_inside_train():
    e = error(MLP + "train:\n  learning_rate: 0.1\n  batch_size: 8\n  epochs: 2\n  batch_size: 16\n")
    assert e.message == "duplicate key 'batch_size' (first at line 7)"
    assert e.loc.line == 9


def test_duplicate_key_inside_a_layer():
    e = error(CNN_HEAD + "  - conv_bn:\n      ic: 1\n      oc: 4\n      k_size: 3\n      oc: 8\n")
    assert e.message == "duplicate key 'oc' (first at line 6)"
    assert e.loc.line == 8


def test_same_field_in_two_spellings():
    assert error("name: m\nlayers: [flatten]\nimage_h: 8\nimageH: 9\n").message == \
        "'imageH' repeats 'image_h' (the same field in another spelling)"
    e = error(CNN_HEAD + "  - conv_bn: {ic: 1, oc: 2, k_size: 3, kSize: 5}\n")
    assert e.message == "layers[0] (conv_bn): 'kSize' repeats 'k_size' (the same field in another spelling)"
    assert e.loc.line == 4
    e = error(MLP + "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, use_adam: true, useAdam: false}\n")
    assert e.message == "train: 'useAdam' repeats 'use_adam' (the same field in another spelling)"


def test_alias_bomb_is_refused_quickly():
    text = "a: &a [" + ", ".join(["x"] * 100) + "]\nb: &b [" + ", ".join(["*a"] * 100) + "]\n" \
           "c: [" + ", ".join(["*b"] * 100) + "]\n"
    t = time.perf_counter()
    e = error(text)
    assert "the spec has more than 200000 values" in e.message
    assert time.perf_counter() - t < 10


def test_oversized_file_is_refused_before_parsing():
    t = time.perf_counter()
    e = error("name: m\n" + "# padding\n" * 120_000)
    assert e.message.startswith("the spec is 1,200,008 characters long; specs over 1,000,000 are refused")
    assert time.perf_counter() - t < 1


def test_deep_nesting():
    assert error("a: " + "[" * 5000 + "]" * 5000 + "\n").message.startswith("invalid YAML:")


def test_missing_file_and_non_utf8(tmp_path):
    with pytest.raises(SpecError, match="cannot read spec: No such file or directory"):
        load_spec(tmp_path / "nope.yaml")
    p = tmp_path / "latin1.yaml"
    p.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(SpecError, match="the spec is not UTF-8 text"):
        load_spec(p)


# ---------------------------------------------------------------- top level


def test_unknown_top_level_field_did_you_mean():
    e = error(MLP + "laers: []\n")
    assert e.message == "unknown top-level field 'laers'; did you mean 'layers'?"
    assert e.loc.line == 5


def test_required_top_level_fields():
    msgs = [e.message for e in errors("image_w: 8\n")]
    assert "`name` is required" in msgs
    assert "`layers` is required (a list of layers)" in msgs


def test_name_must_be_a_string_located():
    e = error(MLP.replace("name: mlp", "name: [1, 2]"))
    assert e.message == "name: expected a string, got [1, 2]"
    assert e.loc.line == 1


def test_layers_must_be_a_non_empty_list():
    assert error("name: m\ninput: {features: 4}\nlayers: []\n").message == "`layers` must be a non-empty list"
    assert error("name: m\ninput: {features: 4}\nlayers: dense\n").loc.line == 3


def test_input_forms():
    assert load(MLP).input == (4,)
    assert load(CNN_HEAD + "  - flatten\n").input == (1, 8, 8)
    # the Lean kit's form: image_h / image_w, channels from the first layer's ic
    s = load("name: m\nimage_h: 6\nimage_w: 5\nlayers:\n  - conv_bn: [3, 4, 3]\n")
    assert s.input == (3, 6, 5) and (s.image_h, s.image_w) == (6, 5)
    e = error(MLP + "image_h: 8\n")
    assert e.message == "`image_h` is the older spelling of `input`; give one or the other, not both"
    assert e.loc.line == 5
    e = error("name: m\ninput: {channels: 1, height: 8}\nlayers: [flatten]\n")
    assert e.message == "`input` must have exactly channels/height/width or features, got ['channels', 'height']"
    assert e.loc.line == 2
    assert error("name: m\ninput: 7\nlayers: [flatten]\n").message == \
        "`input` must be {channels, height, width} or {features}"
    e = error("name: m\ninput: {features: 0}\nlayers: [flatten]\n")
    assert e.message == "input.features: expected an integer in [1, 2147483647], got 0"
    assert (e.loc.line, e.loc.col) == (2, 9)          # the key's position


def test_net_options_defaults_and_values():
    s = load(MLP)
    assert (s.det_stride, s.build_tag, s.conv_bn_act, s.conv_pad_style) == (None, "", Activation.relu, PadStyle.xla_same)
    s = load(MLP + "det_stride: 16\nbuild_tag: arm-b\nconv_bn_act: relu6\nconvPadStyle: symmetric\n")
    assert (s.det_stride, s.build_tag, s.conv_bn_act, s.conv_pad_style) == (16, "arm-b", Activation.relu6,
                                                                          PadStyle.symmetric)
    e = error(MLP + "conv_pad_style: torch\n")
    assert e.message == "conv_pad_style: expected one of xla_same, symmetric, got 'torch'"
    assert e.loc.line == 5


def test_pad_styles_differ_only_when_strided():
    # XLA SAME puts the extra row on the high side; symmetric is (k−1)//2 on both sides
    assert pads(224, 224, 7, 2, "xla_same") == (2, 3, 2, 3)
    assert pads(224, 224, 7, 2, "symmetric") == (3, 3, 3, 3)
    assert pads(8, 8, 3, 1, "xla_same") == pads(8, 8, 3, 1, "symmetric") == (1, 1, 1, 1)
    for style, pad in (("xla_same", (0, 1, 0, 1)), ("symmetric", (1, 1, 1, 1))):
        net = infer(load(CNN_HEAD.replace("layers:", f"conv_pad_style: {style}\nlayers:") + "  - conv_bn: [1, 2, 3, 2]\n"))
        assert net.graph.nodes[0].prim.pad == pad
        assert net.output.type.dims == (1, 2, 4, 4)


def test_dataset_forms_and_errors():
    assert load(MLP + "dataset: mnist\n").dataset == DatasetKind.mnist
    s = load(MLP + "dataset: {kind: npz, path: data/x.npz}\n")
    assert (s.dataset, s.dataset_path) == (DatasetKind.npz, "data/x.npz")
    assert load(MLP + "dataset: petsDet\n").dataset == DatasetKind.pets_det
    # the seed's kinds are all there (lmc's own kinds follow them: tests/test_data_registry.py)
    assert {d.value for d in DatasetKind} >= {"mnist", "cifar10", "imagenette", "pets", "imagenet", "pets_det",
                                              "brats", "brats224", "digits", "npz", "synthetic",
                                                  "digits_seg", "digits_denoise", "digits_det", "text"}
    e = error(MLP + "dataset: cifar\n")
    assert e.message.startswith("dataset: expected one of mnist, cifar10, ")
    assert e.loc.line == 5
    msgs = [(x.loc.line, x.message) for x in errors(MLP + "dataset:\n  kind: npz\n  pth: x\n  path: 3\n")]
    assert msgs == [(7, "dataset: unknown field 'pth' (fields: kind, path, vocab, classes)"),
                    (8, "dataset.path: expected a string, got 3")]
    assert error(MLP + "dataset: {path: x.npz}\n").message == \
        "dataset: `kind` is required, e.g. {kind: npz, path: data.npz}"


# ---------------------------------------------------------------- layers


def test_unknown_layer_kind_did_you_mean():
    e = error("name: m\ninput: {features: 4}\nlayers:\n  - dens: {fan_in: 4, fan_out: 2}\n")
    assert e.message == "layers[0]: unknown layer kind 'dens'; did you mean 'dense'?"
    assert e.hint == "`lmc layers` lists every kind"
    assert (e.loc.line, e.loc.col) == (4, 5)


def test_unknown_layer_field_did_you_mean():
    e = error("name: m\ninput: {features: 4}\nlayers:\n  - dense:\n      fan_in: 4\n      fan_ot: 2\n")
    assert e.message == "layers[0] (dense): unknown field 'fan_ot'; did you mean 'fan_out'? (fields: fan_in, fan_out, act)"
    assert (e.loc.line, e.loc.col) == (6, 7)


def test_missing_required_layer_field():
    e = error(CNN_HEAD + "  - flatten\n  - dense: {fan_in: 64}\n")
    assert e.message == "layers[1] (dense): missing field 'fan_out' (a positive integer)"
    assert e.loc.line == 5


@pytest.mark.parametrize("value, expected", [
    ("1.5", "expected an integer, got 1.5"),
    ("ten", "expected an integer, got 'ten'"),
    ("true", "expected an integer, got True"),
    ("[3]", "expected an integer, got [3]"),
    ("null", "expected an integer, got None"),
    ("0", "expected an integer in [1, 2147483647], got 0"),
    ("-3", "expected an integer in [1, 2147483647], got -3"),
    (str(2**40), "expected an integer in [1, 2147483647], got 1099511627776"),
    (str(10**40), "expected an integer in [1, 2147483647], got 10000000000000000000000000000000000000000"),
])
def test_wrong_types_and_sizes(value, expected):
    e = error(f"name: m\ninput: {{features: 4}}\nlayers:\n  - dense: {{fan_in: 4, fan_out: {value}}}\n")
    assert e.message == f"layers[0] (dense).fan_out: {expected}"
    assert (e.loc.line, e.loc.col) == (4, 24)          # `fan_out`


def test_int_where_bool_belongs_and_string_where_enum_belongs():
    e = error(MLP + "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, use_adam: 1}\n")
    assert e.message == "train.use_adam: expected true or false, got 1"
    assert e.loc.line == 5
    e = error("name: m\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 2, act: sigmoid}\n")
    assert e.message == "layers[0] (dense).act: expected one of relu, relu6, identity, swish, h_swish, gelu, got 'sigmoid'"
    with pytest.raises(SpecError, match="expected true or false, got 'yes please'"):
        coerce("yes please", bool, "x")


def test_huge_numbers_are_refused_fast():
    digits = "9" * 5000
    t = time.perf_counter()
    e = error(f"name: m\ninput: {{features: 4}}\nlayers:\n  - dense: [4, {digits}]\n")
    assert e.message == "the number 99999999999999999999… (5000 digits) is far too large"
    assert (e.loc.line, e.loc.col) == (4, 16)          # the number itself
    # 400 digits parse as an int but do not fit a float
    e = error(MLP + f"train: {{learning_rate: 1{'0' * 400}, batch_size: 2, epochs: 1}}\n")
    assert e.message.startswith("train.learning_rate: expected a finite number, got 1000")
    assert e.message.endswith("...") and len(e.message) < 120
    # a count that would build billions of blocks
    e = error(CNN_HEAD + f"  - residual_block: [1, 2, {MAX_INT}]\n")
    assert e.message == ("layer 0 (residual_block): the net expands to more than 20,000 primitive ops; "
                         "is a count (n_blocks, …) far too large?")
    assert e.loc.line == 4
    e = error(f"name: m\ninput: {{features: 4}}\nlayers:\n  - dense: [4, {MAX_INT}]\n  - dense: [{MAX_INT}, {MAX_INT}]\n")
    assert e.message == "layer 1 (dense): parameter 01.dense.weight [2147483647, 2147483647] is absurdly large"
    assert time.perf_counter() - t < 10


def test_positional_list_too_long():
    e = error("name: m\ninput: {features: 4}\nlayers:\n  - dense: [4, 3, relu, 7]\n")
    assert e.message == "layers[0] (dense): 4 positional values but dense has only 3 fields (fan_in, fan_out, act)"
    assert e.loc.line == 4


def test_positional_shorthand():
    s = load(CNN_HEAD + "  - conv_bn: [1, 32, 3, 1, same]\n  - conv2d: [32, 8, 3, valid, gelu]\n")
    a, b = (e.layer for e in s.layers)
    assert (a.kind, a.ic, a.oc, a.k_size, a.stride, a.pad) == ("conv_bn", 1, 32, 3, 1, Padding.same)
    assert (b.kind, b.pad, b.act) == ("conv2d", Padding.valid, Activation.gelu)
    assert infer(s).output.type.dims == (1, 8, 6, 6)


def test_camel_case_kinds_fields_and_enums():
    s = load(CNN_HEAD +
             "  - convBn: {ic: 1, oc: 4, kSize: 3}\n"
             "  - maxPool: [2, 2]\n"
             "  - residualBlock: {ic: 4, oc: 4, nBlocks: 1, firstStride: 1}\n"
             "  - globalAvgPool\n"
             "  - dense: {fanIn: 4, fanOut: 2, act: hSwish}\n")
    kinds = [e.kind for e in s.layers]
    assert kinds == ["conv_bn", "max_pool", "residual_block", "global_avg_pool", "dense"]
    assert s.layers[0].layer.k_size == 3 and s.layers[2].layer.n_blocks == 1
    assert s.layers[4].layer.act == Activation.h_swish
    assert infer(s).output.type.dims == (1, 2)
    assert [snake(n) for n in ("kSize", "useSE", "convBn", "mbConvV3", "fanIn", "useSWAG", "bf16Conv")] == \
        ["k_size", "use_se", "conv_bn", "mb_conv_v3", "fan_in", "use_swag", "bf16_conv"]


def test_bare_string_layers():
    s = load(CNN_HEAD + "  - flatten\n  - dense: [64, 2]\n")
    assert [e.kind for e in s.layers] == ["flatten", "dense"]
    s = load(CNN_HEAD + "  - global_avg_pool: null\n  - dense: [1, 2]\n")
    assert s.layers[0].kind == "global_avg_pool"
    # a bare kind that needs fields says which
    assert [x.message for x in errors(CNN_HEAD + "  - max_pool\n")] == [
        "layers[0] (max_pool): missing field 'size' (a positive integer)",
        "layers[0] (max_pool): missing field 'stride' (a positive integer)"]


def test_bad_layer_entries():
    e = error(CNN_HEAD + "  - {conv_bn: [1, 2, 3], flatten: null}\n")
    assert e.message.startswith("layers[0]: expected a layer name or a one-key mapping `kind: {fields}`, got {")
    e = error(CNN_HEAD + "  - 3\n")
    assert e.message == "layers[0]: expected a layer name or a one-key mapping `kind: {fields}`, got 3"
    e = error(CNN_HEAD + "  - dense: 7\n")
    assert e.message == "layers[0] (dense): fields must be a mapping or a list, got 7"


def test_layers_keep_their_yaml_lines():
    s = load(CNN_HEAD + "  # stem\n  - conv_bn: [1, 4, 3]\n\n  - flatten\n")
    assert [(e.index, e.loc.line) for e in s.layers] == [(0, 5), (1, 7)]


def test_several_errors_reported_at_once():
    errs = errors(CNN_HEAD +
                  "  - conv_bn: {ic: 1, oc: 0, k_size: 3}\n"
                  "  - flatten\n"
                  "  - dense: {fan_in: 64, fan_out: two}\n"
                  "  - dens: [1, 2]\n")
    assert [(e.loc.line, e.message) for e in errs] == [
        (4, "layers[0] (conv_bn).oc: expected an integer in [1, 2147483647], got 0"),
        (6, "layers[2] (dense).fan_out: expected an integer, got 'two'"),
        (7, "layers[3]: unknown layer kind 'dens'; did you mean 'dense'?")]
    text = MultiError(errs).render()
    assert text.splitlines()[0] == "error: net.yaml:4:22: layers[0] (conv_bn).oc: expected an integer in [1, 2147483647], got 0"
    assert sum(line.startswith("error: net.yaml:") for line in text.splitlines()) == 3


def test_errors_from_every_section_together():
    errs = errors("""\
        name: m
        input: {features: 4}
        layers:
          - dense: [4, 0]
        train: {learning_rate: -1, batch_size: 2, epochs: 1}
        dataset: nope
        """)
    assert [e.loc.line for e in errs] == [4, 6, 5]


# ---------------------------------------------------------------- shapes (infer)


def test_channel_mismatch():
    e = error(CNN_HEAD + "  - conv_bn: [1, 8, 3]\n  - conv_bn: [16, 8, 3]\n")
    assert isinstance(e, ShapeError)
    assert e.message == "layer 1 (conv_bn): ic=16 but the incoming tensor has 8 channels ([1, 8, 8, 8])"
    assert e.loc.line == 5
    assert e.render().startswith("error: net.yaml:5:5: layer 1 (conv_bn): ic=16")


def test_fan_in_differs_from_flattened_features():
    e = error(CNN_HEAD + "  - conv2d: [1, 4, 3]\n  - flatten\n  - dense: [100, 10]\n")
    assert e.message == "layer 2 (dense): fan_in=100 but the input has 256 features"
    assert e.loc.line == 6


def test_dense_on_an_image_hints_flatten():
    e = error(CNN_HEAD + "  - conv2d: [1, 4, 3]\n  - dense: [256, 10]\n")
    assert e.message == "layer 1 (dense): expected a rank-2 input [batch, features], got [1, 4, 8, 8]"
    assert e.hint == "add a `flatten` (or `global_avg_pool`) layer before it"
    assert e.loc.line == 5


def test_image_layer_after_flatten():
    e = error(CNN_HEAD + "  - flatten\n  - conv_bn: [64, 8, 3]\n")
    assert e.message == "layer 1 (conv_bn): expected an image tensor [batch, channels, height, width], got [1, 64]"
    assert "before `flatten`" in e.hint


def test_spatial_size_to_zero():
    e = error(CNN_HEAD.replace("height: 8, width: 8", "height: 4, width: 4") + "  - conv2d: [1, 2, 5, valid]\n")
    assert e.message == "layer 0 (conv2d): a 5x5 kernel does not fit a 4x4 input (output would be 0x0)"
    assert e.loc.line == 4
    e = error(CNN_HEAD + "  - conv2d: [1, 2, 3, valid]\n  - conv2d: [2, 2, 3, valid]\n"
                         "  - conv2d: [2, 2, 3, valid]\n  - conv2d: [2, 2, 3, valid]\n")
    assert e.message == "layer 3 (conv2d): a 3x3 kernel does not fit a 2x2 input (output would be 0x0)"
    assert e.loc.line == 7
    # max_pool has XLA SAME geometry (out = ceil(in / stride)), so a chain never reaches 0x0, but a
    # window larger than its input is refused (it would only pool padding, and its backward grows
    # with the window's square)
    e = error(CNN_HEAD + "  - max_pool: [2, 2]\n" * 4)
    assert e.message == "layer 3 (max_pool): a 2x2 pooling window is larger than the 1x1 input"
    assert e.loc.line == 7


def test_infer_batch_comes_from_the_recipe():
    s = load(MLP + "train: {learning_rate: 0.1, batch_size: 8, epochs: 1}\n")
    assert infer(s).output.type.dims == (8, 3)
    assert infer(s, batch=2).output.type.dims == (2, 3)


# ---------------------------------------------------------------- --set


def test_set_train_field():
    s = load(MLP + "train: {learning_rate: 0.1, batch_size: 8, epochs: 1}\n", ["train.epochs=3"])
    assert s.train.epochs == 3
    s = load(MLP, ["train.learning_rate=0.5", "train.batch_size=4", "train.epochs=2", "train.useAdam=true"])
    assert (s.train.learning_rate, s.train.batch_size, s.train.use_adam) == (0.5, 4, True)


def test_set_layer_field_mapping_and_positional():
    assert load(MLP, ["layers.0.dense.fan_out=7"]).layers[0].layer.fan_out == 7
    s = load("name: m\ninput: {features: 4}\nlayers:\n  - dense: [4, 3]\n", ["layers.0.dense.fan_out=7"])
    assert (s.layers[0].layer.fan_in, s.layers[0].layer.fan_out) == (4, 7)
    s = load(CNN_HEAD + "  - convBn: {ic: 1, oc: 4, kSize: 3}\n", ["layers.0.conv_bn.k_size=5"])
    assert s.layers[0].layer.k_size == 5
    assert load(MLP, ["layers.0={dense: [4, 9]}"]).layers[0].layer.fan_out == 9
    assert load(MLP, ["name=other"]).name == "other"


@pytest.mark.parametrize("item, message", [
    ("train.epochs", "--set expects key=value, got 'train.epochs'"),
    ("=3", "--set '=3': expected a dotted key such as train.epochs"),
    ("train..epochs=3", "--set 'train..epochs=3': expected a dotted key such as train.epochs"),
    ("layers.5.dense.fan_out=2", "--set layers.5.dense.fan_out: layers has 1 items; no item '5'"),
    ("layers.first=2", "--set layers.first: layers has 1 items; no item 'first'"),
    ("name.x=2", "--set name.x: name is 'mlp', not a mapping or list"),
])
def test_set_bad_keys(item, message):
    assert error(MLP, [item]).message == message


def test_set_errors_point_at_the_set():
    e = error(MLP, ["layers.0.dense.fan_out=-1"])
    assert e.message == "layers[0] (dense).fan_out: expected an integer in [1, 2147483647], got -1"
    assert str(e.loc) == "--set layers.0.dense.fan_out"
    assert e.render() == "error: --set layers.0.dense.fan_out: layers[0] (dense).fan_out: expected an integer in [1, 2147483647], got -1"
    e = error(MLP, ["laers=[]"])
    assert (str(e.loc), e.message) == ("--set laers", "unknown top-level field 'laers'; did you mean 'layers'?")
    e = error(MLP, ["train.epochs=" + "9" * 5000])
    assert e.message == "the number 99999999999999999999… (5000 digits) is far too large"
    e = error(MLP, ["train.epochs=[1,"])
    assert e.message.startswith("invalid YAML:") and str(e.loc).startswith("--set train.epochs")
    # a spec without `train:` is blamed on the spec, not on the --set that made a mapping
    e = error(MLP, ["train.epochs=3"])
    assert e.message == "the spec has no `train:` section (--set train.epochs sets only what it names)"
    assert not e.loc.is_flag and "learning_rate: …, batch_size: …" in e.hint


# ---------------------------------------------------------------- TrainConfig


def parse(text: str, dataset=None):
    """A `train:` section alone → TrainConfig, its fields parsed then the recipe rules of the
    check stage applied (or the error)."""
    from lmc.spec.yamlsrc import load_yaml
    data, locs = load_yaml(dedent(text), FILE)
    c = parse_train(data["train"], locs, FILE, ("train",))
    check_rules(c, lambda name: locs.get(("train", name), locs.get(("train",))), dataset)
    return c


BASE = "train:\n  learning_rate: 0.1\n  batch_size: 8\n  epochs: 10\n"


def cfg(**kw):
    return TrainConfig(**{"learning_rate": 0.1, "batch_size": 8, "epochs": 10, **kw})


def test_train_config_has_the_seeds_78_fields():
    from lmc.spec.config import _LMC_FIELDS
    from lmc.spec.config import _REGISTRY_FIELDS
    assert len(_FIELDS) == 78 and len(TRAIN_FIELDS) == 78 + len(_LMC_FIELDS) + len(_REGISTRY_FIELDS)
    import dataclasses
    assert [f.name for f in dataclasses.fields(TrainConfig)] == [n for n, _, _ in _FIELDS + _LMC_FIELDS + _REGISTRY_FIELDS]


def test_train_defaults_match_defaults_md():
    c = parse(BASE)
    # transcribed from shared/reference/defaults.md (the Lean kit's TrainConfig)
    expected = dict(seed=314159, momentum=0.0, use_adam=False, optimizer=OptimizerKind.sgd,
                    rmsprop_decay=0.9, rmsprop_eps=1e-3, weight_decay=0.0, warmup_epochs=0,
                    label_smoothing=0.0, focal_gamma=2.0, mixup_alpha=0.8, cutmix_alpha=1.0,
                    knn_mixup_alpha=1.0, random_erasing_prob=0.25, rand_augment_n=2, rand_augment_m=9.0,
                    repeated_aug=1, val_every_epochs=1, grad_accum_steps=1, ema_decay=0.9999,
                    swag_k=20, swag_samples=30, tta_samples=5, loss_kind=LossKind("class_ce"),
                    bootstrap_backbone=None, bootstrap_backbone_range=None, checkpoint_every_n_epochs=10,
                    eval_every_n_epochs=10, exp_lr_decay_rate=0.0, exp_lr_decay_epochs=1.0,
                    head_lr_mult=1.0, bn_momentum=0.99, anchors=(), fpn_scales=(), yolo_cls_weights=(),
                    head_prior_bias=(), yolo_cls_focal_gamma=0.0, fpn_affine_prob=0.0)
    for name, value in expected.items():
        assert getattr(c, name) == value, name
    bools = [n for n, t, _ in _FIELDS if t is bool]
    assert bools and all(getattr(c, n) is False for n in bools)


def test_train_required_fields():
    errs = [e.message for e in errors(MLP + "train: {epochs: 1}\n")]
    assert errs == ["train.learning_rate is required (a number)", "train.batch_size is required (an integer)"]


def test_unknown_train_field_did_you_mean():
    e = error(MLP + BASE + "  learning_rat: 0.1\n")
    assert e.message == "unknown train field 'learning_rat'; did you mean 'learning_rate'?"
    assert e.loc.line == 9


def test_train_field_values():
    assert parse(BASE + "  useAdam: true\n  bf16: true\n  bf16Conv: true\n").bf16_conv is True
    c = parse(BASE + "  use_yolov1: true\n  anchors: [[1.0, 2], [0.5, 0.5]]\n  bootstrap_backbone: [r34.bin, 21284672]\n")
    assert c.anchors == ((1.0, 2.0), (0.5, 0.5)) and c.bootstrap_backbone == ("r34.bin", 21284672)
    c = parse(BASE + "  use_yolov1: true\n  fpn_scales: [[56, [[1, 1]]], [28, []]]\n")
    assert c.fpn_scales == ((56, ((1.0, 1.0),)), (28, ()))
    for line, msg in [
        ("  label_smoothing: 1.5\n", "train.label_smoothing: expected a number in [0, 1), got 1.5"),
        ("  weight_decay: -0.1\n", "train.weight_decay: expected a number >= 0, got -0.1"),
        ("  momentum: .nan\n", "train.momentum: expected a finite number, got nan"),
        ("  anchors: [[1.0]]\n", "train.anchors[0]: expected a list of 2 values, got [1.0]"),
        ("  optimizer: adagrad\n",
         f"train.optimizer: expected one of {', '.join(optimizer_names())}, got 'adagrad'"),
        ("  seed: -1\n", "train.seed: expected an integer in [0, 2147483647], got -1"),
        ("  grad_accum_steps: 0\n", "train.grad_accum_steps: expected an integer in [1, 2147483647], got 0"),
    ]:
        with pytest.raises(SpecError) as ei:
            parse(BASE + line)
        assert ei.value.message == msg
        assert ei.value.loc.line == 5


def test_train_must_be_a_mapping():
    e = error(MLP + "train: [1, 2]\n")
    assert e.message == "`train` must be a mapping of recipe fields, got list"
    assert e.loc.line == 5
    assert load(MLP + "train:\n").train is None


def rule_errors(text, dataset=None) -> list[tuple[int, str]]:
    try:
        parse(BASE + text, dataset)
    except MultiError as e:
        return [(x.loc.line, x.message) for x in e.errors]
    except SpecError as e:
        return [(e.loc.line, e.message)]
    return []


def test_focal_only_with_int_labels_and_no_smoothing():
    assert rule_errors("  use_focal: true\n") == []
    assert rule_errors("  use_focal: true\n  label_smoothing: 0.1\n") == [
        (6, "use_focal requires label_smoothing = 0 (focal mixes poorly with smoothing)")]
    assert rule_errors("  use_focal: true\n  use_mixup: true\n") == [
        (5, "use_focal needs integer labels (class_ce), but the loss is soft_label_ce")]
    assert rule_errors("  use_focal: true\n  loss_kind: per_pixel_ce\n") == [
        (5, "use_focal needs integer labels (class_ce), but the loss is per_pixel_ce; "
            "for segmentation use loss_kind: {per_pixel_focal_ce: {gamma: 2}}")]
    # on the yolo path focal switches objectness to focal BCE: allowed
    assert rule_errors("  use_focal: true\n  use_yolov1: true\n") == []


def test_mixing_modes_and_knn_precedence():
    assert mixup_mode(cfg(use_knn_mixup=True)) == "knn_mixup"
    assert mixup_mode(cfg(use_mixup=True, use_cutmix=True)) == "mixup|cutmix"    # timm's per-batch switch
    assert mixup_mode(cfg(use_cutmix=True)) == "cutmix"
    assert mixup_mode(cfg()) is None
    # the Lean kit: KNN-mixup takes precedence over mixup and CutMix (every batch is KNN-mixed)
    from lmc.data.mix import Mixer
    import numpy as np
    assert rule_errors("  use_knn_mixup: true\n  use_mixup: true\n  use_cutmix: true\n") == []
    both = cfg(use_knn_mixup=True, use_mixup=True, use_cutmix=True, knn_mixup_alpha=0.4)
    assert mixup_mode(both) == "knn_mixup"
    m = Mixer.from_config(both)
    assert (m.mixup_alpha, m.cutmix_alpha, m.knn_alpha) == (None, None, 0.4)
    rng = np.random.default_rng(0)
    assert {m.mode(rng) for _ in range(20)} == {"knn_mixup"}


def test_a_field_under_an_off_switch_is_refused():
    assert rule_errors("  mixup_alpha: 0.4\n") == [(5, "mixup_alpha has no effect without use_mixup: true")]
    assert rule_errors("  use_rand_augment: true\n  rand_augment_mstd: 0.5\n") == [
        (6, "rand_augment_mstd has no effect without rand_augment_geometric: true")]
    assert rule_errors("  use_rand_augment: true\n  rand_augment_geometric: true\n  rand_augment_mstd: 0.5\n"
                       "  rand_augment_inc: true\n") == []
    assert rule_errors("  use_auto_augment: true\n  use_rand_augment: true\n") == [
        (6, "use_auto_augment and use_rand_augment are exclusive (AutoAugment subsumes the colour RandAugment)")]


def test_swag_requires_swa():
    assert rule_errors("  use_swag: true\n") == [(5, "use_swag requires use_swa: true")]
    assert rule_errors("  use_swag: true\n  use_swa: true\n  swa_start_epoch: 7\n") == []
    assert rule_errors("  use_swa: true\n  swa_start_epoch: 10\n") == [
        (6, "swa_start_epoch (10) must be < epochs (10)")]


def test_other_rules():
    assert rule_errors("  use_muon: true\n  use_shampoo: true\n") == [(6, "use_muon and use_shampoo are exclusive")]
    assert rule_errors("  bf16_conv: true\n") == [(5, "bf16_conv is only meaningful with bf16: true")]
    assert rule_errors("  warmup_epochs: 11\n  cosine_decay: true\n") == [(5, "warmup_epochs (11) exceeds epochs (10)")]
    assert rule_errors("  warmup_epochs: 2\n") == [
        (5, "warmup_epochs needs a schedule (cosine_decay or exp_lr_decay_rate): the constant schedule has "
            "no warm-up (the Lean kit's IREE path silently ignores it there)")]
    # an optimizer field the chosen optimizer does not read
    assert rule_errors("  use_adam: true\n  momentum: 0.9\n") == [
        (6, "momentum is read by muon, rmsprop, sgd, not by the optimizer adam (use_adam)")]
    assert rule_errors("  momentum: 0.9\n  optimizer: rmsprop\n  rmsprop_eps: 0.01\n") == []
    assert rule_errors("  use_yolov1: true\n  loss_kind: bce\n") == [(6, "use_yolov1 conflicts with loss_kind bce")]
    assert rule_errors("  use_yolov1: true\n  use_cutmix: true\n") == [
        (5, "yolov1_masked (use_yolov1) cannot be combined with mixup/cutmix/knn-mixup")]
    assert rule_errors("  loss_kind: per_pixel_dice_ce\n  use_mixup: true\n") == [
        (5, "per_pixel_dice_ce (per-pixel labels) cannot be combined with mixup/cutmix/knn-mixup")]


def test_rules_added_from_losses_md():
    # yolov1_masked: no label smoothing
    assert rule_errors("  use_yolov1: true\n  label_smoothing: 0.1\n") == [
        (6, "yolov1_masked (use_yolov1) requires label_smoothing = 0")]
    # per_pixel_focal_ce and Dice alone: no label smoothing; DiceCE and plain per-pixel CE allow it
    assert rule_errors("  loss_kind: {per_pixel_focal_ce: {gamma: 1}}\n  label_smoothing: 0.1\n") == [
        (6, "per_pixel_focal_ce(gamma=1.0) requires label_smoothing = 0")]
    assert rule_errors("  loss_kind: per_pixel_dice\n  label_smoothing: 0.1\n") == [
        (6, "per_pixel_dice requires label_smoothing = 0")]
    assert rule_errors("  loss_kind: per_pixel_dice_ce\n  label_smoothing: 0.1\n") == []
    assert rule_errors("  loss_kind: per_pixel_ce\n  label_smoothing: 0.1\n") == []
    # the dataset decides the label layout
    assert rule_errors("  loss_kind: soft_label_ce\n", "brats") == [
        (5, "dataset brats has per-pixel labels and needs a per_pixel_* loss, not soft_label_ce")]
    assert rule_errors("  loss_kind: per_pixel_ce\n", "pets_det") == [
        (5, "dataset pets_det needs the yolov1_masked loss (use_yolov1: true), not per_pixel_ce")]
    assert rule_errors("  use_mixup: true\n", "brats224") == [
        (1, "per_pixel_ce (per-pixel labels) cannot be combined with mixup/cutmix/knn-mixup")]


def test_rules_through_the_whole_spec_are_located():
    e = error(MLP + BASE + "  use_focal: true\n  labelSmoothing: 0.2\n")
    assert e.message == "use_focal requires label_smoothing = 0 (focal mixes poorly with smoothing)"
    assert e.loc.line == 10        # the camelCase key's own line
    e = error(MLP + BASE + "  loss_kind: soft_label_ce\ndataset: brats\n")
    assert e.loc.line == 9


def test_effective_loss_derivation():
    assert effective_loss(cfg()).kind == "class_ce"
    assert effective_loss(cfg(use_yolov1=True)).kind == "yolov1_masked"
    assert effective_loss(cfg(use_mixup=True)).kind == "soft_label_ce"
    assert effective_loss(cfg(use_cutmix=True)).kind == "soft_label_ce"
    assert effective_loss(cfg(use_knn_mixup=True)).kind == "soft_label_ce"
    assert effective_loss(cfg(use_yolov1=True, use_mixup=True)).kind == "yolov1_masked"
    assert effective_loss(cfg(), DatasetKind.pets_det).kind == "yolov1_masked"
    assert effective_loss(cfg(), "brats").kind == "per_pixel_ce"
    assert effective_loss(cfg(use_mixup=True), "pets").kind == "per_pixel_ce"
    assert effective_loss(cfg(), "mnist").kind == "class_ce"
    # an explicit kind is never overridden
    assert effective_loss(cfg(loss_kind=LossKind("bce"), use_mixup=True)).kind == "bce"


def test_optimizer_selection():
    """lmc.optim.select, the one place the optimizer is decided: `optimizer` wins; left at sgd,
    the seed's booleans pick use_shampoo > use_muon > use_adam."""
    from lmc.optim import select
    assert select(cfg()) == "sgd"
    assert select(cfg(use_adam=True)) == "adam"
    assert select(cfg(optimizer=OptimizerKind.rmsprop, use_adam=True)) == "rmsprop"
    assert select(parse(BASE + "  optimizer: adam\n")) == "adam"
    assert select(cfg(use_muon=True, use_adam=True)) == "muon"
    assert select(cfg(use_shampoo=True, use_adam=True)) == "shampoo"
    assert select(cfg(optimizer=OptimizerKind.adam, use_muon=True)) == "muon"     # AdamW for the rest
    assert select(cfg(optimizer=OptimizerKind.muon)) == "muon"
    assert rule_errors("  optimizer: lamb\n  use_muon: true\n") == [
        (6, "use_muon conflicts with optimizer: lamb (use_muon selects muon, with AdamW for the other tensors)")]
    assert rule_errors("  optimizer: shampoo\n  use_shampoo: true\n") == []
    names = [m.value for m in OptimizerKind]
    assert names[:6] == ["sgd", "adam", "rmsprop", "lamb", "muon", "shampoo"]     # the seed's, in its order
    assert names == optimizer_names()          # then every other registered optimizer
    assert [OptimizerKind.parse(v, "o") for v in ("sgd", ".adam", *names[2:])] == list(OptimizerKind)


def test_weighted_ce_weights_must_match_class_count():
    seg_net = infer(load(CNN_HEAD + "  - conv2d: [1, 3, 1]\n"))
    c = cfg(loss_kind=LossKind.parse({"per_pixel_weighted_ce": {"weights": [1, 2]}}, "loss_kind"))
    with pytest.raises(SpecError, match="per_pixel_weighted_ce has 2 weights but the net has 3 classes"):
        check_against_net(c, seg_net.num_classes, lambda f: None, output_dims=seg_net.output.type.dims)
    check_against_net(cfg(loss_kind=LossKind("per_pixel_weighted_ce", (1.0, 2.0, 3.0))), None, lambda f: None,
                      output_dims=seg_net.output.type.dims)
    with pytest.raises(SpecError, match=r"per_pixel_ce needs per-pixel logits \[batch, classes, height, width\], "
                                        r"but the net's output is \[1, 3\]"):
        check_against_net(cfg(loss_kind=LossKind("per_pixel_ce")), 3, lambda f: None, output_dims=(1, 3))
    with pytest.raises(SpecError, match=r"class_ce needs logits \[batch, classes\], but the net's output is"):
        check_against_net(cfg(), None, lambda f: None, output_dims=seg_net.output.type.dims)
    with pytest.raises(SpecError, match="head_prior_bias has 2 values but the net has 3 classes"):
        check_against_net(cfg(head_prior_bias=(0.1, 0.2)), 3, lambda f: None)


# ---------------------------------------------------------------- LossKind


@pytest.mark.parametrize("value, kind, seg", [
    ("class_ce", "class_ce", False), ("softLabelCE", "soft_label_ce", False),
    ("per_pixel_ce", "per_pixel_ce", True), ("perPixelDice", "per_pixel_dice", True),
    ("per_pixel_dice_ce", "per_pixel_dice_ce", True), ("float_target_mse", "float_target_mse", False),
    ("yolov1Masked", "yolov1_masked", False), ("bce", "bce", False), (".perPixelCE", "per_pixel_ce", True),
    ({"per_pixel_weighted_ce": {"weights": [1, 4.5, 4]}}, "per_pixel_weighted_ce", True),
    ({"perPixelFocalCE": {"gamma": 0}}, "per_pixel_focal_ce", True),
    ({"per_pixel_focal_ce": None}, "per_pixel_focal_ce", True),
    ({"class_ce": {}}, "class_ce", False),
])
def test_loss_kind_parsing_and_is_seg(value, kind, seg):
    lk = LossKind.parse(value, "loss_kind")
    assert lk.kind == kind and lk.is_seg is seg


def test_loss_kind_parameters():
    w = LossKind.parse({"per_pixel_weighted_ce": {"weights": [1, 4.5, 4]}}, "k")
    assert w.weights == (1.0, 4.5, 4.0) and str(w) == "per_pixel_weighted_ce(weights=[1.0, 4.5, 4.0])"
    assert LossKind.parse({"per_pixel_focal_ce": None}, "k").gamma == 2.0
    assert LossKind.parse({"per_pixel_focal_ce": {"gamma": 0.5}}, "k").gamma == 0.5
    assert str(LossKind.parse("class_ce", "k")) == "class_ce"


# every declared loss kind in the registry's order: the seed's, then lmc's own (the list itself is
# checked by tests/test_losses_registry.py)
LOSS_KINDS = ", ".join(all_losses())


@pytest.mark.parametrize("value, message", [
    ("cross_entropy", f"k: unknown loss kind 'cross_entropy'; did you mean 'class_ce'? (expected one of {LOSS_KINDS})"),
    ("mse", f"k: unknown loss kind 'mse'; did you mean 'float_target_mse'? (expected one of {LOSS_KINDS})"),
    ("bcee", f"k: unknown loss kind 'bcee'; did you mean 'bce'? (expected one of {LOSS_KINDS})"),
    ("zzz", f"k: unknown loss kind 'zzz' (expected one of {LOSS_KINDS})"),
    (3, f"k: expected a loss kind ({LOSS_KINDS}), got 3"),
    ({"per_pixel_weighted_ce": None}, "k: per_pixel_weighted_ce needs `weights: [w0, w1, ...]`"),
    ({"per_pixel_weighted_ce": {"weights": []}}, "k.weights: expected a non-empty list of positive numbers, got []"),
    ({"per_pixel_weighted_ce": {"weights": [1, 0]}}, "k.weights: expected a non-empty list of positive numbers, got [1.0, 0.0]"),
    ({"per_pixel_weighted_ce": {"weights": 2}}, "k.weights: expected a list, got 2"),
    ({"per_pixel_focal_ce": {"gamma": -1}}, "k.gamma: expected a number >= 0, got -1.0"),
    ({"per_pixel_focal_ce": {"alpha": 0.25}}, "k: loss 'per_pixel_focal_ce' has no parameter 'alpha' (parameters: gamma)"),
    ({"per_pixel_focal_ce": {"gama": 2}}, "k: loss 'per_pixel_focal_ce' has no parameter 'gama'; did you mean 'gamma'? (parameters: gamma)"),
    ({"class_ce": {"gamma": 1}}, "k: loss 'class_ce' has no parameter 'gamma' (it takes none)"),
    ({"per_pixel_focal_ce": [2]}, "k: parameters of loss 'per_pixel_focal_ce' must be a mapping, got [2]"),
])
def test_loss_kind_errors(value, message):
    with pytest.raises(SpecError) as ei:
        LossKind.parse(value, "k")
    assert ei.value.message == message


def test_loss_kind_in_a_spec_is_located():
    e = error(MLP + BASE + "  loss_kind:\n    per_pixel_weighted_ce: {weights: [1, -2]}\n")
    assert e.message == "train.loss_kind.weights: expected a non-empty list of positive numbers, got [1.0, -2.0]"
    assert e.loc.line == 9


def test_check_rules_runs_on_a_config():
    with pytest.raises(SpecError, match="use_swag requires use_swa: true"):
        check_rules(cfg(use_swag=True), lambda f: None)


def test_name_and_build_tag_name_build_files():
    assert load(MLP.replace("name: mlp", "name: resnet-34_v1.5+x")).name == "resnet-34_v1.5+x"
    for bad in ("'../../etc/x'", "'my net'", "'a\\nmodule @x'", "'[/x]'"):
        e = error(MLP.replace("name: mlp", f"name: {bad}"))
        assert e.message.startswith("name: expected letters, digits, '_', '.', '+' or '-' (it names build files), got ")
        assert e.loc.line == 1
    assert error(MLP + "build_tag: a/b\n").message.startswith("build_tag: expected letters, digits")
    assert load(MLP + "build_tag: ''\n").build_tag == ""


# ---------------------------------------------------------------- docs/spec.md


def doc_type(name: str, t) -> str:
    """How docs/spec.md spells a TrainConfig field's type and range (as parse_train checks it)."""
    from lmc.spec.config import _PROB, _UNIT, _ZERO_OK
    if t is int:
        return "int ≥ 0" if name in _ZERO_OK else "int ≥ 1"
    if t is float:
        return "float in [0, 1)" if name in _UNIT else "float in [0, 1]" if name in _PROB else "float ≥ 0"
    return _elem(t)


def _elem(t) -> str:
    """Inside lists and tuples ints may be 0 and floats have no range."""
    import types as _types
    from typing import get_args, get_origin
    if get_origin(t) is _types.UnionType:
        return _elem([a for a in get_args(t) if a is not type(None)][0]) + " or null"
    if get_origin(t) is list:
        return f"list of {_elem(get_args(t)[0])}"
    if get_origin(t) is tuple:
        return "[" + ", ".join(_elem(a) for a in get_args(t)) + "]"
    return t.__name__


def doc_default(d) -> str:
    from lmc.spec.config import REQUIRED
    if d is REQUIRED:
        return "required"
    if isinstance(d, bool):
        return str(d).lower()
    if d is None:
        return "null"
    if d == ():
        return "[]"
    return str(d)


def test_docs_describe_every_train_field():
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "spec.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].strip("`") in TRAIN_FIELDS:
            rows[cells[0].strip("`")] = cells
    # the seed's fields and lmc's own are the table; a field a registry entry declares is
    # documented by its declaration (its `where`, shown in lmc/spec/fieldmap.py's table)
    from lmc.spec.config import _LMC_FIELDS, _REGISTRY_FIELDS
    assert sorted(rows) == sorted(n for n, _, _ in _FIELDS + _LMC_FIELDS), set(TRAIN_FIELDS) ^ set(rows)
    assert not set(rows) & {n for n, _, _ in _REGISTRY_FIELDS}
    for name, t, d in _FIELDS + _LMC_FIELDS:
        _, typ, default, meaning = rows[name]
        assert typ == doc_type(name, t), name
        assert default.strip("`") == doc_default(d), name
        assert len(meaning) > 10, name
    # and the table lists them in TrainConfig's order
    order = [l.split("|")[1].strip().strip("`") for l in doc.splitlines()
             if l.startswith("| `") and l.split("|")[1].strip().strip("`") in TRAIN_FIELDS]
    assert order == [n for n, _, _ in _FIELDS + _LMC_FIELDS]


def test_probabilities_may_be_one_but_decays_may_not():
    assert parse(BASE + "  random_erasing: true\n  random_erasing_prob: 1.0\n").random_erasing_prob == 1.0
    with pytest.raises(SpecError, match=r"train.random_erasing_prob: expected a probability in \[0, 1\], got 1.5"):
        parse(BASE + "  random_erasing_prob: 1.5\n")
    with pytest.raises(SpecError, match=r"train.ema_decay: expected a number in \[0, 1\), got 1.0"):
        parse(BASE + "  ema_decay: 1.0\n")
