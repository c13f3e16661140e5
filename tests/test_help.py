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


@pytest.mark.parametrize("name", COMMANDS)
def test_help_shows_examples_that_use_the_commands_own_options(name):
    text = _help(name)
    assert "Examples:" in text
    cmd = GROUP.commands[name]
    flags = {o for p in cmd.params if p.param_type_name == "option" for o in p.opts + p.secondary_opts}
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
