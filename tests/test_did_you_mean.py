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
    monkeypatch.setattr(plan, "compile_training", reached)
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


# --------------------------------------------------------- every enum value, through the CLI
# Each string-enum field of a spec, and each enum option of a command, fed a one-letter slip of
# each of its values: exit 2, one `error:` line (at the field's line for a spec) that names the
# value meant.

from lmc.core.fields import Activation, Normalization, Padding, PadStyle  # noqa: E402
from lmc.data.kinds import all_datasets  # noqa: E402
from lmc.layers import all_layers  # noqa: E402
from lmc.losses import all_losses  # noqa: E402
from lmc.lower.options import CHOICES  # noqa: E402
from lmc.optim import optimizer_names  # noqa: E402

TINY_GPT = ROOT / "specs" / "tiny_gpt_char.yaml"
CONV = """name: c
input: {channels: 1, height: 8, width: 8}
dataset: digits
layers:
  - conv2d: {oc: 4, k_size: 3, pad: PAD}
  - conv_next_stage: {n_blocks: 1, norm: NORM}
  - global_avg_pool
  - dense: {fan_out: 10}
train: {learning_rate: 0.1, batch_size: 8, epochs: 1}
"""


def _edits(a: str, b: str) -> int:
    """Levenshtein distance."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def _slip(value: str, values) -> str:
    """A one-letter slip of `value` that is one edit from it and from no other value: its last
    letter doubled (`relu` → `reluu`), else replaced (`imagenet` → `imageneq`: `imagenett` is as
    close to `imagenette`)."""
    for typo in (value + value[-1], value[:-1] + "q", "q" + value[1:]):
        if all(_edits(typo, v) > 1 for v in values if v != value):
            return typo
    raise AssertionError(f"no unambiguous slip of {value!r}")


def _conv(pad="same", norm="ln"):
    return CONV.replace("PAD", pad).replace("NORM", norm)


# (what, the spec text with VALUE where the field's value goes, its values)
SPEC_ENUMS = [
    ("layer kind", DIGITS_MLP.read_text().replace("  - dense: {fan_in: 64,", "  - VALUE: {fan_in: 64,", 1),
     [k for k in all_layers() if k != "dense"]),
    ("act", DIGITS_MLP.read_text().replace("act: relu", "act: VALUE", 1), [m.value for m in Activation]),
    ("pad", _conv(pad="VALUE"), [m.value for m in Padding]),
    ("norm", _conv(norm="VALUE"), [m.value for m in Normalization]),
    ("conv_pad_style", "conv_pad_style: VALUE\n" + _conv(), [m.value for m in PadStyle]),
    ("dataset", DIGITS_MLP.read_text().replace("dataset: digits", "dataset: VALUE", 1), list(all_datasets())),
    ("dataset.kind", DIGITS_MLP.read_text().replace("dataset: digits", "dataset: {kind: VALUE}", 1),
     list(all_datasets())),
    ("dataset.vocab", TINY_GPT.read_text().replace("vocab: char}", "vocab: VALUE}", 1), ["byte", "char"]),
    ("train.optimizer", DIGITS_MLP.read_text().replace("  use_adam: true", "  optimizer: VALUE", 1),
     list(optimizer_names())),
    ("train.loss_kind", DIGITS_MLP.read_text().replace("  seed: 0", "  loss_kind: VALUE", 1), list(all_losses())),
    ("train.fp8", DIGITS_MLP.read_text().replace("  seed: 0", "  fp8: VALUE", 1), ["off", "e4m3"]),
    ("train.keep_best.mode", DIGITS_MLP.read_text().replace("  seed: 0", "  keep_best: {metric: top1, mode: VALUE}", 1),
     ["max", "min", "auto"]),
    ("train.keep_best.metric", DIGITS_MLP.read_text().replace("  seed: 0", "  keep_best: {metric: VALUE}", 1),
     ["top1", "top5", "loss", "perplexity"]),
    ("train.early_stop.mode", DIGITS_MLP.read_text().replace("  seed: 0", "  early_stop: {metric: loss, mode: VALUE}", 1),
     ["max", "min", "auto"]),
]


def test_the_spec_enum_list_covers_every_choice_field():
    """A new Choice-typed field of a layer or of the recipe lands in SPEC_ENUMS (or this fails)."""
    import dataclasses
    import typing
    from lmc.spec.config import TrainConfig
    covered = {w.split(".")[-1] for w, _, _ in SPEC_ENUMS}
    for cls in [TrainConfig, *all_layers().values()]:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            t = hints.get(f.name)
            if isinstance(t, type) and issubclass(t, Choice):
                assert f.name in covered, f"{cls.__name__}.{f.name} ({t.__name__}) has no typo case here"


def test_the_valid_spellings_are_valid(tmp_path):
    """The texts above parse with a real value, so the slip is the only thing wrong in them."""
    for what, text, values in SPEC_ENUMS:
        if what != "layer kind":          # the dense layer's fields are not another kind's
            p = tmp_path / "ok.yaml"
            p.write_text(text.replace("VALUE", {"train.fp8": "e4m3"}.get(what, values[0])))
            load_spec(p)


@pytest.mark.parametrize("what, text, values", SPEC_ENUMS, ids=[w for w, _, _ in SPEC_ENUMS])
def test_every_spec_enum_value_answers_a_slip(tmp_path, what, text, values):
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "VALUE" in l)
    for value in values:
        typo = _slip(value, values)
        p = tmp_path / "s.yaml"
        p.write_text(text.replace("VALUE", typo))
        r = run("validate", p)
        assert r.exit_code == 2, (what, typo, r.output)
        errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
        assert errors and errors[0].startswith(f"error: {p}:{line}:"), (what, typo, r.stderr)
        assert f"did you mean '{value}'?" in errors[0], (what, typo, errors[0])


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Checkpoints of digits_mlp and tiny_gpt_char (their initial parameters; a char vocabulary
    for the LM) and an input array for predict."""
    from lmc.graph.infer import infer
    from lmc.graph.init import init_tensors
    from lmc.run.checkpoint import save_checkpoint
    import numpy as np
    d = tmp_path_factory.mktemp("ckpts")
    out = {}
    for name, spec, meta in (("mlp", DIGITS_MLP, {}), ("lm", TINY_GPT, {"vocab": "abc"})):
        net = infer(load_spec(spec))
        params, state = init_tensors(net, 0)
        out[name] = save_checkpoint(d / f"{name}.npz", net, [], params, [], state, {"step": 0, **meta})
    np.save(d / "x.npy", np.zeros((1, 64), np.float32))
    out["x"] = d / "x.npy"
    out["dir"] = d
    return out


