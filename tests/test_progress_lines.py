"""Without a terminal, `lmc train` prints a progress line every --progress-every seconds (step,
loss, throughput, ETA); the throughput's unit follows the input (img/s, tok/s, ex/s)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from lmc.spec.netspec import load_spec
from lmc.train.callbacks import throughput

ROOT = Path(__file__).resolve().parent.parent


def test_throughput_units():
    assert throughput(load_spec(ROOT / "specs" / "digits_cnn.yaml"), 1234.4) == "1,234 img/s"
    assert throughput(load_spec(ROOT / "specs" / "digits_mlp.yaml"), 99.0) == "99 ex/s"
    gpt = load_spec(ROOT / "specs" / "tiny_gpt.yaml")
    assert throughput(gpt, 10.0) == f"{10 * gpt.input[0]:,} tok/s"


@pytest.mark.slow
def test_progress_lines_without_a_terminal(tmp_path):
    spec = ROOT / "specs" / "digits_mlp.yaml"
    def train(*extra):
        r = subprocess.run([sys.executable, "-m", "lmc", "train", str(spec), "--epochs", "1", "--out",
                            str(tmp_path / "run"), "--overwrite", *extra], capture_output=True, text=True,
                           cwd=tmp_path, timeout=600)       # stderr is a pipe: no terminal
        assert r.returncode == 0, r.stderr
        return [l for l in r.stderr.splitlines() if l.startswith("step ")]
    lines = train("--progress-every", "0.000001")
    assert lines, "no progress line"
    assert all(re.fullmatch(r"step \d+/22 \(epoch 1/1, batch \d+/22\): loss \d+\.\d{4}, [\d,]+ ex/s, ETA \S+", l)
               for l in lines), lines
    assert train("--progress-every", "0") == []
    assert train() == []        # the default 30 s: a one-second run prints none
