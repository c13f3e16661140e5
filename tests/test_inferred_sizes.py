"""Input-size fields (`fan_in`, `ic`, and each kind's own, declared by Layer.inferred) may be left
out or written `auto`: shape inference fills them from the incoming shape.  The explicit form
stays valid, a wrong explicit value stays an error at its line, and `lmc info` shows the values."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lmc.core.errors import Loc, ShapeError
from lmc.core.types import TensorType
from lmc.graph.infer import infer
from lmc.graph.ir import Graph
from lmc.layers import AUTO, all_layers
from lmc.spec.netspec import NetSpec, load_spec, parse_layer
from cli_run import run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DIGITS_MLP = ROOT / "specs" / "digits_mlp.yaml"



def _build(kind, fields, t):
    layer = parse_layer({kind: fields}, 0, Loc("t"), lambda *a: Loc("t"))
    g = Graph()
    layer = layer.filled(t)
    out = layer.build(g, g.input(t), NetSpec(name="t", input=t.dims[1:], layers=(), file="t"))
    return layer, out.type, [(p.name, p.type) for p in g.params]


CASES = [(k, i) for k, cls in sorted(all_layers().items()) if cls.inferred_fields()
         for i, (f, t) in enumerate(cls.examples) if cls.net_before(f, t) is None
         and set(cls.inferred_fields()) & set(f)]


def test_the_common_kinds_declare_their_input_sizes():
    have = {k for k, _ in CASES}
    assert {"dense", "conv2d", "conv_bn", "residual_block", "mb_conv", "layer_norm",
            "transformer_encoder", "patch_embed"} <= have
    assert len(have) >= 30


@pytest.mark.parametrize("kind, i", CASES)
def test_an_omitted_or_auto_size_is_the_explicit_one(kind, i):
    cls = all_layers()[kind]
    fields, t = cls.examples[i]
    inferred = set(cls.inferred_fields()) & set(fields)
    explicit = _build(kind, fields, t)
    omitted = _build(kind, {k: v for k, v in fields.items() if k not in inferred}, t)
    auto = _build(kind, {**fields, **{k: "auto" for k in inferred}}, t)
    assert omitted == explicit and auto == explicit
    for k in inferred:          # the filled value is the explicit one, not AUTO
        assert getattr(omitted[0], k) == fields[k] and getattr(omitted[0], k) is not AUTO


def test_a_wrong_explicit_value_stays_an_error_at_its_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: m\ninput: {channels: 1, height: 8, width: 8}\nlayers:\n"
                 "  - conv_bn: {oc: 4, k_size: 3}\n"
                 "  - conv_bn: {ic: 5, oc: 4, k_size: 3}\n"
                 "  - flatten\n  - dense: {fan_out: 10}\n")
    r = run("validate", p)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {p}:5:5: layer 1 (conv_bn): ")
    assert "ic=5" in r.stderr


def test_info_shows_the_filled_values(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: m\ninput: {channels: 1, height: 8, width: 8}\nlayers:\n"
                 "  - conv_bn: {oc: 4, k_size: 3}\n"
                 "  - conv_bn: {ic: auto, oc: 6, k_size: 3}\n"
                 "  - flatten\n  - dense: {fan_out: 10}\n")
    net = infer(load_spec(p))
    assert [l.layer.ic for l in net.spec.layers[:2]] == [1, 4]
    assert net.spec.layers[3].layer.fan_in == 6 * 8 * 8
    r = run("info", p, "--json")
    assert r.exit_code == 0
    described = [l["layer"] for l in json.loads(r.stdout)["layers"]]
    assert described[0].startswith("conv_bn(ic=1, oc=4") and described[1].startswith("conv_bn(ic=4, oc=6")
    assert described[3].startswith("dense(fan_in=384,") and not any("auto" in d for d in described)


def test_a_batch_axis_is_not_a_size():
    with pytest.raises(ShapeError, match="cannot infer fan_in from the input"):
        all_layers()["dense"](fan_in=AUTO, fan_out=3).filled(TensorType((4,)))


@pytest.mark.slow
def test_a_spec_without_fan_in_trains(tmp_path):
    """The digits MLP with every fan_in left out trains as the explicit one (real compile and run)."""
    p = tmp_path / "auto.yaml"
    text = DIGITS_MLP.read_text()
    for n in ("fan_in: 64, ", "fan_in: 128, "):
        text = text.replace(n, "")
    assert "fan_in" not in text
    p.write_text(text)
    r = subprocess.run([sys.executable, "-m", "lmc", "train", str(p), "--epochs", "3", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    evals = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    top1 = [e for e in evals if e.get("kind") == "eval"][-1]
    assert top1["top1"] > 0.8, top1
