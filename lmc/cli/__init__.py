"""The command line, on top of every stage: each command calls one stage and prints.
`app` is the typer application; importing this package registers every command on it."""
from .app import app, main
from . import commands, export, predict, trust  # noqa: F401  (each registers its commands on `app`)

__all__ = ["app", "main", "commands", "export", "predict", "trust"]
