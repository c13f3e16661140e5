"""The layer registry: exactly the seed's 50 constructors, each documented with examples that
shape-check to a non-empty output, YAML fields in the seed's order and spelling, and one
rejected input per kind whose message names both conflicting numbers."""
from __future__ import annotations

import dataclasses

import pytest

from lmc.core.errors import Loc, ShapeError, SpecError
from lmc.core.fields import snake
from lmc.graph.ir import Graph
from lmc.graph.infer import infer
from lmc.graph.infer import lowers
from lmc.layers import Layer, all_layers
from lmc.spec.netspec import LayerEntry, NetSpec, parse_layer
from lmc.core.types import TensorType

# The seed's `inductive Layer`, in its order, as (camelCase constructor, argument names).
SEED = [
    ("conv2d", "ic oc kSize pad act"), ("convBn", "ic oc kSize stride pad"), ("maxPool", "size stride"),
    ("globalAvgPool", ""), ("flatten", ""), ("layerNorm", "dim"), ("dense", "fanIn fanOut act"),
    ("residualBlock", "ic oc nBlocks firstStride"), ("bottleneckBlock", "ic oc nBlocks firstStride"),
    ("separableConv", "ic oc stride"), ("invertedResidual", "ic oc expand stride nBlocks"),
    ("mbConv", "ic oc expand kSize stride nBlocks useSE act"),
    ("mbConvV3", "ic oc expandCh kSize stride useSE act"),
    ("fusedMbConv", "ic oc expand kSize stride nBlocks useSE"), ("uib", "ic oc expand stride preDWk postDWk"),
    ("fireModule", "ic squeeze expand1x1 expand3x3"), ("patchEmbed", "ic dim patchSize nPatches"),
    ("transformerEncoder", "dim heads mlpDim nBlocks causalMask keepSequence flashAttn rope"),
    ("mambaBlock", "dim stateSize expand nBlocks"), ("swinStage", "dim heads mlpDim windowSize nBlocks"),
    ("patchMerging", "inDim outDim"), ("unetDown", "ic oc"), ("unetUp", "ic oc"), ("bilinearUpsample", "scale"),
    ("transformerDecoder", "dim heads mlpDim nBlocks nQueries"), ("detrHeads", "dim nClasses"),
    ("shuffleBlock", "ic oc groups nUnits"), ("shuffleV2Block", "ic oc nUnits"),
    ("evoformerBlock", "msaChannels pairChannels nBlocks"), ("structureModule", "singleChannels pairChannels nBlocks"),
    ("mobileVitBlock", "ic dim heads mlpDim nTxBlocks"), ("convNextStage", "channels nBlocks norm act"),
    ("convNextDownsample", "ic oc norm"), ("convNextStem", "ic oc patch"),
    ("waveNetBlock", "residualCh skipCh nLayers"), ("positionalEncoding", "inputDim numFrequencies"),
    ("nerfMLP", "encodedPosDim encodedDirDim hiddenDim"), ("darknetBlock", "channels nBlocks"),
    ("cspBlock", "ic oc nBlocks"), ("inceptionModule", "ic b1out b2reduce b2out b3reduce b3out b4out"),
    ("asppModule", "ic oc"), ("fpnModule", "c2 c3 c4 c5 target"), ("fpnDetect", "oc c3 c4 c5 g5 A tower"),
    ("denseBlock", "ic growthRate nLayers"), ("transitionLayer", "ic oc"), ("spatialFlatten", ""),
    ("spatialUnflatten", "channels height width"),
    ("tokenPositionEmbed", "vocabSize seqLen dModel idsInput gather posEmb"),
    ("lmHead", "dModel vocabSize seqLen"), ("timeCondAdd", "channels nFreq"),
]
KINDS = [snake(name) for name, _ in SEED]

# The seed's defaults (`(x : T := v)`), checked against the dataclass defaults.
SEED_DEFAULTS = {
    "mb_conv": {"act": "swish"}, "mb_conv_v3": {"act": "relu"},
    "transformer_encoder": {"causal_mask": False, "keep_sequence": False, "flash_attn": False, "rope": False},
    "conv_next_stage": {"norm": "ln", "act": "gelu"}, "conv_next_downsample": {"norm": "ln"},
    "token_position_embed": {"ids_input": False, "gather": False, "pos_emb": True},
}

LAYERS = all_layers()
EXAMPLES = [(kind, i, fields, t) for kind in sorted(LAYERS) for i, (fields, t) in enumerate(LAYERS[kind].examples)]


def make(kind: str, fields):
    """A layer instance through the YAML path (so fields are coerced exactly as from a spec)."""
    return parse_layer({kind: fields}, 0, Loc("<test>"), lambda *a: Loc("<test>"))


def standalone(layer, t: TensorType) -> TensorType:
    """Shape-check `layer` on its own (not inside a net): build it, return the output type."""
    net = NetSpec(name="t", input=t.dims[1:], layers=(), file="<test>")
    g = Graph()
    return layer.build(g, g.input(t), net).type


