"""The command line through typer's CliRunner: exit codes (0 ok, 2 for every user error), the
`file:line:col: message` lines on stderr, what `info`, `render` and `layers` print.  The
compiler is faked (no test here claims to test compilation)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lmc import __version__
from lmc.cli import app
from lmc.layers import all_layers

DATA = Path(__file__).resolve().parent / "data"
MLP, CNN, RECIPE = DATA / "mlp.yaml", DATA / "cnn.yaml", DATA / "recipe.yaml"
LOCATED = re.compile(r"^error: (\S+?):(\d+):(\d+): ")


def run(*args):
    """Invoke the app; anything but a clean exit (an uncaught exception) fails the test."""
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    return r


def write(tmp_path, text, name="spec.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------- validate


@pytest.mark.parametrize("spec, summary", [
    (MLP, "ok — 2 layers, 2,410 parameters, output [1, 10]"),
    (CNN, "ok — 5 layers, 8,754 parameters, output [1, 10]"),
    (RECIPE, "ok — 3 layers, 2,610 parameters, output [32, 10]"),
])
def test_validate_ok(spec, summary):
    r = run("validate", spec)
    assert r.exit_code == 0
    assert r.stderr.strip() == f"{spec}: {summary}"
    assert r.stdout == ""


def test_validate_reports_every_error_located(tmp_path):
    p = write(tmp_path, "name: m\ninput: {features: 4}\nlayers:\n"
                        "  - dens: {fan_in: 4, fan_out: 3}\n"
                        "  - dense: {fan_in: 4, fanOut: 1.5}\n"
                        "  - dense: {fan_inn: 3, fan_out: 2}\n")
    r = run("validate", p)
    assert r.exit_code == 2
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert [LOCATED.match(l).group(2) for l in errors] == ["4", "5", "6"]
    assert all(LOCATED.match(l).group(1) == str(p) for l in errors)
    assert errors[0].endswith("layers[0]: unknown layer kind 'dens'; did you mean 'dense'?")
    assert errors[1].endswith("layers[1] (dense).fan_out: expected an integer, got 1.5")
    assert errors[2].endswith("layers[2] (dense): unknown field 'fan_inn'; did you mean 'fan_in'? "
                              "(fields: fan_in, fan_out, act)")
    assert "hint: `lmc layers` lists every kind" in r.stderr


def test_validate_shape_error(tmp_path):
    p = write(tmp_path, "name: m\ninput: {channels: 1, height: 8, width: 8}\nlayers:\n"
                        "  - conv2d: [1, 4, 3]\n  - dense: [256, 10]\n")
    r = run("validate", p)
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        f"error: {p}:5:5: layer 1 (dense): expected a rank-2 input [batch, features], got [1, 4, 8, 8]",
        "hint: add a `flatten` (or `global_avg_pool`) layer before it"]


def test_validate_long_messages_are_not_wrapped(tmp_path):
    p = write(tmp_path, "name: m\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 3, act: a_very_long_activation_name_that_does_not_exist}\n")
    r = run("validate", p)
    line = r.stderr.splitlines()[0]
    assert LOCATED.match(line) and line.endswith("got 'a_very_long_activation_name_that_does_not_exist'")


def test_validate_checks_the_loss_against_the_net(tmp_path):
    p = write(tmp_path, MLP.read_text() + "train:\n  learning_rate: 0.1\n  batch_size: 2\n  epochs: 1\n"
                                          "  loss_kind: per_pixel_ce\n")
    r = run("validate", p)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {p}:11:3: per_pixel_ce needs per-pixel logits [batch, classes, height, "
                               f"width], but the net's output is [2, 10]")


def test_validate_with_set():
    r = run("validate", MLP, "--set", "layers.1.dense.fan_out=7")
    assert r.exit_code == 0 and "output [1, 7]" in r.stderr
    r = run("validate", RECIPE, "--set", "train.epochs=3", "--set", "train.batch_size=4")
    assert r.exit_code == 0 and "output [4, 10]" in r.stderr
    r = run("validate", MLP, "--set", "layers.1.dense.fan_out=0")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: --set layers.1.dense.fan_out: layers[1] (dense).fan_out: "
                                "expected an integer in [1, 2147483647], got 0")
    r = run("validate", MLP, "--set", "train.epochs")
    assert r.exit_code == 2 and r.stderr.strip() == "error: --set expects key=value, got 'train.epochs'"


# ---------------------------------------------------------------- user errors outside the spec


def test_missing_spec_file(tmp_path):
    for cmd in ("validate", "info", "render", "compile"):
        r = run(cmd, tmp_path / "nope.yaml")
        assert r.exit_code == 2, cmd
        assert r.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: cannot read spec: No such file or directory"


def test_directory_and_binary_spec(tmp_path):
    r = run("validate", tmp_path)
    assert r.exit_code == 2 and "cannot read spec: Is a directory" in r.stderr
    p = tmp_path / "x.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    r = run("validate", p)
    assert r.exit_code == 2 and r.stderr.strip() == f"error: {p}: the spec is not UTF-8 text"


def test_unknown_command_and_missing_argument():
    r = run("frobnicate")
    assert r.exit_code == 2 and "No such command 'frobnicate'" in r.stderr
    r = run("validate")
    assert r.exit_code == 2 and "Missing argument" in r.stderr


def test_version():
    r = run("--version")
    assert r.exit_code == 0
    assert re.fullmatch(rf"lmc {re.escape(__version__)} \(.+\)\n", r.stdout)


def test_real_process_exit_codes(tmp_path):
    """The installed entry point (`python -m lmc.cli`) behaves as CliRunner says."""
    root = Path(__file__).resolve().parent.parent
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run([sys.executable, "-m", "lmc.cli", "validate", str(MLP)], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and "ok — 2 layers" in ok.stderr
    bad = subprocess.run([sys.executable, "-m", "lmc.cli", "validate", str(tmp_path / "nope.yaml")],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


# ---------------------------------------------------------------- info


def test_info_table_has_totals():
    r = run("info", CNN)
    assert r.exit_code == 0
    assert "cnn" in r.stdout and "(input [1, 3, 16, 16])" in r.stdout
    total = [l for l in r.stdout.splitlines() if "total" in l]
    assert len(total) == 1 and "8,754" in total[0] and "[1, 10]" in total[0]
    for kind in ("conv_bn", "max_pool", "residual_block", "global_avg_pool", "dense"):
        assert kind in r.stdout


def test_info_json():
    r = run("info", "--json", RECIPE)
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert set(out) == {"name", "input_shape", "output_shape", "total_params", "total_flops", "layers",
                        "params", "state", "train_abi", "lower_options"}
    assert (out["name"], out["input_shape"], out["output_shape"]) == ("recipe", [32, 1, 8, 8], [32, 10])
    assert out["total_params"] == 2610 == sum(l["params"] for l in out["layers"])
    assert out["total_flops"] == sum(l["flops"] for l in out["layers"]) > 0
    assert [l["kind"] for l in out["layers"]] == ["conv2d", "flatten", "dense"]
    assert set(out["layers"][0]) == {"index", "kind", "layer", "output_shape", "params", "flops", "lowered"}
    for p in out["params"]:
        assert set(p) == {"name", "shape", "init"}
    assert [(p["name"], p["shape"], p["init"]) for p in out["params"]] == [
        ("00.conv2d.weight", [4, 1, 3, 3], "he"), ("00.conv2d.bias", [4], "zeros"),
        ("02.dense.weight", [256, 10], "glorot"), ("02.dense.bias", [10], "zeros")]
    cnn = json.loads(run("info", "--json", CNN).stdout)
    assert {s["init"] for s in cnn["state"]} == {"zeros", "ones"}       # BN running mean / var


def test_info_params_and_batch():
    r = run("info", "--params", MLP)
    assert r.exit_code == 0
    assert "parameters (train-step argument order)" in r.stdout
    for name in ("00.dense.weight", "00.dense.bias", "01.dense.weight", "01.dense.bias"):
        assert name in r.stdout
    r = run("info", "--json", "--batch", "5", MLP)
    assert json.loads(r.stdout)["input_shape"] == [5, 64]


def test_info_error_is_located(tmp_path):
    r = run("info", write(tmp_path, "name: m\ninput: {features: 4}\nlayers:\n  - dense: [5, 3]\n"))
    assert r.exit_code == 2 and LOCATED.match(r.stderr) and r.stdout == ""


# ---------------------------------------------------------------- render


def test_render_stdout_and_file(tmp_path):
    r = run("render", RECIPE)
    assert r.exit_code == 0
    text = r.stdout
    assert "module @model {" in text and "func.func @train_step(" in text and "func.func @forward(" in text
    out = tmp_path / "m.mlir"
    r = run("render", RECIPE, "-o", out)
    assert r.exit_code == 0 and r.stdout == ""
    assert out.read_text() == text
    assert r.stderr.strip() == f"wrote {out} ({len(text):,} bytes)"


def test_render_function_forward():
    r = run("render", "--function", "forward", MLP)       # no recipe needed for forward
    assert r.exit_code == 0
    assert "func.func @forward(" in r.stdout and "@train_step" not in r.stdout
    r = run("render", "--function", "train_step", RECIPE)
    assert r.exit_code == 0 and "func.func @train_step(" in r.stdout and "func.func @forward(" not in r.stdout


def test_render_errors():
    r = run("render", "--function", "backward", MLP)
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: --function must be train_step, forward, all or input_grad, got 'backward'"
    r = run("render", MLP)
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: {MLP}:5:5: rendering @train_step needs a `train:` recipe in the spec"


# ---------------------------------------------------------------- layers


def test_layers_lists_every_registered_kind():
    r = run("layers")
    assert r.exit_code == 0
    rows = {l.split("│")[1].strip() for l in r.stdout.splitlines() if l.startswith("│") and l.split("│")[1].strip()}
    assert set(all_layers()) <= rows
    assert "fan_in, fan_out, act=identity" in r.stdout


# ---------------------------------------------------------------- compile (compiler faked)


@pytest.fixture
def fake_compiler(monkeypatch, tmp_path):
    """Replace compile_module: record the module text, write a stub .vmfb."""
    import lmc.compile as comp
    calls = []

    def fake(text, out=None, backend=None, chip=None, verbose=False, options=None):
        calls.append((text, out, backend))
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"vmfb")
        return comp.Compiled(out, False, 0.0, ["iree-compile", "fake"])

    # every stage that compiles binds compile_module at import: replace it in each of them
    real = comp.compile_module
    for mod in [m for name, m in sys.modules.items() if name.startswith("lmc")]:
        if getattr(mod, "compile_module", None) is real:
            monkeypatch.setattr(mod, "compile_module", fake)
    monkeypatch.chdir(tmp_path)
    return calls


def test_compile_spec_with_fake_compiler(fake_compiler, tmp_path):
    r = run("compile", RECIPE, "--backend", "llvm-cpu")
    assert r.exit_code == 0, r.stderr
    (text, out, backend), = fake_compiler
    assert "module @model" in text and backend == "llvm-cpu"
    assert Path(out) == Path("build") / "recipe-ablation-a.llvm-cpu.vmfb"     # build_tag in the name
    assert f"compiling recipe-ablation-a for llvm-cpu → {out}" in r.stderr
    assert "compiled in 0.0s" in r.stderr
    r = run("compile", RECIPE, "--backend", "llvm-cpu", "--json")
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    assert got == {"source": str(RECIPE), "name": "recipe-ablation-a", "backend": "llvm-cpu", "output": str(out),
                   "bytes": 4, "cached": False, "seconds": 0.0, "command": ["iree-compile", "fake"]}


@pytest.mark.parametrize("cmd,new,meaning", [
    (["train", RECIPE], "--max-steps", "stop when the global step reaches N"),
    (["bench", RECIPE], "--timed-steps", "timed train steps after the warm-up"),
    (["attack", RECIPE, "--eps", "0.1"], "--pgd-steps", "PGD steps per restart")])
def test_the_old_steps_flag_is_refused_naming_its_new_name(fake_compiler, tmp_path, cmd, new, meaning):
    """`--steps` meant three counts; each command now names its own, and the old spelling (even
    with a non-number) is one error naming the new flag, before anything is loaded or compiled."""
    for value in ("5", "x"):
        r = run(*cmd, "--steps", value, "--out" if cmd[0] == "train" else "--batch", tmp_path / "r" if cmd[0] == "train" else 2)
        assert r.exit_code == 2, r.output
        assert r.stderr.splitlines() == [
            f"error: --steps is now {new} on lmc {cmd[0]} ({meaning}); --steps meant a different count on each of "
            f"lmc train, bench and attack", f"hint: write {new} {value}"]
    assert fake_compiler == [] and not (tmp_path / "r").exists()
    help_text = run(cmd[0], "--help").output
    assert new in help_text and "--steps " not in help_text
    r = run(cmd[0], "--" + new.split("-")[-2] + "-step", "3")          # a slip of the new name
    assert r.exit_code == 2 and new in r.output and "--steps" not in r.output.replace(new, "")


def test_compile_refuses_a_bad_spec_before_compiling(fake_compiler, tmp_path):
    r = run("compile", write(tmp_path, "name: m\ninput: {features: 4}\nlayers: [dens]\n"))
    assert r.exit_code == 2 and LOCATED.match(r.stderr)
    assert fake_compiler == []
    r = run("compile", RECIPE, "--backend", "tpu")
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: unknown backend 'tpu' (expected one of llvm-cpu, cuda, rocm)"
    r = run("compile", tmp_path / "missing.mlir")
    assert r.exit_code == 2 and "cannot read" in r.stderr


def test_user_text_is_not_read_as_markup(tmp_path):
    """Paths and names with [brackets] are printed as they are, never parsed as rich markup
    (a name "[/x]" once crashed `info` with a MarkupError; names are now restricted too)."""
    d = tmp_path / "a[x]"
    d.mkdir()
    p = write(d, MLP.read_text(), "m[b].yaml")
    for cmd in ("validate", "info"):
        assert run(cmd, p).exit_code == 0
    r = run("validate", write(d, MLP.read_text().replace("name: mlp", "name: '[/x]'"), "n.yaml"))
    assert r.exit_code == 2 and "[/x]" in r.stderr


# ---------------------------------------------------------------- what will not run


SPECS = Path(__file__).resolve().parent.parent / "specs"


UNLOWERED = """name: unlowered
input: {channels: 8, height: 6, width: 1}
dataset: {kind: mnist, path: /nonexistent/data}
layers:
  - spatial_flatten: {}
  - mamba_block: {dim: 8, state_size: 4, expand: 2, n_blocks: 1}
  - mamba_block: {dim: 8, state_size: 4, expand: 2, n_blocks: 1}
  - flatten: {}
  - dense: {fan_in: 48, fan_out: 10}
