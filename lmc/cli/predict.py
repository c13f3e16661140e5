"""`lmc predict`: registered on lmc's typer app (lmc/cli/__init__.py imports this module); thin as
the others — parse options, call the Python API's Model.predict (lmc/api.py), print."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from lmc.api import Model
from lmc.cli.app import ChipOpt, SetOpt, SpecArg, _Command, _load, app, console, err, user_errors
from lmc.core.errors import LmcError
from lmc.evaluate.predict import family
from lmc.run.rundir import require_init


@app.command(cls=_Command)
def predict(spec: SpecArg,
            inputs: Annotated[list[str], typer.Argument(help="Image files (PNG/JPEG/…, any size and mode), folders of them, .npy/.npz arrays (the net's input as it is: [N, …] of the spec's input shape), or for a language model the prompts.", show_default=False)],
            init: Annotated[Optional[Path], typer.Option(help="The parameters: an lmc checkpoint, a run directory (RUN_DIR:best its best) or a .npz/.safetensors of named tensors (default: SPEC's checkpoint when SPEC is a run directory).")] = None,
            as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per input on stdout.")] = False,
            out: Annotated[Optional[Path], typer.Option(help="Where masks, overlays, drawn boxes, detections.json and output images go (default: ./predictions).")] = None,
            top_k: Annotated[int, typer.Option(help="Classes listed per input.")] = 5,
            batch: Annotated[Optional[int], typer.Option(help="Batch size of the compiled @forward (default: the recipe's).")] = None,
            labels: Annotated[Optional[Path], typer.Option(help="Class names, one a line in label order (default: the dataset's: folder names, digits).")] = None,
            tokens: Annotated[int, typer.Option(help="A language model: how many tokens to continue each prompt with.")] = 200,
            temperature: Annotated[float, typer.Option(help="A language model: softmax temperature (0: the most likely token).")] = 0.0,
            backend: Annotated[Optional[str], typer.Option(help="llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu).")] = None,
            chip: ChipOpt = None,
            set: SetOpt = None) -> None:
    """Apply a trained net to your own inputs through its compiled @forward, with the validation split's preprocessing.

    Classifiers print each input's top classes; segmentation writes mask PNGs and colour
    overlays, detection the boxes (COCO results JSON, drawn on the image), dense regressors
    their output image, language models the continuation."""
    with user_errors():
        if top_k < 1:
            raise LmcError(f"--top-k must be at least 1, got {top_k}")
        net = _load(spec, set, batch)
        if family(net) == "lm" and net.batch != 1:
            net = _load(spec, set, 1)          # lmc sample's forward: batch 1
        model = Model(net, require_init(spec, init), backend, chip, labels)
        results = model.predict(inputs, top_k=top_k, out=out, tokens=tokens, temperature=temperature)
    if as_json:
        for r in results:
            print(json.dumps(r))
        return
    fam = model.predictor.family if family(net) != "lm" else "lm"
    if fam == "lm":
        for r in results:
            console.print(r["text"], markup=False, highlight=False)
    elif fam in ("classes", "multi-hot"):
        t = Table(title=f"{escape(net.spec.name)}: {escape(str(model.init))}")
        for c in ("input", "class", "name", "prob", "next"):
            t.add_column(c, justify="right" if c == "prob" else "left")
        for r in results:
            best, rest = r["top"][0], r["top"][1:]
            t.add_row(escape(r["file"]), str(best["class"]), escape(best["name"]), f"{best['prob']:.4f}",
                      escape(", ".join(f"{x['name']} {x['prob']:.3f}" for x in rest)))
        console.print(t)
    else:
        for r in results:
            what = {k: v for k, v in r.items() if k != "file"}
            console.print(f"{r['file']}: {json.dumps(what)}", markup=False, highlight=False, soft_wrap=True)
        if fam == "boxes" and results:
            err.print(f"wrote {Path(results[0]['drawn']).parent / 'detections.json'} (COCO results)")
