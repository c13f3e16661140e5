"""The pipeline's commands: validate, info, render, compile, train, eval, sample, plot, layers,
bench (each parses its options, calls one stage, prints)."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from lmc.cli.app import ChipOpt, SetOpt, SpecArg, _Command, _load, app, console, err, user_errors
from lmc.core.errors import LmcError
from lmc.core.fields import did_you_mean
from lmc.compile import compile_module, resolve_backend
from lmc.evaluate.checkpoint import evaluate_checkpoint
from lmc.evaluate.metrics import save_predictions
from lmc.evaluate.diffusion import schedule_of, write_samples
from lmc.evaluate.plot import plot_run
from lmc.spec.schema import schema_text
from lmc.evaluate.sample import sample as run_sample
from lmc.evaluate.score import EvalResult
from lmc.check import check
from lmc.graph.infer import lowers
from lmc.layers import all_layers
from lmc.lower.lowering import abi, lower, option_refusal
from lmc.lower.options import LowerOptions, switch
from lmc.run.dist import launch, launched_rank, launched_size
from lmc.run.rundir import require_init, resolve_init, run_of_spec
from lmc.train.bench import DeviceMissing, bench
from lmc.train.profile import profile as dispatch_profile
from lmc.train.callbacks import throughput
from lmc.train.options import Interrupted, TrainOptions
from lmc.train.plan import check_job
from lmc.train.trainer import train as run_training
from lmc.trust.stats import save_bitmap

@app.command(cls=_Command)
def validate(spec: SpecArg,
             as_json: Annotated[bool, typer.Option("--json", help="Print the summary (layers, parameters, output shape, warnings) as JSON on stdout.")] = False,
             set: SetOpt = None) -> None:
    """Parse SPEC and shape-check every layer: exit 0 if it is valid, else print every error and exit 2.

    Errors read `file:line:col: message`.  What a valid spec holds that lmc render/train refuse
    (a layer not lowered yet, a loss, optimizer or recipe switch not implemented) is one warning each."""
    with user_errors():
        net = _load(spec, set)      # parse, infer, check: the same stages `lmc train` runs first
        report = check(net)
        report.raise_invalid()
        warnings = report.refusals()
    if as_json:
        print(json.dumps({"spec": str(spec), "ok": True, "layers": len(net.layers), "parameters": net.total_params,
                          "output_shape": list(net.output.type.dims), "warnings": [w.render("warning") for w in warnings]}))
        return
    for w in warnings:     # valid, but lmc render/train would refuse it: say so, still exit 0
        sys.stderr.write(w.render("warning") + "\n")
    err.print(f"{spec}: ok — {len(net.layers)} layers, {net.total_params:,} parameters, "
              f"output {net.output.type.shape_str()}")


def _fmt_flops(n: int) -> str:
    for unit, k in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= k:
            return f"{n / k:.2f}{unit}"
    return str(n)


@app.command(cls=_Command)
def info(spec: SpecArg,
         params: Annotated[bool, typer.Option("--params", help="List every parameter tensor (name, shape, init) in ABI order.")] = False,
         as_json: Annotated[bool, typer.Option("--json", help="Print the same information as JSON.")] = False,
         batch: Annotated[Optional[int], typer.Option(help="Batch size for shapes and FLOPs (default: the recipe's, else 1).")] = None,
         set: SetOpt = None) -> None:
    """Print SPEC's layers as a table: output shape, parameters and forward FLOPs per layer, totals."""
    with user_errors():
        net = _load(spec, set, batch)
        options = LowerOptions.from_env()
    if as_json:
        out = {"name": net.spec.name, "input_shape": list(net.input.dims), "output_shape": list(net.output.type.dims),
               "total_params": net.total_params, "total_flops": net.total_flops,
               "layers": [{"index": l.index, "kind": l.kind, "layer": l.describe, "output_shape": list(l.out.dims),
                           "params": sum(p.type.size for p in l.params), "flops": l.flops, "lowered": l.lowered}
                          for l in net.layers],
               "params": [{"name": p.name, "shape": list(p.type.dims), "init": p.init} for p in net.params],
               "state": [{"name": s.name, "shape": list(s.type.dims), "init": s.init} for s in net.state],
               "train_abi": _train_abi(net, options), "lower_options": options.as_dict()}
        print(json.dumps(out, indent=2))
        return
    # the spec's name and layer text are the user's: escaped, or "[/x]" in a name is a MarkupError
    t = Table(title=f"{escape(net.spec.name)}  (input {net.input.shape_str()})")
    for c in ("#", "layer", "output", "params", "FLOPs"):
        t.add_column(c, justify="right" if c in ("#", "params", "FLOPs") else "left")
    for l in net.layers:
        mark = "" if l.lowered else " [dim](shape only)[/dim]"
        t.add_row(str(l.index), escape(l.describe) + mark, l.out.shape_str(), f"{sum(p.type.size for p in l.params):,}", _fmt_flops(l.flops))
    t.add_section()
    t.add_row("", "total", net.output.type.shape_str(), f"{net.total_params:,}", _fmt_flops(net.total_flops))
    console.print(t)
    if params:
        pt = Table(title="parameters (train-step argument order)")
        for c in ("#", "name", "shape", "init"):
            pt.add_column(c)
        for i, p in enumerate(net.params):
            pt.add_row(str(i), p.name, p.type.shape_str(), p.init)
        for s in net.state:
            pt.add_row("", s.name + " [dim](state)[/dim]", s.type.shape_str(), s.init)
        console.print(pt)


