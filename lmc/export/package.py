"""`lmc export --format vmfb`: a standalone inference package that runs with the IREE runtime
alone (no lmc):

    DIR/forward.vmfb    `module @model` with `@forward(P…, S…, x) -> logits`, compiled for one
                        backend and chip at a fixed batch
    DIR/weights.npz     the parameters and BN statistics under lmc's names (plain NumPy, no pickles)
    DIR/manifest.json   what to feed: the argument order (`args`, then the input), shapes,
                        the runtime driver, the versions it was built with

docs/export.md has the ~20-line snippet that runs it."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from lmc._version import __version__
from lmc.compile import DEFAULT_CHIP, RUNTIME_DRIVER, compile_module, compiler_version, find_compiler, resolve_backend
from lmc.core.errors import ExportError
from lmc.export.weights import Weights, named
from lmc.lower.lowering import lower
from lmc.lower.options import LowerOptions
from lmc.run.checkpoint import atomic_write

MANIFEST = "manifest.json"
FORMAT = "lmc-iree-package"


def check_package_dir(net, out: Path, **_) -> None:
    """DIR must be new, empty, or an earlier package (which is replaced)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ExportError(f"-o {out}: a vmfb package is a directory, and {out} is a file")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise ExportError(f"-o {out}: the directory holds files and no {MANIFEST} (not an lmc package)",
                          hint="choose a new directory; an earlier package's directory is replaced")


def write_package(net, w: Weights, out: Path, backend: str | None = None, chip: str | None = None,
                  options: LowerOptions = LowerOptions(), log=lambda s: None, **_) -> Path:
    out = Path(out)
    check_package_dir(net, out)
    b = resolve_backend(backend)
    chip = chip or os.environ.get("IREE_CHIP") or DEFAULT_CHIP[b]
    if options.transients == "external":
        raise ExportError("LMC_TRANSIENTS=external: a vmfb package's @forward allocates its own intermediates "
                          "(the runtime snippet passes no storage buffer)", hint="unset LMC_TRANSIENTS for lmc export")
    # the package's simple ABI: intermediates allocated by the call, which blocks until done
    options = dataclasses.replace(options, transients="alloca", invocation="sync")
    out.mkdir(parents=True, exist_ok=True)
    c = compile_module(lower(net, "forward", backend=b, options=options), None, b, chip, options=options)
    log(f"{'cached' if c.cached else 'compiled'} @forward for {b} ({chip}) at batch {net.batch}")
    blob = Path(c.path).read_bytes()
    atomic_write(out / "forward.vmfb", lambda f: f.write(blob))
    tensors = named(net, w)
    atomic_write(out / "weights.npz", lambda f: np.savez(f, **tensors))
    manifest = {
        "format": FORMAT, "version": 1, "spec": net.spec.name, "region": w.region,
        "lmc_version": __version__, "iree_compiler": compiler_version(find_compiler()),
        "backend": b, "chip": chip, "driver": RUNTIME_DRIVER[b],
        "module": "forward.vmfb", "module_name": "model", "function": "forward",
        "weights": "weights.npz", "args": [p.name for p in net.params] + [s.name for s in net.state],
        "batch": net.batch,
        "input": {"name": "input", "shape": list(net.input.dims), "dtype": "float32"},
        "output": {"name": "logits", "shape": list(net.output.type.dims), "dtype": "float32"},
    }
    text = json.dumps(manifest, indent=2) + "\n"
    atomic_write(out / MANIFEST, lambda f: f.write(text.encode()))
    return out
