"""[slow] Every spec in specs/ whose layers all lower compiles for llvm-cpu, and cross-compiles
for cuda (sm_86) and rocm (gfx1100) — no GPU needed to compile.  Large nets take minutes on 2
cores: `make test-slow` only.  benchmarks/compile_report.py prints times and module sizes."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmc.compile import compile_module
from lmc.infer import infer
from lmc.lower import lower
from lmc.spec import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.iree]

SPECS = sorted((Path(__file__).resolve().parent.parent / "specs").glob("*.yaml"))


def lowerable(path: Path) -> bool:
    net = infer(load_spec(path))
    return not net.unlowered and net.spec.train is not None


CASES = [(p, b) for p in SPECS if lowerable(p) for b in ("llvm-cpu", "cuda", "rocm")]


@pytest.mark.parametrize("path,backend", CASES, ids=[f"{p.stem}-{b}" for p, b in CASES])
def test_spec_compiles(path, backend):
    text = lower(infer(load_spec(path)), backend=backend)
    c = compile_module(text, backend=backend)
    assert c.path.stat().st_size > 1000


def test_the_issue_nets_are_lowerable():
    names = {p.stem for p, _ in CASES}
    assert {"mnist_mlp", "mnist_cnn", "cifar_cnn_bn", "resnet18", "resnet34", "resnet50"} <= names
