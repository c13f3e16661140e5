"""Image folders decoded in worker processes (--loader-workers N, lmc.data.imagenette.Decoder):
the batches are bit-identical for any worker count (threads, 1 or 2 processes; streamed or in
RAM; augmented or not; resumed mid-epoch), a corrupt file is refused by name as with threads,
and the processes end with the loader — closed, interrupted by Ctrl-C, or orphaned by a killed
training process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cli_run import run
from lmc.core.errors import DataError
from lmc.data import Batcher, eval_batches, load_dataset
from lmc.data.policy import Policy

ROOT = Path(__file__).resolve().parent.parent


def make_tree(root: Path, n_per_class=5, classes=("a", "b", "c"), size=(40, 30)) -> Path:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n_per_class):
                Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(d / f"{i}.JPEG", quality=90)
    Image.fromarray(rng.integers(0, 256, size, dtype=np.uint8), "L").save(root / "train" / "a" / "grey.png")
    return root


def batches(ds, **kw):
    policy = Policy("rand", n=2, m=9.0, mean=ds.mean, std=ds.std) if kw.pop("policy", False) else None
    b = Batcher(ds, 4, seed=5, policy=policy, **kw)
    return [xy for e in (0, 1) for xy in b.epoch(e)]


def assert_same(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.dtype == xb.dtype == np.float32
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


def worker_pids(ds) -> list[int]:
    pool = ds.x_train.decoder._pool
    return [] if pool is None else list(pool._processes)


def gone(pid: int) -> bool:
    """The process has ended (a zombie counts: it runs no more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_batches_are_bit_identical_for_any_worker_count(tmp_path, monkeypatch):
    from lmc.data import imagenette
    monkeypatch.setattr(imagenette, "CHUNK", 3)      # the in-RAM loads too come back in several chunks
    make_tree(tmp_path)
    ref = load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=True, loader_workers=0)
    want = {(aug, pol): batches(ref, augment=aug, policy=pol) for aug, pol in ((False, False), (True, False), (True, True))}
    want_val = list(eval_batches(ref.x_val, ref.y_val, 4))
    ram0 = load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=False, loader_workers=0)
    for w in (1, 2):
        ds = load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=True, loader_workers=w)
        try:
            assert ds.x_train.decoder.workers == w
            for (aug, pol), b in want.items():
                assert_same(batches(ds, augment=aug, policy=pol), b)
            assert len(worker_pids(ds)) == w                 # the batches came from w processes
            for (xa, ya, na), (xb, yb, nb) in zip(want_val, eval_batches(ds.x_val, ds.y_val, 4)):
                assert na == nb
                np.testing.assert_array_equal(xa, xb)
            # resumed mid-epoch: the batches an uninterrupted epoch has from that step on
            b = Batcher(ds, 4, seed=5, augment=True)
            full = list(b.epoch(1))
            assert_same(list(Batcher(ds, 4, seed=5, augment=True).epoch(1, start_step=2)), full[2:])
            assert_same(full, want[(True, False)][len(full):])
        finally:
            ds.close()
        ram = load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=False, loader_workers=w)
        np.testing.assert_array_equal(ram.x_train, ram0.x_train)
        np.testing.assert_array_equal(ram.x_val, ram0.x_val)
    # and the in-RAM loader's batches are those of the streamed one
    assert_same(batches(ram0, augment=True), want[(True, False)])


def test_a_corrupt_file_is_refused_by_name_from_a_worker(tmp_path):
    make_tree(tmp_path, n_per_class=2)
    cut = tmp_path / "train" / "b" / "1.JPEG"
    cut.write_bytes(cut.read_bytes()[:200])
    with pytest.raises(DataError) as e:
        load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=False, loader_workers=2)
    assert str(cut) in e.value.render() and "cannot read image" in e.value.render()
    ds = load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=True, loader_workers=2)
    try:
        with pytest.raises(DataError) as e:
            for _ in Batcher(ds, 6, seed=0, shuffle=False, augment=True).epoch(0):
                pass
        assert str(cut) in e.value.render()
        ds.x_val[0:2]                                # the pool still decodes after the refusal
    finally:
        ds.close()
    r = run("train", _spec(tmp_path), "--loader-workers", "2", "--out", tmp_path / "run", "--max-steps", "1")
    assert r.exit_code == 2, r.output
    lines = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and str(cut) in lines[0], r.stderr


def _spec(root: Path) -> Path:
    p = root / "net.yaml"
    p.write_text(textwrap.dedent(f"""\
        name: tiny
        input: {{channels: 3, height: 14, width: 14}}
        layers:
          - conv2d: {{ic: 3, oc: 4, k_size: 3}}
          - global_avg_pool
          - dense: {{fan_in: 4, fan_out: 3}}
        train: {{learning_rate: 0.01, batch_size: 2, epochs: 1}}
        dataset: {{kind: imagenette, path: {root}}}
        """))
    return p


