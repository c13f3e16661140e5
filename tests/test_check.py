"""The check stage (lmc/check): one place, run once, before data or compilation.

- `lmc validate` and `lmc train` refuse exactly the same specs, with the same messages: every spec
  in specs/ and the refusal cases below go through both; train is stopped where it would first
  read data (what it refuses, it must refuse before that).
- One `lmc train` checks the net once and builds its ABI once (counted).
- Each stage raises only its own error types (a static scan of every `raise`)."""
from __future__ import annotations

import ast
import builtins
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lmc.check as check_stage
import lmc.data.fit as fit
import lmc.lower.lowering as lowering
from lmc.cli import app

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").glob("*.yaml"))

HEAD = "name: m\ninput: {features: 4}\ndataset: synthetic\nlayers:\n  - dense: {fan_in: 4, fan_out: 3}\n"
CASES = {
    "sync_bn": HEAD + "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, sync_bn: true}\n",
    "fp8_with_ema": HEAD + "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, fp8: e4m3, use_ema: true}\n",
    "rule": HEAD + "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, mixup_alpha: 0.5}\n",
    "two_rules": HEAD + "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, use_swag: true, use_tta: true}\n",
    "head_lr_without_dense_head": ("name: m\ninput: {channels: 1, height: 4, width: 4}\ndataset: synthetic\n"
                                   "layers:\n  - conv2d: {ic: 1, oc: 2, k_size: 3}\n  - global_avg_pool: {}\n"
                                   "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, head_lr_mult: 2.0, "
                                   "loss_kind: float_target_mse}\n"),
    "class_ce_on_a_map": ("name: m\ninput: {channels: 1, height: 8, width: 8}\ndataset: synthetic\nlayers:\n"
                          "  - conv2d: {ic: 1, oc: 10, k_size: 3}\n"
                          "train: {learning_rate: 0.1, batch_size: 4, epochs: 1}\n"),
    "bf16_without_a_bf16_form": ("name: m\ninput: {channels: 1, height: 4, width: 4}\ndataset: synthetic\n"
                                 "layers:\n  - conv2d: {ic: 1, oc: 2, k_size: 3}\n  - flatten: {}\n"
                                 "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, bf16: true}\n"),
    "fine": HEAD + "train: {learning_rate: 0.1, batch_size: 2, epochs: 1}\n",
}


class _Reached(Exception):
    """lmc train got past every check: it is about to read the data."""


def _stop_at_data(monkeypatch):
    real = fit.load_data
    for mod in [m for n, m in sys.modules.items() if n.startswith("lmc")]:
        if getattr(mod, "load_data", None) is real:
            monkeypatch.setattr(mod, "load_data", lambda *a, **k: (_ for _ in ()).throw(_Reached()))


def _problems(stderr: str) -> list[str]:
    """The error and warning lines (the label dropped: validate warns of what train refuses)."""
    return [l.split(": ", 1)[1] for l in stderr.splitlines() if l.startswith(("error: ", "warning: "))]


def _both(spec: Path, tmp_path: Path, monkeypatch):
    v = CliRunner().invoke(app, ["validate", str(spec)])
    _stop_at_data(monkeypatch)
    t = CliRunner().invoke(app, ["train", str(spec), "--out", str(tmp_path / "run")])
    return v, t


