"""Every registered layer kind is used by at least one spec in specs/ with a training recipe.
A kind not yet shown in such a spec is listed in PENDING with the reason; the test fails when a
pending kind gains a spec (delete its entry) as well as when a kind is in neither.  Every kind is
also in a spec whose recipe trains on an embedded dataset (no files to fetch), and at least one
such spec of each kind is run by a test: trained for a few steps by
tests/test_layer_specs_train.py (slow) or named in another test."""
from __future__ import annotations

import ast
from pathlib import Path

from lmc.data.kinds import embedded
from lmc.layers import LAYERS, all_layers
from lmc.spec.netspec import load_spec

TESTS = Path(__file__).resolve().parent
SPECS = sorted((TESTS.parent / "specs").glob("*.yaml"))

PENDING = {
}


def kinds_in_specs() -> dict[str, list[str]]:
    used: dict[str, list[str]] = {}
    for p in SPECS:
        spec = load_spec(p)
        if spec.train is None:
            continue
        for entry in spec.layers:
            used.setdefault(entry.layer.kind, []).append(p.stem)
    return used


def kinds_on_embedded_data() -> dict[str, list[str]]:
    """{kind: the specs with a recipe on an embedded dataset that use it}."""
    used: dict[str, list[str]] = {}
    for p in SPECS:
        spec = load_spec(p)
        if spec.train is None or spec.dataset is None or not embedded(spec.dataset.value):
            continue
        for entry in spec.layers:
            if p.stem not in used.setdefault(entry.layer.kind, []):
                used[entry.layer.kind].append(p.stem)
    return used


def specs_named_in_tests() -> set[str]:
    """The stems of the specs in specs/ that a test module (other than this one) names in a
    string: the stem itself (SHOWCASE's entries) or a path ending in specs/<stem>.yaml."""
    stems = {p.stem for p in SPECS}
    named = set()
    for f in sorted(TESTS.glob("test_*.py")):
        if f.name == Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                v = node.value
                named |= {v} & stems
                named |= {s for s in stems if v == f"{s}.yaml" or v.endswith(f"/{s}.yaml")}
    return named


def test_every_layer_kind_trains_in_a_spec():
    used = kinds_in_specs()
    missing = sorted(set(LAYERS) - set(used) - set(PENDING))
    assert not missing, f"layer kinds in no spec with a recipe: {missing}"


def test_pending_kinds_are_still_pending():
    used = kinds_in_specs()
    assert set(PENDING) <= set(LAYERS), sorted(set(PENDING) - set(LAYERS))
    done = sorted(k for k in PENDING if k in used)
    assert not done, f"these kinds now have a spec, delete their PENDING entries: {done}"


def test_every_layer_kind_trains_on_embedded_data_in_a_tested_spec():
    used = kinds_on_embedded_data()
    missing = sorted(set(all_layers()) - set(used))
    assert not missing, f"layer kinds in no spec with a recipe on an embedded dataset: {missing}"
    named = specs_named_in_tests()
    untested = {k: specs for k, specs in sorted(used.items()) if not set(specs) & named}
    assert not untested, ("layer kinds whose embedded-data specs no test trains or names (add one to SHOWCASE in "
                          f"tests/test_layer_specs_train.py): {untested}")
