"""`lmc export`: the safetensors writer (and the package-based reader behind --init)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lmc.cli import app
from lmc.core.errors import CheckpointError
from lmc.export.tensors import write_safetensors
from lmc.export.weights import load_weights
from lmc.graph.infer import infer
from lmc.graph.init import init_tensors
from lmc.run.checkpoint import load_init, read_tensors, save_checkpoint
from lmc.spec.netspec import load_spec

safetensors = pytest.importorskip("safetensors.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

CNN = """
name: tiny_cnn
input: {channels: 1, height: 6, width: 6}
layers:
  - conv_bn: {ic: 1, oc: 4, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - flatten
  - dense: {fan_in: 36, fan_out: 10}
train: {learning_rate: 0.1, batch_size: 4, epochs: 1, use_ema: true}
"""


def run(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    return r


@pytest.fixture
def ckpt(tmp_path):
    """A spec file and an lmc checkpoint of it with distinct live, EMA and BN tensors."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(CNN)
    net = infer(load_spec(spec))
    params, state = init_tensors(net, 3)
    state = [s + np.float32(0.5 + i) for i, s in enumerate(state)]
    ema = {p.name: a * 2 for p, a in zip(net.params, params)}
    path = save_checkpoint(tmp_path / "last.npz", net, [], params, [], state,
                           {"step": 7, "eval_region": "ema"}, regions={"ema": ema})
    return spec, net, path, params, state, ema


def test_safetensors_export_names_values_and_roundtrip(ckpt, tmp_path):
    spec, net, path, params, state, ema = ckpt
    out = tmp_path / "w.safetensors"
    r = run("export", spec, "--init", path, "--format", "safetensors", "-o", out, "--region", "live", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"output": str(out), "format": "safetensors", "region": "live", "init": str(path)}
    got = safetensors.load_file(str(out))
    assert list(got) == sorted([p.name for p in net.params] + [s.name for s in net.state])
    for p, a in zip(net.params, params):
        assert got[p.name].dtype == np.float32 and np.array_equal(got[p.name], a)
    for s, a in zip(net.state, state):
        assert np.array_equal(got[s.name], a)
    back = load_init(out, net)                       # --init reads the export back
    assert all(np.array_equal(x, y) for x, y in zip(back.params + back.state, params + state))
    from safetensors import safe_open
    with safe_open(str(out), framework="numpy") as f:
        meta = f.metadata()
    assert meta["lmc_spec"] == "tiny_cnn" and meta["lmc_region"] == "live"


def test_export_region_auto_is_what_the_run_scored(ckpt, tmp_path):
    spec, net, path, params, state, ema = ckpt
    w = load_weights(net, path)                      # the checkpoint says eval_region: ema
    assert w.region == "ema"
    assert all(np.array_equal(a, ema[p.name]) for p, a in zip(net.params, w.params))
    write_safetensors(net, w, tmp_path / "e.safetensors")
    got = safetensors.load_file(str(tmp_path / "e.safetensors"))
    assert np.array_equal(got[net.params[0].name], ema[net.params[0].name])
    r = run("export", spec, "--init", path, "--format", "safetensors", "-o", tmp_path / "s.safetensors",
            "--region", "swa")
    assert r.exit_code == 2 and "has no swa weights" in r.output


def test_export_refusals_exit_2(ckpt, tmp_path):
    spec, net, path, *_ = ckpt
    r = run("export", spec, "--init", path, "--format", "tflite", "-o", tmp_path / "x")
    assert r.exit_code == 2 and "--format 'tflite'" in r.output
    r = run("export", spec, "--init", path, "--format", "safetensors", "-o", tmp_path / "x.bin")
    assert r.exit_code == 2 and ".safetensors file" in r.output
    r = run("export", spec, "--init", path, "--format", "safetensors", "-o", tmp_path / "x.safetensors", "--batch", "4")
    assert r.exit_code == 2 and "--batch" in r.output
    # a file without BN statistics cannot make a standalone net with BN layers
    bare = tmp_path / "bare.npz"
    np.savez(bare, **{p.name: np.zeros(p.type.dims, np.float32) for p in net.params})
    r = run("export", spec, "--init", bare, "--format", "safetensors", "-o", tmp_path / "y.safetensors")
    assert r.exit_code == 2 and "no BN running statistics" in r.output


def test_reader_takes_the_packages_float_widths_and_refuses_ints(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    p = tmp_path / "w.safetensors"
    safetensors.save_file({"h": a.astype(np.float16), "b": a.astype(ml_dtypes.bfloat16), "d": a.astype(np.float64)},
                          str(p))
    t, meta = read_tensors(p)
    assert meta is None and t["b"].dtype == np.float32
    for k in "hbd":
        assert np.array_equal(np.asarray(t[k], np.float32), a)
    safetensors.save_file({"i": np.arange(3, dtype=np.int64)}, str(p))
    with pytest.raises(CheckpointError, match="tensor 'i' has dtype int64"):
        read_tensors(p)
    p.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00nope!")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        read_tensors(p)


def test_missing_extra_is_named(tmp_path, monkeypatch):
    p = tmp_path / "w.safetensors"
    safetensors.save_file({"a": np.zeros(2, np.float32)}, str(p))
    for m in [m for m in sys.modules if m == "safetensors" or m.startswith("safetensors.")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "safetensors", None)        # `import safetensors` fails
    with pytest.raises(CheckpointError, match=r"needs the safetensors package") as e:
        read_tensors(p)
    assert "lmc[export]" in e.value.hint


# ------------------------------------------------------------------------------------ ONNX

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from types import SimpleNamespace  # noqa: E402

from lmc.export.onnx import Builder, exportable  # noqa: E402
from lmc.prims import all_prims, make_prim  # noqa: E402


def _prim_cases():
    for name, cls in sorted(all_prims().items()):
        if not exportable(cls):
            continue
        for i, (attrs, ins, ps) in enumerate(cls.examples):
            if "layout" in attrs or "out_layout" in attrs:     # the ONNX form is the logical (NCHW) one
                continue
            yield pytest.param(name, attrs, ins, ps, id=f"{name}-{i}")


@pytest.mark.parametrize("name,attrs,ins,ps", list(_prim_cases()))
def test_each_primitives_onnx_form_matches_its_reference(name, attrs, ins, ps):
    """One-node models: every exportable primitive's ONNX nodes (run in onnxruntime) against its
    float64 eval reference, on the primitive's own examples."""
    prim = make_prim(name, **attrs)
    rng = np.random.default_rng(0)
    out, _ = prim.infer(ins, ps)
    xs = [prim.draw(rng, t, True) for t in ins]
    pv = [prim.draw(rng, t, False) for t in ps]
    sv = prim.draw_state(rng, prim.state(ins, ps, out))
    b = Builder(onnx)
    b.node = b.twin = SimpleNamespace(prim=prim)
    b.ins, b.pt, b.out = list(ins), list(ps), out
    names = [f"x{i}" for i in range(len(xs))]
    pn = [b.init(f"p{i}", a) for i, a in enumerate(pv)]
    sn = [b.init(f"s{i}", a) for i, a in enumerate(sv)]
    y = prim.onnx(b, names, pn, sn)
    tp = onnx.TensorProto.FLOAT
    g = onnx.helper.make_graph(b.nodes + [onnx.helper.make_node("Identity", [y], ["y"])], name,
                               [onnx.helper.make_tensor_value_info(n, tp, list(t.dims)) for n, t in zip(names, ins)],
                               [onnx.helper.make_tensor_value_info("y", tp, list(out.dims))], b.inits)
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["y"], dict(zip(names, xs)))[0]
    f64 = [a.astype(np.float64) for a in xs + pv + sv]
    attrs = {k: v for k, v in prim.attrs.items()}
    want = type(prim).eval_reference(np, *f64, **attrs)
    assert got.shape == tuple(out.dims)
    assert np.abs(got - want).max() <= 1e-4 * (1 + np.abs(want).max())


SPECS = Path(__file__).resolve().parent.parent / "specs"
# the default suite's nets (a few seconds each, compile included); every other spec is slow
FAST_ONNX = {"digits_mlp", "digits_cnn", "digits_vit", "detr_digits", "tiny_gpt", "yolo_digits"}


def _weights_for_test(net, seed=1):
    """The init's tensors, with the constant ones (zero biases and BN shifts, unit scales) and the
    BN statistics drawn near their init, so that every tensor reaches the logits and deep nets
    stay well-conditioned (logits of order 1, not amplified rounding)."""
    from lmc.export.weights import Weights
    params, state = init_tensors(net, 0)
    rng = np.random.default_rng(seed)
    out = []
    for p, a in zip(net.params, params):
        if p.init == "zeros":
            a = 0.02 * rng.standard_normal(a.shape)
        elif p.init == "ones":
            a = 1 + 0.05 * rng.standard_normal(a.shape)
        out.append(np.asarray(a, np.float32))
    st = [(rng.uniform(1.0, 1.2, a.shape) if s.name.endswith("var") else 0.02 * rng.standard_normal(a.shape))
          .astype(np.float32) for s, a in zip(net.state, state)]
    return Weights(out, st, "live", "test")


def _calibrate_bn(model, x) -> dict[str, np.ndarray]:
    """BN running statistics that fit the random weights: the batch statistics of each BN's input
    on x, as one train-mode pass gives them (each BatchNormalization node fed its input's batch
    mean and biased variance, which become extra outputs).  Without this, a deep net's eval
    activations vanish or explode under random weights and the logits stop depending on the input."""
    mk = onnx.helper.make_node
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes, outs = [], []
    for n in m.graph.node:
        if n.op_type != "BatchNormalization":
            nodes.append(n)
            continue
        xin, g, b, mean, var = n.input
        t = f"{mean}."                          # the names of this BN's calibration values
        nodes += [mk("Shape", [xin], [t + "shape"]), mk("Size", [t + "shape"], [t + "rank"]),
                  mk("Range", [t + "zero", t + "rank", t + "one"], [t + "all"]),       # axes but 1 (channels)
                  mk("Equal", [t + "all", t + "one"], [t + "isc"]), mk("Not", [t + "isc"], [t + "keep"]),
                  mk("Compress", [t + "all", t + "keep"], [t + "ax"]),
                  mk("ReduceMean", [xin, t + "ax"], [t + "mu"], keepdims=1),
                  mk("Sub", [xin, t + "mu"], [t + "d"]), mk("Mul", [t + "d", t + "d"], [t + "d2"]),
                  mk("ReduceMean", [t + "d2", t + "ax"], [t + "var"], keepdims=1),
                  mk("Reshape", [t + "mu", t + "m1"], [t + "mu1"]), mk("Reshape", [t + "var", t + "m1"], [t + "var1"]),
                  mk("BatchNormalization", [xin, g, b, t + "mu1", t + "var1"], list(n.output), epsilon=1e-5)]
        m.graph.initializer.extend([onnx.numpy_helper.from_array(np.array(0, np.int64), t + "zero"),
                                    onnx.numpy_helper.from_array(np.array(1, np.int64), t + "one"),
                                    onnx.numpy_helper.from_array(np.array([-1], np.int64), t + "m1")])
        outs += [(mean, t + "mu1"), (var, t + "var1")]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.opset_import[0].version = 18          # ReduceMean with its axes as an input
    for _, o in outs:
        m.graph.output.append(onnx.ValueInfoProto(name=o))
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        [o for _, o in outs], {"input": x})
    return {name: a.astype(np.float32) for (name, _), a in zip(outs, got)}


