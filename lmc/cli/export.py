"""`lmc export` and `lmc import`, registered on lmc's typer app (lmc/cli/__init__.py imports this
module): thin as the others — parse options, call one function of lmc/export, print."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from lmc.cli.app import ChipOpt, SetOpt, SpecArg, _Command, _load, app, err, user_errors
from lmc.core.errors import LmcError
from lmc.core.fields import did_you_mean
from lmc.export.published import import_weights
from lmc.export.run import FORMATS, export as run_export
from lmc.lower.options import LowerOptions
from lmc.run.rundir import require_init


def _log(text: str) -> None:
    err.print(text, markup=False, highlight=False, soft_wrap=True)


@app.command(cls=_Command)
def export(spec: SpecArg,
           format: Annotated[str, typer.Option("--format", help="safetensors (the tensors under lmc's names), onnx (an ONNX model of the eval forward), or vmfb (a standalone IREE package: the compiled @forward, its weights and a manifest).")],
           output: Annotated[Path, typer.Option("-o", "--output", help="Where to write it: a .safetensors or .onnx file, or a directory for vmfb.")],
           init: Annotated[Optional[Path], typer.Option(help="The trained parameters: an lmc checkpoint (RUN_DIR/last.npz), RUN_DIR:best, or a .npz/.safetensors of named tensors with the BN statistics (default: the run directory's newest checkpoint).")] = None,
           region: Annotated[str, typer.Option(help="Which weights: live (trained), ema, swa, or auto (what the run's own eval scored).")] = "auto",
           backend: Annotated[Optional[str], typer.Option(help="vmfb: the backend the package is compiled for, llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu).")] = None,
           chip: ChipOpt = None,
           batch: Annotated[Optional[int], typer.Option(help="vmfb: the batch size the compiled @forward takes (default 1).  ONNX models take any batch.")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print what was written (path, format, weights region, checkpoint) as JSON on stdout.")] = False,
           set: SetOpt = None) -> None:
    """Export a trained net: its tensors (safetensors), an ONNX model, or a standalone IREE package (docs/export.md)."""
    with user_errors():
        if format not in FORMATS:
            raise LmcError(f"--format {format!r}: expected one of {', '.join(FORMATS)}{did_you_mean(format, FORMATS)}")
        if batch is not None and batch < 1:
            raise LmcError(f"--batch must be at least 1, got {batch}")
        if format != "vmfb" and (backend is not None or chip is not None or batch is not None):
            raise LmcError(f"--backend, --chip and --batch choose what a vmfb package is compiled for; "
                           f"a {format} export does not compile", hint="leave them out, or use --format vmfb")
        net = _load(spec, set, 1 if format != "vmfb" else batch or 1)
        init = require_init(spec, init)
        out = run_export(net, init, format, output, region=region, backend=backend, chip=chip, log=_log,
                         spec_path=spec, sets=set, options=LowerOptions.from_env())
    if as_json:
        print(json.dumps({"output": str(out), "format": format, "region": region, "init": str(init)}))
        return
    _log(f"wrote {out}")


@app.command("import", cls=_Command)
def import_cmd(spec: SpecArg,
               weights: Annotated[Path, typer.Argument(help="The library model's state_dict: a .safetensors file (lmc never imports PyTorch: convert a .pth with safetensors.torch.save_file).", show_default=False)],
               source: Annotated[str, typer.Option("--from", help="The library the state_dict comes from: torchvision or timm (the models each covers: docs/export.md).")],
               output: Annotated[Path, typer.Option("-o", "--output", help="The lmc checkpoint to write (.npz): `--init` for train, eval and export.")],
               model: Annotated[Optional[str], typer.Option(help="The library's model name, e.g. mobilenet_v3_large (default: the spec's name); it decides the library's batch-norm ε.")] = None,
               as_json: Annotated[bool, typer.Option("--json", help="Print what was written (checkpoint, tensor counts, batch-norm ε) as JSON on stdout.")] = False,
               set: SetOpt = None) -> None:
    """Import published weights: map a torchvision or timm state_dict onto SPEC's tensors (every name and shape checked) and write an lmc checkpoint with the BN statistics."""
    with user_errors():
        net = _load(spec, set, 1)
        r = import_weights(net, weights, source, output, model)
    if as_json:
        print(json.dumps({"output": str(r.path), "weights": str(weights), "from": source, "params": r.n_params,
                          "state": r.n_state, "bn_eps": r.bn_eps}))
        return
    _log(f"wrote {r.path}: {r.n_params} parameters and {r.n_state} BN statistics from {weights} "
         f"({source}, batch-norm ε {r.bn_eps:g})")
