"""Command line: `lmc validate | info | render | compile | train | eval | bench | plot | layers`
(and the trust tools `compare | attack | certify | lipschitz`, lmc/cli/trust.py).
Commands are thin: parse options, call one pipeline function, print.  Artifacts go to stdout
or -o; progress and errors to stderr.  Every LmcError exits with code 2."""
from __future__ import annotations

import contextlib
import sys
import typing
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from lmc.check import load_net
from lmc.core.errors import LmcError
from lmc._version import __version__
from lmc.cli.examples import epilog
from lmc.compile import compiler_version, find_compiler
from lmc.run.dist import launched_rank
from lmc.run.rundir import spec_file


class _Argument(typer.core.TyperArgument):
    def display_type_rich(self, ctx):         # the name says it all: no `<path>` after SPEC
        return None

    def _usage_display_name(self) -> str:     # `SPEC`, `[RUN_DIR]`: not typer's `{spec}`
        name = self.metavar or self.name.upper()
        return name if self.required else f"[{name}]"


_METAVARS = {Path: "PATH", int: "INTEGER", float: "FLOAT", str: "TEXT"}


def _plain(params):
    """Help as in a classic click/typer CLI: `lmc train [OPTIONS] SPEC`, flags without a type
    placeholder, PATH / INTEGER / TEXT after the options that take a value (typer 0.29 writes
    `{spec}`, `--json <bool>`, `--set <list[str]>`)."""
    for p in params:
        if isinstance(p, typer.core.TyperArgument):
            p.__class__ = _Argument
            p.metavar = p.metavar or p.name.upper()
        elif p.metavar is None:
            t = p.type_descriptor.annotation
            t = typing.get_args(t)[0] if typing.get_origin(t) is list else t
            p.metavar = "" if p.is_flag else _METAVARS.get(t, "TEXT")
    return params


class _PlainHelp:
    """Mixed into typer's command and group classes: plain metavars in --help (see _plain)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        _plain(self.params)

    def get_help_option(self, ctx):
        opt = super().get_help_option(ctx)
        return _plain([opt])[0] if opt is not None else None


def _escaped(params):
    """Help text is rendered as rich markup: escape it, so `pip install 'lmc[tensorboard]'` keeps
    its brackets (rich would read `[tensorboard]` as a style tag and drop it)."""
    for p in params:
        if getattr(p, "help", None):
            p.help = escape(p.help)
    return params


class _Command(_PlainHelp, typer.core.TyperCommand):
    """A command: its options' help escaped, its examples (lmc/cli/examples.py) closing its help,
    and a renamed flag refused naming its new name."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        _escaped(self.params)
        if self.help:
            self.help = escape(self.help)
        ex = epilog(self.name)
        if ex and not self.epilog:
            self.epilog = escape(ex)

    def parse_args(self, ctx, args):
        if self.name in RENAMED_STEPS:
            for i, a in enumerate(args):
                if a == "--":
                    break
                if a == "--steps" or a.startswith("--steps="):
                    value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "N")
                    with user_errors():
                        refuse_old_steps(self.name, value)
        return super().parse_args(ctx, args)


class _Group(_PlainHelp, typer.core.TyperGroup):
    pass


app = typer.Typer(cls=_Group, rich_markup_mode="rich", no_args_is_help=True, add_completion=False,
                  help="lmc: YAML nets → StableHLO train steps → IREE.  `lmc COMMAND --help` explains each command.",
                  epilog=escape(epilog(None)))
console = Console()
# stderr: paths and messages on one line, and never read as rich markup (a path may hold "[/x]")
err = Console(stderr=True, soft_wrap=True, highlight=False, markup=False)

SpecArg = Annotated[Path, typer.Argument(help="Network spec (YAML), or a run directory (its spec.yaml, as trained).", show_default=False)]
ChipOpt = Annotated[Optional[str], typer.Option(help="Target chip (default: $IREE_CHIP, else sm_86 for cuda, gfx1100 for rocm, host for llvm-cpu).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override a spec field, e.g. --set train.epochs=3 (repeatable).")]
# `--steps` once meant three counts: train's global step to stop at, bench's timed steps, attack's
# PGD steps.  Each has its own name now; the old spelling is refused naming the new one (in
# _Command.parse_args: not a hidden option, which click would offer as a "possible option").
RENAMED_STEPS = {"train": ("--max-steps", "stop when the global step reaches N"),
                 "bench": ("--timed-steps", "timed train steps after the warm-up"),
                 "attack": ("--pgd-steps", "PGD steps per restart")}


def refuse_old_steps(command: str, value: str) -> None:
    """The old `--steps VALUE` given to `command`: one error naming the flag that replaced it."""
    new, meaning = RENAMED_STEPS[command]
    raise LmcError(f"--steps is now {new} on lmc {command} ({meaning}); --steps meant a different "
                   f"count on each of lmc train, bench and attack", hint=f"write {new} {value}")


@contextlib.contextmanager
def user_errors():
    """LmcError → its message on stderr, exit code 2.  Anything else is a bug (traceback)."""
    try:
        yield
    except LmcError as e:
        # plain write: rich would wrap a long `file:line:col: message` line at the terminal width
        r = launched_rank()
        sys.stderr.write((f"rank {r}: " if r else "") + e.render() + "\n")
        raise typer.Exit(2)


def _load(spec: Path, sets, batch=None, world: int = 1):
    """load → infer → check for every command (lmc.check.load_net); what is valid but cannot be
    lowered or trained yet stays in the net's check report for the command to refuse or warn."""
    if batch is not None and batch < 1:     # else infer blames layer 0 for an empty dimension
        raise LmcError(f"--batch must be at least 1, got {batch}")
    # a run directory stands for the spec it was trained with (RUN/spec.yaml: lmc/run/rundir.py)
    return load_net(spec_file(spec), sets, batch=batch, world=world)


def _version(value: bool):
    if value:
        try:
            cv = compiler_version(find_compiler())
        except LmcError:
            cv = "iree-compile not found"
        print(f"lmc {__version__} ({cv})")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print lmc's and the IREE compiler's versions.")] = False):
    pass


def main():
    app()
