"""`lmc export`: one function per format, each taking the net, the weights and the output path."""
from __future__ import annotations

from pathlib import Path

from lmc.export.onnx import check_exportable, write_onnx
from lmc.export.package import check_package_dir, write_package
from lmc.export.tensors import check_safetensors, write_safetensors
from lmc.export.weights import load_weights
from lmc.lower.options import LowerOptions


def _safetensors(net, w, out, **_):
    return write_safetensors(net, w, out)


def _onnx(net, w, out, **_):
    return write_onnx(net, w, out)


def _check_safetensors(net, out, **_):
    check_safetensors(out)


# format → (what refuses the net or the output before any weights are read, the writer)
FORMATS = {"safetensors": (_check_safetensors, _safetensors), "onnx": (check_exportable, _onnx),
           "vmfb": (check_package_dir, write_package)}


def export(net, init: Path, fmt: str, out: Path, region: str = "auto", backend: str | None = None,
           chip: str | None = None, log=lambda s: None, spec_path: Path | None = None, sets=None,
           options: LowerOptions = LowerOptions()) -> Path:
    """Write `init`'s weights of `region` for `net` in format `fmt` to `out`; returns the path."""
    check, write = FORMATS[fmt]
    kw = dict(backend=backend, chip=chip, log=log, spec_path=spec_path, sets=sets, options=options)
    check(net, out, **kw)
    w = load_weights(net, init, region)
    log(f"exporting {net.spec.name} ({w.what}; {w.region} weights) as {fmt}")
    return write(net, w, out, **kw)
