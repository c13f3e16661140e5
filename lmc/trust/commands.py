"""The trust tools' commands, registered on lmc's typer app (lmc/cli.py imports this module):
thin as the others — parse options, call one function of lmc/trust, print a table (or --json)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..cli import _Command, app, console, err, user_errors


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _ci(lo_hi) -> str:
    lo, hi = lo_hi
    return f"{100 * lo:.2f}–{100 * hi:.2f}"


def _log(text: str) -> None:
    err.print(text, markup=False, highlight=False, soft_wrap=True)


@app.command(cls=_Command)
def compare(a: Annotated[Path, typer.Argument(help="Model A's correctness bitmap (`lmc eval --dump-correct A.npy`).", show_default=False)],
            b: Annotated[Path, typer.Argument(help="Model B's correctness bitmap, on the same examples in the same order.", show_default=False)],
            as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON on stdout.")] = False) -> None:
    """Paired comparison of two models on the same examples: McNemar's test on the discordant pairs.

    b = A right and B wrong, c = the reverse; the exact two-sided binomial p-value of b out of
    b + c at ½, and the continuity-corrected χ² p-value; both accuracies with 95% Wilson intervals."""
    from .stats import load_bitmap, mcnemar
    with user_errors():
        r = mcnemar(load_bitmap(a), load_bitmap(b))
    d = r.as_dict()
    if as_json:
        print(json.dumps(d))
        return
    t = Table(title=f"McNemar on {r.n:,} paired examples")
    for c in ("", "top-1", "95% CI (Wilson)", "correct"):
        t.add_column(c)
    t.add_row(f"A  {a}", _pct(d["acc_a"]), _ci(d["acc_a_ci"]), f"{r.correct_a:,}")
    t.add_row(f"B  {b}", _pct(d["acc_b"]), _ci(d["acc_b_ci"]), f"{r.correct_b:,}")
    console.print(t)
    console.print(f"discordant: b = {r.b:,} (A right, B wrong), c = {r.c:,} (A wrong, B right)", markup=False)
    console.print(f"exact binomial p = {r.p_exact:.4g};  χ² (continuity-corrected) = {r.chi2:.4g}, p = {r.p_chi2:.4g}",
                  markup=False)
    if r.b + r.c == 0:
        console.print("no discordant pair: the two models are right on exactly the same examples", markup=False)