train: {learning_rate: 0.1, batch_size: 4, epochs: 1}
"""


@pytest.fixture
def scan_declared(monkeypatch):
    """selective_scan as a declared primitive (its template hidden): every layer kind lowers
    now, so the refusal of one that does not is tested on mamba_block without its scan."""
    from lmc.prims import all_prims
    monkeypatch.setattr(all_prims()["selective_scan"], "lowered", classmethod(lambda cls: False))


def test_validate_warns_of_what_render_and_train_refuse(tmp_path, scan_declared):
    """A valid spec exits 0, but every item lmc render/train would refuse is one located warning."""
    spec = tmp_path / "unlowered.yaml"
    spec.write_text(UNLOWERED)
    r = run("validate", spec)
    assert r.exit_code == 0
    warnings = [l for l in r.stderr.splitlines() if l.startswith("warning:")]
    assert warnings == [
        f"warning: {spec}:{line}:5: not implemented yet: mamba_block (layer {i}): `lmc info` counts "
        f"it, but it is not lowered to StableHLO, so lmc render, compile and train refuse it" for line, i in ((6, 1), (7, 2))]
    assert r.stderr.splitlines()[-1].endswith("ok — 5 layers, 1,818 parameters, output [4, 10]")
    # recipe refusals (lmc/check/training.py) and a loss option that is not lowered yet
    yolo = tmp_path / "yolo.yaml"
    yolo.write_text(YOLO)
    r = run("validate", yolo, "--set", "train.sync_bn=true", "--set", "train.yolo_cls_focal_gamma=2")
    assert r.exit_code == 0
    warnings = [l for l in r.stderr.splitlines() if l.startswith("warning:")]
    assert len(warnings) == 2
    assert warnings[0].startswith("warning: --set train.yolo_cls_focal_gamma: not implemented yet: train.yolo_cls_focal_gamma "
                                  "(with loss yolov1_masked)")
    assert warnings[1] == f"warning: {yolo}:6:1: not implemented yet in lmc train: train.sync_bn"
    # and what validate warns of is exactly what render refuses
    r2 = run("render", yolo, "--set", "train.yolo_cls_focal_gamma=2")
    assert r2.exit_code == 2 and r2.stderr.startswith("error: --set train.yolo_cls_focal_gamma: not implemented yet")
    r = run("validate", RECIPE)
    assert r.exit_code == 0 and "warning:" not in r.stderr


YOLO = """name: yolo
input: {channels: 1, height: 8, width: 8}
layers:
  - conv_bn: {ic: 1, oc: 4, k_size: 3, stride: 2}
  - conv2d: {ic: 4, oc: 13, k_size: 1, act: identity}
