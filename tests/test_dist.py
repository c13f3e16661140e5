"""Data-parallel training (lmc/run/dist.py) with 2 CPU ranks under MPICH's mpiexec:

- no BN: after k steps the parameters and optimizer state of 2 ranks × batch 32 equal one
  process training at batch 64 (f32 tolerance), and the two ranks are bit-identical;
- BN + dropout: equal to the ghost-BN reference computed here in one process (each half of
  the global batch through @grad_step with its own batch statistics, the gradients summed,
  @apply_step; the running statistics the ranks' mean), masks drawn for the global batch;
- a rank killed mid-run stops the job with an error naming it, and --resume continues to the
  same final parameters as an uninterrupted run;
- a rank that hangs makes the others stop at the --dist-timeout deadline;
- the refusals (a loss that is not a per-example mean, fp8, sync_bn)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.runtime")
pytest.importorskip("mpi4py")

from lmc.run.dist import checksum, mpiexec, shard  # noqa: E402

pytestmark = pytest.mark.iree
ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "specs" / "digits_mlp.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "LMC_TASK_WORKERS": "1"}

BN_SPEC = ROOT / "tests" / "data" / "bn_dropout.yaml"   # conv_bn, max_pool, dropout


def tensors(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k: f[k] for k in f.files if k != "__lmc__"}


def ranks(out: Path, spec: Path, steps: int, *sets: str, n: int = 2, overlap: str = "off"):
    """Run tests/dist_worker.py on n ranks; returns each rank's arrays.  overlap="on": the
    backward in two halves, the late gradients summed while the early backward runs."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, str(ROOT / "tests" / "dist_worker.py"), str(spec), str(out),
           str(steps), *sets]
    r = subprocess.run(cmd, env={**ENV, "LMC_DIST_OVERLAP": overlap}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return [list(np.load(out / f"rank{i}.npz").values()) for i in range(n)]


def lmc_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "lmc", *map(str, args)], env=ENV, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("steps,extra,overlap", [(6, [], "off"), (9, ["train.grad_accum_steps=2"], "off"),
                                                 (9, ["train.grad_accum_steps=2"], "on")])
def test_two_ranks_equal_one_process_at_the_global_batch(tmp_path, steps, extra, overlap):
    """(With accumulation, 9 steps end mid-cycle: the checkpoint's accumulator is the ranks' mean,
    equal to one process's.  overlap on: micro-steps without an update run both halves and
    sum nothing.)"""
    got = ranks(tmp_path / "dp", MLP, steps, "train.batch_size=32", *extra, overlap=overlap)
    assert checksum(got[0]) == checksum(got[1])                   # ranks bit-identical
    sets = [a for e in extra for a in ("--set", e)]
    r = lmc_cli("train", MLP, "--max-steps", steps, "--set", "train.batch_size=64", *sets, "--out", tmp_path / "one")
    assert r.returncode == 0, r.stderr
    one = tensors(tmp_path / "one" / "last.npz")
    dp = tensors(tmp_path / "dp" / "last.npz")                    # rank 0's checkpoint
    assert set(one) == set(dp)
    for k in one:
        np.testing.assert_allclose(dp[k], one[k], rtol=1e-4, atol=1e-6, err_msg=k)
    # the run's own records: 6 steps, the global batch, the eval equal to one process's
    rec = [json.loads(line) for line in (tmp_path / "dp" / "metrics.jsonl").read_text().splitlines()]
    head = rec[0]
    assert head["ranks"] == 2 and head["global_batch"] == 64 and head["batch_size"] == 32
    assert len([x for x in rec if x["kind"] == "step"]) == steps
    ev = [x for x in rec if x["kind"] == "eval"][-1]
    ev1 = [json.loads(line) for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()
           if '"eval"' in line][-1]
    assert ev["n"] == ev1["n"] == 360 and ev["top1"] == ev1["top1"]


