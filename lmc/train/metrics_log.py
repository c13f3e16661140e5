"""RUN_DIR/metrics.jsonl (and its TensorBoard mirror): the run's log, one JSON object a line.

Input: records (`kind` = header, resume, step, epoch, eval, checkpoint, diverged,
interrupted, end) from the plan and the training callbacks.
Output: the file, flushed as written (step records: at each log flush); on resume the lines a
killed run logged after its last checkpoint are dropped (`kept` holds the others)."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from lmc.run.checkpoint import atomic_write
from lmc.train.tboard import Mirror


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class NoMetrics:
    """A data-parallel rank other than 0: it logs nothing (rank 0 writes metrics.jsonl)."""
    kept: list = []

    def write(self, flush: bool = True, **rec):
        pass

    def flush(self):
        pass

    def close(self):
        pass


class MetricsLog:
    """RUN_DIR/metrics.jsonl, one JSON object per line, flushed as written."""

    def __init__(self, path: Path, keep_until_step: int | None, tensorboard: Path | None = None):
        self.path = path
        self.tb = None
        if tensorboard is not None:
            self.tb = Mirror(tensorboard, None if keep_until_step is None else keep_until_step + 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.kept: list[dict] = []
        if keep_until_step is None:
            path.write_text("")
        else:
            self.kept = _kept(path, keep_until_step)
            text = "".join(json.dumps(r) + "\n" for r in self.kept)
            atomic_write(path, lambda f: f.write(text.encode()))
        self.f = open(path, "a")

    def write(self, flush: bool = True, **rec):
        self.f.write(json.dumps(rec) + "\n")
        if self.tb is not None:
            self.tb.record(rec)
        if flush:
            self.flush()

    def flush(self):
        self.f.flush()
        if self.tb is not None:
            self.tb.flush()

    def close(self):
        if not self.f.closed:
            self.f.close()
        if self.tb is not None:
            self.tb.close()
            self.tb = None


def _kept(path: Path, keep_until_step: int) -> list[dict]:
    """Drop what a killed run logged after its last checkpoint: the resumed run redoes it."""
    kept = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue           # a line cut short by the kill
            if rec.get("step", 0) <= keep_until_step:
                kept.append(rec)
    return kept