def _train_abi(net, options: LowerOptions) -> dict | None:
    """The training functions' layout for machines: the hp vector's entries, each tensor's
    optimizer, the optimizer-state order, the input (at train_res under it) and label tensors (None without a recipe; the refusal
    when lmc cannot lower it)."""
    if net.spec.train is None:
        return None
    r = check(net)
    refused = r.fit + r.train_step + [e for e in [option_refusal(net, options)] if e is not None]
    if refused:
        return {"refused": refused[0].message}
    try:
        a = abi(net, halves=options.split)        # the functions lmc train runs
    except LmcError as e:
        return {"refused": e.message}
    return {"hp": list(a.hp), "loss": a.loss.name, "x": list(a.x.dims), "labels": {"shape": list(a.labels.dims), "dtype": a.labels.dtype},
            "optimizers": {p.name: a.optimizers[p.name].name for p in net.params},
            "opt_state": [[slot, name] for slot, name in a.opt_keys], "ema": [p.name for p in a.ema],
            "head_lr": sorted(a.head), "grad_accum_steps": a.accum,
            "masks": [{"kind": m.kind, "layer": m.layer, "shape": list(m.value.type.dims)} for m in a.masks],
            "functions": ["train_late", "train_early"] if a.halves else ["train_step"] if a.accum == 1
            else ["grad_step", "apply_step"]}


def _rendered_abi(net, function: str, options: LowerOptions):
    """The ABI `lmc render` / `lmc compile` lower the training step with: LMC_SPLIT=on renders it
    as its two halves, @train_late + @train_early, in the one module (exit 2 where the recipe
    cannot be split, as in `lmc train`); auto and off the fused @train_step, the reference form
    (None: lower's default)."""
    if options.split != "on" or function not in ("train_step", "all") or net.spec.train is None:
        return None
    return abi(net, halves="on")


@app.command(cls=_Command)
def render(spec: SpecArg,
           output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the module here instead of stdout.")] = None,
           function: Annotated[str, typer.Option("--function", help="Which functions to emit: train_step, forward, all, or input_grad (@input_grad and @forward, what lmc attack compiles).")] = "all",
           batch: Annotated[Optional[int], typer.Option(help="Batch size to render for (default: the recipe's).")] = None,
           backend: Annotated[Optional[str], typer.Option(help="Target backend: llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu). Every backend gets the same module today (convolutions as matmuls; LMC_CONV_FORM=direct spells them as stablehlo.convolution; `lmc info --json` shows the lowering options in force).")] = None,
           set: SetOpt = None) -> None:
    """Lower SPEC to a StableHLO module (`module @model` with @train_step and @forward).

    No --json: the module text is the result (`lmc info --json` describes the net, its ABI and
    the lowering options; `lmc compile --json` reports the compiled module)."""
    with user_errors():
        if function not in ("train_step", "forward", "all", "input_grad"):
            raise LmcError(f"--function must be train_step, forward, all or input_grad, got {function!r}"
                           + did_you_mean(function, ("train_step", "forward", "all", "input_grad")))
        net, options = _load(spec, set, batch), LowerOptions.from_env()
        text = lower(net, function, backend=resolve_backend(backend), options=options,
                     the_abi=_rendered_abi(net, function, options))
    if output:
        output.write_text(text)
        err.print(f"wrote {output} ({len(text):,} bytes)")
    else:
        sys.stdout.write(text)


