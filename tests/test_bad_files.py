"""Every bad file lmc is handed is refused with one `error:` line naming the file (and the array or
row), exit 2, no traceback and no numpy advice — checkpoints (truncated, corrupt, empty, a
directory, not numpy at all), .npz datasets (NaN/Inf, labels out of range, x/y lengths, an empty
split), a text corpus that is not UTF-8, a corrupt image in an image folder, a spec that is a
directory, a YAML bomb, `lmc compare` given the wrong files — and a run refused this way leaves
the checkpoint already in its run directory as it was.

Image folders refuse a corrupt file (rather than skip it): the split you asked for is the split
trained on, the counts in the logs stay true, and a streamed dataset would otherwise fail or
shrink mid-epoch."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lmc.core.errors import DataError
from cli_run import run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "specs" / "digits_mlp.yaml"



def refused(r, *names):
    """Exit 2 and one error line naming each of `names`, without numpy's pickle advice."""
    assert r.exit_code == 2, r.output
    lines = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, r.stderr
    for n in names:
        assert str(n) in lines[0], (n, lines[0])
    assert "allow_pickle" not in r.output and "pickle.load" not in r.output
    return lines[0]


@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory):
    """A real checkpoint of digits_mlp (2 steps)."""
    d = tmp_path_factory.mktemp("run")
    r = subprocess.run([sys.executable, "-m", "lmc", "train", str(MLP), "--max-steps", "2", "--out", str(d / "run")],
                       capture_output=True, text=True, cwd=d, timeout=600)
    assert r.returncode == 0, r.stderr
    return d / "run" / "last.npz"


