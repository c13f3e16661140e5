"""docs/env.md lists every environment variable lmc reads (found in the source by name)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_environment_variable_is_documented():
    src = "\n".join(p.read_text() for p in (ROOT / "lmc").rglob("*.py"))
    names = set(re.findall(r"environ(?:\.get|\.pop|\.setdefault)?\(?\[?\s*\"([A-Z][A-Z0-9_]+)\"", src))
    names |= set(re.findall(r"\"(LMC_[A-Z0-9_]+)\"", src)) | set(re.findall(r"\"(IREE_[A-Z_]+)\"", src))
    names |= {n for pair in re.findall(r"\(\"([A-Z_]+_RANK)\", (?:\"([A-Z_]+_SIZE)\"|None)\)", src) for n in pair if n}
    assert {"LMC_CACHE", "IREE_BACKEND", "LMC_CONV_FORM", "PMI_RANK"} <= names
    doc = (ROOT / "docs" / "env.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in doc and f"`{n}/" not in doc and f"/{n}`" not in doc)
    assert not missing, f"docs/env.md does not list {missing}"
