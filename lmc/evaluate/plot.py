"""`lmc plot`: RUN_DIR/metrics.jsonl → a PNG with the loss and accuracy curves (matplotlib, Agg)."""
from __future__ import annotations

import json
from pathlib import Path

from lmc.core.errors import EvalError


def png_target(explicit: Path | None, default: Path) -> tuple[Path, str]:
    """Where a PNG goes, and how to say so, never overwriting silently: an explicit --plot PATH
    is written there ("replaced" said when it existed); a default path that exists gets the next
    free name (attack-linf-2.png, -3, ...), so an earlier run's plot survives."""
    if explicit is not None:
        p = Path(explicit)
        return p, f"wrote {p}" + (" (replaced the earlier file)" if p.exists() else "")
    p, k = Path(default), 2
    while p.exists():
        p = Path(default).with_name(f"{Path(default).stem}-{k}{Path(default).suffix}")
        k += 1
    return p, f"wrote {p}"


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


def _run(run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    recs = read_metrics(run_dir / "metrics.jsonl")
    steps = [r for r in recs if r.get("kind") == "step"]
    if not steps:
        raise EvalError(f"{run_dir / 'metrics.jsonl'} has no step records yet")
    head = next((r for r in recs if r.get("kind") == "header"), {})
    return {"dir": run_dir, "recs": recs, "steps": steps, "head": head,
            "epochs": [r for r in recs if r.get("kind") == "epoch"],
            "evals": [r for r in recs if r.get("kind") == "eval" and r.get("top1") is not None],
            "bpe": head.get("steps_per_epoch") or 1}


def plot_run(run_dirs, output: Path | None = None) -> tuple[Path, str]:
    """Training loss per step and its per-epoch mean (drawn at the middle of the epoch it
    averages), train and validation top-1 per epoch (the validation's 95% Wilson interval as
    error bars), and the learning rate per step; several run directories overlay, one colour
    each.  Returns the PNG's path and the line that reports it (png_target)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    runs = [_run(d) for d in run_dirs]
    many = len(runs) > 1
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    for i, run in enumerate(runs):
        c = f"C{i}"
        tag = f"{run['dir'].name}: " if many else ""
        steps, epochs, evals, bpe, recs = run["steps"], run["epochs"], run["evals"], run["bpe"], run["recs"]
        ax1.plot([r["step"] / bpe for r in steps], [r["loss"] for r in steps], lw=0.6, alpha=0.5, color=c,
                 label=f"{tag}loss per step")
        if epochs:
            # epoch e averages the steps at x in (e − 1, e]: its mean belongs at the middle
            ax1.plot([r["epoch"] - 0.5 for r in epochs], [r["loss"] for r in epochs], "o-", ms=3, color=c,
                     label=f"{tag}epoch mean")
        vloss = [r for r in run["recs"] if r.get("kind") == "eval" and r.get("loss") is not None]
        if vloss:
            ax1.plot([r["step"] / bpe for r in vloss], [r["loss"] for r in vloss], "s--", ms=4, color=c,
                     label=f"{tag}val loss (cross-entropy)")
        ep_acc = [r for r in epochs if r.get("acc") is not None]     # a regression loss has none
        if ep_acc:
            seg = any("miou" in r for r in recs if r.get("kind") == "eval")
            ax2.plot([r["epoch"] - 0.5 for r in ep_acc], [100 * r["acc"] for r in ep_acc], "o-", ms=3, color=c,
                     alpha=0.6, label=f"{tag}{'train pixel acc' if seg else 'train top-1'} (epoch mean)")
        if evals:
            x = [r["step"] / bpe for r in evals]
            y = [100 * r["top1"] for r in evals]
            err = [[100 * (r["top1"] - r["top1_lo"]) for r in evals], [100 * (r["top1_hi"] - r["top1"]) for r in evals]]
            ax2.errorbar(x, y, yerr=err, fmt="s-", ms=4, capsize=3, color=c, label=f"{tag}val top-1 (95% Wilson)")
            if "top5" in evals[-1] and not many:
                ax2.plot(x, [100 * r["top5"] for r in evals], "^--", ms=4, color=c, label="val top-5")
        _plot_other_evals(ax2, [r for r in recs if r.get("kind") == "eval"], bpe)
        lr = [r for r in steps if r.get("lr") is not None]
        ax3.plot([r["step"] / bpe for r in lr], [r["lr"] for r in lr], color=c, label=f"{tag}learning rate".strip())
    if min(r["loss"] for run in runs for r in run["steps"]) > 0:
        ax1.set_yscale("log")
    recs = [r for run in runs for r in run["recs"]]
    for ax, ylabel in ((ax1, "training loss"),
                       (ax2, "accuracy (%)" if not any("psnr" in r for r in recs) else "validation PSNR (dB)"),
                       (ax3, "learning rate")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right" if ax is ax2 else "best", fontsize=8)
    head = runs[0]["head"]
    fig.suptitle(" vs ".join(r["dir"].name for r in runs) if many else
                 f"{head.get('name', runs[0]['dir'].name)}  ({head.get('optimizer', '?')}, lr {head.get('learning_rate', '?')}, "
                 f"batch {head.get('batch_size', '?')})")
    fig.tight_layout()
    out, said = png_target(output, runs[0]["dir"] / "curves.png" if not many else Path("runs-compared.png"))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out, said
