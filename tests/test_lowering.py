"""Lowering: `lmc render` of a few specs (key ops present, each symbol defined once and every
call resolved, YAML locations on the calls, same bytes on every run), shape-only kinds refused
with NotImplementedKind, and (slow) cross-compiling a conv net for CUDA and ROCm."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lmc.cli import app
from lmc.core.errors import NotImplementedKind
from lmc.graph.infer import infer
from lmc.graph.infer import lowers
from lmc.layers import all_layers
from lmc.lower.lowering import lower
from lmc.lower.options import LowerOptions
from lmc.spec.netspec import load_spec

ROOT = Path(__file__).resolve().parent.parent

CNN = """\
name: cnn
input: {channels: 2, height: 8, width: 8}
layers:
  - conv2d: {ic: 2, oc: 4, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - conv_bn: {ic: 4, oc: 4, k_size: 3, stride: 2}
  - flatten
  - dense: {fan_in: 16, fan_out: 3}
train: {learning_rate: 0.1, batch_size: 2, epochs: 1}
"""
MLP = """\
name: mlp
input: {features: 6}
layers:
  - dense: {fan_in: 6, fan_out: 5, act: relu}
  - dense: {fan_in: 5, fan_out: 4}
train: {learning_rate: 0.01, batch_size: 3, epochs: 1, use_adam: true, loss_kind: soft_label_ce}
"""
RESNET = """\
name: resnet
input: {channels: 2, height: 6, width: 6}
conv_pad_style: symmetric
layers:
  - conv_bn: {ic: 2, oc: 4, k_size: 3, stride: 1}
  - residual_block: {ic: 4, oc: 4, n_blocks: 1, first_stride: 1}
  - global_avg_pool
  - dense: {fan_in: 4, fan_out: 2}
train: {learning_rate: 0.1, batch_size: 2, epochs: 1, momentum: 0.9}
"""
# spec → substrings its module must contain
SPECS = {
    # convolutions are emitted as matmuls over patches (no stablehlo.convolution: see
    # templates/prims/conv.mlir.j2 and benchmarks/NOTES.md); max pool as a window-max reduction
    "cnn": (CNN, ["func.func @train_step(", "func.func @forward(", "@conv_fwd_", "@conv_bwd_",
                  "@max_pool_fwd_", "stablehlo.rsqrt", "stablehlo.dot_general", "stablehlo.reshape",
                  "stablehlo.maximum", "@class_ce_", "@sgd_", "@ema_",
                  "@batch_norm_eval_"]),
    # its layers have ≤ 16 outputs: dense's multiply + sum form, not a dot_general
    "mlp": (MLP, ["stablehlo.reduce(%xw_p", "@soft_label_ce_", "@adam_", "stablehlo.power", "stablehlo.sqrt"]),
    "resnet": (RESNET, ["@conv_fwd_", "@add_fwd_", "@sgd_", "@global_avg_pool_fwd_",
                        # the residual join: the cotangents of the fan-out are summed in @train_step
                        "%acc"]),
}


def _write(tmp_path, name, text) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


def _render(path: Path) -> str:
    res = CliRunner().invoke(app, ["render", str(path)])
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("name", SPECS)
def test_render_key_ops(tmp_path, name):
    text, ops = SPECS[name]
    out = _render(_write(tmp_path, name, text))
    assert out.count("module @model {") == 1
    for op in ops:
        assert op in out, f"{name}: {op!r} missing from the rendered module"


@pytest.mark.parametrize("name", SPECS)
def test_symbols_once_and_calls_resolve(tmp_path, name):
    out = _render(_write(tmp_path, name, SPECS[name][0]))
    defined = re.findall(r"func\.func (?:private )?@(\w+)\(", out)
    dupes = sorted({s for s in defined if defined.count(s) > 1})
    assert not dupes, f"symbols defined more than once: {dupes}"
    called = set(re.findall(r"func\.call @(\w+)\(", out))
    assert called <= set(defined), f"calls to undefined symbols: {sorted(called - set(defined))}"
    # a primitive's template holds its eval form beside fwd/bwd: under train.running_bn false
    # (the default) @forward normalises with batch statistics and leaves BN's eval form uncalled
    spare = {s for s in defined if s.startswith("batch_norm_eval_")}
    assert set(defined) - called - spare == {"train_step", "forward"}, "a private function is never called"


@pytest.mark.parametrize("name", SPECS)
def test_calls_carry_layer_locations(tmp_path, name):
    text = SPECS[name][0]
    path = _write(tmp_path, name, text)
    out = _render(path)
    lines = text.splitlines()
    items = [(n + 1, line) for n, line in enumerate(lines) if line.startswith("  - ")]
    spec = load_spec(path)
    assert len(items) == len(spec.layers)
    for i, (lineno, line) in enumerate(items):
        kind = spec.layers[i].kind
        loc = f'loc("layers[{i}].{kind}"("{path}":{lineno}:5))'
        assert loc in out, f"no call carries {loc}"
    # every call inside @train_step/@forward to a layer's function is located
    for call in re.findall(r"^    .*func\.call @(?:\w+)_(?:fwd|bwd|eval)_\w+\(.*$", out, re.M):
        assert 'loc("layers[' in call, f"unlocated call: {call.strip()[:120]}"


def test_render_deterministic(tmp_path):
    """Same spec, same bytes: twice in-process and in two fresh interpreters with different
    hash seeds (which would expose any iteration over an unordered set)."""
    path = _write(tmp_path, "resnet", RESNET)
    first = _render(path)
    assert _render(path) == first
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-m", "lmc.cli", "render", str(path)], capture_output=True,
                              env=env, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr.decode()
        outs.append(proc.stdout)
    assert outs[0] == outs[1] == first.encode()


# --------------------------------------------------------------------------- shape-only kinds


def _shape_only_kinds():
    """Every shape-only kind whose first example stands alone as a one-layer spec that does not
    lower (some need a token-stream input or an earlier stage to pair with; a block whose
    first example avoids its declared primitives lowers)."""
    from lmc.spec.netspec import load_spec
    real = []
    for k, cls in sorted(all_layers().items()):
        if lowers(cls) or cls.examples[0][1].rank not in (2, 4):
            continue
        try:
            net = infer(load_spec("probe.yaml", text=_shape_only_spec(k)))
        except Exception:
            continue
        if not net.layers[0].lowered:
            real.append(k)
    return real


def _shape_only_spec(kind: str) -> str:
    fields, x = all_layers()[kind].examples[0]
    body = ", ".join(f"{k}: {getattr(v, 'value', v)}" for k, v in fields.items())
    layer = f"  - {kind}: {{{body}}}" if fields else f"  - {kind}"
    inp = (f"{{features: {x.dims[1]}}}" if x.rank == 2 else
           f"{{channels: {x.dims[1]}, height: {x.dims[2]}, width: {x.dims[3]}}}")
    return (f"name: shape_only\ninput: {inp}\nlayers:\n{layer}\n"
            f"train: {{learning_rate: 0.1, batch_size: {x.dims[0]}, epochs: 1}}\n")


@pytest.mark.parametrize("kind", _shape_only_kinds())
def test_shape_only_kind_not_lowered(tmp_path, kind):
    path = _write(tmp_path, "shape_only", _shape_only_spec(kind))
    net = infer(load_spec(path))                       # shape inference still works
    assert not net.layers[0].lowered
    # the forward alone: with a rank-4 output the class_ce recipe is itself refused first
    with pytest.raises(NotImplementedKind) as e:
        lower(net, "forward")
    assert e.value.message.startswith(f"not implemented yet: {kind} "), e.value.message
    assert e.value.loc is not None and e.value.loc.line == 4        # the layer's line in the YAML
    res = CliRunner().invoke(app, ["render", "--function", "forward", str(path)])
    assert res.exit_code == 2
    assert f"not implemented yet: {kind}" in res.output


# --------------------------------------------------------------------------- GPU cross-compiles


@pytest.mark.slow
@pytest.mark.iree
@pytest.mark.parametrize("backend,chip", [("cuda", "sm_86"), ("rocm", "gfx1100")])
def test_cross_compile(tmp_path, backend, chip):
    """A conv net's train step compiles for the GPU targets (no GPU needed to compile)."""
    from lmc.compile import compile_module
    text = lower(infer(load_spec(_write(tmp_path, "cnn", CNN))))
    c = compile_module(text, tmp_path / f"cnn.{backend}.vmfb", backend=backend, chip=chip)
    assert c.path.stat().st_size > 1000
    assert any(chip in f for f in c.command), c.command


# --------------------------------------------------------------------------- conv spellings


def test_conv_form_selects_the_spelling(tmp_path, monkeypatch):
    net = infer(load_spec(_write(tmp_path, "cnn", CNN)))
    matmul = lower(net, backend="cuda")
    assert "stablehlo.convolution" not in matmul and "stablehlo.dot_general" in matmul
    assert "stablehlo.reverse" not in matmul      # the kernel flip of dx is folded into the patch order
    assert "stablehlo.convolution" in lower(net, backend="cuda", options=LowerOptions(conv_form="direct"))
    # the library reads no environment: only the command line turns LMC_CONV_FORM into options
    monkeypatch.setenv("LMC_CONV_FORM", "direct")
    assert lower(net, backend="cuda") == matmul


def test_winograd_takes_the_stride1_3x3_convs_only(tmp_path):
    """conv_form "winograd" (the default) spells a conv as conv_winograd where it covers it
    (stride 1, 3×3, one group, 8+ channels each side) and leaves every other conv to conv's
    forms; "matmul" leaves them all."""
    src = CNN.replace("channels: 2, height: 8", "channels: 8, height: 8").replace(
        "conv2d: {ic: 2, oc: 4, k_size: 3}", "conv2d: {ic: 8, oc: 8, k_size: 3}").replace(
        "conv_bn: {ic: 4, oc: 4", "conv_bn: {ic: 8, oc: 8").replace("fan_in: 16", "fan_in: 32")
    net = infer(load_spec(_write(tmp_path, "cnn8", src)))
    text = lower(net)
    assert text.count("func.func private @conv_winograd_fwd_") == 1       # the stride-1 conv
    assert text.count("func.func private @conv_fwd_") == 1                # the stride-2 one
    matmul = lower(net, options=LowerOptions(conv_form="matmul"))
    assert "conv_winograd" not in matmul and matmul.count("func.func private @conv_fwd_") == 2
    assert "conv_winograd" not in lower(infer(load_spec(_write(tmp_path, "cnn", CNN))))   # 2–4 channels
    # train.bf16_conv keeps the row matmuls (ConvWinograd.takes_bf16: data tiling refuses its products)
    bf = infer(load_spec(_write(tmp_path, "cnn8bf", src.replace("epochs: 1}", "epochs: 1, bf16: true, bf16_conv: true}"))))
    text = lower(bf)
    assert "conv_winograd" not in text and text.count("func.func private @conv_fwd_") == 2 and "xbf16>" in text


def test_conv_form_rejects_unknown_values(tmp_path):
    path = _write(tmp_path, "cnn", CNN)
    env = {**os.environ, "LMC_CONV_FORM": "fft"}
    r = subprocess.run([sys.executable, "-m", "lmc.cli", "render", str(path)], capture_output=True, text=True, env=env)
    assert r.returncode == 2, r.stderr
    assert "LMC_CONV_FORM='fft': expected one of winograd, matmul, direct" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.iree
def test_resnet18_cross_compiles_for_cuda(tmp_path):
    """Regression: IREE 3.13's NVPTX backend aborted on resnet18's train step ("Cannot select:
    v2i16 umul_lohi" in the reverse+transpose gather of a 256-channel dx kernel).  Small batch
    and image so it stays in the default suite (≈ 20 s); the full-size nets: `make test-slow`."""
    from lmc.compile import compile_module
    root = Path(__file__).resolve().parent.parent
    net = infer(load_spec(root / "specs" / "resnet18.yaml", ["train.batch_size=8", "input.height=32", "input.width=32"]))
    c = compile_module(lower(net, backend="cuda"), tmp_path / "r18.vmfb", backend="cuda", chip="sm_86")
    assert c.path.stat().st_size > 100_000


def test_packed_matmul_hint_follows_the_net_and_the_target(monkeypatch):
    # lower marks a net whose FLOPs are mostly dense/attention for packed (data-tiled) matmuls on
    # targets without AVX-512 and on Intel's AVX-512; a token-stream net whose largest linear
    # layer sums its dW over chunks of rows only on Intel's AVX-512 where large, else not at all;
    # a conv net not at all; compile.flags turns the mark into the llvm-cpu flag (only there) by
    # the target the flags name; LMC_PACKED wins
    import lmc.compile as c
    from lmc.compile import PACKED, PACKED_DENSE, PACKED_INTEL, flags, target_has_avx512
    from lmc.graph.infer import infer
    from lmc.lower.lowering import lower
    from lmc.spec.netspec import load_spec
    root = Path(__file__).resolve().parent.parent / "specs"
    hints = (PACKED, PACKED_DENSE, PACKED_INTEL)
    mlp = lower(infer(load_spec(root / "mnist_mlp.yaml")), "forward")
    gpt = lower(infer(load_spec(root / "tiny_gpt.yaml")), "forward")
    cnn = lower(infer(load_spec(root / "mnist_cnn.yaml")), "forward")
    small = lower(infer(load_spec(root / "resnet18.yaml", ["input.height=32", "input.width=32"])), "forward")
    big = lower(infer(load_spec(root / "mnist_mlp.yaml", ["train.batch_size=1024"])), "forward")
    tokens = lower(infer(load_spec(root / "tiny_gpt.yaml", ["train.batch_size=128"])), "forward")
    assert PACKED_DENSE in mlp.splitlines()[:2] and PACKED_DENSE in big.splitlines()[:2]
    assert PACKED_INTEL in tokens.splitlines()[:2] and PACKED_DENSE not in tokens
    assert not any(h in text for h in hints for text in (cnn, small, gpt))
    tiling = "--iree-global-opt-data-tiling"
    monkeypatch.setenv("IREE_EXTRA_FLAGS", "--iree-llvmcpu-target-cpu=znver3")
    assert tiling in flags("llvm-cpu", None, mlp) and tiling not in flags("llvm-cpu", None, cnn)
    assert tiling not in flags("cuda", None, mlp)
    assert tiling in flags("llvm-cpu", None, big) and tiling not in flags("llvm-cpu", None, tokens)
    for cpu, packs in (("znver4", False), ("x86-64-v4", False), ("sapphirerapids", True), ("icelake-server", True)):
        monkeypatch.setenv("IREE_EXTRA_FLAGS", f"--iree-llvmcpu-target-cpu={cpu}")
        for text in (mlp, big, tokens):
            assert (tiling in flags("llvm-cpu", None, text)) == packs, cpu
        assert tiling not in flags("llvm-cpu", None, cnn), cpu
    monkeypatch.delenv("IREE_EXTRA_FLAGS")
    for vendor, packs in (("AuthenticAMD", False), ("GenuineIntel", True)):   # host: the CPU's vendor
        monkeypatch.setattr(c, "_cpuinfo_first", lambda keys, v=vendor: {"vendor_id": v, "flags": "fpu avx512f"})
        for text in (mlp, big, tokens):
            assert (tiling in flags("llvm-cpu", None, text)) == packs, vendor
    monkeypatch.setattr(c, "_cpuinfo_first", lambda keys: {"vendor_id": "GenuineIntel", "flags": "fpu avx2"})
    assert tiling in flags("llvm-cpu", None, mlp) and tiling in flags("llvm-cpu", None, big)
    assert tiling not in flags("llvm-cpu", None, tokens)
    monkeypatch.undo()
    monkeypatch.setenv("IREE_EXTRA_FLAGS", "--iree-llvmcpu-target-cpu=znver4 --iree-llvmcpu-target-cpu-features=-avx512f")
    assert tiling in flags("llvm-cpu", None, mlp)
    assert target_has_avx512(["--iree-llvmcpu-target-cpu=haswell", "--iree-llvmcpu-target-cpu=znver4"])
    assert not target_has_avx512(["--iree-llvmcpu-target-cpu=znver4", "--iree-llvmcpu-target-cpu=znver3"])
    # workgroup counts sized for the runtime's workers (LMC_TASK_WORKERS, else the cores)
    monkeypatch.delenv("IREE_EXTRA_FLAGS")
    monkeypatch.setenv("LMC_TASK_WORKERS", "3")
    assert "--iree-llvmcpu-number-of-threads=3" in flags("llvm-cpu", None, mlp)
    assert not any("number-of-threads" in f for f in flags("cuda", None, mlp))
    off = lower(infer(load_spec(root / "mnist_mlp.yaml")), "forward", options=LowerOptions(packed="off"))
    assert PACKED not in off and PACKED_DENSE not in off
    on = lower(infer(load_spec(root / "mnist_cnn.yaml")), "forward", options=LowerOptions(packed="on"))
    assert PACKED in on.splitlines()[:2] and tiling in flags("llvm-cpu", None, on)


@pytest.mark.parametrize("spec, pos", [("digits_vit", "00.patch_embed.pos"), ("tiny_gpt", "00.token_position_embed.pos"),
                                       ("swin_tiny", "01.swin_stage.0.attn.rel_pos_bias")])
def test_wd_exclude_norm_bias_spares_positional_embeddings(spec, pos):
    """wd_exclude_norm_bias (the Lean kit's field doc): biases, norm scales, the class token and
    the positional embedding take no decay; the other ≥ 2-D weights do.  The layer declares its
    positional tensors (Param.role), so the rank-2 position tables are exempt without a name rule."""
    from lmc.lower.lowering import abi
    root = Path(__file__).resolve().parents[1] / "specs"
    net = infer(load_spec(root / f"{spec}.yaml", ["train.wd_exclude_norm_bias=true", "train.weight_decay=0.05"]))
    a = abi(net)
    names = {p.name: p for p in net.params}
    assert pos in names and names[pos].type.rank == 2
    assert not a.decay(pos)
    assert all(not a.decay(p.name) for p in net.params if p.type.rank < 2)
    decayed = [p.name for p in net.params if a.decay(p.name)]
    assert decayed and all(names[n].type.rank >= 2 and names[n].role == "weight" for n in decayed)
    off = abi(infer(load_spec(root / f"{spec}.yaml", ["train.weight_decay=0.05"])))
    assert off.decay(pos)                      # off: every tensor decays (the kit's legacy behaviour)


def test_every_shared_macro_file_is_imported_by_a_template():
    """templates/**/_*.j2 hold macros shared between templates (Adam's moments, the coupled and
    decoupled decays, the dot of flash_attn, ...): each must be imported by some template — a
    macro file nothing imports is dead code that reads as if it were used."""
    root = Path(__file__).resolve().parent.parent / "templates"
    shared = {p.relative_to(root).as_posix() for p in root.rglob("_*.j2")}
    assert shared, "no shared macro files found"
    imported = set()
    for p in root.rglob("*.j2"):
        imported |= set(re.findall(r'{%-?\s*(?:from|import)\s+"([^"]+)"', p.read_text()))
    assert shared <= imported, f"never imported: {sorted(shared - imported)}"
    # the sharing that replaced copied template code stays shared: Adam's moments (adam, lamb,
    # lion's betas) and the soft-label correct count (bce, soft_label_ce)
    users = {"optim/_adam_moments.j2": ("optim/adam.mlir.j2", "optim/lamb.mlir.j2", "optim/lion.mlir.j2"),
             "losses/_soft_correct.mlir.j2": ("losses/bce.mlir.j2", "losses/soft_label_ce.mlir.j2")}
    for macro, templates in users.items():
        for t in templates:
            assert f'"{macro}"' in (root / t).read_text(), f"{t} no longer imports {macro}"