def _input_for(net, batch, rng):
    dims = (batch,) + tuple(net.input.dims[1:])
    if any(n.prim.name == "embedding" for n in net.graph.nodes):     # token ids, held in f32
        return rng.integers(0, 200, dims).astype(np.float32)
    return rng.standard_normal(dims).astype(np.float32)


@pytest.mark.iree
@pytest.mark.parametrize("spec", [pytest.param(p, id=p.stem, marks=() if p.stem in FAST_ONNX else pytest.mark.slow)
                                  for p in sorted(SPECS.glob("*.yaml"))])
def test_onnx_export_matches_the_compiled_forward(spec):
    """Every spec in specs/ exports but those using a primitive docs/export.md lists as refused
    (mamba_lm's selective_scan), which are refused naming it: onnxruntime's logits at batch 2
    equal lmc's compiled @forward within 1e-4·(1 + max|logit|), and the model takes another
    batch size (3) giving the same rows."""
    from lmc.check import load_net
    from lmc.compile import compile_module
    from lmc.core.errors import ExportError
    from lmc.export.onnx import build_model, check_exportable, refused_prims
    from lmc.lower.lowering import lower
    from lmc.run.runtime import Module
    net = load_net(spec, None, batch=2)
    refused = refused_prims(net)
    if refused:
        doc = (SPECS.parent / "docs" / "export.md").read_text()
        assert all(f"| `{p}` |" in doc for p in refused), f"docs/export.md does not list {sorted(refused)}"
        with pytest.raises(ExportError, match="no ONNX form for the primitive " + next(iter(refused))):
            check_exportable(net)
        return
    w = _weights_for_test(net)
    rng = np.random.default_rng(2)
    x = _input_for(net, 2, rng)
    model = build_model(net, w)
    if net.state:                            # BN statistics that fit the random weights, then again
        # on 16 rows, not the 2 compared: a BN after a 1×1 map (digits_fpn_yolo's C5) sees one
        # value per image, and two images can give a variance of 1e-10, amplifying both sides'
        # f32 rounding ~300× (measured there: 3.1e-3 apart calibrated on 2 rows, 8.4e-6 on 16)
        stats = _calibrate_bn(model, np.concatenate([x, _input_for(net, 14, np.random.default_rng(3))]))
        w.state = [stats[s.name] for s in net.state]
        model = build_model(net, w)
    assert model.opset_import[0].version >= 17
    assert [i.name for i in model.graph.input] == ["input"] and [o.name for o in model.graph.output] == ["logits"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = sess.run(["logits"], {"input": x})[0]
    mod = Module(compile_module(lower(net, "forward", backend="llvm-cpu"), None, "llvm-cpu", None).path, "llvm-cpu")
    z = np.asarray(mod.forward(*[mod.upload(a) for a in w.params], *[mod.upload(a) for a in w.state], x)).copy()
    assert y.shape == z.shape
    assert np.abs(z[0] - z[1]).max() > 1e-3                      # the logits depend on the input
    assert np.abs(y - z).max() <= 1e-4 * (1 + np.abs(z).max())
    y3 = sess.run(["logits"], {"input": np.concatenate([x, x[:1]])})[0]
    assert y3.shape[0] == 3 and np.abs(y3[:2] - y).max() <= 1e-5 * (1 + np.abs(y).max())


def test_onnx_cli_export_and_refusal(ckpt, tmp_path):
    spec, net, path, params, state, ema = ckpt
    out = tmp_path / "m.onnx"
    r = run("export", spec, "--init", path, "--format", "onnx", "-o", out, "--region", "live")
    assert r.exit_code == 0, r.output
    m = onnx.load(str(out))
    onnx.checker.check_model(m)
    assert {i.name for i in m.graph.initializer} >= {p.name for p in net.params} | {s.name for s in net.state}
    assert "BatchNormalization" in {n.op_type for n in m.graph.node}
    x = np.random.default_rng(0).standard_normal((5, 1, 6, 6)).astype(np.float32)
    y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(["logits"], {"input": x})[0]
    assert y.shape == (5, 10)
    r = run("export", spec, "--init", path, "--format", "onnx", "-o", tmp_path / "m.pb")
    assert r.exit_code == 2 and ".onnx file" in r.output
    # a primitive with no ONNX form is refused by name, before any weights are read
    mamba = tmp_path / "mamba.yaml"
    mamba.write_text("name: tiny_mamba\ninput: {features: 8}\nlayers:\n"
                     "  - token_position_embed: {vocab_size: 16, seq_len: 8, d_model: 4, gather: true}\n"
                     "  - mamba_block: {dim: 4, state_size: 3, expand: 2, n_blocks: 1}\n")
    r = run("export", mamba, "--init", tmp_path / "none.npz", "--format", "onnx", "-o", tmp_path / "x.onnx")
    assert r.exit_code == 2
    assert "no ONNX form for the primitive selective_scan (layer 1, mamba_block)" in r.output


# ------------------------------------------------------------------------------------ vmfb

DOC = Path(__file__).resolve().parent.parent / "docs" / "export.md"


def _snippet() -> str:
    text = DOC.read_text()
    body = text.split("<!-- vmfb-snippet -->", 1)[1]
    return body.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.iree
def test_vmfb_package_runs_from_the_docs_snippet_without_lmc(ckpt, tmp_path, monkeypatch):
    import json
    import subprocess
    from lmc.compile import compile_module
    from lmc.lower.lowering import lower
    from lmc.run.runtime import Module
    spec, net, path, params, state, ema = ckpt
    pkg = tmp_path / "digits_cnn.pkg"                     # the name the snippet loads
    # the package keeps the blocking ABI the snippet calls, whatever lmc's own modules use
    monkeypatch.setenv("LMC_INVOCATION", "async")
    r = run("export", spec, "--init", path, "--format", "vmfb", "--batch", "4", "--region", "live", "-o", pkg)
    assert r.exit_code == 0, r.output
    m = json.loads((pkg / "manifest.json").read_text())
    assert m["batch"] == 4 and m["input"]["shape"] == [4, 1, 6, 6] and m["output"]["shape"] == [4, 10]
    assert m["args"] == [p.name for p in net.params] + [s.name for s in net.state]
    x = np.random.default_rng(0).standard_normal((3, 1, 6, 6)).astype(np.float32)    # a partial batch
    np.save(tmp_path / "x.npy", x)
    code = _snippet() + ("\nnp.save('y.npy', predict(np.load('x.npy')))\n"
                         "import sys\nassert not [k for k in sys.modules if k == 'lmc' or k.startswith('lmc.')]\n")
    assert len(_snippet().strip().splitlines()) <= 25
    p = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    y = np.load(tmp_path / "y.npy")
    net4 = infer(net.spec, 4)
    mod = Module(compile_module(lower(net4, "forward"), None, "llvm-cpu", None).path)
    xb = np.concatenate([x, np.zeros((1, 1, 6, 6), np.float32)])
    z = np.asarray(mod.forward(*params, *state, xb))[:3]
    assert y.shape == (3, 10) and np.abs(z[0] - z[1]).max() > 1e-3
    assert np.array_equal(y, z)


def test_vmfb_refusals(ckpt, tmp_path, monkeypatch):
    spec, net, path, *_ = ckpt
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    r = run("export", spec, "--init", path, "--format", "vmfb", "-o", tmp_path / "full")
    assert r.exit_code == 2 and "not an lmc package" in r.output
    (tmp_path / "f").write_text("")
    r = run("export", spec, "--init", path, "--format", "vmfb", "-o", tmp_path / "f")
    assert r.exit_code == 2 and "is a file" in r.output
    r = run("export", spec, "--init", path, "--format", "vmfb", "--batch", "0", "-o", tmp_path / "p")
    assert r.exit_code == 2 and "--batch must be at least 1" in r.output
    # the package's snippet passes no transient storage (LMC_TRANSIENTS, docs/env.md)
    monkeypatch.setenv("LMC_TRANSIENTS", "external")
    r = run("export", spec, "--init", path, "--format", "vmfb", "-o", tmp_path / "q")
    assert r.exit_code == 2 and "LMC_TRANSIENTS=external" in r.output and not (tmp_path / "q").exists()


# ------------------------------------------------------------------------------------ import

def _torchvision_like(rng):
    """A torchvision-style state_dict of the tiny spec (conv, BN, linear), in scrambled order."""
    sd = {"features.0.weight": rng.standard_normal((4, 1, 3, 3)),
          "features.1.weight": rng.uniform(0.5, 1.5, 4), "features.1.bias": rng.standard_normal(4),
          "features.1.running_mean": rng.standard_normal(4), "features.1.running_var": rng.uniform(0.5, 1.5, 4),
          "classifier.weight": rng.standard_normal((10, 36)), "classifier.bias": rng.standard_normal(10)}
    sd = {k: np.asarray(v, np.float32) for k, v in sd.items()}
    sd["features.1.num_batches_tracked"] = np.array(7, np.int64)
    return dict(reversed(list(sd.items())))


def test_import_maps_a_state_dict_by_name_and_shape(ckpt, tmp_path):
    spec, net, *_ = ckpt
    sd = _torchvision_like(np.random.default_rng(0))
    safetensors.save_file(sd, str(tmp_path / "w.safetensors"))
    r = run("import", spec, tmp_path / "w.safetensors", "--from", "torchvision", "-o", tmp_path / "ck.npz", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"output": str(tmp_path / "ck.npz"), "weights": str(tmp_path / "w.safetensors"),
                                    "from": "torchvision", "params": 5, "state": 2, "bn_eps": 1e-5}
    got = load_init(tmp_path / "ck.npz", net)
    want = [sd["features.0.weight"], sd["features.1.weight"], sd["features.1.bias"], sd["classifier.weight"].T,
            sd["classifier.bias"]]
    assert [p.name for p in net.params][3] == "03.dense.weight"
    assert all(np.array_equal(a, b) for a, b in zip(got.params, want))
    assert np.array_equal(got.state[0], sd["features.1.running_mean"])
    assert np.allclose(got.state[1], sd["features.1.running_var"], rtol=0, atol=1e-7)   # ε = 1e-5 both sides
    # a library with another BN ε: the variance shifted so that (σ² + ε) is unchanged
    r = run("import", spec, tmp_path / "w.safetensors", "--from", "torchvision", "--model", "mobilenet_v3_large",
            "-o", tmp_path / "ck3.npz")
    assert r.exit_code == 0 and "ε 0.001" in r.output
    got = load_init(tmp_path / "ck3.npz", net)
    assert np.allclose(got.state[1] + 1e-5, sd["features.1.running_var"] + 1e-3, rtol=0, atol=1e-7)


@pytest.mark.parametrize("change,message", [
    (lambda sd: sd.update({"classifier.extra": np.zeros(3, np.float32)}),
     "tensor 'classifier.extra': 'extra' is not a tensor the torchvision table knows"),
    (lambda sd: sd.update({"fc.weight": np.zeros((10, 10), np.float32)}),
     "torchvision tensor 'fc.weight' [10, 10] has no lmc tensor left to go to"),
    (lambda sd: sd.pop("classifier.bias"), "lmc tensor 03.dense.bias got no torchvision tensor"),
    (lambda sd: sd.update({"classifier.weight": np.zeros((10, 35), np.float32)}),
     "torchvision tensor 'classifier.weight' [10, 35] does not fit lmc's 03.dense.weight [36, 10]"),
    (lambda sd: sd.update({"features.1.bias": np.zeros(4, np.int32)}),
     "torchvision tensor 'features.1.bias' has dtype int32; expected a float tensor"),
    (lambda sd: sd.update({"features.0.wobble.weight": np.zeros(4, np.float32)}),
     "module 'wobble' is not one the torchvision table knows"),
])
def test_import_refuses_what_does_not_map_naming_the_tensor(ckpt, tmp_path, change, message):
    spec, *_ = ckpt
    sd = _torchvision_like(np.random.default_rng(0))
    change(sd)
    safetensors.save_file(sd, str(tmp_path / "w.safetensors"))
    r = run("import", spec, tmp_path / "w.safetensors", "--from", "torchvision", "-o", tmp_path / "ck.npz")
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "ck.npz").exists()


