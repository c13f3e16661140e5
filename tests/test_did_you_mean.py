"""Wrong names get the closest valid one, and a refusal blames what is wrong: every enum-valued
field (activations, losses, datasets, optimizers, backends, every Choice), `adamw` as Adam's
decoupled decay, a spec without `train:`, and what the machine lacks (a GPU, an optional package)
refused before anything is compiled or loaded."""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

import lmc.spec.config as config
import lmc.train.plan as plan
from lmc.core.errors import LmcError, SpecError
from lmc.core.fields import Choice
from lmc.run.runtime import check_device
from lmc.spec.netspec import load_spec
from cli_run import run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DIGITS_MLP = ROOT / "specs" / "digits_mlp.yaml"



def _choices():
    """Every Choice enum lmc defines (classes and the registry-made ones), with members."""
    for m in ("lmc.layers", "lmc.spec.netspec", "lmc.check"):     # everything that defines one
        importlib.import_module(m)
    seen, todo = [], [Choice]
    while todo:
        c = todo.pop()
        for s in c.__subclasses__():
            todo.append(s)
            if len(s) and s not in seen:
                seen.append(s)
    return seen


def _typo(name: str) -> str:
    """A one-letter slip: the last letter doubled (`relu` → `reluu`)."""
    return name + name[-1]


@pytest.mark.parametrize("cls", _choices(), ids=lambda c: c.__name__)
def test_every_choice_suggests_the_closest_member(cls):
    for m in cls:
        if len(m.value) < 3:
            continue        # `bn`, `ln`: too short for a doubled letter to be unambiguous
        typo = _typo(m.value)
        if typo in {x.value for x in cls}:     # cifar10 + 0 is cifar100
            typo = m.value[:-1] + "q"
        with pytest.raises(SpecError) as e:
            cls.parse(typo, "f")
        assert e.value.message.endswith("?") and "; did you mean '" in e.value.message, e.value.message
        close = e.value.message.rsplit("'", 2)[1]
        assert cls.parse(close, "f") in list(cls)
    with pytest.raises(SpecError) as e:
        cls.parse("qqqqqqqqqq", "f")
    assert "did you mean" not in e.value.message


def test_registry_made_choices_are_covered():
    names = {c.__name__ for c in _choices()}
    assert {"DatasetKind", "OptimizerKind", "Activation"} <= names


@pytest.mark.parametrize("edit, message", [
    (("act: relu", "act: reluu"), "expected one of relu, relu6, identity, swish, h_swish, gelu, got 'reluu'; did you mean 'relu'?"),
    (("dataset: digits", "dataset: digitz"), "got 'digitz'; did you mean 'digits'?"),
    (("  seed: 0", "  loss_kind: cross_entropy"), "unknown loss kind 'cross_entropy'; did you mean 'class_ce'?"),
    (("  seed: 0", "  optimizer: adamm"), "got 'adamm'; did you mean 'adam'?"),
    (("  seed: 0", "  optimizer: lon"), "got 'lon'; did you mean 'lion'?"),
])
def test_spec_typos_in_values_are_answered(tmp_path, edit, message):
    p = tmp_path / "s.yaml"
    p.write_text(DIGITS_MLP.read_text().replace(*edit, 1))
    r = run("validate", p)
    assert r.exit_code == 2
    lines = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert lines and message in lines[0] and f"{p}:" in lines[0]


def test_adamw_is_adam_with_its_decoupled_decay():
    adam = load_spec(DIGITS_MLP, ["train.use_adam=false", "train.optimizer=adam"])
    adamw = load_spec(DIGITS_MLP, ["train.use_adam=false", "train.optimizer=adamw"])
    assert adamw.train.optimizer is config.OptimizerKind.adam
    assert adamw.train == adam.train
    # Adam's decay is AdamW's: on the old θ, not added to the gradient
    import numpy as np
    from lmc.optim.adam import Adam
    w, g = np.array([1.0]), np.array([0.0])
    slots = {"m": np.zeros(1), "v": np.zeros(1)}
    w2, _ = Adam.reference(np, w, g, slots, 0.1, 0.5, True, 0.9, 0.999, 1e-8, 1)
    assert w2[0] == pytest.approx(1.0 - 0.1 * 0.5 * 1.0)   # a zero gradient still decays: decoupled


@pytest.mark.parametrize("sets, flag", [(["--epochs", "1"], "--epochs"),
                                        (["--set", "train.epochs=1"], "--set train.epochs")])
def test_a_spec_without_train_is_blamed_on_the_spec(tmp_path, sets, flag):
    p = tmp_path / "s.yaml"
    p.write_text(DIGITS_MLP.read_text().split("train:")[0])
    r = run("train", p, "--out", tmp_path / "run", *sets)
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0] == f"error: {p}: the spec has no `train:` section ({flag} sets only what it names)"
    assert "learning_rate: …, batch_size: …" in r.stderr


@pytest.fixture
def nothing_loads(monkeypatch):
    """Fail the test if the run reaches its data or the compiler."""
    def reached(*a, **k):
        raise AssertionError("the refusal came after loading data or compiling")
    monkeypatch.setattr(plan, "load_data", reached)
    monkeypatch.setattr(plan, "compile_module", reached)
    monkeypatch.setattr(plan, "lower", reached)


def _without(monkeypatch, package: str):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))


@pytest.mark.parametrize("package, spec, args, message", [
    ("tensorboardX", DIGITS_MLP, ["--tensorboard", "TB"], "error: --tensorboard needs the tensorboardX package"),
    ("pycocotools", ROOT / "specs" / "yolo_digits.yaml", [], "error: detection mAP needs pycocotools"),
    ("mpi4py", DIGITS_MLP, ["--nproc", "2"], "error: --nproc needs mpi4py"),
])
def test_missing_extras_are_refused_before_anything_loads(tmp_path, monkeypatch, nothing_loads,
                                                         package, spec, args, message):
    _without(monkeypatch, package)
    args = [str(tmp_path / a) if a == "TB" else a for a in args]
    r = run("train", spec, "--out", tmp_path / "run", *args)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines()[0].startswith(message)
    extra = {"tensorboardX": "tensorboard", "pycocotools": "det", "mpi4py": "dist"}[package]
    assert f"lmc[{extra}]" in r.stderr        # the extra's name survives the console (no markup)


def _has(backend: str) -> bool:
    try:
        check_device(backend)
        return True
    except LmcError:
        return False


@pytest.mark.parametrize("backend, kind", [("cuda", "CUDA"), ("rocm", "HIP (AMD ROCm)")])
def test_a_missing_gpu_is_refused_before_compiling(tmp_path, nothing_loads, backend, kind):
    if _has(backend):
        pytest.skip(f"this machine has a {kind} device")
    r = run("train", DIGITS_MLP, "--out", tmp_path / "run", "--backend", backend)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: no {kind} device found")
    assert "--backend llvm-cpu" in r.stderr


def test_backend_typo():
    r = run("train", DIGITS_MLP, "--backend", "cdua")
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: unknown backend 'cdua'; did you mean 'cuda'? (expected one of llvm-cpu, cuda, rocm)"