@app.command("compile", cls=_Command)
def compile_cmd(source: Annotated[Path, typer.Argument(help="A spec (.yaml) or a StableHLO module (.mlir).")],
                output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Where to write the .vmfb (default: build/<name>.<backend>.vmfb; <name> is the spec's name, then -<build_tag> if it has one, or the .mlir file's stem).")] = None,
                backend: Annotated[Optional[str], typer.Option(help="llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu).")] = None,
                chip: ChipOpt = None,
                verbose: Annotated[bool, typer.Option("--verbose", help="Print the compiler command and keep the .mlir next to the cache entry.")] = False,
                as_json: Annotated[bool, typer.Option("--json", help="Print the result (output path, size, backend, cached, seconds, compiler command) as JSON on stdout.")] = False,
                set: SetOpt = None) -> None:
    """Compile SOURCE with iree-compile (cached by module text, flags and compiler version)."""
    with user_errors():
        options = LowerOptions.from_env()
        if source.suffix == ".mlir":
            try:
                text = source.read_text()
            except OSError as e:
                raise LmcError(f"cannot read {source}: {e.strerror}")
            name = source.stem
            options = None          # a text lmc did not lower here: cached by the text alone
        else:
            net = _load(source, set)
            text = lower(net, backend=resolve_backend(backend), options=options,
                         the_abi=_rendered_abi(net, "all", options))
            name = net.spec.name + (f"-{net.spec.build_tag}" if net.spec.build_tag else "")
        b = resolve_backend(backend)
        out = output or Path("build") / f"{name}.{b}.vmfb"
        err.print(f"compiling {name} for {b} → {out}")
        c = compile_module(text, out, backend, chip, verbose, options)
    if verbose:
        err.print(" ".join(c.command))
    if as_json:
        print(json.dumps({"source": str(source), "name": name, "backend": b, "output": str(out),
                          "bytes": out.stat().st_size, "cached": c.cached, "seconds": c.seconds, "command": c.command}))
        return
    err.print(f"{'cached' if c.cached else 'compiled'} in {c.seconds:.1f}s: {out} ({out.stat().st_size:,} bytes)")