def _args(cmd: str, c) -> list:
    """`lmc cmd` with what it needs up to the option under test."""
    mlp = [DIGITS_MLP, "--init", c["mlp"]]
    return {"compile": [DIGITS_MLP, "-o", c["dir"] / "m.vmfb"], "render": [DIGITS_MLP], "bench": [DIGITS_MLP],
            "train": [DIGITS_MLP, "--out", c["dir"] / "run"], "eval": mlp, "lipschitz": mlp,
            "predict": [DIGITS_MLP, c["x"], "--init", c["mlp"]], "attack": [*mlp, "--eps", "0.1"],
            "certify": [*mlp, "--sigma", "0.25"], "sample": [TINY_GPT, "--init", c["lm"]],
            "export": [*mlp, "--format", "vmfb", "-o", c["dir"] / "pkg"],
            "import": [DIGITS_MLP, c["dir"] / "w.safetensors", "-o", c["dir"] / "w.npz"]}[cmd]


def _commands_with(flag: str) -> list[str]:
    from typer.main import get_command
    from lmc.cli import app
    return sorted(n for n, c in get_command(app).commands.items()
                  if any(flag in p.opts for p in c.params if p.param_type_name == "option"))


CLI_ENUMS = ([("--backend", cmd, ["llvm-cpu", "cuda", "rocm"]) for cmd in _commands_with("--backend")]
             + [("--region", "eval", ["auto", "live", "ema", "swa", "swag"])]
             + [("--region", cmd, ["auto", "live", "ema", "swa"]) for cmd in ("export", "attack", "certify", "lipschitz")]
             + [("--norm", "attack", ["linf", "l2"]), ("--format", "export", ["safetensors", "onnx", "vmfb"]),
                ("--from", "import", ["torchvision", "timm"]),
                ("--function", "render", ["train_step", "forward", "all", "input_grad"])])


def test_the_cli_enum_list_covers_every_region_option():
    assert {c for f, c, _ in CLI_ENUMS if f == "--region"} == set(_commands_with("--region"))


@pytest.mark.parametrize("flag, cmd, values", CLI_ENUMS, ids=[f"{c} {f}" for f, c, _ in CLI_ENUMS])
def test_every_cli_enum_value_answers_a_slip(ckpts, flag, cmd, values):
    for value in values:
        typo = _slip(value, values)
        r = run(cmd, *_args(cmd, ckpts), flag, typo)
        assert r.exit_code == 2, (cmd, flag, typo, r.output)
        errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
        assert len(errors) == 1 and f"did you mean '{value}'?" in errors[0], (cmd, flag, typo, r.stderr)


@pytest.mark.parametrize("field, var_values", CHOICES.items(), ids=list(CHOICES))
def test_every_lowering_switch_answers_a_slip(monkeypatch, field, var_values):
    var, values = var_values
    for value in values:
        typo = _slip(value, values)
        monkeypatch.setenv(var, typo)
        r = run("info", DIGITS_MLP, "--json")
        assert r.exit_code == 2, (var, typo, r.output)
        assert r.stderr.strip().startswith(f"error: {var}={typo!r}: expected one of"), r.stderr
        assert f"did you mean '{value}'?" in r.stderr, r.stderr
