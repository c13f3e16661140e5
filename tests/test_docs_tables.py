"""docs/spec.md's registry tables (layer kinds, losses, optimizers, dataset kinds) are written by
tools/gendocs.py from the registries: the committed file must be what the generator writes, so a
kind added to a registry without `make docs` fails here, as does a hand edit inside a table."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gen():
    spec = importlib.util.spec_from_file_location("gendocs", ROOT / "tools" / "gendocs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_spec_md_tables_are_the_generators():
    gen = _gen()
    text = (ROOT / "docs" / "spec.md").read_text()
    assert gen.generate(text) == text, "docs/spec.md's generated tables are stale: run `make docs`"


def test_every_registered_kind_has_its_row():
    from lmc.data.kinds import all_datasets
    from lmc.layers import all_layers
    from lmc.losses import all_losses
    from lmc.optim import all_optimizers
    text = (ROOT / "docs" / "spec.md").read_text()
    blocks = {m.group(2): m.group(3) for m in _gen().BLOCK.finditer(text)}
    for name, reg in (("layers", all_layers), ("losses", all_losses), ("optimizers", all_optimizers),
                      ("datasets", all_datasets)):
        rows = re.findall(r"^\| `(\w+)`", blocks[name], re.M)
        assert rows == list(reg()), name
    # every loss lowers, and the table says so (it once said most did not)
    assert all(r.endswith("| yes |") for r in blocks["losses"].splitlines()[2:])


def test_a_stale_table_is_rewritten(tmp_path):
    gen = _gen()
    text = (ROOT / "docs" / "spec.md").read_text()
    stale = text.replace("| `huber` |", "| `hubber` |")
    assert stale != text and gen.generate(stale) == text