@app.command(cls=_Command)
def train(spec: SpecArg,
          backend: Annotated[Optional[str], typer.Option(help="llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu); the module runs on that backend's device.")] = None,
          chip: ChipOpt = None,
          data: Annotated[Optional[Path], typer.Option(help="Dataset directory or file (default: the spec's dataset path, else data/<kind>); a .npz file selects the npz loader.")] = None,
          out: Annotated[Optional[Path], typer.Option(help="Run directory for the checkpoint (last.npz) and metrics.jsonl (default: runs/<spec name>).")] = None,
          epochs: Annotated[Optional[int], typer.Option(help="Train this many epochs instead of the recipe's (same as --set train.epochs=N).")] = None,
          max_steps: Annotated[Optional[int], typer.Option("--max-steps", help="Stop when the global step reaches N (with --resume too: N is the step to reach, not a count of more steps); the lr schedule still spans the recipe's epochs.")] = None,
          init: Annotated[Optional[Path], typer.Option(help="Start from these parameters: an lmc checkpoint, a run directory (its newest checkpoint; RUN:best its best), a .npz/.safetensors of named tensors, or a flat float32 .bin.")] = None,
          resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its checkpoint, with its optimizer state and data position.")] = False,
          shuffle: Annotated[bool, typer.Option("--shuffle/--no-shuffle", help="Shuffle the training examples every epoch (--no-shuffle keeps the file order).")] = True,
          overwrite: Annotated[bool, typer.Option("--overwrite", help="Start a new run even if --out already holds one (its checkpoint and metrics are replaced).")] = False,
          log_every: Annotated[int, typer.Option(help="Read the loss back from the device every N steps (and at each epoch end); a NaN is caught at the next read.")] = 10,
          progress_every: Annotated[float, typer.Option(help="Without a terminal (nohup, Slurm, CI), print a progress line (step, loss, throughput, ETA) every N seconds; 0: none.")] = 30.0,
          stream: Annotated[Optional[bool], typer.Option("--stream/--no-stream", help="Decode an image-folder dataset (imagenette, imagenet) batch by batch in the background (threads, or --loader-workers processes) instead of loading it into RAM (default: imagenet always, imagenette when it would take more than 4 GiB).")] = None,
          loader_workers: Annotated[Optional[int], typer.Option("--loader-workers", help="Decode and crop an image-folder dataset's files in N worker processes (0: threads of the training process, the default); the batches are the same for any N.")] = None,
          tensorboard: Annotated[Optional[Path], typer.Option(help="Also write the metrics (loss, lr, throughput, eval scores) as TensorBoard event files in this directory (needs tensorboardX: pip install 'lmc[tensorboard]').")] = None,
          nproc: Annotated[int, typer.Option(help="Data-parallel training on N local ranks (MPI; pip install 'lmc[dist]'): each runs train.batch_size examples of every global batch of N × batch_size, gradients summed by all-reduce.  Under mpiexec/mpirun the launcher's world is used instead (docs/distributed.md).")] = 1,
          devices: Annotated[Optional[str], typer.Option(help="With --nproc on GPUs: one device per local rank, e.g. 0,1,2,3 (default: each rank the driver's default device).")] = None,
          dist_timeout: Annotated[Optional[float], typer.Option(help="Data-parallel: seconds a rank waits for the others at an all-reduce before the job is aborted (a rank died or hangs); default 300.")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="At the end, print the run's summary (step, loss, final eval, timings, checkpoint) as JSON on stdout.")] = False,
          set: SetOpt = None) -> None:
    """Train SPEC: compile (cached), initialize, train on the device, evaluate, checkpoint.

    Ctrl-C saves a checkpoint at the current step and exits with code 130."""
    sets = list(set or []) + ([(f"train.epochs={epochs}", "--epochs")] if epochs is not None else [])
    world = launched_size()
    try:
        with user_errors():
            if nproc < 1:
                raise LmcError(f"--nproc must be at least 1, got {nproc}")
            if world > 1 and nproc not in (1, world):
                raise LmcError(f"--nproc {nproc}, but the launcher started {world} ranks",
                               hint="under mpiexec/mpirun leave --nproc out (the launcher's -n decides)")
            if world == 1 and nproc == 1 and (devices or dist_timeout is not None):
                raise LmcError(f"{'--devices' if devices else '--dist-timeout'} acts on data-parallel ranks, and this "
                               f"run has one process", hint="add --nproc N (or start the ranks with mpiexec)")
            if dist_timeout is not None and dist_timeout <= 0:
                raise LmcError(f"--dist-timeout must be positive, got {dist_timeout:g}")
            net = _load(spec, sets)
            out = out if out is not None or run_of_spec(spec) is None else run_of_spec(spec)   # `lmc train RUN --resume`
            opts = TrainOptions(backend=backend, chip=chip, data=data, out=out, max_steps=max_steps, init=resolve_init(None, init),
                                resume=resume, shuffle=shuffle, overwrite=overwrite, log_every=max(1, log_every),
                                progress_every=progress_every,
                                tensorboard=tensorboard, stream=stream, loader_workers=loader_workers, dist_timeout=dist_timeout,
                                nproc=world if world > 1 else nproc, lower_options=LowerOptions.from_env(),
                                dist_overlap=switch("LMC_DIST_OVERLAP", ("off", "on"), "off") == "on")
            if world == 1 and nproc > 1:
                # this process launches the ranks: refuse what they would refuse, once, here
                job = check_job(net, opts, err)
                raise typer.Exit(launch(_rank_argv(sys.argv[1:]), nproc, devices.split(",") if devices else None,
                                        lambda m: err.print(m, markup=False, highlight=False), job.out / "metrics.jsonl"))
            if devices:
                os.environ["LMC_DEVICES"] = devices
            s = run_training(net, opts, err)
    except Interrupted as e:
        if not launched_rank():           # one line for a data-parallel run: rank 0's
            err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(130)
    except KeyboardInterrupt:
        err.print("aborted by Ctrl-C (before training started, or a second Ctrl-C): no checkpoint was written "
                  "for the current step", markup=False, soft_wrap=True)
        raise typer.Exit(130)
    if s.rank:                            # rank 0 reports for a data-parallel run
        return
    if as_json:
        print(json.dumps({"out": str(s.out), "step": s.step, "epoch": s.epoch,
                          "loss": None if s.loss is None else float(s.loss),
                          "eval": None if s.eval is None else {**s.eval.as_dict(), "region": getattr(s.eval, "region", "live")},
                          "seconds": s.seconds, "train_seconds": s.train_seconds, "steps_run": s.steps_run,
                          "examples_per_s": s.images_per_s, "checkpoint": None if s.checkpoint is None else str(s.checkpoint),
                          "metrics": str(s.out / "metrics.jsonl")}))
    ev = f"; {s.eval.describe()}" if s.eval is not None else ""
    loss = f"{s.loss + 0.0:.4f}" if s.loss is not None else "n/a"
    err.print(f"done: step {s.step}, loss {loss}{ev}; {s.steps_run} steps in {s.train_seconds:.1f}s "
              f"({throughput(net.spec, s.images_per_s)}), {s.seconds:.1f}s in all; checkpoint {s.checkpoint}, "
              f"metrics {s.out / 'metrics.jsonl'}", markup=False, highlight=False, soft_wrap=True)


