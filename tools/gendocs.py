"""Write the registry tables of docs/spec.md from the registries themselves: the layer kinds
(lmc/layers), the losses (lmc/losses), the optimizers (lmc/optim) and the dataset kinds
(lmc/data/kinds).  Each table sits between `<!-- generated: NAME -->` and `<!-- end generated -->`;
everything else in the file is left as written.  A new kind reaches the docs by `make docs`, and
tests/test_docs_tables.py fails while the committed file differs from what this writes.

    python tools/gendocs.py          # rewrite the tables in place
    python tools/gendocs.py --check  # exit 1 (naming the tables) if a table is stale
"""
from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = {"spec.md": ("layers", "losses", "optimizers", "datasets")}
BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated -->)", re.S)


MARKS = (".md", ".py", "lmc/", "§", "Lean", "seed")


def _drop_pointers(text: str) -> str:
    """The text without its top-level parentheses that point into sources (a file, a section)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                out.append(text[start:i])
                start = i
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0:
                group = text[start:i + 1]
                if not any(m in group for m in MARKS):
                    out.append(group)
                start = i + 1
    out.append(text[start:])
    return re.sub(r"\s+([,.;:])(?=\s|$)", r"\1", re.sub(r"  +", " ", "".join(out)))


def summary(cls) -> str:
    """The first clause of the kind's docstring (its class's, else its module's), without its
    `name:` lead and without pointers into sources (parentheses naming a file or a section)."""
    doc = cls.__doc__ if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else None
    doc = (doc or sys.modules[cls.__module__].__doc__ or "").strip()
    para = " ".join(doc.split("\n\n")[0].split())
    para = re.sub(r"^[\w/]+(?: \([^)]*\))?: ", "", para)
    para = _drop_pointers(para)
    cut = [m.start() for m in re.finditer(r"(?<!e\.g)(?<!i\.e)(?<! al)[.;](?:\s|$)| — |:\s", para) if m.start() >= 15]
    s = para[:cut[0]] if cut else para
    s = s.strip().rstrip(":,")
    while s.count("(") > s.count(")"):          # a clause cut inside a parenthesis: drop it
        s = s[:s.rfind("(")].rstrip(" ,")
    first = s.split(" ")[0]
    if "_" not in first and not first[1:2].isupper():
        s = s[:1].upper() + s[1:]
    return s.replace("|", "\\|")


def _fields(cls) -> str:
    out = []
    for f in dataclasses.fields(cls):
        if f.name in ("loc",) or not f.init:
            continue
        d = f.default
        if d is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            d = f.default_factory()
        if d is dataclasses.MISSING:
            out.append(f.name)
        else:
            d = getattr(d, "value", d)
            out.append(f"{f.name} ({d})")
    return "`" + ", ".join(out) + "`" if out else "—"


def layers() -> str:
    from lmc.graph.infer import lowers
    from lmc.layers import all_layers
    rows = ["| kind | fields (default) | computes | lowers |", "|---|---|---|---|"]
    for name, cls in all_layers().items():
        rows.append(f"| `{name}` | {_fields(cls)} | {summary(cls)} | {'yes' if lowers(cls) else 'not yet'} |")
    return "\n".join(rows)


def losses() -> str:
    from lmc.losses import all_losses
    rows = ["| kind | parameters | labels | net output | loss | lowered |", "|---|---|---|---|---|---|"]
    for name, cls in all_losses().items():
        ps = ", ".join(f"`{p.name}`" + (" (required)" if p.example else f" ({p.default})") for p in cls.params) or "—"
        out = cls.logits_layout if cls.logits_rank is not None else "any shape (the target's)"
        kind = f"`{name}`" + (" (default)" if cls.default else "")
        rows.append(f"| {kind} | {ps} | {cls.label_format} | {out} | {summary(cls)} | "
                    f"{'yes' if cls.lowered else 'not yet'} |")
    return "\n".join(rows)


def optimizers() -> str:
    from lmc.optim import all_optimizers
    rows = ["| kind | state per tensor | runtime hyperparameters | update |", "|---|---|---|---|"]
    for name, cls in all_optimizers().items():
        slots = ", ".join(f"`{s}`" for s in cls.slots) or "—"
        hp = ", ".join(f"`{h}`" for h in cls.hp) or "—"
        rows.append(f"| `{name}` | {slots} | {hp} | {summary(cls)} |")
    return "\n".join(rows)


def datasets() -> str:
    from lmc.data.kinds import all_datasets
    rows = ["| kind | labels | embedded (no download) | data |", "|---|---|---|---|"]
    for name, cls in all_datasets().items():
        rows.append(f"| `{name}` | {cls.label_format} | {'yes' if cls.embedded else 'no'} | {summary(cls)} |")
    return "\n".join(rows)


TABLES = {"layers": layers, "losses": losses, "optimizers": optimizers, "datasets": datasets}


def generate(text: str) -> str:
    def one(m):
        return m.group(1) + TABLES[m.group(2)]() + "\n" + m.group(4)
    return BLOCK.sub(one, text)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    stale = []
    for doc, names in DOCS.items():
        path = ROOT / "docs" / doc
        text = path.read_text()
        found = {m.group(2) for m in BLOCK.finditer(text)}
        missing = set(names) - found
        if missing:
            print(f"docs/{doc}: no <!-- generated: {sorted(missing)[0]} --> block", file=sys.stderr)
            return 1
        new = generate(text)
        if new != text:
            stale.append(doc)
            if "--check" not in argv:
                path.write_text(new)
    if stale and "--check" in argv:
        print(f"stale generated tables in {', '.join('docs/' + d for d in stale)}: run `make docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