def ghost_reference(spec: Path, steps: int, W: int):
    """One process: each rank's slice of the global batch through @grad_step with its own BN
    statistics, the gradients summed, @apply_step; the running statistics averaged at the end.
    (Under LMC_DIST_OVERLAP=on the ranks run the backward in two halves; this one whole.)"""
    from lmc.compile import compile_module
    from lmc.data import Batcher
    from lmc.graph.init import init_tensors
    from lmc.graph.infer import infer
    from lmc.lower.lowering import abi, lower
    from lmc.train.masks import draw
    from lmc.run.runtime import Module
    from lmc.train.schedule import learning_rate
    from lmc.spec.netspec import load_spec
    from lmc.data.fit import load_data
    net = infer(load_spec(spec))
    glob = infer(load_spec(spec, [(f"train.batch_size={net.batch * W}", "--set")]))
    cfg, a, ag = net.spec.train, abi(net, W), abi(glob)
    mod = Module(compile_module(lower(net, world=W, the_abi=a)).path)   # one @grad_step
    ds = load_data(glob, None, cfg.seed)
    nc = net.num_classes
    bt = Batcher(ds, glob.batch, seed=cfg.seed, labels=lambda y: ag.loss.fit_labels(y, nc, cfg))
    P, S0 = init_tensors(net, cfg.seed)
    O = a.initial_opt()
    S = [list(S0) for _ in range(W)]
    b, nP, nS = net.batch, len(P), len(S0)
    for step in range(1, steps + 1):
        e, i = divmod(step - 1, bt.steps_per_epoch)
        x, y = bt.batch(e, i)
        masks = draw(ag.masks, cfg, cfg.seed, e, i)              # the global batch's masks
        hp = a.hp_vector(cfg, learning_rate(cfg, step, bt.steps_per_epoch), step)
        G = None
        for r in range(W):
            sl = slice(r * b, (r + 1) * b)
            out = mod.grad_step(*P, *S[r], *[np.zeros_like(p) for p in P], x[sl], y[sl], hp,
                                *[np.ascontiguousarray(m[sl]) for m in masks])
            g = [np.array(t.to_host()) for t in out[:nP]]
            S[r] = [np.array(t.to_host()) for t in out[nP:nP + nS]]
            G = g if G is None else [u + v for u, v in zip(G, g)]
        res = mod.apply_step(*P, *O, *G, hp)
        P = [np.array(t.to_host()) for t in res[:nP]]
        O = [np.array(t.to_host()) for t in res[nP:nP + len(O)]]
    return P + O + [(sum(s[k] for s in S) / np.float32(W)).astype(np.float32) for k in range(nS)]


@pytest.mark.parametrize("overlap", ["off", "on"])
def test_two_ranks_bn_dropout_equal_the_ghost_bn_reference(tmp_path, overlap):
    spec = BN_SPEC
    from lmc.graph.infer import infer
    from lmc.lower.lowering import abi
    from lmc.spec.netspec import load_spec
    assert bool(abi(infer(load_spec(spec)), 2, overlap=overlap == "on").cut) == (overlap == "on")
    got = ranks(tmp_path / "dp", spec, 5, overlap=overlap)
    assert checksum(got[0]) == checksum(got[1])
    ref = ghost_reference(spec, 5, 2)
    assert len(ref) == len(got[0])
    for k, (u, v) in enumerate(zip(got[0], ref)):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6, err_msg=f"array {k}")


def test_shard_and_checksum_units():
    a = np.arange(12, dtype=np.float32).reshape(6, 2)
    assert np.array_equal(np.concatenate([shard(a, r, 3) for r in range(3)]), a)
    b = a.copy()
    b[5, 1] = np.nextafter(b[5, 1], np.float32(100))          # one ulp
    assert checksum([a]) != checksum([b]) and checksum([a]) == checksum([a.copy()])
    from lmc.train.masks import draw

    class M:                                                    # a mask site of batch 4
        kind = "dropout"

        class value:
            class type:
                dims = (4, 3)

    class Cfg:
        dropout, drop_path = 0.5, 0.0
    full = draw([M], Cfg, 1, 0, 2, 0, 1)[0]
    M.value.type.dims = (2, 3)
    halves = [draw([M], Cfg, 1, 0, 2, r, 2)[0] for r in range(2)]
    assert np.array_equal(np.concatenate(halves), full)