def _rank_argv(argv: list[str]) -> list[str]:
    """This command line for the ranks: without --nproc and --devices (the launcher's and
    LMC_DEVICES' business)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--nproc", "--devices"):
            skip = True
            continue
        if a.startswith(("--nproc=", "--devices=")):
            continue
        out.append(a)
    return out


@app.command("eval", cls=_Command)
def eval_cmd(spec: SpecArg,
             init: Annotated[Optional[Path], typer.Option(help="The parameters to score: an lmc checkpoint (RUN_DIR/last.npz), a run directory (its newest checkpoint; RUN_DIR:best its best), a .npz/.safetensors of named tensors, or a flat .bin (default: SPEC's checkpoint when SPEC is a run directory).")] = None,
             backend: Annotated[Optional[str], typer.Option(help="llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu).")] = None,
             chip: ChipOpt = None,
             data: Annotated[Optional[Path], typer.Option(help="Dataset directory or file (default: the spec's dataset path, else data/<kind>).")] = None,
             batch: Annotated[Optional[int], typer.Option(help="Batch size of the compiled @forward (default: the recipe's).")] = None,
             region: Annotated[str, typer.Option(help="Which weights to score: live (trained), ema, swa, swag (samples around the SWA mean), or auto: what the run's own eval scored at that checkpoint.")] = "auto",
             as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON on stdout.")] = False,
             recalibrate: Annotated[int, typer.Option(help="Re-estimate the BN running statistics from N training batches in train mode before scoring (for checkpoints without them, e.g. a flat .bin); 0 = use the checkpoint's.")] = 0,
             batch_stats: Annotated[bool, typer.Option("--batch-stats", help="Normalise batch norm with each validation batch's own statistics instead of the running ones (a diagnostic: how far the running statistics are from the batches'; what a recipe with running_bn: false always does).")] = False,
             dump_correct: Annotated[Optional[Path], typer.Option(help="Write the per-example top-1 correctness bitmap (uint8 .npy, validation order) to this file, for `lmc compare`.")] = None,
             plot: Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of the first validation predictions (segmentation masks, detection boxes, regression outputs) to this file.")] = None,
             predictions: Annotated[Optional[Path], typer.Option("--predictions", hidden=True, help="The older name of --plot.")] = None,
             limit: Annotated[Optional[int], typer.Option(help="Score only the first N validation examples.")] = None,
             set: SetOpt = None) -> None:
    """Score a checkpoint on SPEC's validation split: top-1 (and top-5) with 95% Wilson intervals."""
    with user_errors():
        if plot is not None and predictions is not None:
            raise LmcError("--predictions is the older name of --plot: give one of them")
        plot = plot if plot is not None else predictions
        if dump_correct is not None and dump_correct.suffix != ".npy":
            raise LmcError(f"--dump-correct {dump_correct}: expected a .npy file name")
        net = _load(spec, set, batch)
        init = require_init(spec, init)
        r = evaluate_checkpoint(net, init, data, backend, chip,
                                lambda t: err.print(t, markup=False, highlight=False, soft_wrap=True), region,
                                recalibrate, LowerOptions.from_env(), batch_stats=batch_stats, limit=limit)
        if dump_correct is not None and not hasattr(r, "correct"):
            raise LmcError(f"--dump-correct writes per-example top-1 correctness, which {type(r).__name__} "
                           f"(this spec's labels) does not have")
        if dump_correct is not None:
            save_bitmap(dump_correct, r.correct())
            err.print(f"wrote {dump_correct} ({r.n:,} examples, {r.top1:,} correct)", markup=False, highlight=False)
    if plot is not None:
        with user_errors():
            if not save_predictions(r, plot):
                raise LmcError("--plot draws segmentation, detection or regression outputs; this spec's "
                               "labels are class ids")
        err.print(f"wrote {plot}", markup=False, highlight=False)
    if as_json and not isinstance(r, EvalResult):     # segmentation / regression metrics (lmc/evaluate/metrics.py)
        print(json.dumps({**r.as_dict(), "region": r.region}))
    elif as_json:
        d = r.as_dict()
        d.update(correct=r.top1, top1_ci=[d["top1_lo"], d["top1_hi"]], region=r.region)
        if r.top5 is not None:
            d.update(top5_correct=r.top5, top5_ci=[d["top5_lo"], d["top5_hi"]])
        print(json.dumps(d))
    else:
        console.print(r.describe(), markup=False, highlight=False)