def test_import_arguments_and_pth(ckpt, tmp_path, monkeypatch):
    spec, net, *_ = ckpt
    sd = _torchvision_like(np.random.default_rng(0))
    safetensors.save_file(sd, str(tmp_path / "w.safetensors"))
    r = run("import", spec, tmp_path / "w.safetensors", "--from", "keras", "-o", tmp_path / "ck.npz")
    assert r.exit_code == 2 and "--from 'keras'" in r.output
    r = run("import", spec, tmp_path / "w.safetensors", "--from", "torchvision", "-o", tmp_path / "ck.pt")
    assert r.exit_code == 2 and "is a .npz file" in r.output
    r = run("import", spec, tmp_path / "w.bin", "--from", "torchvision", "-o", tmp_path / "ck.npz")
    assert r.exit_code == 2 and "expected a .safetensors" in r.output
    (tmp_path / "w.pth").write_bytes(b"not a torch file")
    r = run("import", spec, tmp_path / "w.pth", "--from", "torchvision", "-o", tmp_path / "ck.npz")
    assert r.exit_code == 2 and "it never imports PyTorch" in r.output       # say what to do instead
    assert "safetensors.torch.save_file" in r.output
    r = run("import", spec, tmp_path / "w.safetensors", "--from", "torchvision", "-o", tmp_path / "ck.npz")
    assert r.exit_code == 0, r.output
    assert np.array_equal(load_init(tmp_path / "ck.npz", net).params[3], sd["classifier.weight"].T)


def test_timm_table_splits_the_fused_qkv_and_orders_by_name():
    """timm's module order rebuilt from the names alone (cls and position tokens first, numeric
    block indices by value); a module the table does not know is refused naming it.  (The fused
    q‖k‖v split and the values: test_published's timm ViT, slow.)"""
    from lmc.export.published import TIMM, module_order
    names = ["head.weight", "blocks.1.attn.qkv.weight", "pos_embed", "blocks.0.norm1.weight", "cls_token",
             "blocks.10.attn.qkv.bias", "patch_embed.proj.weight", "norm.bias", "blocks.0.mlp.fc2.weight"]
    assert module_order(names, TIMM) == ["cls_token", "pos_embed", "patch_embed.proj.weight", "blocks.0.norm1.weight",
                                         "blocks.0.mlp.fc2.weight", "blocks.1.attn.qkv.weight",
                                         "blocks.10.attn.qkv.bias", "norm.bias", "head.weight"]
    with pytest.raises(Exception, match="module 'layers' is not one the timm table knows"):
        module_order(["layers.0.blocks.0.norm1.weight"], TIMM)
