"""The weights an export writes: a checkpoint's parameters of one region and its BN statistics."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmc.core.errors import ExportError
from lmc.core.fields import did_you_mean
from lmc.run.checkpoint import load_init, load_region, read_tensors

REGIONS = ("auto", "live", "ema", "swa")


@dataclass
class Weights:
    params: list[np.ndarray]       # in `lmc info --params` order
    state: list[np.ndarray]        # the BN running statistics, in the net's state order
    region: str                    # live, ema or swa
    what: str                      # what the file was ("lmc checkpoint (step 40)")


def load_weights(net, init: Path, region: str = "auto") -> Weights:
    """The parameters of `region` (auto: what the run's own eval scored, else the live weights)
    and the BN statistics of the checkpoint `init`; a net with BN needs the file to hold them."""
    if region not in REGIONS:
        raise ExportError(f"--region {region!r}: expected one of {', '.join(REGIONS)}{did_you_mean(region, REGIONS)}",
                          hint="a SWAG run's --region swa exports the SWA mean")
    init = Path(init)
    got = load_init(init, net)
    if net.state and got.state is None:
        raise ExportError(f"{init} has no BN running statistics, which the exported net needs",
                          hint="export an lmc checkpoint (RUN_DIR/last.npz) or a file that includes them")
    tensors, meta = read_tensors(init) if init.suffix in (".npz", ".safetensors") else ({}, None)
    if region == "auto":
        region = (meta or {}).get("eval_region", "live")
        region = "swa" if region == "swag" else region
    params = got.params if region == "live" else load_region(init, net, region, tensors, meta)
    return Weights(params, list(got.state or []), region, got.what)


def named(net, w: Weights) -> dict[str, np.ndarray]:
    """The tensors under lmc's names (`lmc info --params`): parameters, then BN statistics."""
    out = {p.name: np.ascontiguousarray(a, np.float32) for p, a in zip(net.params, w.params)}
    out.update({s.name: np.ascontiguousarray(a, np.float32) for s, a in zip(net.state, w.state)})
    return out
