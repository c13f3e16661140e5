"""`lmc train --tensorboard DIR`: the run's metrics mirrored into TensorBoard event files.

Writer: tensorboardX (a maintained, framework-free SummaryWriter: protobuf and numpy only,
where torch.utils.tensorboard needs PyTorch and tf.summary TensorFlow), imported only when the
option is given.  Every `step`, `epoch` and `eval` record of metrics.jsonl becomes scalars at
its global step: train/loss, train/acc, train/lr, train/images_per_s; epoch/loss, epoch/acc,
epoch/seconds; eval/<metric> for each number of the eval record (top1, its interval, …).
A resumed run purges the events logged after the checkpoint it resumes from, as
metrics.jsonl drops those lines, so the curves never show the redone steps twice.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from lmc.core.errors import TrainError

_TAGS = {"step": ("train", ("loss", "acc", "lr", "images_per_s")),
         "epoch": ("epoch", ("loss", "acc", "lr", "seconds", "images_per_s"))}


def require_tensorboard() -> None:
    """--tensorboard needs tensorboardX: refused before anything is compiled or loaded."""
    if importlib.util.find_spec("tensorboardX") is None:
        raise TrainError("--tensorboard needs the tensorboardX package",
                         hint="pip install 'lmc[tensorboard]' (or pip install tensorboardX)")


class Mirror:
    def __init__(self, logdir: Path, purge_step: int | None):
        try:
            from tensorboardX import SummaryWriter
        except ImportError as e:
            raise TrainError("--tensorboard needs the tensorboardX package",
                             hint="pip install 'lmc[tensorboard]' (or pip install tensorboardX)") from e
        self.w = SummaryWriter(str(logdir), purge_step=purge_step, flush_secs=10)

    def record(self, rec: dict) -> None:
        kind, step = rec.get("kind"), rec.get("step")
        if step is None:
            return
        if kind in _TAGS:
            group, keys = _TAGS[kind]
            for k in keys:
                if isinstance(rec.get(k), (int, float)):
                    self.w.add_scalar(f"{group}/{k}", rec[k], step)
        elif kind == "eval":
            for k, v in rec.items():
                if k not in ("kind", "step", "epoch", "n") and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.w.add_scalar(f"eval/{k}", v, step)

    def flush(self):
        self.w.flush()

    def close(self):
        self.w.close()
