"""Every registered layer kind is used by at least one spec in specs/ with a training recipe.
A kind not yet shown in such a spec is listed in PENDING with the reason; the test fails when a
pending kind gains a spec (delete its entry) as well as when a kind is in neither.  The specs
written to show a kind on embedded data are trained for a few steps by
tests/test_layer_specs_train.py (slow)."""
from __future__ import annotations

from pathlib import Path

from lmc.layers import LAYERS
from lmc.spec.netspec import load_spec

SPECS = sorted((Path(__file__).resolve().parent.parent / "specs").glob("*.yaml"))

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


def test_every_layer_kind_trains_in_a_spec():
    used = kinds_in_specs()
    missing = sorted(set(LAYERS) - set(used) - set(PENDING))
    assert not missing, f"layer kinds in no spec with a recipe: {missing}"


def test_pending_kinds_are_still_pending():
    used = kinds_in_specs()
    assert set(PENDING) <= set(LAYERS), sorted(set(PENDING) - set(LAYERS))
    done = sorted(k for k in PENDING if k in used)
    assert not done, f"these kinds now have a spec, delete their PENDING entries: {done}"