def _rank_pid(run: Path, rank: int) -> int | None:
    """The rank's process: the one with the run in its command line and PMI_RANK in its
    environment whose parent has neither (a child it forks, e.g. for a subprocess, carries both
    until it execs)."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            env = (d / "environ").read_bytes().split(b"\0")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if str(run).encode() in cmd and f"PMI_RANK={rank}".encode() in env:
            found[int(d.name)] = ppid
    top = [pid for pid, ppid in found.items() if ppid not in found]
    return min(top) if top else None


def _wait_for_checkpoint(run: Path, proc, limit=120) -> int:
    t0 = time.time()
    while time.time() - t0 < limit:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        m = run / "metrics.jsonl"
        if m.exists():
            ck = [json.loads(x) for x in m.read_text().splitlines() if '"checkpoint"' in x]
            if ck:
                return ck[-1]["step"]
        time.sleep(0.1)
    raise AssertionError("no checkpoint appeared")


ARGS = ["--nproc", 2, "--epochs", 24, "--set", "train.batch_size=32", "--set", "train.checkpoint_every_n_epochs=2",
        "--set", "train.eval_every_n_epochs=0"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "run"
    r = lmc_cli("train", MLP, *ARGS, "--out", out)
    assert r.returncode == 0, r.stderr[-2000:]
    return tensors(out / "last.npz")


def _resumed_equals(run: Path, full: dict):
    r = lmc_cli("train", MLP, *ARGS, "--out", run, "--resume")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resuming" in r.stderr
    got = tensors(run / "last.npz")
    for k in full:
        assert np.array_equal(got[k], full[k]), k                # bit-exact resume


def test_killed_rank_stops_the_job_and_resume_continues_exactly(tmp_path, uninterrupted):
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "lmc", "train", str(MLP), *map(str, ARGS), "--out", str(run)],
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_checkpoint(run, p)
    pid = _rank_pid(run, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    t0 = time.time()
    _, err = p.communicate(timeout=60)
    assert time.time() - t0 < 60
    assert p.returncode == 1, err[-2000:]
    assert f"rank 1 (pid {pid} on" in err and "killed by signal 9" in err, err[-3000:]
    _resumed_equals(run, uninterrupted)


def test_ctrl_c_saves_one_checkpoint_and_resume_continues_exactly(tmp_path, uninterrupted):
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "lmc", "train", str(MLP), *map(str, ARGS), "--out", str(run)],
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for_checkpoint(run, p)
    os.killpg(p.pid, signal.SIGINT)                 # a terminal's Ctrl-C: the whole process group
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    assert err.count("interrupted at step") == 1 and "--nproc 2" in err
    _resumed_equals(run, uninterrupted)


def test_a_hanging_rank_stops_the_others_at_the_deadline(tmp_path):
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "lmc", "train", str(MLP), *map(str, ARGS), "--dist-timeout", "3",
                          "--out", str(run)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_checkpoint(run, p)
    pid = _rank_pid(run, 1)
    os.kill(pid, signal.SIGSTOP)
    try:
        _, err = p.communicate(timeout=60)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert p.returncode != 0
    assert "rank 0: the other ranks did not join the gradient all-reduce of step" in err, err[-2000:]


@pytest.mark.parametrize("sets,msg", [
    (["train.loss_kind=per_pixel_dice"], None),
    (["train.fp8=e4m3"], "train.fp8"),
    (["train.sync_bn=true"], "train.sync_bn"),
])
def test_refusals(tmp_path, sets, msg):
    spec = MLP
    if "per_pixel_dice" in sets[0]:
        spec = ROOT / "specs" / "unet_digits.yaml"
        msg = "its batch value is not a mean of per-example terms"
    args = ["train", spec, "--nproc", 2, "--max-steps", 1, "--out", tmp_path / "r"]
    for s in sets:
        args += ["--set", s]
    r = lmc_cli(*args, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert msg in r.stderr
    assert not (tmp_path / "r" / "last.npz").exists()


def test_overlap_switch_at_the_command_line(tmp_path):
    """LMC_DIST_OVERLAP=on trains through `lmc train --nproc 2` (the halves, each rank's
    metrics showing the all-reduce wait); another value is refused naming the variable."""
    r = subprocess.run([sys.executable, "-m", "lmc", "train", str(MLP), "--nproc", "2", "--max-steps", "3",
                        "--out", str(tmp_path / "r")], env={**ENV, "LMC_DIST_OVERLAP": "on"},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    end = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines() if '"end"' in x][-1]
    assert end["step"] == 3 and "allreduce_seconds" in end
    r = subprocess.run([sys.executable, "-m", "lmc", "train", str(MLP), "--max-steps", "1", "--out", str(tmp_path / "s")],
                       env={**ENV, "LMC_DIST_OVERLAP": "yes"}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "LMC_DIST_OVERLAP='yes'" in r.stderr, r.stderr[-2000:]


def test_nproc_under_a_launcher_must_match(tmp_path):
    r = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "lmc", "train", str(MLP), "--nproc", "3",
                        "--max-steps", "1", "--out", str(tmp_path / "r")], env=ENV, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "--nproc 3, but the launcher started 2 ranks" in r.stderr


@pytest.mark.parametrize("args,msg", [(["--dist-timeout", 5], "--dist-timeout acts on data-parallel ranks"),
                                      (["--devices", "0,1"], "--devices acts on data-parallel ranks"),
                                      (["--nproc", 2, "--devices", "0,1"], "--devices names GPU devices")])
def test_data_parallel_options_are_refused_where_they_do_nothing(tmp_path, args, msg):
    r = lmc_cli("train", MLP, "--max-steps", 1, *args, "--out", tmp_path / "r", timeout=120)
    assert r.returncode == 2 and msg in r.stderr, r.stderr[-2000:]


def test_the_launcher_prints_a_rank_message_the_abort_cut_off(tmp_path):
    """MPI_Abort can kill the I/O forwarders before a rank's last stderr line arrives; the
    rank also writes it to the launcher's report file, and the launcher prints what it missed."""
    from lmc.run.dist import _supervise
    rep = tmp_path / "report.log"
    said: list[str] = []
    code = "from lmc.run.dist import report; report('error: rank 0: lost words'); raise SystemExit(3)"
    rc = _supervise([sys.executable, "-c", code], {**ENV, "LMC_DIST_REPORT": str(rep)}, said.append,
                    tmp_path / "metrics.jsonl", rep, None)
    assert rc == 3 and said == ["error: rank 0: lost words"]
    code = "import sys; from lmc.run.dist import report; print('error: seen', file=sys.stderr); report('error: seen')"
    rep.unlink()
    said.clear()
    assert _supervise([sys.executable, "-c", code], {**ENV, "LMC_DIST_REPORT": str(rep)}, said.append,
                      tmp_path / "metrics.jsonl", rep, None) == 0
    assert said == []                                # printed once, not twice