train: {learning_rate: 0.01, batch_size: 4, epochs: 1, use_yolov1: true}
"""


def test_train_refuses_an_unlowered_layer_before_loading_data(fake_compiler, monkeypatch, tmp_path, scan_declared):
    """The spec's data directory does not exist here: the refusal must come first, without
    reading any data or compiling."""
    import lmc.train.plan as tr
    loaded = []
    monkeypatch.setattr(tr, "load_data", lambda *a: loaded.append(a) or _raise(AssertionError("data loaded")))
    spec = tmp_path / "unlowered.yaml"
    spec.write_text(UNLOWERED)
    r = run("train", spec, "--out", tmp_path / "run")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {spec}:6:5: not implemented yet: mamba_block (layer 1)")
    assert "mamba_block (layer 2)" in r.stderr          # every refusal, not just the first
    assert "no such directory" not in r.stderr
    assert loaded == [] and fake_compiler == []
    # a recipe switch lmc train refuses is also caught before the data
    r = run("train", RECIPE, "--set", "train.sync_bn=true", "--out", tmp_path / "run")
    assert r.exit_code == 2 and "not implemented yet in lmc train: train.sync_bn" in r.stderr
    assert loaded == [] and fake_compiler == []


def _raise(e):
    raise e


CONV_HEAD = ("name: convhead\ninput: {channels: 1, height: 8, width: 8}\nlayers:\n"
             "  - conv2d: {ic: 1, oc: 10, k_size: 3}\n"
             "train: {learning_rate: 0.1, batch_size: 4, epochs: 1}\ndataset: synthetic\n")


@pytest.mark.parametrize("cmd", ["validate", "render", "compile", "train"])
def test_every_command_checks_the_loss_against_the_output(fake_compiler, tmp_path, cmd):
    """class_ce on a rank-4 output: the same located error from validate, render, compile and
    train (it once rendered a module that iree-compile rejected), before any compile."""
    p = write(tmp_path, CONV_HEAD)
    r = run(cmd, p)
    assert r.exit_code == 2
    assert r.stderr == (f"error: {p}:5:1: class_ce needs logits [batch, classes], but the net's output is "
                        f"[4, 10, 8, 8]\nhint: end the net with global_avg_pool or flatten, then dense\n")
    assert r.stdout == "" and fake_compiler == []
    assert run("info", p).exit_code == 0          # info still shows the shapes the error is about


def test_lower_refuses_a_loss_the_output_cannot_feed(tmp_path):
    from lmc.core.errors import SpecError
    from lmc.graph.infer import infer
    from lmc.lower.lowering import lower
    from lmc.spec.netspec import load_spec
    net = infer(load_spec(write(tmp_path, CONV_HEAD)))
    with pytest.raises(SpecError, match="class_ce needs logits"):
        lower(net)
    assert "func.func @forward(" in lower(net, "forward")      # the forward alone is fine


# ---------------------------------------------------------------- values set by options


WARMUP = ("name: m\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 3}\n"
          "train:\n  learning_rate: 0.1\n  batch_size: 2\n  epochs: 5\n  warmup_epochs: 2\n"
          "  cosine_decay: true\ndataset: synthetic\n")


def test_a_rule_broken_by_an_option_names_the_option(fake_compiler, tmp_path):
    p = write(tmp_path, WARMUP)
    r = run("train", p, "--epochs", 1, "--out", tmp_path / "run")
    assert r.exit_code == 2
    assert r.stderr == (f"error: {p}:9:3: warmup_epochs (2) exceeds epochs (1) (epochs set by --epochs 1)\n"
                        f"hint: pass --epochs 2 or more, or lower warmup_epochs\n")
    r = run("validate", p, "--set", "train.epochs=1")
    assert r.exit_code == 2
    assert r.stderr == (f"error: {p}:9:3: warmup_epochs (2) exceeds epochs (1) (epochs set by --set train.epochs=1)\n"
                        f"hint: pass --set train.epochs=2 or more, or lower warmup_epochs\n")
    r = run("validate", p, "--set", "train.warmup_epochs=7")       # the other side set by an option
    assert r.exit_code == 2
    assert r.stderr == ("error: --set train.warmup_epochs: warmup_epochs (7) exceeds epochs (5)\n"
                        "hint: raise epochs to 7, or pass --set train.warmup_epochs=5 or less\n")
    r = run("validate", write(tmp_path, WARMUP.replace("  epochs: 5\n", "  epochs: 1\n"), "file.yaml"))
    assert r.exit_code == 2 and "set by" not in r.stderr and "hint:" not in r.stderr   # all from the file
    r = run("train", p, "--epochs", -1, "--out", tmp_path / "run")
    assert r.exit_code == 2 and r.stderr.startswith("error: --epochs: train.epochs: expected an integer")
    assert fake_compiler == []


@pytest.mark.parametrize("cmd", ["info", "render", "eval"])
def test_batch_option_must_be_positive(tmp_path, cmd):
    extra = ["--init", tmp_path / "x.npz"] if cmd == "eval" else []
    r = run(cmd, RECIPE, "--batch", 0, *extra)
    assert r.exit_code == 2 and r.stderr == "error: --batch must be at least 1, got 0\n"


# ---------------------------------------------------------------- --help


COMMANDS = ["validate", "info", "render", "compile", "train", "eval", "plot", "layers", "bench"]


def help_text(*args) -> str:
    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_has_no_type_placeholders(cmd):
    """Usage `lmc CMD [OPTIONS] SPEC` (not `{spec}`); flags take no `<bool>`; values show
    TEXT / PATH / INTEGER as a click CLI does, never typer's `<list[str]>`."""
    text = help_text(cmd)
    usage = next(l for l in text.splitlines() if "Usage:" in l)
    assert "{" not in usage and "<" not in usage
    assert not re.search(r"<(bool|int|str|path|float|list\[\w+\])>", text), text
    arg = {"plot": "RUN_DIR", "compile": "SOURCE", "layers": None}.get(cmd, "SPEC")
    assert usage.rstrip(" │").endswith(f"{cmd} [OPTIONS]" + (f" {arg}" if arg else "")), usage
    assert re.search(r"--help +Show this message", text)


