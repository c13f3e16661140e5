"""A/B of one lowering option (lmc/lower/options.py) on whole train steps: the same net lowered
with each value of the option (the other LMC_* switches as this command line sets them),
compiled alike, the train steps timed interleaved in one process (micro.interleave: medians of
wall and process CPU ms per step).  Prints each module's compile time (0 if cached) and its
dot_general and transpose counts.  The activation-layout A/B is `--option layout --values nchw hbwc`.
`--constant module.NAME` (or module.Class.NAME) A/Bs a tuning constant of a primitive instead (set before
each lowering, converted to the constant's type), e.g. the Winograd dU chunk.

    python benchmarks/options_ab.py --option conv_form --values matmul winograd \\
        [--nets mnist_cnn cifar_cnn_bn resnet18] [--reps 9] [--set train.batch_size=64]
    python benchmarks/options_ab.py --constant lmc.prims.conv_winograd.DU_CHUNK --values 1 256"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import micro                          # noqa: E402
from lmc.graph.infer import infer  # noqa: E402
from lmc.lower.lowering import lower  # noqa: E402
from lmc.lower.options import CHOICES, LowerOptions  # noqa: E402
from lmc.spec.netspec import load_spec  # noqa: E402
from lmc.train.bench import stepper  # noqa: E402

NETS = {"mnist_mlp": ["train.batch_size=128"],
        "mnist_cnn": ["train.batch_size=128"], "cifar_cnn_bn": ["train.batch_size=128"],
        "resnet18": ["train.batch_size=128", "input.height=32", "input.width=32"],
        "mobilenet_v2": ["train.batch_size=128", "input.height=32", "input.width=32"],
        "efficientnet_b0": ["train.batch_size=128", "input.height=32", "input.width=32"],
        # as make bench's row (benchmarks/run.py): CIFAR size, 4×4 patches
        "vit_tiny": ["train.batch_size=64", "input.height=32", "input.width=32",
                     "layers.0.patch_embed.patch_size=4", "layers.0.patch_embed.n_patches=64"],
        "tiny_gpt": ["train.batch_size=32", "train.grad_clip_norm=0"]}


def _owner(dotted: str):
    """module.NAME or module.Class.NAME → (the module or class, NAME)."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:-1]:
            obj = getattr(obj, p)
        return obj, parts[-1]
    raise SystemExit(f"--constant {dotted}: no importable module in it")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--option", choices=sorted(CHOICES))
    which.add_argument("--constant", help="module.NAME or module.Class.NAME: a tuning constant instead of a "
                                           "lowering option")
    ap.add_argument("--values", nargs="+", required=True)
    ap.add_argument("--nets", nargs="*", default=["mnist_cnn", "cifar_cnn_bn", "resnet18"])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--set", action="append", default=[], help="extra spec overrides for every net")
    args = ap.parse_args()
    for name in args.nets:
        net = infer(load_spec(ROOT / "specs" / f"{name}.yaml", NETS.get(name, []) + args.set))
        cands = {}
        for v in args.values:
            if args.constant:
                owner, attr = _owner(args.constant)
                setattr(owner, attr, type(getattr(owner, attr))(v))
                options = LowerOptions.from_env()
            else:
                options = dataclasses.replace(LowerOptions.from_env(), **{args.option: v})
            text = lower(net, options=options)
            t0 = time.perf_counter()
            m = micro.load(text, options=options)
            print(f"{name} {args.option or args.constant}={v}: {text.count('stablehlo.dot_general')} dot_generals, "
                  f"{text.count('stablehlo.transpose')} transposes, "
                  f"compile {time.perf_counter() - t0:.1f} s (0 if cached)", flush=True)
            cands[v] = stepper(net, m)[0]
        micro.report_steps(name, cands, args.reps)


if __name__ == "__main__":
    main()
