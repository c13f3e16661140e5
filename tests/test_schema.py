"""`lmc schema`: the JSON Schema of specs, generated from the registries.  Every spec in specs/
validates; a wrong type, an unknown field or kind fails; the copy shipped in the package is the
generated one."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from lmc.cli import app
from lmc.spec.schema import SHIPPED, schema, schema_text

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
VALIDATOR = jsonschema.Draft202012Validator(schema())


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(schema())


def test_lmc_schema_prints_the_shipped_schema():
    r = CliRunner().invoke(app, ["schema"])
    assert r.exit_code == 0
    assert json.loads(r.stdout) == schema()
    assert SHIPPED.read_text() == schema_text(), "regenerate it: lmc schema > lmc/spec/lmc-spec.schema.json"


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.name)
def test_every_spec_validates(spec):
    errors = list(VALIDATOR.iter_errors(yaml.safe_load(spec.read_text())))
    assert not errors, errors[0].message


MLP = yaml.safe_load((ROOT / "specs" / "digits_mlp.yaml").read_text())


def _with(edit):
    d = copy.deepcopy(MLP)
    edit(d)
    return d


@pytest.mark.parametrize("what, edit", [
    ("epochs a string", lambda d: d["train"].update(epochs="three")),
    ("fan_out a float", lambda d: d["layers"][0]["dense"].update(fan_out=1.5)),
    ("a negative size", lambda d: d["layers"][0]["dense"].update(fan_out=-4)),
    ("an unknown activation", lambda d: d["layers"][0]["dense"].update(act="reluu")),
    ("an unknown layer field", lambda d: d["layers"][0]["dense"].update(fan_outt=3)),
    ("an unknown layer kind", lambda d: d["layers"].append({"dens": {"fan_out": 3}})),
    ("an unknown recipe field", lambda d: d["train"].update(learning_rat=0.1)),
    ("an unknown optimizer", lambda d: d["train"].update(optimizer="adamx")),
    ("an unknown dataset", lambda d: d.update(dataset="digitz")),
    ("a boolean as a number", lambda d: d["train"].update(learning_rate=True)),
    ("dense without fan_out", lambda d: d["layers"][0]["dense"].pop("fan_out")),
])
def test_a_wrong_field_fails(what, edit):
    assert VALIDATOR.is_valid(MLP)
    assert list(VALIDATOR.iter_errors(_with(edit))), what


def test_inferred_sizes_and_aliases_validate():
    d = _with(lambda d: (d["layers"][0]["dense"].pop("fan_in"), d["layers"][1]["dense"].update(fan_in="auto"),
                         d["train"].update(optimizer="adamw", use_adam=False)))
    assert VALIDATOR.is_valid(d), next(VALIDATOR.iter_errors(d)).message