def in_net(layer, t: TensorType):
    """Shape-check `layer` as layer 0 of a one-layer net (the `lmc validate` path)."""
    net = NetSpec(name="t", input=t.dims[1:], layers=(LayerEntry(0, layer, Loc("<test>", 3, 5)),), file="<test>")
    return infer(net, t.dims[0])


def test_registry_holds_exactly_the_seeds_50_kinds():
    """Every seed kind is registered, and every registered kind the seed names says so (a kind
    of lmc's own declares from_seed = False)."""
    assert len(KINDS) == 50
    assert sorted(k for k, cls in LAYERS.items() if cls.from_seed) == sorted(KINDS)


# lmc's own fields after the seed's arguments (each with a default that keeps the seed's layer)
EXTENSIONS = {"swin_stage": ["flash_attn"]}


@pytest.mark.parametrize("name,args", SEED, ids=[snake(n) for n, _ in SEED])
def test_fields_are_the_seeds_arguments_in_order(name, args):
    cls = LAYERS[snake(name)]
    ext = EXTENSIONS.get(snake(name), [])
    assert [f.name for f in dataclasses.fields(cls)] == [snake(a) for a in args.split()] + ext
    assert all(f.default is not dataclasses.MISSING for f in dataclasses.fields(cls) if f.name in ext)


@pytest.mark.parametrize("kind", sorted(SEED_DEFAULTS))
def test_seed_defaults(kind):
    defaults = {f.name: f.default for f in dataclasses.fields(LAYERS[kind])}
    for name, value in SEED_DEFAULTS[kind].items():
        got = defaults[name]
        assert getattr(got, "value", got) == value, (kind, name)


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_documented_with_examples(kind):
    cls = LAYERS[kind]
    doc = cls.__doc__ or ""
    assert len(doc) > 40, kind
    # the 8 kinds of the core commit predate the `Assumptions:` convention for every kind
    older = {"conv2d", "conv_bn", "max_pool", "global_avg_pool", "flatten", "residual_block", "bottleneck_block"}
    assert "Assumptions" in doc or kind in older, kind
    assert cls.examples, f"{kind} has no examples"
    for fields, t in cls.examples:
        assert isinstance(t, TensorType) and t.rank >= 2, "examples give the input type with its batch"


@pytest.mark.parametrize("kind,i,fields,t", EXAMPLES, ids=[f"{k}[{i}]" for k, i, _, _ in EXAMPLES])
def test_example_shape_checks(kind, i, fields, t):
    layer = make(kind, fields)
    out = standalone(layer, t)
    assert out.rank >= 2 and all(d > 0 for d in out.dims)
    assert out.dims[0] == t.dims[0], "the batch dimension is kept"
    if kind not in ("fpn_module", "fpn_detect", "unet_up"):   # these reach back into the net
        typed = in_net(make(kind, fields), t)
        assert typed.output.type == out
        info = typed.layers[0]
        if lowers(LAYERS[kind]):        # a kind that lowers does so on every input
            assert info.lowered
        assert info.flops > 0 or kind in ("flatten", "spatial_flatten", "spatial_unflatten", "permute", "reshape")
        names = [p.name for p in typed.params]
        assert len(names) == len(set(names)), "parameter names are unique"
        assert all(n.startswith(f"00.{kind}.") for n in names)


# kind: (fields, input that does not fit, substrings the message must contain)
REJECTS = [(kind, i, *case) for kind in sorted(LAYERS) for i, case in enumerate(LAYERS[kind].rejects or ())]


def test_every_kind_declares_its_rejections():
    assert [k for k, cls in LAYERS.items() if cls.rejects is None] == []


@pytest.mark.parametrize("kind,i,fields,dims,needles", REJECTS, ids=[f"{k}[{i}]" for k, i, *_ in REJECTS])
def test_rejects_input_that_does_not_fit(kind, i, fields, dims, needles):
    with pytest.raises(ShapeError) as e:
        in_net(make(kind, fields), TensorType(dims))
    msg = e.value.message
    assert msg.startswith(f"layer 0 ({kind}): ")
    assert e.value.loc == Loc("<test>", 3, 5)
    for needle in needles:
        assert needle in msg, msg


def test_zero_is_legal_only_where_the_seed_means_off():
    assert LAYERS["uib"].zero_ok == {"pre_d_wk", "post_d_wk"}
    assert LAYERS["fpn_detect"].zero_ok == {"tower"}
    make("uib", dict(ic=4, oc=4, expand=2, stride=1, pre_d_wk=0, post_d_wk=3))
    with pytest.raises(SpecError, match="expand"):
        make("uib", dict(ic=4, oc=4, expand=0, stride=1, pre_d_wk=0, post_d_wk=3))
    with pytest.raises(SpecError, match="n_blocks"):
        make("transformer_encoder", dict(dim=8, heads=2, mlp_dim=16, n_blocks=0))