# A stand-in for the launcher in the case it gets wrong: rank 1 is killed, its clean-up kills
# rank 0 with the same signal, and its report names rank 0 (MPICH's report under load, seen in CI).
_MISREPORT = """
import os, signal, subprocess, sys, time
hold = "from lmc.run.lifeline import hold; import sys, time; s = hold(int(sys.argv[1])); print(s is not None, flush=True); time.sleep(60)"
ranks = [subprocess.Popen([sys.executable, "-c", hold, str(r)], stdout=subprocess.PIPE, text=True) for r in range(2)]
held = [p.stdout.readline().strip() for p in ranks]   # each rank holds its line (or has none) before it dies
open(sys.argv[1], "w").write('{"kind": "header", "pids": [%d, %d]}\\n' % (ranks[0].pid, ranks[1].pid))
os.kill(ranks[1].pid, signal.SIGKILL); ranks[1].wait()
time.sleep(0.3)
os.kill(ranks[0].pid, signal.SIGKILL); ranks[0].wait()
print("=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\\n=   PID %d RUNNING AT vm\\n=   EXIT CODE: 9" % ranks[0].pid)
print("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)")
sys.exit(137)
"""


def test_the_rank_that_died_first_is_named_even_when_the_launcher_names_another(tmp_path):
    """Each rank holds a lifeline socket to the launcher side; the first to close names the rank
    that went first, not the one the launcher's report happens to name."""
    from lmc.run.dist import _supervise
    from lmc.run.lifeline import ENV as LIFELINE, Lifelines
    metrics, rep = tmp_path / "metrics.jsonl", tmp_path / "report.log"
    said: list[str] = []
    lines = Lifelines()
    try:
        rc = _supervise([sys.executable, "-c", _MISREPORT, str(metrics)], {**ENV, LIFELINE: lines.path},
                        said.append, metrics, rep, lines)
    finally:
        lines.close()
    pids = json.loads(metrics.read_text())["pids"]
    assert rc == 1 and len(said) == 1, said
    assert f"rank 1 (pid {pids[1]} on " in said[0] and "killed by signal 9" in said[0], said
    # without lifelines the launcher's report is all there is
    said.clear()
    assert _supervise([sys.executable, "-c", _MISREPORT, str(metrics)], ENV, said.append, metrics, rep, None) == 1
    pids = json.loads(metrics.read_text())["pids"]
    assert f"rank 0 (pid {pids[0]} on vm)" in said[0], said
    # nor is the order trusted when a rank held no line (one on another host): three ranks listed
    said.clear()
    lines = Lifelines()
    try:
        rc = _supervise([sys.executable, "-c", _MISREPORT.replace("%d, %d]", "%d, %d, 1]"), str(metrics)],
                        {**ENV, LIFELINE: lines.path}, said.append, metrics, rep, lines)
    finally:
        lines.close()
    pids = json.loads(metrics.read_text())["pids"]
    assert rc == 1 and len(pids) == 3 and f"rank 0 (pid {pids[0]} on vm)" in said[0], said