@app.command(cls=_Command)
def sample(spec: SpecArg,
           init: Annotated[Optional[Path], typer.Option(help="The trained parameters: an lmc checkpoint (RUN_DIR/last.npz), a run directory, or a .npz/.safetensors of named tensors (default: SPEC's checkpoint when SPEC is a run directory).")] = None,
           prompt: Annotated[Optional[str], typer.Option(help="A language model: text the sample continues (UTF-8; default: a newline).", show_default=False)] = None,
           tokens: Annotated[Optional[int], typer.Option(help="A language model: how many tokens (bytes, or characters for a `vocab: char` run) to sample after the prompt [default: 200].", show_default=False)] = None,
           temperature: Annotated[Optional[float], typer.Option(help="A language model: softmax temperature; 0 picks the most likely token every time [default: 0.8].", show_default=False)] = None,
           top_k: Annotated[Optional[int], typer.Option(help="A language model: sample among the k most likely tokens only (0: all of them) [default: 0].", show_default=False)] = None,
           n: Annotated[Optional[int], typer.Option("--n", help="A diffusion spec: how many images to draw [default: 64].", show_default=False)] = None,
           steps: Annotated[Optional[int], typer.Option(help="A diffusion spec: how many of its timesteps the ancestral sampler runs (default: all of them; fewer are evenly spaced, the noise schedule respaced to them).", show_default=False)] = None,
           plot: Annotated[Optional[Path], typer.Option("--plot", help="A diffusion spec: where to write the PNG grid of the images (default: samples.png beside the checkpoint; an existing default file is kept and the next free name used).", show_default=False)] = None,
           npy: Annotated[Optional[Path], typer.Option("--npy", help="A diffusion spec: also write the images as a float32 array [n, C, H, W] in [0, 1], the dataset's pixel scale (.npy; e.g. for `lmc predict` with a classifier).", show_default=False)] = None,
           seed: Annotated[int, typer.Option(help="Seed of the sampling draws (same seed, same text or images).")] = 0,
           backend: Annotated[Optional[str], typer.Option(help="llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu).")] = None,
           chip: ChipOpt = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout: a language model's prompt, text and sampling settings; a diffusion spec's image count, steps, seed and the files written.")] = False,
           set: SetOpt = None) -> None:
    """Sample from a trained generative model through its compiled @forward: text from a language model (SPEC ends in lm_head; a character-level run's vocabulary comes from its checkpoint), or images from a diffusion spec's noise predictor (its dataset is a diffusion, e.g. digits_ddpm: ancestral DDPM sampling, written as a PNG grid)."""
    text_opts = {"--prompt": prompt, "--tokens": tokens, "--temperature": temperature, "--top-k": top_k}
    image_opts = {"--n": n, "--steps": steps, "--plot": plot, "--npy": npy}
    with user_errors():
        resolve_backend(backend)          # a typo is answered before the checkpoint is read
        net = _load(spec, set)
        images = schedule_of(net) is not None
        given = [k for k, v in (text_opts if images else image_opts).items() if v is not None]
        if given:
            what = (f"for a language model, but {net.spec.name} is a diffusion spec: lmc sample draws images from it"
                    if images else f"for a diffusion spec (a diffusion dataset, e.g. digits_ddpm), but {net.spec.name} "
                                   f"is sampled as a language model")
            raise LmcError(f"{', '.join(given)}: {what}",
                           hint="use --n, --steps, --plot, --npy" if images else "use --prompt, --tokens, --temperature, --top-k")
        ckpt = require_init(spec, init)
        if images:
            n_img = 64 if n is None else n
            lines = write_samples(net, ckpt, n_img, steps, seed, plot, npy, backend, chip, LowerOptions.from_env(),
                                  log=None if as_json else (lambda t: err.print(t, markup=False, highlight=False)))
            if as_json:
                print(json.dumps({"images": n_img, "steps": steps, "seed": seed, "written": lines}))
            else:
                for line in lines:
                    err.print(line, markup=False, highlight=False)
            return
        prompt, tokens = prompt or "", 200 if tokens is None else tokens
        temperature, top_k = 0.8 if temperature is None else temperature, top_k or 0
        text = run_sample(_load(spec, set, 1), ckpt, prompt, tokens, temperature, top_k, seed, backend, chip,
                          LowerOptions.from_env())
    if as_json:
        print(json.dumps({"prompt": prompt, "text": text, "tokens": tokens, "temperature": temperature,
                          "top_k": top_k, "seed": seed}))
        return
    sys.stdout.write(text + "\n")