def test_seed_spellings_and_positional_lists():
    # camelCase kinds and fields from the seed, and positional lists in the seed's order
    a = parse_layer({"mbConvV3": {"ic": 16, "oc": 24, "expandCh": 64, "kSize": 3, "stride": 2, "useSE": False}},
                    0, Loc("<t>"), lambda *x: Loc("<t>"))
    b = make("mb_conv_v3", [16, 24, 64, 3, 2, False])
    assert a == b and a.act.value == "relu"
    c = make("uib", [64, 96, 3, 2, 5, 5])
    assert (c.pre_d_wk, c.post_d_wk) == (5, 5)
    d = make("fpn_detect", [128, 128, 256, 512, 8, 3, 0])
    assert (d.a, d.tower) == (3, 0)


def test_lowering_kinds():
    """Every kind lowers: all its examples expand into primitives that have templates."""
    shape_only = {k for k, cls in LAYERS.items() if not lowers(cls)}
    assert shape_only == set()


def test_mbconv_se_width_is_canonical():
    # SE width bic/4 (16/4 = 4 for block 0, oc/4 = 6 after), not mid/4
    t = TensorType((1, 16, 8, 8))
    g = Graph()
    net = NetSpec(name="t", input=t.dims[1:], layers=(), file="<t>")
    make("mb_conv", dict(ic=16, oc=24, expand=6, k_size=3, stride=1, n_blocks=2, use_se=True)).build(g, g.input(t), net)
    se = {p.name: p.shape for p in g.params if ".se." in p.name}
    assert se["0.se.reduce.weight"] == (4, 96, 1, 1)
    assert se["1.se.reduce.weight"] == (6, 144, 1, 1)


def test_mobilenet_v3_se_width_is_rounded_to_8():
    t = TensorType((1, 24, 8, 8))
    g = Graph()
    make("mb_conv_v3", dict(ic=24, oc=40, expand_ch=72, k_size=5, stride=2, use_se=True)).build(
        g, g.input(t), NetSpec(name="t", input=t.dims[1:], layers=(), file="<t>"))
    assert {p.name: p.shape for p in g.params}["se.reduce.weight"] == (24, 72, 1, 1)   # 72/4 = 18 → 24


def test_uib_takes_the_stride_on_the_middle_depthwise():
    g = Graph()
    net = NetSpec(name="t", input=(4, 8, 8), layers=(), file="<t>")
    make("uib", dict(ic=4, oc=4, expand=2, stride=2, pre_d_wk=3, post_d_wk=3)).build(g, g.input(TensorType((1, 4, 8, 8))), net)
    convs = [n for n in g.nodes if n.prim.name == "conv"]
    assert [n.prim.stride for n in convs] == [1, 1, 2, 1]
    acts = [n.prim.kind for n in g.nodes if n.prim.name == "act"]
    assert acts == ["relu", "relu"]                      # none after pre_dw, none after project


def test_inverted_residual_graph():
    g = Graph()
    net = NetSpec(name="t", input=(8, 6, 6), layers=(), file="<t>")
    y = make("inverted_residual", dict(ic=8, oc=8, expand=6, stride=1, n_blocks=2)).build(
        g, g.input(TensorType((2, 8, 6, 6))), net)
    assert y.type.dims == (2, 8, 6, 6)
    assert [n.prim.name for n in g.nodes].count("add") == 2
    assert {n.prim.kind for n in g.nodes if n.prim.name == "act"} == {"relu6"}
    dw = [n for n in g.nodes if n.prim.name == "conv" and n.prim.groups > 1]
    assert [n.params[0].shape for n in dw] == [(48, 1, 3, 3), (48, 1, 3, 3)]


BUILT = [(k, i, f, t) for k, i, f, t in EXAMPLES if LAYERS[k].build is not Layer.build]


@pytest.mark.parametrize("kind,i,fields,t", BUILT, ids=[f"{k}[{i}]" for k, i, _, _ in BUILT])
def test_graph_references_agree_with_shape_rules(kind, i, fields, t):
    """Every node of the example's graph, evaluated with its primitive's float64 reference
    (declared primitives included), gives the type its shape rule inferred."""
    import numpy as np
    layer = make(kind, fields)
    g = Graph()
    x = g.input(t)
    layer.build(g, x, NetSpec(name="t", input=t.dims[1:], layers=(), file="<test>"))
    rng = np.random.default_rng(0)
    vals = {}
    for node in g.nodes:
        args = [vals[v.id] if v.node is not None else vals.setdefault(v.id, rng.standard_normal(v.type.dims))
                for v in node.inputs] + [rng.standard_normal(p.type.dims) for p in node.params]
        y = node.prim.reference(np, *args, **node.prim.attrs)
        assert y.shape == node.out.type.dims, f"{node.prim.name}: reference gives {y.shape}, infer {node.out.type.dims}"
        vals[node.out.id] = y