def test_help_shows_the_true_defaults_and_metavars():
    text = help_text("compile")
    assert "build/<name>.<backend>.vmfb" in text            # compile_cmd's default output path
    assert re.search(r"--verbose +Print the compiler command", text)
    assert re.search(r"--set +TEXT +Override a spec field", text)
    assert re.search(r"--output +-o +PATH ", text)
    text = help_text("info")
    assert re.search(r"--json +Print the same information as JSON", text)
    assert re.search(r"--batch +INTEGER ", text)
    text = help_text("train")
    assert re.search(r"--shuffle +--no-shuffle +Shuffle", text)
    assert re.search(r"--epochs +INTEGER ", text) and re.search(r"--data +PATH ", text)
    assert "$IREE_BACKEND" in help_text("render")             # resolve_backend reads it there too
    assert re.search(r"--version +Print lmc's", help_text())


# ---------------------------------------------------------------- hints for what is missing


@pytest.mark.parametrize("kind, expects", [
    ("mnist", "train-images-idx3-ubyte[.gz]"), ("cifar10", "data_batch_1.bin"), ("npz", "keys x [N, ...] and y [N]")])
def test_missing_data_says_what_is_expected_and_that_lmc_never_downloads(fake_compiler, tmp_path, kind, expects):
    r = run("train", RECIPE, "--set", f"dataset={kind}", "--out", tmp_path / "run")
    assert r.exit_code == 2
    first, hint = r.stderr.splitlines()
    where = "no such file: data/npz" if kind == "npz" else f"no such directory: data/{kind}"
    assert first.startswith(f"error: {where}") and expects in first
    assert hint.startswith("hint: lmc never downloads data: ")
    assert "--data PATH" in hint and f"dataset: {{kind: {kind}, path: PATH}}" in hint
    assert "`dataset: digits`" in hint and "`dataset: synthetic`" in hint
    assert fake_compiler == []


