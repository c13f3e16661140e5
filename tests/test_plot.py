"""`lmc plot`: the epoch means sit at the middle of the steps they average, a learning-rate panel,
several runs overlaid, and PNG writers that never overwrite silently."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib.figure
import pytest
from typer.testing import CliRunner

from lmc.cli import app
from lmc.evaluate.plot import plot_run, png_target


def _run_dir(d: Path, lr: float = 0.01, bpe: int = 4, epochs: int = 3) -> Path:
    d.mkdir()
    recs = [{"kind": "header", "name": d.name, "steps_per_epoch": bpe, "optimizer": "adam", "learning_rate": lr,
             "batch_size": 8}]
    for s in range(1, bpe * epochs + 1):
        recs.append({"kind": "step", "step": s, "epoch": (s - 1) // bpe + 1, "loss": 2.0 / s, "acc": 0.5, "lr": lr * s})
    for e in range(1, epochs + 1):
        recs.append({"kind": "epoch", "step": e * bpe, "epoch": e, "loss": 1.0 / e, "acc": 0.5 + 0.1 * e, "lr": lr})
        recs.append({"kind": "eval", "step": e * bpe, "epoch": e, "n": 10, "top1": 0.6, "top1_lo": 0.3, "top1_hi": 0.8,
                     "loss": 1.5 / e})
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return d


@pytest.fixture
def figures(monkeypatch):
    saved = []
    real = matplotlib.figure.Figure.savefig
    def keep(self, *a, **k):
        saved.append(self)
        return real(self, *a, **k)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return saved


def test_epoch_means_sit_at_the_middle_of_their_steps(tmp_path, figures):
    d = _run_dir(tmp_path / "a")
    path, said = plot_run(d)
    assert path == d / "curves.png" and path.stat().st_size > 0 and said == f"wrote {path}"
    loss_ax, acc_ax, lr_ax = figures[0].axes
    mean = next(l for l in loss_ax.get_lines() if l.get_label() == "epoch mean")
    assert list(mean.get_xdata()) == [0.5, 1.5, 2.5]          # epoch e averages steps in (e-1, e]
    per_step = next(l for l in loss_ax.get_lines() if l.get_label() == "loss per step")
    assert per_step.get_xdata()[0] == 0.25 and per_step.get_xdata()[-1] == 3.0
    val = next(l for l in loss_ax.get_lines() if l.get_label() == "val loss (cross-entropy)")
    assert list(val.get_xdata()) == [1.0, 2.0, 3.0] and list(val.get_ydata()) == [1.5, 0.75, 0.5]
    assert lr_ax.get_ylabel() == "learning rate"
    assert list(lr_ax.get_lines()[0].get_ydata())[:2] == [0.01, 0.02]


def test_several_runs_overlay(tmp_path, figures):
    a, b = _run_dir(tmp_path / "a"), _run_dir(tmp_path / "b", lr=0.1)
    r = CliRunner().invoke(app, ["plot", str(a), str(b), "--plot", str(tmp_path / "both.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "both.png").stat().st_size > 0
    labels = [l.get_label() for l in figures[0].axes[2].get_lines()]
    assert labels == ["a: learning rate", "b: learning rate"]


def test_png_writers_never_overwrite_silently(tmp_path):
    d = _run_dir(tmp_path / "a")
    assert plot_run(d)[0] == d / "curves.png"
    assert plot_run(d)[0] == d / "curves-2.png"          # the default name is taken: the next free one
    assert plot_run(d)[0] == d / "curves-3.png"
    out = tmp_path / "x.png"
    assert png_target(out, d / "z.png") == (out, f"wrote {out}")
    out.write_bytes(b"old")
    assert png_target(out, d / "z.png") == (out, f"wrote {out} (replaced the earlier file)")
    r = CliRunner().invoke(app, ["plot", str(d), "--plot", str(out)])
    assert r.exit_code == 0 and "replaced the earlier file" in r.stderr
    r = CliRunner().invoke(app, ["plot", str(d), "-o", str(out)])            # the older name still works
    assert r.exit_code == 0
    r = CliRunner().invoke(app, ["plot", str(d), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout) == {"plot": str(d / "curves-4.png"), "runs": [str(d)]}


def test_the_validation_loss_is_the_cross_entropy():
    import numpy as np
    from lmc.evaluate.score import EvalResult, _score
    res = EvalResult(0, 0)
    logits = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32)
    y = np.array([0, 2])
    _score(res, logits, y)
    z = logits.astype(np.float64)
    ce = -(z[[0, 1], y] - np.log(np.exp(z).sum(axis=1))).mean()
    d = res.as_dict()
    assert d["loss"] == pytest.approx(ce) and "perplexity" not in d
    assert not res.describe().startswith("per-token")
