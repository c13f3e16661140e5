"""Peak host memory of one causal attention block's train step, plain vs flash_attn, at long
sequences (llvm-cpu: the device memory is host memory, so the process's peak RSS is the peak of
the IREE allocations plus a constant runtime baseline).  Each (form, length) runs in a fresh
process: compile (cached; iree-compile is a child process, not counted), load, 3 steps, then
report ru_maxrss.  Also prints the [B, H, N, N] tensor size for reference.

    python benchmarks/flash_memory.py [--lengths 1024 2048] [--batch 2] [--dim 64] [--heads 4]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys
sys.path.insert(0, {root!r})
import numpy as np
from lmc.train.bench import stepper
from lmc.compile import compile_module
from lmc.graph.infer import infer
from lmc.lower.lowering import lower
from lmc.run.runtime import Module
from lmc.spec.netspec import load_spec
net = infer(load_spec("flash.yaml", text={spec!r}))
m = Module(compile_module(lower(net, "train_step")).path)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
step, _ = stepper(net, m)
for _ in range(3):
    step()
print(json.dumps({{"base_kb": base, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""


def spec(n: int, batch: int, dim: int, heads: int, flash: bool) -> str:
    return f"""name: flash-memory
input: {{channels: {dim}, height: {n}, width: 1}}
layers:
  - spatial_flatten
  - transformer_encoder: {{dim: {dim}, heads: {heads}, mlp_dim: {2 * dim}, n_blocks: 1, causal_mask: true,
                          flash_attn: {str(flash).lower()}}}
  - flatten
  - dense: {{fan_in: {n * dim}, fan_out: 10}}
train: {{learning_rate: 0.01, batch_size: {batch}, epochs: 1}}
"""


def measure(n, batch, dim, heads, flash) -> dict:
    code = CHILD.format(root=str(ROOT), spec=spec(n, batch, dim, heads, flash))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="*", default=[1024])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    a = ap.parse_args()
    print("| N | [B, H, N, N] f32 MiB | plain peak MiB | flash_attn peak MiB | runtime baseline MiB |")
    print("|---|---|---|---|---|")
    for n in a.lengths:
        p = measure(n, a.batch, a.dim, a.heads, False)
        f = measure(n, a.batch, a.dim, a.heads, True)
        nn = a.batch * a.heads * n * n * 4 / 2**20
        print(f"| {n} | {nn:.0f} | {p['peak_kb'] / 1024:.0f} | {f['peak_kb'] / 1024:.0f} | {p['base_kb'] / 1024:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
