"""One data-parallel rank for tests/test_dist.py, started by mpiexec: trains SPEC like
`lmc train` does, then saves this rank's live parameters, optimizer state and BN statistics
to OUT/rank<r>.npz so the test can compare ranks bit for bit.

usage: mpiexec -n N python tests/dist_worker.py SPEC OUT STEPS [train.field=value ...]
(LMC_DIST_OVERLAP=on: the backward in two halves, as `lmc train` reads it)"""
import os
import sys
from pathlib import Path

import numpy as np
from rich.console import Console

from lmc.graph.infer import infer
from lmc.spec.netspec import load_spec
from lmc.train.options import TrainOptions
from lmc.train.plan import check_job
from lmc.train.state import to_host
from lmc.train.trainer import train_job

spec, out, steps, *sets = sys.argv[1:]
net = infer(load_spec(Path(spec), [(s, "--set") for s in sets]))
job = check_job(net, TrainOptions(out=Path(out), max_steps=int(steps), overwrite=True, dist_timeout=60.0,
                                  dist_overlap=os.environ.get("LMC_DIST_OVERLAP") == "on"),
                Console(stderr=True))
summary, state = train_job(job)
arrays = to_host(state.P) + to_host(state.O) + to_host(state.S)
np.savez(Path(out) / f"rank{summary.rank}.npz", *arrays)
