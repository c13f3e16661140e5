"""The lowering options (lmc/lower/options.py): read once from the LMC_* variables at the command
line (an unknown value is exit 2 naming the variable), passed explicitly to lower() and to every
pass that reads one, in the compile-cache key, and shown by `lmc info --json` and `lmc bench`.
The library itself reads no environment."""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lmc.cli import app
from lmc.core.errors import LmcError
from lmc.graph.infer import infer
from lmc.compile import flags
from lmc.lower.lowering import ASYNC, PACKED, lower
from lmc.lower.options import CHOICES, LowerOptions
from lmc.spec.netspec import load_spec

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
RECIPE = DATA / "recipe.yaml"
DEFAULTS = {"conv_form": "winograd", "bf16_form": "convert", "layout": "hbwc", "inplace": "on", "packed": "auto",
            "split": "auto", "transients": "auto", "invocation": "sync"}
# a conv run that the layout pass keeps in HBWC (conv → conv), a dense head, a recipe
CONVS = """\
name: convs
input: {channels: 2, height: 8, width: 8}
layers:
  - conv2d: {ic: 2, oc: 4, k_size: 3}
  - conv2d: {ic: 4, oc: 4, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - flatten
  - dense: {fan_in: 64, fan_out: 3}
train: {learning_rate: 0.1, batch_size: 2, epochs: 1, use_adam: true}
"""


def run(args, env=None):
    r = CliRunner().invoke(app, [str(a) for a in args], env=env or {})
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


@pytest.fixture
def no_lmc_env(monkeypatch):
    for var, _ in CHOICES.values():
        monkeypatch.delenv(var, raising=False)


# ---------------------------------------------------------------- the value


def test_defaults_are_todays_and_describe_themselves():
    o = LowerOptions()
    assert o.as_dict() == DEFAULTS
    assert o.describe() == ("conv_form=winograd, bf16_form=convert, layout=hbwc, inplace=on, packed=auto, split=auto, "
                            "transients=auto, invocation=sync")
    # the compile cache's key: every option but split, which picks the texts, not how one compiles
    keyed = {k: v for k, v in DEFAULTS.items() if k != "split"}
    assert o.canonical() == json.dumps(keyed, sort_keys=True, separators=(",", ":"))
    assert LowerOptions(split="off").canonical() == o.canonical() != LowerOptions(packed="off").canonical()
    assert o.hbwc and o.tie and not o.queued
    assert not LowerOptions(layout="nchw").hbwc and not LowerOptions(inplace="off").tie
    assert LowerOptions(invocation="async").queued
    with pytest.raises(Exception):
        o.layout = "nchw"                               # frozen: one value for a whole lowering


def test_from_env_reads_each_variable(no_lmc_env):
    assert LowerOptions.from_env() == LowerOptions()
    env = {"LMC_CONV_FORM": "direct", "LMC_BF16_FORM": "emulated", "LMC_LAYOUT": "nchw",
           "LMC_INPLACE": "off", "LMC_PACKED": "on", "LMC_SPLIT": "off", "LMC_TRANSIENTS": "alloca",
           "LMC_INVOCATION": "async"}
    assert LowerOptions.from_env(env).as_dict() == {"conv_form": "direct", "bf16_form": "emulated",
                                                    "layout": "nchw", "inplace": "off", "packed": "on",
                                                    "split": "off", "transients": "alloca", "invocation": "async"}
    assert LowerOptions.from_env({"LMC_PACKED": "off"}) == LowerOptions(packed="off")


@pytest.mark.parametrize("field,var,allowed", [(f, v, a) for f, (v, a) in CHOICES.items()])
def test_an_unknown_value_is_refused_naming_the_variable(field, var, allowed):
    default = DEFAULTS[field]
    with pytest.raises(LmcError) as e:
        LowerOptions.from_env({var: "bogus"})
    assert e.value.message == f"{var}='bogus': expected one of {', '.join(allowed)} (default {default})"
    with pytest.raises(LmcError, match=f"LowerOptions.{field}='bogus'"):
        LowerOptions(**{field: "bogus"})                # built in code: checked the same


