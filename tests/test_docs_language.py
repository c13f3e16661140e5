"""The README, docs/*.md and the example specs (specs/*.yaml, their comments) speak to users:
no pointer to a file a clone does not have (the Lean kit's distilled notes, `../shared/...`),
no internal section numbers (`§3.23`), no "issue N" or "session N", and the Lean kit is called
the Lean kit (not "the seed", not a bare "the kit").  A user's own paths (`/shared/runs/r34` on
a cluster) are fine."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "specs").glob("*.yaml"))]

FORBIDDEN = {
    "the seed": re.compile(r"\bthe seed\b|\bseed's\b", re.I),
    "a section number": re.compile(r"§"),
    "an issue number": re.compile(r"\bissues? #?\d+", re.I),
    "a session number": re.compile(r"\bsessions? \d+", re.I),
    "a file outside the repo": re.compile(r"\.\./shared|\bshared/(?:reference|seeds|STYLE)|/work/|"
                                          r"\breference/[a-z_]+\.md"),
    "the kit without its name": re.compile(r"(?<!Lean )(?<!Lean-)(?<!Lean 4 )\bkit\b"),
}


def _hits(text: str) -> list[tuple[str, int, str]]:
    return [(what, text.count("\n", 0, m.start()) + 1, m.group(0))
            for what, pat in FORBIDDEN.items() for m in pat.finditer(text)]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_docs_speak_to_users(path):
    hits = _hits(path.read_text())
    assert not hits, "\n".join(f"{path.name}:{line}: {what}: {s!r}" for what, line, s in hits)


def test_the_check_catches_each_phrase():
    bad = ("as the seed does\nlayers.md §6\n(issue 10)\nin session 7\nsee ../shared/STYLE.md\n"
           "shared/reference/defaults.md\nthe kit's defaults\n")
    assert {w for w, _, _ in _hits(bad)} == set(FORBIDDEN)
    assert not _hits("the Lean kit's defaults; --seed 3; the same seed; mpiexec ... --out /shared/runs/r34\n"
                     "`lmc` re-creates, in Python, the Lean 4 kit [brettkoonce/lean4-mlir]; a Lean-kit `.bin`")
