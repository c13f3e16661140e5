"""`lmc render` of every spec in specs/ gives the same bytes as before the stages moved into
packages (tests/data/render_sha256.json, recorded from the flat layout): the reorganisation
changed no module text, under the default lowering options and under each LMC_* switch.

A deliberate change to the lowering regenerates the file: `python tests/test_render_golden.py`."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lmc.cli import app

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "render_sha256.json"
CASES = json.loads(GOLDEN.read_text())


def render(case: dict, monkeypatch=None) -> tuple[int, bytes]:
    args = ["render", case["spec"], "--function", case["function"]]
    for s in case["set"]:
        args += ["--set", s]
    r = CliRunner().invoke(app, args, env=case["env"])
    return r.exit_code, r.stdout_bytes if r.exit_code == 0 else b""


@pytest.mark.parametrize("name", sorted(CASES))
def test_render_unchanged(name, monkeypatch):
    case = CASES[name]
    monkeypatch.chdir(ROOT)
    code, text = render(case)
    if case["bytes"] == 0:                 # refused before the move (a spec with no recipe): still refused
        assert code == 2
        return
    assert code == 0
    assert len(text) == case["bytes"] and hashlib.sha256(text).hexdigest() == case["sha256"], \
        f"{case['spec']} ({case['function']}, {case['env'] or 'default options'}) renders other text than recorded"


if __name__ == "__main__":         # regenerate after an intended change of the module text
    import os
    os.chdir(ROOT)
    for name, case in CASES.items():
        code, text = render(case)
        case.update(sha256=hashlib.sha256(text).hexdigest(), bytes=len(text))
        print(name, code, len(text), file=sys.stderr)
    GOLDEN.write_text(json.dumps(CASES, indent=1) + "\n")