def test_unimplemented_loss_option_has_a_hint(tmp_path):
    yolo = tmp_path / "yolo.yaml"
    yolo.write_text(YOLO)
    r = run("render", yolo, "--set", "train.yolo_cls_focal_gamma=2")
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0].startswith("error: --set train.yolo_cls_focal_gamma: not implemented yet: "
                                               "train.yolo_cls_focal_gamma (with loss yolov1_masked)")
    assert r.stderr.splitlines()[1] == "hint: remove the field from the recipe (or set it to its default)"


# ---------------------------------------------------------------- the update side of the recipe


def test_info_json_states_the_hp_layout_and_optimizer_per_tensor():
    r = run("info", RECIPE, "--json", "--set", "train.optimizer=rmsprop", "--set", "train.use_adam=false",
            "--set", "train.grad_clip_norm=1", "--set", "train.use_ema=true")
    assert r.exit_code == 0
    t = json.loads(r.stdout)["train_abi"]
    assert t["hp"] == ["lr", "weight_decay", "t", "bn_momentum", "label_smoothing", "rmsprop.rho", "rmsprop.eps",
                       "rmsprop.mu", "grad_clip_norm", "ema_decay"]
    assert set(t["optimizers"].values()) == {"rmsprop"} and t["ema"] == list(t["optimizers"])
    assert [s for s, _ in t["opt_state"]] == ["v"] * len(t["optimizers"]) + ["buf"] * len(t["optimizers"])
    r = run("info", RECIPE, "--json", "--set", "train.grad_accum_steps=4")
    assert json.loads(r.stdout)["train_abi"]["functions"] == ["grad_step", "apply_step"]


def test_head_lr_mult_needs_a_final_dense_layer(tmp_path):
    p = write(tmp_path, CONV_HEAD.replace("epochs: 1}", "epochs: 1, head_lr_mult: 10}").replace(
        "conv2d: {ic: 1, oc: 10, k_size: 3}", "conv2d: {ic: 1, oc: 10, k_size: 3}\n  - global_avg_pool"))
    r = run("validate", p)        # a recipe that does not fit the net: an error, not a warning
    assert r.exit_code == 2 and r.stderr.startswith(f"error: {p}:6:") and "head_lr_mult" in r.stderr
    r = run("render", p)
    assert r.exit_code == 2
    assert f"{p}:6:" in r.stderr and ("head_lr_mult scales the lr of the final dense head, but the last layer "
                                      "with parameters is layer 0 (conv2d)") in r.stderr
