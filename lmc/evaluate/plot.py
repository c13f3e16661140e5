"""`lmc plot`: RUN_DIR/metrics.jsonl → a PNG with the loss and accuracy curves (matplotlib, Agg)."""
from __future__ import annotations

import json
from pathlib import Path

from lmc.core.errors import EvalError


def save_percent_plot(fig, ax, xlabel: str, ylabel: str, title: str, path) -> Path:
    """Finish a top-1 (%) plot — labels, 0–100 % axis, title, legend — write it (110 dpi), close it."""
    import matplotlib.pyplot as plt
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def read_metrics(path: Path) -> list[dict]:
    if not path.is_file():
        raise EvalError(f"no metrics log at {path}", hint="pass the --out directory of an `lmc train` run")
    recs = []
    for line in path.read_text().splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            continue                       # a last line cut short by a kill
    return recs


def _plot_other_evals(ax, evals, bpe):
    """The metrics of lmc/evaluate/metrics.py: segmentation (val mIoU and pixel accuracy, %), detection
    (val mAP@0.5 and mAP@[.5:.95], %) or regression (val PSNR, dB)."""
    seg = [r for r in evals if r.get("miou") is not None]
    if seg:
        x = [r["step"] / bpe for r in seg]
        ax.plot(x, [100 * r["miou"] for r in seg], "s-", ms=4, label="val mIoU")
        ax.plot(x, [100 * r["pixel_acc"] for r in seg], "^--", ms=4, label="val pixel acc")
    det = [r for r in evals if r.get("map50") is not None]
    if det:
        x = [r["step"] / bpe for r in det]
        ax.plot(x, [100 * r["map50"] for r in det], "s-", ms=4, label="val mAP@0.5")
        ax.plot(x, [100 * r["map"] for r in det], "^--", ms=4, label="val mAP@[.5:.95]")
    reg = [r for r in evals if r.get("psnr") is not None]
    if reg:
        ax.plot([r["step"] / bpe for r in reg], [r["psnr"] for r in reg], "s-", ms=4, label="val PSNR")


def plot_run(run_dir: Path, output: Path | None = None) -> Path:
    """Loss per step (and per-epoch mean) on the left; train and validation top-1 per epoch,
    with the validation's 95% Wilson interval, on the right."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    recs = read_metrics(run_dir / "metrics.jsonl")
    steps = [r for r in recs if r.get("kind") == "step"]
    if not steps:
        raise EvalError(f"{run_dir / 'metrics.jsonl'} has no step records yet")
    epochs = [r for r in recs if r.get("kind") == "epoch"]
    evals = [r for r in recs if r.get("kind") == "eval" and r.get("top1") is not None]
    head = next((r for r in recs if r.get("kind") == "header"), {})
    bpe = head.get("steps_per_epoch") or 1

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([r["step"] / bpe for r in steps], [r["loss"] for r in steps], lw=0.6, alpha=0.5, label="loss per step")
    if epochs:
        ax1.plot([r["epoch"] for r in epochs], [r["loss"] for r in epochs], "o-", ms=3, label="epoch mean")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("training loss")
    if min(r["loss"] for r in steps) > 0:
        ax1.set_yscale("log")
    ax1.grid(alpha=0.3)
    ax1.legend()

    ep_acc = [r for r in epochs if r.get("acc") is not None]     # a regression loss has none
    if ep_acc:
        seg = any("miou" in r for r in recs if r.get("kind") == "eval")
        ax2.plot([r["epoch"] for r in ep_acc], [100 * r["acc"] for r in ep_acc], "o-", ms=3,
                 label="train pixel acc" if seg else "train top-1")
    if evals:
        x = [r["step"] / bpe for r in evals]
        y = [100 * r["top1"] for r in evals]
        err = [[100 * (r["top1"] - r["top1_lo"]) for r in evals], [100 * (r["top1_hi"] - r["top1"]) for r in evals]]
        ax2.errorbar(x, y, yerr=err, fmt="s-", ms=4, capsize=3, label="val top-1 (95% Wilson)")
        if "top5" in evals[-1]:
            ax2.plot(x, [100 * r["top5"] for r in evals], "^--", ms=4, label="val top-5")
    _plot_other_evals(ax2, [r for r in recs if r.get("kind") == "eval"], bpe)
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("accuracy (%)" if not any("psnr" in r for r in recs) else "validation PSNR (dB)")
    ax2.grid(alpha=0.3)
    ax2.legend(loc="lower right")
    fig.suptitle(f"{head.get('name', run_dir.name)}  ({head.get('optimizer', '?')}, lr {head.get('learning_rate', '?')}, "
                 f"batch {head.get('batch_size', '?')})")
    fig.tight_layout()
    out = Path(output) if output else run_dir / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
