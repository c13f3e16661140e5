"""The train step in two halves (Abi.halves: `@train_late` + `@train_early`, two modules compiled
side by side, LMC_SPLIT) computes what the fused `@train_step` does — whose every primitive,
loss and optimizer the JAX oracle checks (tests/test_oracle.py) — through the host's own
adapter (lmc.run.runtime.HalvesCall), for two steps in a row (the halves write their new state
over their arguments): with BN statistics and dropout masks, residual fan-outs across the cut,
EMA weights and a head lr multiplier, and a weight read on both sides of the cut.  Also the
module split (each module holds only what it calls), the rule that picks the split, its
refusals, and `lmc train` end to end."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.runtime")

from lmc.check import load_net  # noqa: E402
from lmc.compile import compile_module  # noqa: E402
from lmc.core.errors import UsageError  # noqa: E402
from lmc.graph.infer import train_net  # noqa: E402
from lmc.graph.init import init_tensors  # noqa: E402
from lmc.lower import lowering  # noqa: E402
from lmc.lower.lowering import abi, late_after, lower, lower_train, split_module  # noqa: E402
from lmc.run.runtime import Module  # noqa: E402
from lmc.run.runtime import HalvesCall, train_function  # noqa: E402

pytestmark = pytest.mark.iree
ROOT = Path(__file__).resolve().parent.parent
DROPOUT_BN = str(ROOT / "tests" / "data" / "bn_dropout.yaml")   # conv_bn, max_pool, dropout

SHARED = str(ROOT / "tests" / "data" / "halves_shared.yaml")      # a weight read in every round


def _inputs(net, a, seed=0):
    rng = np.random.default_rng(seed)
    P, S = init_tensors(net, net.spec.train.seed)
    P = [np.asarray(p, np.float32) for p in P]
    O = [(0.01 * np.abs(rng.standard_normal(p.type.dims))).astype(np.float32) for _, p in a.opt]
    E = [p + np.float32(0.01) for p in P[:len(a.ema)]]
    x = rng.standard_normal(a.x.dims).astype(np.float32)
    y = a.loss.draw_labels(rng, a.labels, a.logits)
    masks = [((rng.random(m.value.type.dims) < 0.75) / np.float32(0.75)).astype(np.float32) for m in a.masks]
    return P, O, E, [np.asarray(s, np.float32) for s in S], x, y, masks


def _host(v):
    return np.array(v.to_host()) if hasattr(v, "to_host") else np.array(v)


def _two_steps(net, a, call, ins):
    """Two train steps through `call` (@train_step's layout), the first's results fed to the
    second as device arrays; every result of both, on the host."""
    P, O, E, S, x, y, masks = ins
    state, n, got = [*P, *O, *E, *S], len(P) + len(O) + len(E) + len(S), []
    for step in (1, 2):
        hp = a.hp_vector(net.spec.train, 0.01, step)
        out = call(*state, x, y, hp, *masks)
        got.append([_host(v) for v in out])
        state = list(out[:n])
    return got


def _halves_abi(whole, net, k):
    return dataclasses.replace(whole, cut=k, late=late_after(train_net(net), k))


def _compare(got, want, what):
    for step, (gs, ws) in enumerate(zip(got, want), 1):
        assert len(gs) == len(ws)
        for j, (u, v) in enumerate(zip(gs, ws)):
            scale = max(float(np.abs(v).max()), 1e-3)
            np.testing.assert_allclose(u, v, rtol=2e-5, atol=2e-6 * scale, err_msg=f"{what}: step {step}, result {j}")


@pytest.mark.parametrize("spec,sets,cuts", [
    (DROPOUT_BN, ["train.use_ema=true"], ["rule", 1, 6]),      # BN statistics, a dropout mask, EMA
    ("specs/digits_bottleneck.yaml", ["train.head_lr_mult=3"], ["rule"]),   # residual fan-outs, head lr
    ("specs/digits_vit.yaml", [], ["rule"]),                   # attention, layer norm, AdamW, the class token
    (SHARED, [], ["shared"]),                                  # a weight read on both sides of the cut
])
def test_the_halves_compute_the_fused_train_step(spec, sets, cuts):
    net = load_net(spec, list(sets))
    whole = abi(net)
    assert not whole.halves
    ins = _inputs(net, whole)
    fused = Module(compile_module(lower(net, "train_step", the_abi=whole)).path)
    want = _two_steps(net, whole, fused.train_step, ins)
    t = train_net(net)
    n = len(t.graph.nodes)
    for c in cuts:
        if c == "rule":
            a = abi(net, halves="on")
        elif c == "shared":          # between two reads of a weight: its late share is carried
            uses: dict[str, list[int]] = {}
            for i, node in enumerate(t.graph.nodes):
                for p in node.params:
                    uses.setdefault(p.name, []).append(i)
            k = min(v[-1] for v in uses.values() if len(v) > 1)
            a = _halves_abi(whole, net, k)
            assert any(v[0] < k <= v[-1] for v in uses.values())
        else:
            a = _halves_abi(whole, net, c)
        assert a.halves and 0 < a.cut < n
        first, second = lower_train(net, a)
        late = Module(compile_module(first).path, later={"train_early": lambda s=second: compile_module(s).path})
        call = train_function(a, late)
        assert isinstance(call, HalvesCall)
        _compare(_two_steps(net, a, call, ins), want, f"cut {a.cut} of {n}")


def test_each_module_holds_what_it_calls():
    net = load_net(DROPOUT_BN, ["train.use_swa=true"])
    a = abi(net, halves="on")
    first, second = lower_train(net, a)
    whole = lower(net, "train_step", the_abi=a)
    heads = lambda text: [m.groups() for m in map(lowering._FUNC.match, text.splitlines()) if m]
    funcs = lambda text: {name for _, name in heads(text)}
    publics = lambda text: {name for private, name in heads(text) if not private}
    assert publics(first) == {"train_late", "average"} and publics(second) == {"train_early"}
    assert funcs(first) | funcs(second) <= funcs(whole)
    for text in (first, second):
        called = set(lowering._SYM.findall("\n".join(l for l in text.splitlines() if "func.call" in l)))
        assert called <= funcs(text)                                # nothing missing
        assert funcs(text) - publics(text) <= called                # nothing it does not call
    assert not any("_fwd_" in f for f in funcs(second))             # the forward is all in the first
    with pytest.raises(ValueError, match="no public function"):
        split_module(whole, ["train_nothing"])


def test_the_split_rule():
    small = load_net("specs/mnist_cnn.yaml")
    deep = load_net("specs/resnet18.yaml", ["input.height=32", "input.width=32"])
    assert not abi(small, halves="auto").halves and abi(small, halves="on").halves
    a = abi(deep, halves="auto")
    assert a.halves and not abi(deep).halves and not abi(deep, halves="off").halves
    n = len(train_net(deep).graph.nodes)
    assert n >= lowering.SPLIT_MIN_NODES and 0 < a.cut < n
    light = load_net("specs/digits_googlenet.yaml")    # deep enough, but a step of a few ms
    assert len(train_net(light).graph.nodes) >= lowering.SPLIT_MIN_NODES and lowering.mostly_convs(light)
    assert not abi(light, halves="auto").halves and abi(light, halves="on").halves
    vit = load_net("specs/vit_tiny.yaml", ["input.height=32", "input.width=32", "layers.0.patch_embed.patch_size=4",
                                           "layers.0.patch_embed.n_patches=64"])
    assert 3 * vit.total_flops >= lowering.SPLIT_MIN_FLOPS and not lowering.mostly_convs(vit)
    assert not abi(vit, halves="auto").halves and abi(vit, halves="on").halves     # a transformer: one module
    early = {p.name for node in train_net(deep).graph.nodes[:a.cut] for p in node.params}
    assert a.late and not early & a.late and early | a.late == {p.name for p in a.params}
    # a recipe the halves cannot run: fused under auto, refused (exit 2, naming why) under on
    for sets, why in ((["train.grad_clip_norm=1"], "grad_clip_norm"), (["train.grad_accum_steps=2"], "grad_accum")):
        net = load_net("specs/resnet18.yaml", ["input.height=32", "input.width=32", *sets])
        assert not abi(net, halves="auto").halves
        with pytest.raises(UsageError, match=why):
            abi(net, halves="on")
    assert not abi(load_net("specs/resnet18.yaml", ["input.height=32", "input.width=32"]), world=2, halves="auto").halves


def test_lmc_train_in_halves_trains_what_the_fused_step_does(tmp_path, monkeypatch):
    """The same run, split and fused, and split then resumed fused: the same tensors (the digits
    CNN, 30 steps: bit for bit here, compared at f32 tolerance), two train modules compiled, and
    `lmc eval`'s @forward a cache hit either way."""
    import subprocess
    import sys
    spec = str(ROOT / "specs" / "digits_cnn.yaml")
    got = {}
    for split in ("on", "off"):
        cache = tmp_path / f"cache-{split}"
        env = {**__import__("os").environ, "LMC_CACHE": str(cache), "LMC_SPLIT": split}
        r = subprocess.run([sys.executable, "-m", "lmc", "train", spec, "--out", str(tmp_path / split),
                            "--max-steps", "30"], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        assert ("compiled 2 modules" in r.stdout + r.stderr) == (split == "on")
        assert len(list(cache.glob("*.vmfb"))) == (3 if split == "on" else 2)     # + @forward's
        r = subprocess.run([sys.executable, "-m", "lmc", "eval", spec, "--init", str(tmp_path / split)],
                           capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        assert len(list(cache.glob("*.vmfb"))) == (3 if split == "on" else 2)     # eval: a cache hit
        got[split] = np.load(tmp_path / split / "last.npz")
    # and a run split for 12 steps, resumed fused to 30: the checkpoint does not know the split
    env = {**__import__("os").environ, "LMC_CACHE": str(tmp_path / "cache-on")}
    for split, more in (("on", ["--max-steps", "12"]), ("off", ["--resume", "--max-steps", "30"])):
        r = subprocess.run([sys.executable, "-m", "lmc", "train", spec if split == "on" else str(tmp_path / "mixed"),
                            "--out", str(tmp_path / "mixed"), *more], capture_output=True, text=True,
                           env={**env, "LMC_SPLIT": split}, timeout=600)
        assert r.returncode == 0, r.stderr
    got["mixed"] = np.load(tmp_path / "mixed" / "last.npz")
    names = [k for k in got["off"].files if not k.startswith("__")]
    assert names
    for k in names:
        for other in ("on", "mixed"):
            np.testing.assert_allclose(got[other][k], got["off"][k], rtol=1e-5, atol=1e-6, err_msg=f"{other}: {k}")


def test_lmc_split_on_a_recipe_it_cannot_split_exits_2(tmp_path):
    import subprocess
    import sys
    env = {**__import__("os").environ, "LMC_CACHE": str(tmp_path / "cache"), "LMC_SPLIT": "on"}
    r = subprocess.run([sys.executable, "-m", "lmc", "train", str(ROOT / "specs" / "digits_cnn.yaml"),
                        "--set", "train.grad_clip_norm=1", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and "LMC_SPLIT=on" in r.stderr and "grad_clip_norm" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_lmc_render_follows_lmc_split_on(tmp_path):
    """`lmc render` / `lmc compile` read LMC_SPLIT too: on renders the halves (refused where the
    recipe cannot be split), auto and off the fused @train_step."""
    import os
    import re
    import subprocess
    import sys
    spec = str(ROOT / "specs" / "digits_cnn.yaml")

    def render(split, *extra):
        env = {**os.environ, "LMC_CACHE": str(tmp_path / "cache"), "LMC_SPLIT": split}
        return subprocess.run([sys.executable, "-m", "lmc", "render", spec, *extra],
                              capture_output=True, text=True, env=env, timeout=300)
    funcs = {s: re.findall(r"func\.func @(\w+)", render(s).stdout) for s in ("on", "auto", "off")}
    assert funcs["on"] == ["train_late", "train_early", "forward"], funcs
    assert funcs["auto"] == funcs["off"] == ["train_step", "forward"], funcs
    r = render("on", "--set", "train.grad_clip_norm=1")
    assert r.returncode == 2 and "grad_clip_norm" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_cut_balances_the_modelled_compile_times():
    """`balanced_halves`: the cut whose slower module the text model (compile_cost) has compile
    fastest, of HALVES_AT, a probe and the interpolated balance: for resnet18@32² lower than
    HALVES_AT (measured there: 12.3 s at 0.75, 11.2 s at 0.6, benchmarks/NOTES.md)."""
    from lmc.lower.compile_cost import compile_seconds
    from lmc.lower.options import LowerOptions
    deep = load_net("specs/resnet18.yaml", ["input.height=32", "input.width=32"])
    t = train_net(deep)
    a = abi(deep, halves="auto")
    k0, _ = lowering.halves_cut(t)

    def modelled(k):
        texts = lower_train(deep, dataclasses.replace(a, cut=k, late=late_after(t, k)), options=LowerOptions(inplace="off"))
        late, early = (compile_seconds(x) for x in texts)
        return late, early
    chosen, first = modelled(a.cut), modelled(k0)
    assert first[1] > first[0]                      # at HALVES_AT the early module is the slower
    assert a.cut < k0 and max(chosen) < max(first)
    assert a.late == late_after(t, a.cut)
    again = load_net("specs/resnet18.yaml", ["input.height=32", "input.width=32"])
    assert abi(again, halves="auto").cut == a.cut == abi(deep, halves="on").cut    # the same search


def test_the_compile_model_counts_inlined_ops_and_text():
    from lmc.lower.compile_cost import PER_KB, PER_OP, compile_seconds, measures
    text = """module @model {
  func.func private @f(%x: tensor<2xf32>) -> tensor<2xf32> {
    %a = stablehlo.add %x, %x : tensor<2xf32>
    %b = stablehlo.multiply %a, %a : tensor<2xf32>
    return %b : tensor<2xf32>
  }
  func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
    %a = func.call @f(%x) : (tensor<2xf32>) -> tensor<2xf32>
    %b = func.call @f(%a) : (tensor<2xf32>) -> tensor<2xf32>
    %c = stablehlo.negate %b : tensor<2xf32>
    return %c : tensor<2xf32>
  }
}
"""
    ops, kb = measures(text)
    assert ops == 1 + 2 * 2 and kb == len(text) / 1e3        # @f's two ops once per call
    assert compile_seconds(text) == PER_OP * ops + PER_KB * kb
