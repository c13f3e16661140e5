"""`lmc train`'s options and results: what the CLI (or a test) asks for and what a run reports.

Input: the command line's values (TrainOptions).
Output: Summary (the run's outcome), or Interrupted (Ctrl-C, after a checkpoint); the names of
the files a run directory holds (CHECKPOINT, METRICS, VOCAB_FILE)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lmc.evaluate.score import EvalResult
from lmc.lower.options import LowerOptions

METRICS = "metrics.jsonl"
VOCAB_FILE = "vocab.json"       # a char-level text run's vocabulary (also in every checkpoint's metadata)


@dataclass
class TrainOptions:
    backend: str | None = None
    chip: str | None = None
    data: Path | None = None
    out: Path | None = None
    max_steps: int | None = None      # --max-steps: stop when the global step reaches this
    init: Path | None = None
    resume: bool = False
    shuffle: bool = True
    overwrite: bool = False
    log_every: int = 10
    progress_every: float = 30.0      # without a terminal: a progress line every N seconds (0: none)
    tensorboard: Path | None = None   # also mirror the metrics into TensorBoard event files here
    stream: bool | None = None        # image folders decoded per batch (None: by size)
    loader_workers: int | None = None  # image folders decoded in N processes (0/None: threads)
    dist_timeout: float | None = None  # data-parallel: seconds a rank waits for the others
    nproc: int = 1                    # data-parallel ranks (lmc/run/dist.py; the launcher's world)
    dist_overlap: bool = False        # data-parallel: the backward split to overlap the all-reduce (LMC_DIST_OVERLAP=on)
    lower_options: LowerOptions = LowerOptions()   # the lowering's spellings (the command line's LMC_*)


class Interrupted(Exception):
    """Ctrl-C: a checkpoint was saved at the current step; the CLI exits with code 130."""


@dataclass
class Summary:
    out: Path
    step: int
    epoch: int
    loss: float | None
    eval: EvalResult | None
    seconds: float
    train_seconds: float
    steps_run: int
    images_per_s: float
    checkpoint: Path | None = None
    train_cpu_seconds: float = 0.0      # process CPU time (all threads) of the training steps
    rank: int = 0                       # data-parallel: this process's rank (0 reports)
    extra: dict = field(default_factory=dict)
