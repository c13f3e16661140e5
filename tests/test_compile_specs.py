"""[slow] Every spec in specs/ whose layers all lower compiles for llvm-cpu, and cross-compiles
for cuda (sm_86) and rocm (gfx1100) — no GPU needed to compile.  Large nets take minutes on 2
cores: `make test-slow` only.  benchmarks/compile_report.py prints times and module sizes."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmc.compile import compile_module
from lmc.core.errors import LmcError
from lmc.graph.infer import infer
from lmc.check import check
from lmc.lower.lowering import lower
from lmc.spec.netspec import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.iree]

SPECS = sorted((Path(__file__).resolve().parent.parent / "specs").glob("*.yaml"))


def lowerable(path: Path) -> bool:
    """Whether the whole module renders: every layer, the loss and the optimizer lower."""
    net = infer(load_spec(path))
    try:
        r = check(net)
        return net.spec.train is not None and not (r.errors or r.fit or r.layers or r.train_step)
    except LmcError:          # a recipe lmc train refuses (e.g. a head whose loss is not lowered)
        return False


CASES = [(p, b) for p in SPECS if lowerable(p) for b in ("llvm-cpu", "cuda", "rocm")]
# known failures, each with what the compiler says (fix, then delete the entry)
KNOWN: dict = {}
PARAMS = [pytest.param(p, b, id=f"{p.stem}-{b}",
                       marks=[pytest.mark.xfail(reason=KNOWN[(p.stem, b)], strict=True)] if (p.stem, b) in KNOWN else [])
          for p, b in CASES]


@pytest.mark.parametrize("path,backend", PARAMS)
def test_spec_compiles(path, backend):
    text = lower(infer(load_spec(path)), backend=backend)
    c = compile_module(text, backend=backend)
    assert c.path.stat().st_size > 1000


def test_the_issue_nets_are_lowerable():
    names = {p.stem for p, _ in CASES}
    assert {"mnist_mlp", "mnist_cnn", "cifar_cnn_bn", "resnet18", "resnet34", "resnet50"} <= names


def test_the_conv_family_nets_are_lowerable():
    names = {p.stem for p, _ in CASES}
    assert {"efficientnet_b0", "efficientnet_v2_s", "mobilenet_v3_large", "squeezenet", "unet", "densenet121",
            "shufflenet_v2_x1_0", "googlenet", "csp_darknet53", "deeplabv3_resnet18", "digits_mobile"} <= names
