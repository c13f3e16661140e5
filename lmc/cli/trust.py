"""The trust tools' commands, registered on lmc's typer app (lmc/cli/__init__.py imports this module):
thin as the others — parse options, call one function of lmc/trust, print a table (or --json)."""
from __future__ import annotations

import json

import numpy as np
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from lmc.cli.app import ChipOpt, SetOpt, SpecArg, _Command, _load, app, console, err, user_errors
from lmc.core.errors import LmcError
from lmc.evaluate.interval import wilson95
from lmc.evaluate.plot import png_target
from lmc.lower.options import LowerOptions
from lmc.run.rundir import require_init
from lmc.trust.attack import check_args as check_attack_args, clean_correct, pgd, plot_attack
from lmc.trust.certify import (certified_accuracy, certify as run_certify, check_args as check_certify_args, plot_certified,
    radius_cap)
from lmc.trust.lipschitz import certified, lipschitz, margin_radii
from lmc.trust.model import batches, load_model, pad
from lmc.trust.stats import load_bitmap, mcnemar


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _ci(lo_hi) -> str:
    lo, hi = lo_hi
    return f"{100 * lo:.2f}–{100 * hi:.2f}"


def _log(text: str) -> None:
    err.print(text, markup=False, highlight=False, soft_wrap=True)


