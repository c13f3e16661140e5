"""Run directories: what `lmc train` leaves in RUN/ and how a run directory stands in for a spec
or a checkpoint on every command.

A run directory holds
  spec.yaml        the spec as trained: the file as read, or the YAML after the `--set`
                   overrides (headed by a comment naming the source and the overrides)
  run.json         who trained it how: the source spec and the overrides, the backend and chip,
                   lmc's and IREE's versions, the dataset's identity (kind, path, sizes)
  last.npz         the newest checkpoint (lmc/run/checkpoint.py); epoch-N.npz the numbered
                   snapshots of checkpoint_every_n_epochs, best.npz the best by keep_best
  metrics.jsonl    the log (lmc plot RUN reads it)

Resolution, the one place the commands and the Python API share:
  spec_file(RUN)              → RUN/spec.yaml (a file path is returned as it is)
  checkpoint_path(RUN)        → the newest checkpoint (RUN/last.npz, else the last epoch-N.npz)
  checkpoint_path(RUN:best)   → RUN/best.npz; RUN:NAME → RUN/NAME.npz (RUN:epoch-3, RUN:last)
  resolve_init(SPEC, INIT)    → INIT resolved as above, or SPEC's checkpoint when SPEC is a run
                                directory and INIT is not given."""
from __future__ import annotations

import json
import re
from pathlib import Path

from lmc.core.errors import CheckpointError, RunError

SPEC_FILE = "spec.yaml"
RUN_FILE = "run.json"
CHECKPOINT = "last.npz"
BEST = "best.npz"
RUN_FORMAT = "lmc-run"


def epoch_checkpoint(epoch: int) -> str:
    """The numbered snapshot of checkpoint_every_n_epochs after epoch `epoch` (1-based)."""
    return f"epoch-{epoch}.npz"


_EPOCH = re.compile(r"epoch-(\d+)\.npz")


def is_run_dir(path) -> bool:
    """A directory `lmc train` wrote: it holds spec.yaml, run.json or a checkpoint."""
    p = Path(path)
    return p.is_dir() and any((p / f).is_file() for f in (SPEC_FILE, RUN_FILE, CHECKPOINT))


def spec_file(path) -> Path:
    """The spec to load for `path`: a run directory's spec.yaml, or `path` itself."""
    p = Path(path)
    if not p.is_dir():
        return p
    s = p / SPEC_FILE
    if s.is_file():
        return s
    if is_run_dir(p):
        raise RunError(f"{p} is a run directory without {SPEC_FILE} (written by an older lmc)",
                       hint=f"pass the spec it was trained with, and its checkpoint with --init {p / CHECKPOINT}")
    return p            # another directory: the spec loader says it cannot read it


def run_of_spec(spec_path) -> Path | None:
    """The run directory whose spec.yaml `spec_path` is (or which it names), else None."""
    p = Path(spec_path)
    if p.is_dir():
        return p if is_run_dir(p) else None
    if p.name == SPEC_FILE and is_run_dir(p.parent):
        return p.parent
    return None


def _split(arg: Path) -> tuple[Path, str | None]:
    """RUN:NAME → (RUN, NAME) when RUN is a directory and the whole is not a file."""
    s = str(arg)
    if Path(s).exists() or ":" not in s:
        return Path(s), None
    head, name = s.rsplit(":", 1)
    if Path(head).is_dir() and name and "/" not in name:
        return Path(head), name
    return Path(s), None


def snapshots(run) -> list[tuple[int, Path]]:
    """The numbered snapshots RUN/epoch-N.npz, by epoch."""
    out = []
    for f in Path(run).glob("epoch-*.npz"):
        m = _EPOCH.fullmatch(f.name)
        if m:
            out.append((int(m.group(1)), f))
    return sorted(out)


def checkpoint_path(arg) -> Path:
    """A checkpoint argument → a file: a file as it is; RUN → its newest checkpoint; RUN:best,
    RUN:last, RUN:epoch-N → that checkpoint of the run."""
    path, name = _split(Path(arg))
    if name is not None:
        f = path / (name if name.endswith(".npz") else name + ".npz")
        if not f.is_file():
            have = ", ".join(sorted(p.stem for p in path.glob("*.npz") if not p.name.startswith("."))) or "none"
            extra = " (keep_best writes it: train.keep_best)" if name == "best" else ""
            raise CheckpointError(f"{path} has no checkpoint '{name}'{extra}; it holds: {have}")
        return f
    if not path.is_dir():
        return path
    if (path / CHECKPOINT).is_file():
        return path / CHECKPOINT
    snaps = snapshots(path)
    if snaps:
        return snaps[-1][1]
    raise CheckpointError(f"{path} is a directory without a checkpoint ({CHECKPOINT} or epoch-N.npz)",
                          hint="pass the checkpoint file, or the run directory `lmc train --out` wrote")


def resolve_init(spec, init) -> Path | None:
    """The checkpoint a command scores: `init` resolved (checkpoint_path), or — when it is not
    given and `spec` is a run directory — that run's newest checkpoint; None when neither."""
    if init is not None:
        return checkpoint_path(init)
    run = run_of_spec(spec) if spec is not None else None
    return checkpoint_path(run) if run is not None else None


def require_init(spec, init, flag: str = "--init") -> Path:
    """resolve_init, refusing when neither gives a checkpoint."""
    got = resolve_init(spec, init)
    if got is None:
        raise CheckpointError(f"{flag} is required: the checkpoint to use (RUN_DIR/last.npz, a run directory, "
                              f"or RUN_DIR:best)", hint="or pass a run directory instead of the spec")
    return got


def read_run_info(run) -> dict | None:
    """RUN/run.json, or None for a run an older lmc wrote (or an unreadable file)."""
    f = Path(run) / RUN_FILE
    try:
        info = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("format") == RUN_FORMAT else None


def saved_spec(run) -> str | None:
    """The text of RUN/spec.yaml, None when the run has none."""
    try:
        return (Path(run) / SPEC_FILE).read_text(encoding="utf-8")
    except OSError:
        return None


def data_differences(a, b, path: str = "") -> list[str]:
    """The dotted paths where two YAML data trees differ (mapping keys compared as written)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                out.append(sub)
            else:
                out += data_differences(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += data_differences(x, y, f"{path}.{i}" if path else str(i))
        return out
    return [] if a == b else [path or "(the whole spec)"]
