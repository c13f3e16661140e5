"""`lmc export --format safetensors`: the weights under lmc's names, written with the safetensors
package (the `export` extra).  The file is a bare set of named tensors, so `--init` reads it
back; its header metadata says what it came from (`lmc_spec`, `lmc_net_hash`, `lmc_region`)."""
from __future__ import annotations

from pathlib import Path

from lmc._version import __version__
from lmc.core.errors import ExportError
from lmc.export.weights import Weights, named
from lmc.run.checkpoint import atomic_write, net_hash, safetensors_module


def check_safetensors(path: Path) -> None:
    if Path(path).suffix != ".safetensors":
        raise ExportError(f"-o {path}: a safetensors export is written to a .safetensors file")
    safetensors_module("lmc export --format safetensors")


def write_safetensors(net, w: Weights, path: Path) -> Path:
    """Write the net's parameters and BN statistics to `path` (atomically)."""
    path = Path(path)
    check_safetensors(path)
    st = safetensors_module("lmc export --format safetensors")
    meta = {"format": "lmc-tensors", "lmc_version": __version__, "lmc_spec": net.spec.name,
            "lmc_net_hash": net_hash(net), "lmc_region": w.region}
    blob = st.numpy.save(named(net, w), metadata=meta)
    atomic_write(path, lambda f: f.write(blob))
    return path
