"""--help that teaches: every command's help ends with examples that use its own options, and
every `pip install 'lmc[extra]'` it prints names a real extra of pyproject.toml (the help is rich
markup: unescaped, `[tensorboard]` would vanish and leave `pip install 'lmc'`)."""
from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from lmc.cli import app
from lmc.cli.examples import EXAMPLES

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
GROUP = get_command(app)
COMMANDS = sorted(GROUP.commands)


def _help(*args) -> str:
    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.output


def test_every_command_has_examples():
    assert set(EXAMPLES) == set(COMMANDS)


def test_lmc_help_shows_examples_of_real_commands():
    from lmc.cli.examples import TOP_EXAMPLES
    text = " ".join(_help().split())
    assert "Examples:" in text
    for ex in TOP_EXAMPLES:
        assert ex in text, ex
        assert shlex.split(ex)[1] in COMMANDS, ex


@pytest.mark.parametrize("name", COMMANDS)
def test_help_shows_examples_that_use_the_commands_own_options(name):
    text = _help(name)
    assert "Examples:" in text
    cmd = GROUP.commands[name]
    flags = {o for p in cmd.params if p.param_type_name == "option" and not p.hidden for o in p.opts + p.secondary_opts}
    for ex in EXAMPLES[name]:
        assert ex in " ".join(text.split()) or ex in text, ex       # printed as written
        words = shlex.split(ex)
        assert words[:2] == ["lmc", name], ex
        for w in words[2:]:
            if w.startswith("-"):
                assert w.split("=")[0] in flags, f"{ex}: {w} is not an option of lmc {name}"


@pytest.mark.parametrize("name", [None] + COMMANDS)
def test_extras_names_survive_the_help(name):
    text = _help(*([name] if name else []))
    assert "pip install 'lmc'" not in text
    for extra in re.findall(r"lmc\[([a-z_-]+)\]", text):
        assert extra in EXTRAS, extra


def test_train_help_names_its_extras():
    text = _help("train")
    assert "lmc[tensorboard]" in text and "lmc[dist]" in text


def _readme_flags() -> dict[str, set[str]]:
    text = (ROOT / "README.md").read_text()
    table = text.split("<!-- flags-table -->")[1].split("<!-- /flags-table -->")[0]
    rows = [r for r in table.strip().splitlines()[2:]]
    out = {}
    for r in rows:
        flag, _, cmds = [c.strip() for c in r.strip("|").split("|")]
        out[flag.strip("`").split()[0]] = {c.strip() for c in cmds.split(",")}
    return out


def test_the_readme_flags_table_matches_the_code():
    flags = _readme_flags()
    assert {"--set", "--json", "--limit", "--plot"} <= set(flags)
    for flag, cmds in flags.items():
        have = {n for n, c in GROUP.commands.items()
                if any(flag in p.opts and not p.hidden for p in c.params if p.param_type_name == "option")}
        assert cmds == have, f"{flag}: the README says {sorted(cmds)}, the code has {sorted(have)}"


def test_old_png_flag_names_stay_as_hidden_aliases():
    hidden = {n: {o for p in c.params if p.param_type_name == "option" and p.hidden for o in p.opts}
              for n, c in GROUP.commands.items()}
    assert "--predictions" in hidden["eval"] and "--output" in hidden["plot"]
    assert "--predictions" not in _help("eval") and "--output" not in _help("plot")


@pytest.mark.slow
def test_eval_limit_and_the_json_flags(tmp_path):
    """eval --limit N scores N examples; train, validate and layers print JSON (real compile)."""
    import json
    import subprocess
    import sys
    spec = ROOT / "specs" / "digits_mlp.yaml"
    lmc = [sys.executable, "-m", "lmc"]
    r = subprocess.run(lmc + ["train", str(spec), "--max-steps", "2", "--out", str(tmp_path / "run"), "--json"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["step"] == 2 and s["checkpoint"] == str(tmp_path / "run" / "last.npz") and s["eval"]["n"] == 360
    r = subprocess.run(lmc + ["eval", str(spec), "--init", s["checkpoint"], "--limit", "50", "--json"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n"] == 50
    v = json.loads(CliRunner().invoke(app, ["validate", str(spec), "--json"]).stdout)
    assert v == {"spec": str(spec), "ok": True, "layers": 3, "parameters": 26122, "output_shape": [64, 10], "warnings": []}
    kinds = json.loads(CliRunner().invoke(app, ["layers", "--json"]).stdout)
    dense = next(k for k in kinds if k["kind"] == "dense")
    assert dense["fields"][0] == {"name": "fan_in", "inferred": True} and dense["lowers"]


# the commands whose output is itself the result, in a format of its own (MLIR text; a JSON
# Schema): no --json, and their help says why
NO_JSON = {"render", "schema"}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_that_prints_a_result_takes_json(name):
    opts = {o for p in GROUP.commands[name].params if p.param_type_name == "option" for o in p.opts}
    if name in NO_JSON:
        assert "--json" not in opts
        assert "No --json:" in " ".join(_help(name).split())
    else:
        assert "--json" in opts, f"lmc {name} prints a result but has no --json"
