"""User-facing errors.  Every failure a user can cause is an LmcError: the CLI prints it
(`file:line:col: message`, then an optional hint) on stderr and exits with code 2.
Anything else is a bug and keeps its traceback."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in a spec file (1-based line and column)."""
    file: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        if self.line:
            return f"{self.file}:{self.line}:{self.col or 1}"
        return self.file

    @property
    def is_flag(self) -> bool:
        """A value set on the command line: `file` names the option (`--epochs`, `--set train.epochs`)."""
        return not self.line and self.file.startswith("--")

    def flag_with(self, value) -> str:
        """How to pass `value` by the same option: `--epochs 2`, `--set train.epochs=2`."""
        return f"{self.file}={value}" if self.file.startswith("--set ") else f"{self.file} {value}"


class LmcError(Exception):
    """Base of every user-facing error."""

    def __init__(self, message: str, loc: Loc | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.hint = hint

    def located(self, loc: Loc | None) -> "LmcError":
        """Attach a location if this error does not have one yet."""
        if self.loc is None and loc is not None:
            self.loc = loc
        return self

    def render(self, label: str = "error") -> str:
        """`error: file:line:col: message` (or `warning: …`), then `hint: …` if there is one."""
        where = f"{self.loc}: " if self.loc else ""
        text = f"{label}: {where}{self.message}"
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text

    def __str__(self) -> str:
        return self.render()


class SpecError(LmcError):
    """The YAML is malformed, or a field has the wrong name, type or value."""


class MultiError(LmcError):
    """Several independent errors found in one pass (each printed on its own line)."""

    def __init__(self, errors: list[LmcError]):
        super().__init__("; ".join(e.message for e in errors))
        self.errors = errors

    def render(self, label: str = "error") -> str:
        return "\n".join(e.render(label) for e in self.errors)


class ShapeError(LmcError):
    """A layer does not fit the tensor it receives."""


class NotImplementedKind(LmcError):
    """A layer/loss/optimizer kind that parses but has no lowering yet."""


class TemplateError(LmcError):
    """A template failed to render (a bug in lmc, reported with its layer)."""


class UsageError(LmcError):
    """An option or LMC_* environment switch has a value lmc does not accept."""


class CompileError(LmcError):
    """iree-compile is missing or rejected the module."""


class DataError(LmcError):
    """A dataset file is missing, truncated, or does not match the spec."""


class CheckpointError(LmcError):
    """A checkpoint or --init file is missing, corrupt, or does not match the net."""


class RunError(LmcError):
    """The runtime cannot run the compiled module here (no device, a data-parallel rank failed)."""


class TrainError(LmcError):
    """Training cannot start or had to stop (NaN loss, a run directory that holds a run)."""


class EvalError(LmcError):
    """Scoring, sampling or plotting a trained net cannot be done as asked."""


class TrustError(LmcError):
    """A trust tool (compare, attack, certify, lipschitz) cannot run as asked."""


class ExportError(LmcError):
    """A trained net cannot be exported (or published weights imported) as asked."""
