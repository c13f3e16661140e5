"""What `lmc train` shows while iree-compile runs: a transient spinner with the elapsed time on a
terminal, one plain line otherwise, nothing on a cache hit or on a quiet (non-zero rank) console."""
import contextlib
import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.progress import Progress

from lmc.compile import compile_module
from lmc.graph.infer import infer
from lmc.lower.lowering import lower
from lmc.spec.netspec import load_spec
from lmc.train import plan

ROOT = Path(__file__).resolve().parent.parent


def _job(console):
    job = SimpleNamespace(console=console, net=SimpleNamespace(spec=SimpleNamespace(name="mlp")))
    job.log = lambda text: console.print(text, markup=False)
    return job


def test_a_terminal_gets_a_spinner_with_elapsed_time_and_a_pipe_one_line():
    tty = Console(file=io.StringIO(), force_terminal=True)
    p = plan._compiling(_job(tty), "llvm-cpu")
    assert isinstance(p, Progress) and p.live.transient
    assert any(type(c).__name__ == "TimeElapsedColumn" for c in p.columns)
    with p:
        pass
    pipe = io.StringIO()
    with plan._compiling(_job(Console(file=pipe, force_terminal=False)), "llvm-cpu"):
        pass
    assert pipe.getvalue() == "compiling mlp for llvm-cpu (iree-compile)...\n"
    quiet = io.StringIO()
    with plan._compiling(_job(Console(file=quiet, quiet=True)), "llvm-cpu"):
        pass
    assert quiet.getvalue() == ""


@pytest.mark.iree
def test_compile_module_enters_during_only_for_a_real_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("LMC_CACHE", str(tmp_path))
    text = lower(infer(load_spec(ROOT / "specs" / "mnist_linear.yaml", ["train.batch_size=2"])))
    entered = []

    @contextlib.contextmanager
    def during():
        entered.append(1)
        yield
    assert not compile_module(text, during=during).cached and entered == [1]
    assert compile_module(text, during=during).cached and entered == [1]
