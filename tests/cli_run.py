"""`run(*args)`: the lmc command line in-process (typer's CliRunner), as the tests call it — no
exception but SystemExit, and never a traceback in the output."""
from __future__ import annotations

from typer.testing import CliRunner

from lmc.cli import app


def run(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    return r