def _bad_checkpoints(tmp_path: Path, good: Path) -> dict[str, tuple[Path, str]]:
    data = good.read_bytes()
    out = {}
    p = tmp_path / "trunc.npz"; p.write_bytes(data[:len(data) // 3]); out["truncated npz"] = (p, "not a readable .npz")
    p = tmp_path / "corrupt.npz"; b = bytearray(data)
    b[2000:6000] = b"A" * 4000; p.write_bytes(bytes(b)); out["corrupt npz member"] = (p, "is unreadable")
    p = tmp_path / "zero.npz"; p.write_bytes(b""); out["zero bytes"] = (p, "empty (0 bytes)")
    p = tmp_path / "dir.npz"; p.mkdir(); out["a directory"] = (p, "is a directory")
    p = tmp_path / "pickle.npz"; p.write_bytes(b"\x80\x04" + bytes(range(200))); out["not numpy"] = (p, "not a readable .npz")
    p = tmp_path / "bad.safetensors"; p.write_bytes(b"garbage"); out["safetensors garbage"] = (p, "not a readable safetensors file")
    p = tmp_path / "trunc.safetensors"; p.write_bytes((200).to_bytes(8, "little") + b'{"a": {"dtype": "F32", "shape": [10], "data_offsets": [0, 40]}}'.ljust(200) + b"\0" * 8)
    out["truncated safetensors"] = (p, "trunc.safetensors")
    p = tmp_path / "zero.safetensors"; p.write_bytes(b""); out["empty safetensors"] = (p, "empty (0 bytes)")
    return out


@pytest.mark.slow
def test_bad_checkpoints_are_refused(tmp_path, good_ckpt):
    for what, (p, text) in _bad_checkpoints(tmp_path, good_ckpt).items():
        for cmd in (["eval", MLP, "--init", p], ["train", MLP, "--init", p, "--out", tmp_path / "r", "--max-steps", "1"]):
            line = refused(run(*cmd), p)
            assert text in line, (what, line)


@pytest.mark.slow
def test_a_failed_run_leaves_the_checkpoint_intact(tmp_path, good_ckpt):
    run_dir = tmp_path / "run"
    shutil.copytree(good_ckpt.parent, run_dir)
    before = (run_dir / "last.npz").read_bytes()
    x = np.random.default_rng(0).random((100, 64), np.float32)
    x[5, 3] = np.nan
    bad = tmp_path / "nan.npz"
    np.savez(bad, x=x, y=np.arange(100) % 10)
    for extra in (["--resume"], ["--overwrite"]):
        refused(run("train", MLP, "--data", bad, "--out", run_dir, *extra), bad, "row 5", "NaN")
        assert (run_dir / "last.npz").read_bytes() == before
    trunc = tmp_path / "t.npz"
    trunc.write_bytes(before[:500])
    refused(run("train", MLP, "--init", trunc, "--out", run_dir, "--overwrite"), trunc)
    assert (run_dir / "last.npz").read_bytes() == before
    assert run("eval", MLP, "--init", run_dir / "last.npz").exit_code == 0


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("case, names", [
    ("nan", ["'x' row 5 holds NaN"]),
    ("inf", ["'x' row 7 holds Inf"]),
    ("inf_val", ["'x_val' row 2 holds Inf"]),
    ("negative label", ["label -1", "negative"]),
    ("label too large", ["label 12", "out of range"]),
    ("x/y lengths", ["'y' has shape (90,)", "(100,)"]),
    ("empty train split", ["'x' has 0 rows"]),
    ("empty val split", ["'x_val' has 0 rows"]),
    ("not an npz", ["not a readable .npz"]),
])
def test_bad_npz_datasets_are_refused_and_the_started_compiles_stopped(tmp_path, monkeypatch, case, names):
    import lmc.train.plan as plan
    stopped = []

    class Compile:                  # the compiles start before the data loads: stopped, never waited for
        def done(self):
            pytest.fail("waited for the compile before refusing the data")
        wait = result = done

        def cancel(self):
            stopped.append(1)
    monkeypatch.setattr(plan, "compile_training", lambda *a, **k: ([Compile()], Compile()))
    rng = np.random.default_rng(0)
    x, y = rng.random((100, 64), np.float32), np.arange(100) % 10
    p = tmp_path / "d.npz"
    if case == "nan":
        x[5, 3] = np.nan; _npz(p, x=x, y=y)
    elif case == "inf":
        x[7, 1] = np.inf; _npz(p, x=x, y=y)
    elif case == "inf_val":
        xv = x[:20].copy(); xv[2, 0] = -np.inf; _npz(p, x=x, y=y, x_val=xv, y_val=y[:20])
    elif case == "negative label":
        y = y.copy(); y[4] = -1; _npz(p, x=x, y=y)
    elif case == "label too large":
        y = y.copy(); y[9] = 12; _npz(p, x=x, y=y)
    elif case == "x/y lengths":
        _npz(p, x=x, y=y[:90])
    elif case == "empty train split":
        _npz(p, x=x[:0], y=y[:0])
    elif case == "empty val split":
        _npz(p, x=x, y=y, x_val=x[:0], y_val=y[:0])
    else:
        p.write_text("x,y\n1,2\n")
    refused(run("train", MLP, "--data", p, "--out", tmp_path / "r", "--max-steps", "1"), p, *names)
    assert stopped == [1, 1]                        # the train module's and @forward's


def test_a_text_corpus_that_is_not_utf8(tmp_path):
    p = tmp_path / "corpus.txt"
    p.write_bytes("héllo wörld\n".encode("latin-1") * 200)
    refused(run("train", ROOT / "specs" / "tiny_gpt_char.yaml", "--data", p, "--out", tmp_path / "r", "--max-steps", "1"),
            p, "not UTF-8")


def test_a_corrupt_image_in_an_image_folder_is_refused_by_name(tmp_path):
    from PIL import Image
    from lmc.data.imagenette import read_images
    good = tmp_path / "good.png"
    Image.new("RGB", (8, 8), (200, 10, 10)).save(good)
    jpg = tmp_path / "good.jpg"
    Image.new("RGB", (32, 32), (10, 200, 10)).save(jpg)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(jpg.read_bytes()[:len(jpg.read_bytes()) // 2])
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    assert read_images([good, jpg], (8, 8)).shape == (2, 3, 8, 8)
    for bad in (cut, junk):
        with pytest.raises(DataError) as e:
            read_images([good, bad], (8, 8))
        assert str(bad) in e.value.render()


def test_a_spec_that_is_a_directory(tmp_path):
    d = tmp_path / "spec.yaml"
    d.mkdir()
    for cmd in ("validate", "info", "train"):
        refused(run(cmd, d), d)


def test_a_yaml_bomb_is_refused_quickly(tmp_path):
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, cur in zip("abcdefg", "bcdefgh"):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    line = refused(run("validate", p), p)
    assert "alias" in line


def test_compare_refuses_files_that_are_not_bitmaps(tmp_path):
    a = tmp_path / "a.npy"
    np.save(a, np.ones(10, np.uint8))
    z = tmp_path / "z.npy"; z.write_bytes(b"")
    npz = tmp_path / "c.npz"; np.savez(npz, w=np.ones(3))
    trunc = tmp_path / "t.npy"; trunc.write_bytes(a.read_bytes()[:20])
    for b, text in ((MLP, "not a readable .npy"), (z, "empty (0 bytes)"), (npz, "a .npz archive"),
                    (trunc, "not a readable .npy"), (tmp_path, "is a directory")):
        line = refused(run("compare", a, b), b)
        assert text in line, line