@app.command(cls=_Command)
def plot(run_dir: Annotated[list[Path], typer.Argument(help="Run directories written by `lmc train` (each holds metrics.jsonl); several are overlaid, one colour each.", show_default=False)],
         plot_path: Annotated[Optional[Path], typer.Option("--plot", help="Where to write the PNG (default: RUN_DIR/curves.png for one run, runs-compared.png for several; an existing default file is kept and the next free name used).")] = None,
         output: Annotated[Optional[Path], typer.Option("-o", "--output", hidden=True, help="The older name of --plot.")] = None,
         as_json: Annotated[bool, typer.Option("--json", help="Print the PNG's path and the runs drawn as JSON on stdout.")] = False) -> None:
    """Plot runs' loss, accuracy and learning-rate curves from RUN_DIR/metrics.jsonl into a PNG."""
    with user_errors():
        if plot_path is not None and output is not None:
            raise LmcError("-o/--output is the older name of --plot: give one of them")
        path, said = plot_run(run_dir, plot_path if plot_path is not None else output)
    if as_json:
        print(json.dumps({"plot": str(path), "runs": [str(d) for d in run_dir]}))
        return
    err.print(said, markup=False, highlight=False)


@app.command(cls=_Command)
def layers(as_json: Annotated[bool, typer.Option("--json", help="Print the kinds as JSON on stdout: fields (with defaults, and which are inferred from the input) and whether each lowers.")] = False) -> None:
    """List every registered layer kind with its fields and whether it lowers yet."""
    if as_json:
        print(json.dumps([{"kind": kind, "lowers": lowers(cls),
                           "fields": [{"name": f.name, **({} if f.default is dataclasses.MISSING else
                                                          {"default": getattr(f.default, "value", f.default)}),
                                       **({"inferred": True} if f.name in cls.inferred_fields() else {})}
                                      for f in dataclasses.fields(cls)]}
                          for kind, cls in sorted(all_layers().items())], indent=2))
        return
    t = Table()
    for c in ("kind", "fields", "lowers"):
        t.add_column(c)
    for kind, cls in sorted(all_layers().items()):
        fields = ", ".join(f.name + ("" if f.default is dataclasses.MISSING else f"={getattr(f.default, 'value', f.default)}")
                           for f in dataclasses.fields(cls))
        t.add_row(kind, fields, "yes" if lowers(cls) else "shape only")
    console.print(t)


@app.command(cls=_Command)
def schema() -> None:
    """Print the JSON Schema of spec files for editors: save it and point a YAML language server at it.

    The schema is generated from the layer, loss, optimizer and dataset registries.

    No --json: the schema is JSON already."""
    sys.stdout.write(schema_text())


