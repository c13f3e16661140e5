"""The loss registry (lmc/losses): every kind of the seed's LossKind parses to its own module,
lowered exactly when its template exists, and no loss name appears in lmc outside lmc/losses
(config.effective_loss, the seed's derivation, is the one place that may name kinds)."""
import ast
import re
from pathlib import Path

import pytest

from lmc.spec.config import LossKind
from lmc.core.errors import NotImplementedKind
from lmc.losses import Loss, all_losses, lowered_losses, make_loss
from lmc.core.render import TEMPLATES
from lmc.core.types import TensorType, f32, i32

LMC = Path(__file__).resolve().parent.parent / "lmc"

# The seed's LossKind constructors as losses.md §1 spells them (the spec being checked, not a
# copy of the registry), with the parameters a parameterized kind must be given.
SEED = [("classCE", None), ("softLabelCE", None), ("perPixelCE", None), ("perPixelDice", None),
        ("perPixelDiceCE", None), ("perPixelWeightedCE", {"weights": [1, 2, 3]}),
        ("perPixelFocalCE", {"gamma": 2}), ("floatTargetMse", None), ("yolov1Masked", None), ("bce", None)]
# lmc's first additions after the seed's kinds (beyond the seed: DETR's set loss for detr_heads);
# later ones follow them
ADDED = ["detr_set"]


@pytest.mark.parametrize("seed, args", SEED, ids=[s for s, _ in SEED])
def test_every_seed_kind_parses_to_its_module(seed, args):
    kind = LossKind.parse({seed: args} if args else seed, "loss_kind")
    cls = all_losses()[kind.kind]
    assert cls.__module__ == f"lmc.losses.{kind.kind}" and issubclass(cls, Loss)
    assert (LMC / "losses" / f"{kind.kind}.py").is_file()
    assert LossKind.parse({kind.kind: args} if args else kind.kind, "k") == kind    # snake_case too


def test_the_registry_is_the_seed_list_in_the_seed_order():
    from lmc.core.fields import snake
    names = list(all_losses())
    assert names[:len(SEED)] == [snake(s) for s, _ in SEED]
    # lmc's additions follow the seed's kinds (each a module like the seed's: the other tests here)
    assert names[len(SEED):len(SEED) + len(ADDED)] == ADDED


@pytest.mark.parametrize("name", list(all_losses()))
def test_lowered_exactly_when_the_template_exists(name):
    cls = all_losses()[name]
    assert cls.lowered == (TEMPLATES / "losses" / f"{name}.mlir.j2").is_file()
    if cls.lowered:
        assert cls.reference is not Loss.reference and cls.examples, "a lowered loss has a reference and examples"
    else:
        assert not cls.examples
        with pytest.raises(NotImplementedKind) as e:
            make_loss(LossKind(name))
        assert e.value.message.startswith(f"not implemented yet: loss {name}")
        assert e.value.hint == f"lowered losses: {', '.join(sorted(lowered_losses()))}"


def test_declared_label_abis():
    seg, head = f32(2, 3, 5, 7), f32(2, 3)
    assert LossKind("per_pixel_ce").is_seg
    for name, cls in all_losses().items():
        if cls.is_seg:
            assert cls(LossKind(name)).labels(seg) == i32(2, 5, 7)
    assert all_losses()["bce"](LossKind("bce")).labels(head) == TensorType((2, 3), "f32")
    assert all_losses()["float_target_mse"](LossKind("float_target_mse")).labels(seg) == seg
    # the grid target with the cell mask packed as its last channel
    assert all_losses()["yolov1_masked"](LossKind("yolov1_masked")).labels(f32(2, 13, 5, 7)) == f32(2, 14, 5, 7)
    # per query: class id, box cx cy w h, match mask
    assert all_losses()["detr_set"](LossKind("detr_set")).labels(f32(2, 7, 9)) == f32(2, 7, 6)


def _effective_loss_lines() -> set[int]:
    tree = ast.parse((LMC / "spec" / "config.py").read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "effective_loss"]
    return set(range(fn.lineno, fn.end_lineno + 1))


def _name_pattern():
    """Every registered name, in snake_case or the seed's camelCase (classCE), plus the family
    prefix (per_pixel_*, perPixel...)."""
    names = sorted(all_losses(), key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(n.replace("_", "_?") for n in names) + r"|per_?pixel_?\w*)\b", re.I)


def test_no_loss_name_outside_its_module():
    # in code, strings, comments and docstrings alike; only the derivation function may name kinds
    pat = _name_pattern()
    allowed = {"spec/config.py": _effective_loss_lines()}
    found = []
    for path in sorted(LMC.rglob("*.py")):
        rel = path.relative_to(LMC)
        if rel.parts[0] == "losses":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pat.search(line) and i not in allowed.get(str(rel), ()):
                found.append(f"lmc/{rel}:{i}: {line.strip()}")
    assert found == []


def test_the_name_check_would_catch_one():
    pat = _name_pattern()
    for line in ('if k == "bce":', "# perPixelDice", "x.kind in ('class_ce',)", "needs a per_pixel_* loss"):
        assert pat.search(line), line
    assert not pat.search("subce = obce + classes")
