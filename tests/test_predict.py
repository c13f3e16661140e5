"""`lmc predict` and the Python API [iree]: PNG/JPEG files written from the validation images get
the classes `lmc eval --dump-correct` says (the eval's preprocessing), arrays are taken as they
are, and `lmc.load(RUN)` predicts and evaluates what the commands do; segmentation and detection
outputs are written (slow: their nets train for a while)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.runtime")
from PIL import Image  # noqa: E402

import lmc  # noqa: E402
from lmc.core.errors import LmcError  # noqa: E402
from lmc.data import load_dataset  # noqa: E402
from cli_run import run  # noqa: E402

pytestmark = pytest.mark.iree
SPECS = Path(__file__).resolve().parents[1] / "specs"
N = 40



@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("predict") / "R"
    r = run("train", SPECS / "digits_mlp.yaml", "--set", "layers.0.dense.fan_out=48", "--set",
            "layers.1.dense.fan_in=48", "--epochs", "1", "--out", out)
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def val():
    return load_dataset("digits", None, (1, 8, 8), 10)


@pytest.mark.parametrize("suffix", ["png", "jpg"])
def test_image_files_get_the_eval_classes(trained, val, tmp_path, suffix):
    r = run("eval", trained, "--dump-correct", tmp_path / "c.npy")
    assert r.exit_code == 0, r.output
    correct = np.load(tmp_path / "c.npy")[:N].astype(bool)
    folder = tmp_path / suffix
    folder.mkdir()
    for i in range(N):       # the stored pixels are k/16: written as 8-bit grey (JPEG at quality 100:
        # one 8×8 block, within a grey level of the PNG; at quality 75, 10 of 360 classes change)
        Image.fromarray(np.round(val.x_val[i, 0] * 255).astype(np.uint8)).save(folder / f"{i:03d}.{suffix}",
                                                                               quality=100)
    r = run("predict", trained, folder, "--json", "--top-k", "3")
    assert r.exit_code == 0, r.output
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert [g["file"] for g in got] == [str(folder / f"{i:03d}.{suffix}") for i in range(N)]
    classes = np.array([g["top"][0]["class"] for g in got])
    assert np.array_equal(classes == val.y_val[:N], correct)
    assert all(len(g["top"]) == 3 and len(g["logits"]) == 10 and g["top"][0]["name"] == str(g["top"][0]["class"])
               for g in got)
    assert abs(sum(np.exp(np.array(got[0]["logits"]) - max(got[0]["logits"]))) ** -1 - got[0]["top"][0]["prob"]) < 1e-6
    # a JPEG of another size and mode is converted as training did (grey, squashed to 8×8)
    big = Image.fromarray(np.round(val.x_val[0, 0] * 255).astype(np.uint8)).resize((40, 40)).convert("RGB")
    big.save(tmp_path / "big.jpg")
    r = run("predict", trained, tmp_path / "big.jpg", "--labels", _labels(tmp_path))
    assert r.exit_code == 0 and "digit-" in r.stdout, r.output             # the table
    r = run("predict", trained, tmp_path / "big.jpg", "--labels", _labels(tmp_path), "--json")
    (one,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert one["file"] == str(tmp_path / "big.jpg") and one["top"][0]["name"] == f"digit-{one['top'][0]['class']}"


def _labels(tmp_path):
    p = tmp_path / "labels.txt"
    p.write_text("".join(f"digit-{d}\n" for d in range(10)))
    return p


def test_arrays_are_taken_as_they_are(trained, val, tmp_path):
    x = val.x_val[:N].reshape(N, 64)
    np.save(tmp_path / "x.npy", x)
    r = run("predict", trained, tmp_path / "x.npy", "--json", "--batch", "7")
    assert r.exit_code == 0, r.output
    logits = np.array([json.loads(line)["logits"] for line in r.stdout.splitlines()])
    m = lmc.load(trained)
    assert np.allclose(m.predict(x), logits, atol=1e-5)            # another batch size, the same outputs
    np.save(tmp_path / "bad.npy", np.zeros((3, 65), np.float32))
    r = run("predict", trained, tmp_path / "bad.npy")
    assert r.exit_code == 2 and "the net takes [N, 64]" in r.stderr, r.stderr
    r = run("predict", trained, tmp_path / "nope.png")
    assert r.exit_code == 2 and "no such input" in r.stderr


def test_python_api(trained, tmp_path):
    m = lmc.load(trained)
    ev = m.evaluate()
    r = run("eval", trained, "--json")
    assert json.loads(r.stdout)["top1"] == ev.as_dict()["top1"]
    s = lmc.train(trained / "spec.yaml", max_steps=3, out=tmp_path / "T", verbose=False, learning_rate=0.01)
    assert s.step == 3 and (tmp_path / "T" / "last.npz").is_file()
    assert "train.learning_rate=0.01" in json.loads((tmp_path / "T" / "run.json").read_text())["sets"]
    with pytest.raises(LmcError, match=r"lmc.train\(steps=N\) is now max_steps=N"):
        lmc.train(trained / "spec.yaml", steps=3, out=tmp_path / "T2", verbose=False)
    assert not (tmp_path / "T2").exists()
    if importlib.util.find_spec("lmc.export") is None:       # lmc export's stage is not in this build
        with pytest.raises(LmcError, match="not available"):
            m.export("onnx", tmp_path / "m.onnx")


@pytest.mark.slow
@pytest.mark.parametrize("spec, dataset, suffixes", [
    ("unet_digits", "digits_seg", (".mask.png", ".overlay.png")),
    ("yolo_digits", "digits_det", (".boxes.png",)),
    ("detr_digits", "digits_det", (".boxes.png",)),
])
def test_dense_outputs_are_written(spec, dataset, suffixes, tmp_path):
    out = tmp_path / "R"
    r = run("train", SPECS / f"{spec}.yaml", "--max-steps", "40", "--out", out)
    assert r.exit_code == 0, r.output
    ds = load_dataset(dataset, None, (1, 32, 32) if dataset == "digits_seg" else (1, 64, 64), 11 if dataset == "digits_seg" else 10)
    for i in range(2):
        Image.fromarray(np.round(ds.x_val[i, 0] * 255).astype(np.uint8)).save(tmp_path / f"{i}.png")
    r = run("predict", out, tmp_path / "0.png", tmp_path / "1.png", "--out", tmp_path / "pred", "--json")
    assert r.exit_code == 0, r.output
    for i in range(2):
        for s in suffixes:
            assert (tmp_path / "pred" / f"{i}{s}").is_file()
    if dataset == "digits_seg":
        m = np.asarray(Image.open(tmp_path / "pred" / "0.mask.png"))
        assert m.shape == (32, 32) and m.max() <= 10
    else:
        dets = json.loads((tmp_path / "pred" / "detections.json").read_text())
        assert all(set(d) >= {"image_id", "category_id", "bbox", "score"} for d in dets)
