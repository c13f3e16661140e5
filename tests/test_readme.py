"""The README's "First hour" commands run as written (in a scratch directory holding the repo's
specs), each exiting 0."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def first_hour_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## First hour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [l.strip() for b in blocks for l in b.splitlines() if l.strip() and not l.startswith("#")]


def test_the_first_hour_section_has_its_commands():
    cmds = first_hour_commands()
    assert cmds[0] == ". .venv/bin/activate"
    assert [c.split()[1] for c in cmds[1:] if c.startswith("lmc ")] == ["train", "plot", "eval", "attack", "bench",
                                                                         "predict", "export"]


@pytest.mark.slow
def test_the_first_hour_runs_as_written(tmp_path):
    (tmp_path / "specs").symlink_to(ROOT / "specs")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for cmd in first_hour_commands()[1:]:          # the activation is the environment this test runs in
        argv = shlex.split(cmd)
        assert argv[0] in ("lmc", "python"), cmd
        prog = [sys.executable, "-m", "lmc"] if argv[0] == "lmc" else [sys.executable]
        r = subprocess.run([*prog, *argv[1:]], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
    assert (tmp_path / "runs" / "digits_cnn" / "curves.png").stat().st_size > 0
    assert (tmp_path / "runs" / "digits_cnn" / "attack.png").stat().st_size > 0
    assert (tmp_path / "runs" / "digits_cnn" / "weights.safetensors").stat().st_size > 0


def test_the_docs_index_lists_every_doc():
    index = (ROOT / "docs" / "index.md").read_text()
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")
    missing = [d for d in docs if f"]({d})" not in index]
    assert not missing, f"docs/index.md does not list {missing}"
    assert "docs/index.md" in (ROOT / "README.md").read_text()