def _same_refusals(v, t):
    """validate is clean ⟺ train reaches its data; else both name the same problems.  (A spec
    with no `train:` is a valid net-only spec — validate says ok — and train refuses it for that.)"""
    if "the spec has no `train:` recipe" in t.stderr:
        assert v.exit_code == 0 and not _problems(v.stderr) and len(_problems(t.stderr)) == 1
        return
    validate_clean = v.exit_code == 0 and not _problems(v.stderr)
    train_reached = isinstance(t.exception, _Reached)
    assert validate_clean == train_reached, (v.stderr, t.stderr, t.exception)
    if not train_reached:
        assert t.exit_code == 2, (t.exception, t.stderr)
        assert _problems(v.stderr) == _problems(t.stderr)


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_validate_and_train_refuse_the_same_specs(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    _same_refusals(*_both(spec, tmp_path, monkeypatch))


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_and_train_refuse_the_same_recipes(case, tmp_path, monkeypatch):
    p = tmp_path / f"{case}.yaml"
    p.write_text(CASES[case])
    v, t = _both(p, tmp_path, monkeypatch)
    _same_refusals(v, t)
    assert (v.exit_code, bool(_problems(v.stderr))) != (0, True) or case in ("sync_bn", "fp8_with_ema")
    assert (case == "fine") == isinstance(t.exception, _Reached)
    if case == "two_rules":            # every problem at once, each located
        assert len(_problems(t.stderr)) == 2


def test_train_checks_once_and_builds_the_abi_once(tmp_path, monkeypatch):
    counts = {"check": 0, "abi": 0}
    real_check, real_abi = check_stage._check, lowering.abi

    def counted_check(*a, **k):
        counts["check"] += 1
        return real_check(*a, **k)

    def counted_abi(*a, **k):
        counts["abi"] += 1
        return real_abi(*a, **k)

    monkeypatch.setattr(check_stage, "_check", counted_check)
    for mod in [m for n, m in sys.modules.items() if n.startswith("lmc")]:
        if getattr(mod, "abi", None) is real_abi:
            monkeypatch.setattr(mod, "abi", counted_abi)
    p = tmp_path / "fine.yaml"
    p.write_text(CASES["fine"])
    _stop_at_data(monkeypatch)         # lowering is done before the data: everything counted is in
    t = CliRunner().invoke(app, ["train", str(p), "--out", str(tmp_path / "run")])
    assert isinstance(t.exception, _Reached), t.stderr
    assert counts == {"check": 1, "abi": 1}


# Each stage's own error types (and LmcError's generic subclasses a stage may pass on).  A stage
# raising another stage's type would blame the wrong place; a test per type is the scan below.
OWN = {
    "core": {"LmcError", "SpecError", "TemplateError"},
    "spec": {"SpecError"},
    "graph": {"ShapeError", "SpecError", "NotImplementedKind"},   # init's recipe problems: SpecError
    "check": {"SpecError", "NotImplementedKind"},
    "prims": {"ShapeError", "NotImplementedKind"},
    "layers": {"ShapeError", "SpecError", "NotImplementedKind"},
    "losses": {"SpecError", "DataError", "NotImplementedKind"},
    "optim": {"SpecError", "NotImplementedKind"},
    "data": {"DataError"},
    "lower": {"SpecError", "TemplateError", "NotImplementedKind", "UsageError"},   # LMC_* values
    "compile": {"CompileError"},
    "run": {"CheckpointError", "RunError"},
    "train": {"TrainError"},
    "evaluate": {"EvalError"},
    "trust": {"TrustError"},
    "cli": {"LmcError", "UsageError"},
}


def _raised(path: Path) -> set[str]:
    names = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call) and isinstance(n.exc.func, ast.Name):
            if n.exc.func.id.endswith(("Error", "Kind")):
                names.add(n.exc.func.id)
    return names


def test_each_stage_raises_only_its_own_errors():
    bad = []
    for path in sorted((ROOT / "lmc").rglob("*.py")):
        stage = path.relative_to(ROOT / "lmc").parts[0].removesuffix(".py")
        if stage not in OWN:
            continue
        for name in _raised(path) - OWN[stage]:
            if name in dir(builtins):
                continue                  # lmc bugs keep Python's types (and their tracebacks)
            bad.append(f"{path.relative_to(ROOT)} raises {name}")
    assert bad == []


@pytest.mark.parametrize("sets, why", [
    (["det_stride=8"], None),
    (["det_stride=16"], "det_stride 16 on a 64×64 input asks for a 4×4 grid, but the net's head is 8×8"),
    (["det_stride=3"], "asks for a 21.3333×21.3333 grid"),
])
def test_det_stride_is_checked_against_the_grid_head(sets, why):
    """det_stride (the Lean kit's detStride: grid = image / det_stride) must agree with the grid
    the layers build; a contradiction is refused where it is written, with the stride that fits."""
    r = CliRunner().invoke(app, ["validate", str(ROOT / "specs" / "yolo_digits.yaml"), *[a for s in sets for a in ("--set", s)]])
    if why is None:
        assert r.exit_code == 0, r.output
    else:
        assert r.exit_code == 2 and r.stderr.startswith("error: --set det_stride: ") and why in r.stderr, r.output
        assert "hint: det_stride: 8" in r.stderr


@pytest.mark.parametrize("spec, msg", [("digits_cnn", "this spec's loss is class_ce, so nothing would read it"),
                                       ("digits_fpn_det", "the multi-scale head's grids are train.fpn_scales'")])
def test_det_stride_is_refused_where_no_single_grid_reads_it(spec, msg):
    r = CliRunner().invoke(app, ["validate", str(ROOT / "specs" / f"{spec}.yaml"), "--set", "det_stride=8"])
    assert r.exit_code == 2 and msg in r.stderr, r.output
