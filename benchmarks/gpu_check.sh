#!/usr/bin/env bash
# GPU check (issue 15): compile every lowerable spec for a GPU backend and for llvm-cpu, run N
# train steps on both from the same state and batch, compare losses and final parameters, time
# the GPU step next to JAX/PyTorch there, write build/gpu_check/report.{md,json}.
# Usage (see benchmarks/gpu_check.py --help and benchmarks/NOTES.md, "GPU check"):
#   benchmarks/gpu_check.sh                       # prepare + run, cuda sm_80 vs llvm-cpu
#   benchmarks/gpu_check.sh prepare               # here: compile only (needs iree-compile)
#   benchmarks/gpu_check.sh run                   # on the GPU machine: runtime only
#   benchmarks/gpu_check.sh all --backend llvm-cpu --specs specs/digits_mlp.yaml   # CPU dry run
# PYTHON picks the interpreter (default: .venv/bin/python if present, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PY" benchmarks/gpu_check.py "$@"