@app.command(cls=_Command)
def compare(a: Annotated[Path, typer.Argument(help="Model A's correctness bitmap (`lmc eval --dump-correct A.npy`).", show_default=False)],
            b: Annotated[Path, typer.Argument(help="Model B's correctness bitmap, on the same examples in the same order.", show_default=False)],
            as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON on stdout.")] = False) -> None:
    """Paired comparison of two models on the same examples: McNemar's test on the discordant pairs.

    b = A right and B wrong, c = the reverse; the exact two-sided binomial p-value of b out of
    b + c at ½, and the continuity-corrected χ² p-value; both accuracies with 95% Wilson intervals."""
    with user_errors():
        r = mcnemar(load_bitmap(a), load_bitmap(b))
    d = r.as_dict()
    if as_json:
        print(json.dumps(d))
        return
    t = Table(title=f"McNemar on {r.n:,} paired examples")
    for c in ("", "top-1", "95% CI (Wilson)", "correct"):
        t.add_column(c)
    t.add_row(f"A  {a}", _pct(d["acc_a"]), _ci(d["acc_a_ci"]), f"{r.correct_a:,}")
    t.add_row(f"B  {b}", _pct(d["acc_b"]), _ci(d["acc_b_ci"]), f"{r.correct_b:,}")
    console.print(t)
    console.print(f"discordant: b = {r.b:,} (A right, B wrong), c = {r.c:,} (A wrong, B right)", markup=False)
    console.print(f"exact binomial p = {r.p_exact:.4g};  χ² (continuity-corrected) = {r.chi2:.4g}, p = {r.p_chi2:.4g}",
                  markup=False)
    if r.b + r.c == 0:
        console.print("no discordant pair: the two models are right on exactly the same examples", markup=False)


BackendOpt = Annotated[Optional[str], typer.Option(help="llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu).")]
DataOpt = Annotated[Optional[Path], typer.Option(help="Dataset directory or file (default: the spec's dataset path, else data/<kind>).")]
InitOpt = Annotated[Optional[Path], typer.Option(help="The trained parameters: an lmc checkpoint (RUN_DIR/last.npz), a run directory (RUN_DIR:best its best), a .npz/.safetensors of named tensors, or a flat .bin (default: SPEC's checkpoint when SPEC is a run directory).")]
RegionOpt = Annotated[str, typer.Option(help="Which weights: live, ema, swa, or auto (what the run's own eval scored; a SWAG run's SWA mean).")]
LimitOpt = Annotated[Optional[int], typer.Option(help="Judge only the first N validation examples.")]
BatchOpt = Annotated[Optional[int], typer.Option(help="Batch size of the compiled module (default: the recipe's).")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the random draws (starts, noise).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the results as JSON on stdout.")]


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise LmcError(f"{what} {text!r}: expected comma-separated numbers, e.g. 0,0.05,0.1") from None


@app.command(cls=_Command)
def attack(spec: SpecArg,
           eps: Annotated[str, typer.Option(help="Comma-separated radii ε of the attack ball, e.g. 0,0.05,0.1,0.2 (in the data's units).")],
           init: InitOpt = None,
           norm: Annotated[str, typer.Option(help="The ball: linf (each input within ε) or l2 (Euclidean norm ≤ ε).")] = "linf",
           pgd_steps: Annotated[int, typer.Option("--pgd-steps", help="PGD steps per restart.")] = 10,
           step_size: Annotated[Optional[float], typer.Option(help="Step length α (default: 2.5·ε/N for --pgd-steps N).")] = None,
           restarts: Annotated[int, typer.Option(help="Random restarts; an example is robust only if it survives all of them.")] = 1,
           limit: LimitOpt = None,
           seed: SeedOpt = 0,
           plot: Annotated[Optional[Path], typer.Option(help="Where to write the accuracy-vs-ε PNG (default: attack-<norm>.png next to the checkpoint).")] = None,
           region: RegionOpt = "auto",
           backend: BackendOpt = None,
           chip: ChipOpt = None,
           data: DataOpt = None,
           batch: BatchOpt = None,
           as_json: JsonOpt = False,
           set: SetOpt = None) -> None:
    """Attack a trained classifier with PGD (random start, projected onto the ε-ball and the data range).

    Prints clean and adversarial top-1 per ε with 95% Wilson intervals and writes a plot.
    PGD gives an upper bound on robust accuracy, never a certificate."""
    with user_errors():
        radii = _floats(eps, "--eps")
        check_attack_args(radii, norm, pgd_steps, step_size, restarts)
        net = _load(spec, set, batch)
        init = require_init(spec, init)
        m = load_model(net, init, data, backend, chip, _log, "input_grad", region, limit, LowerOptions.from_env())
        clean, results = pgd(m, radii, norm, pgd_steps, step_size, restarts, seed, log=_log)
        path, said = png_target(plot, Path(init).with_name(f"attack-{norm}.png"))
        plot_attack(clean, results, path, f"{net.spec.name}: PGD-{pgd_steps} {norm}, {restarts} restart(s)")
        _log(said)
    n = len(clean)
    cd = {"n": n, "correct": int(clean.sum()), "top1": float(clean.mean()),
          "top1_ci": list(wilson95(int(clean.sum()), n))}
    if as_json:
        print(json.dumps({"clean": cd, "pgd_steps": pgd_steps, "restarts": restarts, "seed": seed,
                          "bounds": list(m.bounds), "results": [r.as_dict() for r in results]}))
        return
    t = Table(title=f"PGD-{pgd_steps} ({norm}, {restarts} restart(s)) on {n:,} validation examples; data range "
                    f"[{m.bounds[0]:g}, {m.bounds[1]:g}]")
    for c in ("ε", "top-1", "95% CI (Wilson)", "correct"):
        t.add_column(c)
    t.add_row("clean", _pct(cd["top1"]), _ci(cd["top1_ci"]), f"{cd['correct']:,}/{n:,}")
    for r in results:
        d = r.as_dict()
        t.add_row(f"{r.eps:g}", _pct(d["top1"]), _ci(d["top1_ci"]), f"{r.correct:,}/{n:,}")
    console.print(t)


@app.command(cls=_Command)
def certify(spec: SpecArg,
            sigma: Annotated[float, typer.Option(help="Standard deviation σ of the Gaussian noise (in the data's units); train with train.gaussian_noise_sigma: σ.")],
            init: InitOpt = None,
            n0: Annotated[int, typer.Option(help="Noisy forwards per example that select the top class.")] = 100,
            n: Annotated[int, typer.Option(help="Noisy forwards per example that estimate its probability (≥ n0).")] = 10000,
            alpha: Annotated[float, typer.Option(help="Failure probability α of each certificate (one-sided Clopper–Pearson level).")] = 0.001,
            radii: Annotated[str, typer.Option(help="Comma-separated L2 radii at which to report certified accuracy.")] = "0,0.25,0.5,0.75,1",
            limit: LimitOpt = None,
            seed: SeedOpt = 0,
            plot: Annotated[Optional[Path], typer.Option(help="Where to write the certified-accuracy-vs-radius PNG (default: certify-sigma<σ>.png next to the checkpoint).")] = None,
            region: RegionOpt = "auto",
            backend: BackendOpt = None,
            chip: ChipOpt = None,
            data: DataOpt = None,
            batch: BatchOpt = None,
            as_json: JsonOpt = False,
            set: SetOpt = None) -> None:
    """Certify a classifier by randomized smoothing (Cohen et al. 2019): an L2 radius per example.

    Each certificate holds with probability ≥ 1 − α; abstentions (p_A ≤ ½) count as wrong."""
    with user_errors():
        rs = _floats(radii, "--radii")
        check_certify_args(sigma, n0, n, alpha, rs)
        net = _load(spec, set, batch)
        init = require_init(spec, init)
        m = load_model(net, init, data, backend, chip, _log, "forward", region, limit, LowerOptions.from_env())
        certs = run_certify(m, sigma, n0, n, alpha, seed, log=_log)
        path, said = png_target(plot, Path(init).with_name(f"certify-sigma{sigma:g}.png"))
        plot_certified({f"smoothed, σ = {sigma:g}": ([c.radius for c in certs], [c.correct for c in certs])}, path,
                       f"{net.spec.name}: randomized smoothing, n = {n:,}, α = {alpha:g}", radius_cap(sigma, n, alpha))
        _log(said)
    acc = certified_accuracy(certs, rs)
    if as_json:
        print(json.dumps({"sigma": sigma, "n0": n0, "n": n, "alpha": alpha, "seed": seed,
                          "examples": [c.as_dict() for c in certs],
                          "certified": [{k: a[k] for k in ("radius", "top1", "correct", "n")} for a in acc]}))
        return
    abstain = sum(c.pred < 0 for c in certs)
    t = Table(title=f"randomized smoothing, σ = {sigma:g}, n = {n:,}, α = {alpha:g}, on {len(certs):,} examples")
    for c in ("L2 radius", "certified top-1", "95% CI (Wilson)", "certified"):
        t.add_column(c)
    for a in acc:
        t.add_row(f"{a['radius']:g}", _pct(a["top1"]), _ci(wilson95(a["correct"], a["n"])), f"{a['correct']:,}/{a['n']:,}")
    console.print(t)
    console.print(f"abstained on {abstain:,} of {len(certs):,}; the largest radius {n:,} draws can certify is "
                  f"{radius_cap(sigma, n, alpha):.3g} (σ·Φ⁻¹(α^(1/n)))", markup=False)


@app.command("lipschitz", cls=_Command)
def lipschitz_cmd(spec: SpecArg,
                  init: InitOpt = None,
                  radii: Annotated[str, typer.Option(help="Comma-separated L2 radii at which to report certified accuracy.")] = "0.1,0.25,0.5",
                  limit: LimitOpt = None,
                  plot: Annotated[Optional[Path], typer.Option(help="Where to write the certified-accuracy-vs-radius PNG (default: lipschitz.png next to the checkpoint).")] = None,
                  region: RegionOpt = "auto",
                  backend: BackendOpt = None,
                  chip: ChipOpt = None,
                  data: DataOpt = None,
                  batch: BatchOpt = None,
                  as_json: JsonOpt = False,
                  set: SetOpt = None) -> None:
    """Bound the net's L2 Lipschitz constant layer by layer and certify each example's L2 radius margin/(√2·L).

    A sound, deterministic certificate — and a loose one: the product of per-layer bounds grows
    with depth, and says so when it certifies nothing."""
    with user_errors():
        rs = _floats(radii, "--radii")
        if any(r < 0 for r in rs):
            raise LmcError("--radii must be ≥ 0")
        net = _load(spec, set, batch)
        init = require_init(spec, init)
        m = load_model(net, init, data, backend, chip, _log, "forward", region, limit, LowerOptions.from_env())
        host_state = [np.asarray(a.to_host() if hasattr(a, "to_host") else a) for a in m.S]
        L, _, layers = lipschitz(net, m.params, host_state)
        logits = np.concatenate([m.logits(pad(m.x[s:e], m.batch))[:e - s] for s, e in batches(len(m.x), m.batch)])
        rad = margin_radii(logits, m.y, L)
        right = clean_correct(m).astype(bool)
        acc = certified(rad, right, rs)
        path, said = png_target(plot, Path(init).with_name("lipschitz.png"))
        plot_certified({f"margin/(√2·L), L = {L:.3g}": (rad, right)}, path, f"{net.spec.name}: Lipschitz certificate")
        _log(said)
    vacuous = [a["radius"] for a in acc if a["radius"] > 0 and a["correct"] == 0]
    if as_json:
        print(json.dumps({"layers": layers, "L": L, "clean": float(right.mean()),
                          "median_radius": float(np.median(rad[right])) if right.any() else 0.0,
                          "certified": [{k: a[k] for k in ("radius", "top1", "correct", "n")} for a in acc],
                          "vacuous_at": vacuous}))
        return
    t = Table(title=f"Lipschitz bounds of {net.spec.name} ({m.region} weights)")
    t.add_column("layer")
    t.add_column("bound", justify="right")
    for l in layers:
        t.add_row(l["name"], f"{l['bound']:.4g}")
    t.add_row("L (whole net)", f"{L:.4g}")
    console.print(t)
    t = Table(title=f"certified top-1 (radius = margin/(√2·L)) on {len(rad):,} examples; clean {_pct(right.mean())}")
    for c in ("L2 radius", "certified top-1", "certified"):
        t.add_column(c)
    for a in acc:
        t.add_row(f"{a['radius']:g}", _pct(a["top1"]), f"{a['correct']:,}/{a['n']:,}")
    console.print(t)
    med = float(np.median(rad[right])) if right.any() else 0.0
    console.print(f"median certified radius of the correct examples: {med:.3g}", markup=False)
    if vacuous:
        console.print(f"the certificate is vacuous at radius {', '.join(f'{r:g}' for r in vacuous)}: it certifies "
                      f"no example there (L = {L:.4g} is too large for these margins)", markup=False)