@app.command("bench", cls=_Command)
def bench_cmd(spec: SpecArg,
              backend: Annotated[Optional[str], typer.Option(help="llvm-cpu, cuda or rocm (default: $IREE_BACKEND, else llvm-cpu).")] = None,
              chip: ChipOpt = None,
              batch: Annotated[Optional[int], typer.Option(help="Batch size to measure (default: the recipe's).")] = None,
              timed_steps: Annotated[int, typer.Option("--timed-steps", help="Timed train steps after 3 warm-up steps.")] = 20,
              as_json: Annotated[bool, typer.Option("--json", help="Print the measurements as JSON.")] = False,
              cold: Annotated[bool, typer.Option("--cold", help="Also measure a cold compile (into an empty temporary cache), even if the module is cached.")] = False,
              peak: Annotated[bool, typer.Option("--peak/--no-peak", help="On llvm-cpu, also measure the machine's float32 matmul peak (NumPy sgemm 4096³, all cores; a few seconds) and report the step's GFLOP/s as its fraction.")] = True,
              profile: Annotated[bool, typer.Option("--profile", help="On llvm-cpu, also profile the train step dispatch by dispatch (IREE's host-execution profiling over 11 more steps of the fused @train_step, the first left out) and report the top 5 dispatches and their share of the step's dispatch time.")] = False,
              set: SetOpt = None) -> None:
    """Time SPEC's compiled train step and forward on synthetic data of the spec's shapes.

    Measures compile (cold and cached), load, step median/spread, images/s, achieved GFLOP/s
    and peak memory; with --profile, where the step's time goes (its top 5 dispatches)."""
    with user_errors():
        net = _load(spec, set, batch)
        if net.spec.train is None:
            raise LmcError("lmc bench needs a `train:` recipe (optimizer, batch size) in the spec")
        if timed_steps < 1:
            raise LmcError(f"--timed-steps must be at least 1, got {timed_steps}")
        if profile and resolve_backend(backend) != "llvm-cpu":
            raise LmcError(f"--profile profiles llvm-cpu's task executor only, not {resolve_backend(backend)}",
                           hint="drop --profile, or bench with --backend llvm-cpu")
        options = LowerOptions.from_env()
        err.print(f"lowering options: {options.describe()}")
        try:
            r = bench(net, backend, chip, steps=timed_steps, cold=cold, options=options, peak=peak)
            if profile:
                r["dispatches"] = dispatch_profile(net, options)
        except DeviceMissing as e:   # report what was measured (the compile), then the error
            p = e.partial
            if as_json:
                print(json.dumps(p, indent=2))
            else:
                console.print(f"compiled {p['name']} for {p['backend']} (batch {p['batch']}): "
                              + ("cached" if p["compile_s"] is None else f"{p['compile_s']:.2f} s")
                              + f", {p['vmfb_bytes']:,} bytes; step timings need the device", markup=False)
            raise
    if as_json:
        print(json.dumps(r, indent=2))
        return
    t = Table(title=f"lmc bench: {r['name']} on {r['backend']} (batch {r['batch']})")
    t.add_column("measure")
    t.add_column("value", justify="right")
    rows = [("compile (cold)", "cached (use --cold)" if r["compile_s"] is None else f"{r['compile_s']:.2f} s"),
            ("compile (cached)", f"{r['compile_cached_s'] * 1e3:.0f} ms"), ("module load", f"{r['load_s'] * 1e3:.1f} ms"),
            ("train step, median", f"{r['step_ms_median']:.2f} ms"),
            ("train step, min / max", f"{r['step_ms_min']:.2f} / {r['step_ms_max']:.2f} ms"),
            ("train step, IQR", f"{r['step_ms_iqr']:.2f} ms"), ("forward, median", f"{r['forward_ms_median']:.2f} ms"),
            ("images/s (train)", f"{r['images_per_s']:,.0f}"),
            ("achieved GFLOP/s (3x forward FLOPs)", f"{r['train_gflops']:.1f}"
             + (f" ({100 * r['peak_fraction']:.1f}% of sgemm {r['sgemm_peak_gflops']:.0f})" if "peak_fraction" in r else "")),
            ("peak host memory", f"{r['peak_rss_mb']:.0f} MB"), ("module size", f"{r['vmfb_bytes']:,} bytes")]
    d = r.get("dispatches")
    if d:
        rows += [("dispatches per step", f"{d['dispatches_per_step']:.0f} ({d['dispatch_ms']:.2f} ms of dispatch time)"),
                 (f"top {d['top']} dispatches", f"{100 * d['share']:.1f}% of the dispatch time")]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    if d:
        _print_top_dispatches(d, r["train_modules"])


def _print_top_dispatches(d: dict, train_modules: int) -> None:
    """`lmc bench --profile`'s dispatch table: the costliest dispatches of the fused @train_step
    (IREE's names: the op kind and its loop sizes), ms per step and share, then time per kind."""
    t = Table(title=f"top {d['top']} dispatches of @train_step (over {d['profiled_calls']} calls"
                    + (", the fused step: the timed step ran as two modules)" if train_modules > 1 else ")"))
    t.add_column("dispatch")
    t.add_column("ms per step", justify="right")
    t.add_column("share", justify="right")
    for name, ms in zip(d["names"], d["top_ms"]):
        t.add_row(name, f"{ms:.2f}", f"{100 * ms / d['dispatch_ms']:.1f}%")
    console.print(t)
    console.print("by kind: " + ", ".join(f"{k} {ms:.2f} ms ({100 * ms / d['dispatch_ms']:.0f}%)"
                                          for k, ms in d["by_kind_ms"].items()), markup=False)



