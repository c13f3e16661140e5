"""[slow] The specs that show a layer kind or a loss on embedded data (tests/test_spec_coverage.py)
train: a few steps of each through `lmc train`, the real compile and runtime, a finite loss that
the metrics log records, and a checkpoint."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("iree.runtime")

from lmc.cli import app  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.iree]
SPECS = Path(__file__).resolve().parent.parent / "specs"
SHOWCASE = ["digits_separable", "digits_shuffle", "digits_darknet", "digits_fpn_yolo", "mamba_lm",
            "unet_digits_dice", "unet_digits_dice_ce", "unet_digits_weighted_ce", "unet_digits_focal", "wavenet_lm", "nerf_image", "chain_fold",
            "digits_bottleneck", "digits_convnext", "digits_swin", "digits_densenet", "digits_squeezenet",
            "digits_googlenet", "digits_csp", "digits_efficientnet_v2", "digits_mobilenet_v3", "digits_mobilevit",
            "digits_shufflenet_v2", "digits_mobilenet_v4", "deeplab_digits"]


@pytest.mark.parametrize("stem", SHOWCASE)
def test_showcase_spec_trains(stem, tmp_path):
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", str(SPECS / f"{stem}.yaml"), "--max-steps", "3", "--out", str(run)])
    assert r.exit_code == 0, r.output
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [s["loss"] for s in steps if s["kind"] == "step"]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    assert (run / "last.npz").is_file()