def test_loader_workers_is_refused_where_it_would_do_nothing(tmp_path):
    with pytest.raises(DataError, match="--loader-workers decodes image folders .*; digits has no files"):
        load_dataset("digits", None, (1, 8, 8), 10, loader_workers=2)
    r = run("train", ROOT / "specs" / "digits_mlp.yaml", "--loader-workers", "2", "--out", tmp_path / "r")
    assert r.exit_code == 2 and "error: --loader-workers decodes image folders" in r.stderr, r.output
    make_tree(tmp_path, n_per_class=1)
    r = run("train", _spec(tmp_path), "--loader-workers", "-1", "--out", tmp_path / "r2")
    assert r.exit_code == 2 and "--loader-workers must be 0 (threads) or a number of processes" in r.stderr, r.output


def test_close_stops_the_workers_and_a_later_read_restarts_them(tmp_path):
    make_tree(tmp_path, n_per_class=2)
    ds = load_dataset("imagenette", tmp_path, (3, 14, 14), 3, stream=True, loader_workers=2)
    first = ds.x_train[0:3]
    pids = worker_pids(ds)
    assert len(pids) == 2
    ds.close()
    assert all(gone(p) for p in pids)
    np.testing.assert_array_equal(ds.x_train[0:3], first)
    again = worker_pids(ds)
    assert len(again) == 2 and not set(again) & set(pids)
    ds.close()
    assert all(gone(p) for p in again)


SCRIPT = """
import os, sys, time
from lmc.data import Batcher, load_dataset
ds = load_dataset("imagenette", sys.argv[1], (3, 14, 14), 3, stream=True, loader_workers=2)
b = Batcher(ds, 2, seed=0, augment=True)
try:
    e = 0
    while True:
        for i, _ in enumerate(b.epoch(e)):
            if e == 0 and i == 0:
                print(" ".join(map(str, ds.x_train.decoder._pool._processes)), flush=True)
        e += 1
except KeyboardInterrupt:
    ds.close()
    print("interrupted", flush=True)
"""


def _start(tmp_path):
    make_tree(tmp_path, n_per_class=6)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    pids = [int(x) for x in p.stdout.readline().split()]
    assert len(pids) == 2, p.stderr.read()
    return p, pids


def _wait_gone(pids, seconds=10.0) -> bool:
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        if all(gone(q) for q in pids):
            return True
        time.sleep(0.1)
    return False


def test_ctrl_c_ends_the_workers_without_tracebacks(tmp_path):
    p, pids = _start(tmp_path)
    os.killpg(p.pid, signal.SIGINT)               # a terminal's Ctrl-C: the whole process group
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and "interrupted" in out, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err   # the workers ignore it
    assert _wait_gone(pids)


def test_workers_of_a_killed_process_end_by_themselves(tmp_path):
    p, pids = _start(tmp_path)
    p.kill()
    p.wait(timeout=30)
    assert _wait_gone(pids), [q for q in pids if not gone(q)]


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError):
            pass
    return out


def _tensors(path: Path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files if k != "__lmc__"}


def _meta(path: Path) -> dict:
    import json
    with np.load(path) as z:
        return json.loads(str(z["__lmc__"]))


@pytest.mark.slow
def test_a_run_with_workers_is_interrupted_cleanly_and_resumes_to_the_threads_run(tmp_path):
    """`lmc train --stream --loader-workers 2`: Ctrl-C (to the process group, as a terminal sends
    it) saves a checkpoint and exits 130 with the workers gone and silent; the resumed run ends
    with the parameters of an uninterrupted run decoding in threads."""
    make_tree(tmp_path, n_per_class=5)
    spec = _spec(tmp_path)
    spec.write_text(spec.read_text().replace("epochs: 1", "epochs: 40, augment: true"))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    lmc = [sys.executable, "-m", "lmc", "train", str(spec), "--stream", "--log-every", "1"]
    ref = subprocess.run(lmc + ["--loader-workers", "0", "--out", str(tmp_path / "ref")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr
    out = tmp_path / "run"
    p = subprocess.Popen(lmc + ["--loader-workers", "2", "--out", str(out)], env=env, cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0, kids = time.monotonic(), []
    while time.monotonic() - t0 < 300 and p.poll() is None:
        lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
        if sum('"kind": "step"' in l for l in lines) > 20:
            kids = _children(p.pid)
            break
        time.sleep(0.05)
    assert len(kids) >= 2, p.communicate()[1]          # the two workers (and multiprocessing's tracker)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert _wait_gone(kids)
    ck = _meta(out / "last.npz")
    assert 0 < ck["step"] < 40 * 8 and not ck["complete"]        # interrupted mid-run (8 steps an epoch)
    r = subprocess.run(lmc + ["--loader-workers", "2", "--out", str(out), "--resume"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    a, b = _tensors(tmp_path / "ref" / "last.npz"), _tensors(out / "last.npz")
    assert a.keys() == b.keys() and _meta(out / "last.npz")["step"] == _meta(tmp_path / "ref" / "last.npz")["step"]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