@pytest.mark.parametrize("cmd", [["render"], ["info", "--json"], ["compile"], ["bench"]])
def test_the_command_line_refuses_an_unknown_value_with_exit_2(cmd, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    r = run([*cmd, RECIPE], env={"LMC_LAYOUT": "nhwc"})
    assert r.exit_code == 2
    assert "LMC_LAYOUT='nhwc': expected one of hbwc, nchw (default hbwc)" in r.stderr
    assert "Traceback" not in r.output and r.stdout == ""


# ---------------------------------------------------------------- they reach the text


def test_each_option_reaches_the_text(no_lmc_env):
    net = infer(load_spec("c.yaml", text=CONVS))
    base = lower(net)
    assert "stablehlo.convolution" in lower(net, options=LowerOptions(conv_form="direct"))
    assert "stablehlo.convolution" not in base
    nchw = lower(net, options=LowerOptions(layout="nchw"))
    assert nchw != base and nchw.count("stablehlo.transpose") > base.count("stablehlo.transpose")
    assert "iree.abi.output" in base and "iree.abi.output" not in lower(net, options=LowerOptions(inplace="off"))
    assert (PACKED in base) != (PACKED in lower(net, options=LowerOptions(packed="off" if PACKED in base else "on")))
    queued = lower(net, options=LowerOptions(invocation="async"))
    assert ASYNC not in base and ASYNC in queued
    assert "--iree-execution-model=async-external" in flags("llvm-cpu", text=queued)
    assert not any("execution-model" in f for f in flags("llvm-cpu", text=base))
    bf16 = infer(load_spec("c.yaml", text=CONVS.replace("use_adam: true", "use_adam: true, bf16: true")))
    assert "xbf16>" in lower(bf16) and "xbf16>" not in lower(bf16, options=LowerOptions(bf16_form="emulated"))


def test_the_library_reads_no_environment(monkeypatch):
    net = infer(load_spec("c.yaml", text=CONVS))
    base = lower(net)
    for var, allowed in CHOICES.values():
        monkeypatch.setenv(var, allowed[-1])
    monkeypatch.setenv("LMC_CONV_FORM", "direct")
    assert lower(net) == base


def test_render_through_the_command_line_follows_the_variables():
    default = run(["render", RECIPE, "--function", "forward"], env={"LMC_CONV_FORM": None})
    direct = run(["render", RECIPE, "--function", "forward"], env={"LMC_CONV_FORM": "direct"})
    assert default.exit_code == direct.exit_code == 0
    assert default.stdout != direct.stdout
    assert "stablehlo.convolution" in direct.stdout and "stablehlo.convolution" not in default.stdout


# ---------------------------------------------------------------- the compile cache


def test_the_cache_key_tells_option_sets_apart():
    from lmc.compile import cache_key
    fl, v = ["--iree-input-type=stablehlo"], "IREE 3.13"
    keys = {cache_key("module", fl, v, o) for o in
            [LowerOptions(), LowerOptions(inplace="off"), LowerOptions(packed="on"), None]}
    assert len(keys) == 4
    assert cache_key("module", fl, v, LowerOptions()) == cache_key("module", fl, v, LowerOptions())


def test_a_host_target_is_keyed_by_the_cpu_it_resolves_to(monkeypatch):
    """A cache shared by two machines (NFS home, a VM moved between hosts) must not hand code
    built for one CPU to the other: `host` is keyed by the CPU, a named CPU by its name alone."""
    import lmc.compile as c
    cpus = {"a": {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17", "flags": "fpu avx512f"},
            "b": {"vendor_id": "GenuineIntel", "cpu family": "6", "model": "143", "flags": "fpu avx512f avx512_fp16"}}

    def key(cpu, fl):
        monkeypatch.setattr(c, "_cpuinfo_first", lambda keys: {k: v for k, v in cpus[cpu].items() if k in keys})
        c.host_cpu_id.cache_clear()
        return c.cache_key("module", fl, "IREE 3.13", LowerOptions())

    try:
        host = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
        named = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=znver4"]
        feats = named + ["--iree-llvmcpu-target-cpu-features=host"]
        assert key("a", host) != key("b", host)
        assert key("a", host) == key("a", host)
        assert key("a", feats) != key("b", feats)
        assert key("a", named) == key("b", named)
        assert c.host_has_avx512()
    finally:
        c.host_cpu_id.cache_clear()


@pytest.fixture
def stub_compiler(monkeypatch, tmp_path):
    """An iree-compile that copies its input to its output: the cache, without IREE."""
    import lmc.compile as comp
    exe = tmp_path / "iree-compile"
    exe.write_text(f"#!{sys.executable}\nimport shutil, sys\n"
                   "if sys.argv[1:] == ['--version']:\n    print('IREE stub version 0'); sys.exit(0)\n"
                   "a = sys.argv[1:]\nshutil.copyfile(a[0], a[a.index('-o') + 1])\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(comp, "find_compiler", lambda: str(exe))
    monkeypatch.setenv("LMC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("IREE_EXTRA_FLAGS", raising=False)
    return comp


def test_two_option_sets_never_share_a_cache_entry(stub_compiler):
    text = "module @model {}\n"              # the same text for both: an option that changes nothing
    a = stub_compiler.compile_module(text, options=LowerOptions())
    b = stub_compiler.compile_module(text, options=LowerOptions(inplace="off"))
    assert not a.cached and not b.cached and a.path != b.path
    again = stub_compiler.compile_module(text, options=LowerOptions(inplace="off"))
    assert again.cached and again.path == b.path
    assert stub_compiler.compile_module(text).path == a.path        # the library default: the defaults


def test_lmc_compile_keys_the_cache_by_the_variables(stub_compiler, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = {}
    for inplace in ("on", "off", "on"):
        r = run(["compile", RECIPE, "-o", tmp_path / f"{inplace}.vmfb"], env={"LMC_INPLACE": inplace})
        assert r.exit_code == 0, r.output
        paths.setdefault(inplace, []).append("cached" in r.stderr)
    assert paths == {"on": [False, True], "off": [False]}


# ---------------------------------------------------------------- shown where they matter


def test_info_json_shows_the_options_in_force():
    out = json.loads(run(["info", "--json", RECIPE], env={k: None for k, _ in CHOICES.values()}).stdout)
    assert out["lower_options"] == DEFAULTS
    out = json.loads(run(["info", "--json", RECIPE], env={"LMC_PACKED": "off", "LMC_LAYOUT": "nchw"}).stdout)
    assert out["lower_options"] == {**DEFAULTS, "packed": "off", "layout": "nchw"}
    # and the recipe's refusal under them (train.bf16_conv needs the matmul form of conv)
    r = run(["info", "--json", RECIPE, "--set", "train.bf16=true", "--set", "train.bf16_conv=true"],
            env={"LMC_CONV_FORM": "direct"})
    assert "bf16_conv covers the matmul form" in json.loads(r.stdout)["train_abi"]["refused"]


def test_bench_states_the_options(monkeypatch):
    """bench prints the options before it compiles (one stderr line) and returns them with its
    numbers (--json); here with the compile and the timing replaced."""
    import lmc.cli.commands as commands
    seen = []

    def fake_bench(net, backend, chip, steps, cold, options, peak):
        seen.append(options)
        return {"name": net.spec.name, "lower_options": options.as_dict()}
    monkeypatch.setattr(commands, "bench", fake_bench)
    r = run(["bench", RECIPE, "--json"], env={"LMC_INPLACE": "off"})
    assert r.exit_code == 0, r.output
    assert "lowering options: conv_form=winograd, bf16_form=convert, layout=hbwc, inplace=off, packed=auto" in r.stderr
    assert seen == [LowerOptions(inplace="off")]
    assert json.loads(r.stdout)["lower_options"]["inplace"] == "off"


@pytest.mark.iree
def test_bench_json_records_the_options(tmp_path, monkeypatch):
    pytest.importorskip("iree.runtime")
    monkeypatch.setenv("LMC_CACHE", str(tmp_path / "cache"))
    from lmc.train.bench import bench
    net = infer(load_spec(ROOT / "specs" / "mnist_linear.yaml", ["train.batch_size=4"]))
    r = bench(net, steps=1, warmup=0, forward=False, options=LowerOptions(inplace="off"))
    assert r["lower_options"] == {**DEFAULTS, "inplace": "off"}


def test_lower_options_are_not_read_outside_the_command_line():
    """Nothing under lmc/ but the command line, the Python API (lmc/api.py: the command line's
    twin for scripts) and options.py itself builds them from the environment: a stage that did
    would decide a lowering out of sight of its callers."""
    hits = []
    for p in (ROOT / "lmc").rglob("*.py"):
        rel = p.relative_to(ROOT).as_posix()
        if rel.startswith("lmc/cli/") or rel in ("lmc/lower/options.py", "lmc/api.py"):
            continue
        text = p.read_text()
        if "from_env(" in text or any(f'"{var}"' in text for var, _ in CHOICES.values()):
            hits.append(rel)
    assert hits == []
