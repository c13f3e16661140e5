"""`lmc export`: one function per format, each taking the net, the weights and the output path."""
from __future__ import annotations

from pathlib import Path

from lmc.export.tensors import write_safetensors
from lmc.export.weights import load_weights


def _safetensors(net, w, out, **_):
    return write_safetensors(net, w, out)


FORMATS = {"safetensors": _safetensors}


def export(net, init: Path, fmt: str, out: Path, region: str = "auto", backend: str | None = None,
           chip: str | None = None, log=lambda s: None, spec_path: Path | None = None, sets=None) -> Path:
    """Write `init`'s weights of `region` for `net` in format `fmt` to `out`; returns the path."""
    w = load_weights(net, init, region)
    log(f"exporting {net.spec.name} ({w.what}; {w.region} weights) as {fmt}")
    return FORMATS[fmt](net, w, out, backend=backend, chip=chip, log=log, spec_path=spec_path, sets=sets)
