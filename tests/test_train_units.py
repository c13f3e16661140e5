"""The pieces of `lmc train` that need no compiler: init rules and reproducibility, lr schedules,
the Wilson interval and top-k scoring, checkpoint files (format, atomicity, layout checks,
--init readers, bootstrap windows)."""
from __future__ import annotations

import dataclasses
import json
import math
import struct

import numpy as np
import pytest

from lmc.run.checkpoint import (META_KEY, apply_bootstrap, check_layout, flatten, load_checkpoint, load_init,
    net_hash, read_tensors, save_checkpoint)
from lmc.spec.config import TrainConfig
from lmc.core.errors import CheckpointError, SpecError
from lmc.evaluate.interval import wilson95
from lmc.evaluate.score import count_correct
from lmc.graph.ir import Param
from lmc.graph.infer import infer
from lmc.graph.init import apply_head_prior, init_tensors
from lmc.train.schedule import learning_rate
from lmc.spec.netspec import load_spec
from lmc.core.types import TensorType

CNN = """
name: tiny_cnn
input: {channels: 1, height: 6, width: 6}
layers:
  - conv_bn: {ic: 1, oc: 4, k_size: 3}
  - conv2d: {ic: 4, oc: 64, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - flatten
  - dense: {fan_in: 576, fan_out: 300, act: relu}
  - dense: {fan_in: 300, fan_out: 10}
train: {learning_rate: 0.1, batch_size: 4, epochs: 1, use_adam: true}
"""


def net_of(text: str = CNN, extra_layers: str = ""):
    if extra_layers:
        text = text.replace("train:", extra_layers + "train:")
    return infer(load_spec("t.yaml", text=text))


# ------------------------------------------------------------------------------------ init

def test_init_same_seed_is_bit_identical_and_another_seed_differs():
    net = net_of()
    p1, s1 = init_tensors(net, 7)
    p2, s2 = init_tensors(net, 7)
    p3, _ = init_tensors(net, 8)
    assert all(a.dtype == np.float32 and a.tobytes() == b.tobytes() for a, b in zip(p1 + s1, p2 + s2))
    drawn = [i for i, p in enumerate(net.params) if p.init in ("he", "glorot")]
    assert all(not np.array_equal(p1[i], p3[i]) for i in drawn)
    assert [a.shape for a in p1] == [p.type.dims for p in net.params]


def test_head_prior_bias_sets_the_head_bias_to_log_prior():
    net = net_of()
    params, _ = init_tensors(net, 0)
    before = [a.copy() for a in params]
    nc = net.params[-1].type.dims[0]
    prior = tuple(np.linspace(1, 2, nc) / np.linspace(1, 2, nc).sum())
    assert apply_head_prior(params, net, TrainConfig(learning_rate=0.1, batch_size=2, epochs=1,
                                                      head_prior_bias=prior)) == [f"head prior: {net.params[-1].name} = log π"]
    np.testing.assert_allclose(params[-1], np.log(prior), rtol=1e-6)
    assert all(np.array_equal(a, b) for a, b in zip(params[:-1], before[:-1]))
    with pytest.raises(SpecError, match=r"priors must be > 0"):
        apply_head_prior(params, net, TrainConfig(learning_rate=0.1, batch_size=2, epochs=1,
                                                  head_prior_bias=(0.0,) + prior[1:]))
    with pytest.raises(SpecError, match=r"3 values, but the net's last parameter is"):
        apply_head_prior(params, net, TrainConfig(learning_rate=0.1, batch_size=2, epochs=1, head_prior_bias=(0.5,) * 3))


def test_init_rules_he_fan_out_glorot_bn_constants():
    net = net_of()
    params, state = init_tensors(net, 0)
    by = {p.name: (p, a) for p, a in zip(net.params, params)}
    # conv2d 4→64 k3: He with fan-OUT, std √(2/(64·9))
    p, w = by["01.conv2d.weight"]
    assert p.init == "he" and p.fan_out == 64 * 9
    assert w.std() == pytest.approx(math.sqrt(2 / (64 * 9)), rel=0.03)
    assert abs(w.mean()) < 0.01
    # dense 576→300: Glorot uniform ±√(6/876)
    p, w = by["04.dense.weight"]
    bound = math.sqrt(6 / (576 + 300))
    assert p.init == "glorot" and np.abs(w).max() <= bound
    assert np.abs(w).max() > 0.99 * bound
    assert w.var() == pytest.approx(bound ** 2 / 3, rel=0.02)
    # BN γ = 1, β = 0, biases 0; running mean 0, var 1
    assert (by["00.conv_bn.gamma"][1] == 1).all() and (by["00.conv_bn.beta"][1] == 0).all()
    assert (by["01.conv2d.bias"][1] == 0).all() and (by["05.dense.bias"][1] == 0).all()
    st = {s.name: a for s, a in zip(net.state, state)}
    assert (st["00.conv_bn.running_mean"] == 0).all() and (st["00.conv_bn.running_var"] == 1).all()


def test_init_adding_a_layer_keeps_earlier_draws():
    net = net_of()
    longer = infer(load_spec("t.yaml", text=CNN.replace(
        "  - dense: {fan_in: 300, fan_out: 10}\n",
        "  - dense: {fan_in: 300, fan_out: 10}\n  - dense: {fan_in: 10, fan_out: 10}\n")))
    a, _ = init_tensors(net, 3)
    b, _ = init_tensors(longer, 3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


class _Net:
    def __init__(self, params):
        self.params, self.state = params, []


def test_init_normal_trunc_normal_and_unknown_kind():
    ps = [Param("a", TensorType((200, 200)), "normal", std=0.02),
          Param("b", TensorType((200, 200)), "trunc_normal", std=0.02)]
    a, b = init_tensors(_Net(ps), 0)[0]
    assert a.std() == pytest.approx(0.02, rel=0.02)
    assert np.abs(b).max() <= 0.04 + 1e-7 and b.std() == pytest.approx(0.02 * 0.8796, rel=0.02)
    with pytest.raises(SpecError, match=r"parameter c: unknown init kind 'lecun'"):
        init_tensors(_Net([Param("c", TensorType((2, 2)), "lecun")]), 0)
    with pytest.raises(SpecError, match="normal init needs std > 0"):
        init_tensors(_Net([Param("d", TensorType((2, 2)), "normal")]), 0)


# ------------------------------------------------------------------------------------ schedules

def cfg(**kw):
    base = dict(learning_rate=1.0, batch_size=8, epochs=10)
    return TrainConfig(**{**base, **kw})


def test_cosine_with_linear_warmup():
    c = cfg(cosine_decay=True, warmup_epochs=2)          # bpE 10: 20 warmup steps of 100
    lr = lambda s: learning_rate(c, s, 10)               # noqa: E731
    assert lr(1) == pytest.approx(0.05)
    assert lr(10) == pytest.approx(0.5)
    assert lr(20) == pytest.approx(1.0)
    assert lr(21) == pytest.approx(0.5 * (1 + math.cos(math.pi / 80)))
    assert lr(60) == pytest.approx(0.5)
    assert lr(100) == pytest.approx(0.0, abs=1e-12)
    assert lr(150) == pytest.approx(0.0, abs=1e-12)     # clamped past the end
    c0 = cfg(cosine_decay=True)
    assert learning_rate(c0, 1, 10) == pytest.approx(0.5 * (1 + math.cos(math.pi / 100)))


def test_exponential_decay_wins_over_cosine():
    c = cfg(cosine_decay=True, exp_lr_decay_rate=0.5, exp_lr_decay_epochs=2.0)
    lr = lambda s: learning_rate(c, s, 10)               # noqa: E731
    assert lr(1) == pytest.approx(1.0)                   # epoch_float = (s − 1)/bpE = 0
    assert lr(21) == pytest.approx(0.5)                  # 2 epochs = one decay period
    assert lr(41) == pytest.approx(0.25)
    assert lr(31) == pytest.approx(0.5 ** 1.5)
    w = cfg(exp_lr_decay_rate=0.5, exp_lr_decay_epochs=1.0, warmup_epochs=1)
    assert learning_rate(w, 5, 10) == pytest.approx(0.5)      # warmup: 5/10
    assert learning_rate(w, 11, 10) == pytest.approx(1.0)     # (1.0 − 1)/1 → rate^0
    assert learning_rate(w, 21, 10) == pytest.approx(0.5)


def test_constant_ignores_warmup():
    c = cfg(warmup_epochs=3)
    assert [learning_rate(c, s, 10) for s in (1, 15, 100)] == [1.0, 1.0, 1.0]


# ------------------------------------------------------------------------------------ scoring

def test_wilson_interval_numbers():
    lo, hi = wilson95(85, 100)
    assert (lo, hi) == (pytest.approx(0.767163, abs=1e-6), pytest.approx(0.906941, abs=1e-6))
    lo, hi = wilson95(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.277540, abs=1e-6)
    lo, hi = wilson95(10, 10)
    assert hi == 1.0 and lo == pytest.approx(1 - 0.277540, abs=1e-6)
    lo, hi = wilson95(3332, 3925)                        # p ≈ 0.85, n = 3925: ± ≈ 1.1 pt (training.md §7)
    assert (hi - lo) / 2 == pytest.approx(0.0112, abs=0.0003)
    assert wilson95(0, 0) == (0.0, 1.0)


def test_top1_first_max_wins_and_top5_ties_favour_the_label():
    logits = np.array([[1, 3, 3, 0, 0, 0], [5, 4, 3, 2, 1, 0], [0, 1, 1, 1, 1, 1]], np.float32)
    y = np.array([2, 5, 0])
    assert count_correct(logits, y, 1) == 0              # row 0: argmax is index 1, not the tied 2
    assert count_correct(logits, np.array([1, 0, 2]), 1) == 2    # row 2: the tied index 2 loses to 1
    # row 0: rank of class 2 = 0 ; row 1: rank of class 5 = 5 (miss) ; row 2: rank of class 0 = 5 (miss)
    assert count_correct(logits, y, 5) == 1
    assert count_correct(logits, np.array([3, 4, 3]), 5) == 3   # row 2: ties count for the label


# ------------------------------------------------------------------------------------ checkpoints

def _arrays(net, seed=0):
    params, state = init_tensors(net, seed)
    opt = [np.full(p.type.dims, i, np.float32) for i, p in enumerate(net.params * 2)]
    return params, opt, state


def test_checkpoint_roundtrip_names_and_metadata(tmp_path):
    net = net_of()
    params, opt, state = _arrays(net)
    keys = [(s, p.name) for s in ("m", "v") for p in net.params]
    path = save_checkpoint(tmp_path / "last.npz", net, keys, params, opt, state,
                           {"step": 5, "epoch": 1, "batch": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["last.npz"]          # no temp file left behind
    with np.load(path, allow_pickle=False) as f:
        names = list(f.files)
        meta = json.loads(str(f[META_KEY]))
    want = [p.name for p in net.params] + [f"opt.m.{p.name}" for p in net.params] + \
           [f"opt.v.{p.name}" for p in net.params] + [s.name for s in net.state] + [META_KEY]
    assert names == want
    assert "00.conv_bn.weight" in names and "opt.m.04.dense.weight" in names and "00.conv_bn.running_var" in names
    assert meta["format"] == "lmc-checkpoint" and meta["net_hash"] == net_hash(net) and meta["step"] == 5
    ck = load_checkpoint(path, net, keys)
    assert all(np.array_equal(a, b) for a, b in zip(ck.params + ck.opt + ck.state, params + opt + state))
    with pytest.raises(CheckpointError, match=r"optimizer state \['m', 'v'\] for 18 tensors but the spec's optimizer "
                                         r"needs \['momentum'\] for 9"):
        load_checkpoint(path, net, [("momentum", p.name) for p in net.params])


def test_net_hash_ignores_the_recipe_but_not_the_structure():
    a = net_of()
    b = infer(load_spec("t.yaml", text=CNN.replace("learning_rate: 0.1", "learning_rate: 0.5")))
    c = infer(load_spec("t.yaml", text=CNN.replace("fan_out: 300", "fan_out: 301").replace("fan_in: 300", "fan_in: 301")))
    assert net_hash(a) == net_hash(b) != net_hash(c)


def test_layout_mismatch_names_the_first_tensor(tmp_path):
    net = net_of()
    other = infer(load_spec("t.yaml", text=CNN.replace("fan_out: 300", "fan_out: 301").replace("fan_in: 300", "fan_in: 301")))
    params, opt, state = _arrays(other)
    path = save_checkpoint(tmp_path / "o.npz", other, [(s, p.name) for s in ("m", "v") for p in other.params],
                           params, opt, state, {"step": 0})
    with pytest.raises(CheckpointError, match=r"tensor '04.dense.weight' has shape \[576, 301\] there but \[576, 300\]"):
        load_init(path, net)
    with pytest.raises(CheckpointError, match=r"has no tensor '00.conv_bn.weight'"):
        check_layout({}, [(p.name, p.type.dims) for p in net.params], "f.npz")
    t = {p.name: np.zeros(p.type.dims, np.float32) for p in net.params}
    t["99.extra"] = np.zeros(3, np.float32)
    with pytest.raises(CheckpointError, match=r"has a tensor '99.extra' \[3\] that the spec does not"):
        check_layout(t, [(p.name, p.type.dims) for p in net.params], "f.npz")


def write_safetensors(path, tensors: dict[str, np.ndarray]):
    header, blobs, off = {}, [], 0
    for k, a in tensors.items():
        b = np.ascontiguousarray(a, "<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_init_from_bare_npz_safetensors_and_flat_bin_agree(tmp_path):
    net = net_of()
    params, _, state = _arrays(net, seed=4)
    named = {p.name: a for p, a in zip(net.params, params)}
    np.savez(tmp_path / "bare.npz", **named)
    write_safetensors(tmp_path / "bare.safetensors", {**named, **{s.name: a + 1 for s, a in zip(net.state, state)}})
    flatten(params).astype("<f4").tofile(tmp_path / "net_params.bin")
    a = load_init(tmp_path / "bare.npz", net)
    b = load_init(tmp_path / "bare.safetensors", net)
    c = load_init(tmp_path / "net_params.bin", net)
    for x, y, z, w in zip(a.params, b.params, c.params, params):
        assert np.array_equal(x, w) and np.array_equal(y, w) and np.array_equal(z, w)
    assert a.state is None and c.state is None                      # no BN statistics in these
    assert all(np.array_equal(x, y + 1) for x, y in zip(b.state, state))
    # the reference's BN companion file is used when its size is exact
    flatten([a + 2 for a in state]).astype("<f4").tofile(tmp_path / "net_bn_stats.bin")
    c = load_init(tmp_path / "net_params.bin", net)
    assert all(np.array_equal(x, y + 2) for x, y in zip(c.state, state))


def test_bad_bin_size_is_refused(tmp_path):
    net = net_of()
    np.zeros(net.total_params - 1, "<f4").tofile(tmp_path / "p.bin")
    with pytest.raises(CheckpointError, match=rf"has {4 * (net.total_params - 1):,} bytes but the spec's "
                                         rf"{net.total_params:,} parameters need {4 * net.total_params:,}"):
        load_init(tmp_path / "p.bin", net)
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(CheckpointError, match="unknown checkpoint format '.txt'"):
        read_tensors(tmp_path / "p.txt")


def test_bootstrap_prefix_and_range(tmp_path):
    net = net_of()
    params, _, state = _arrays(net)
    n = net.total_params
    src = np.arange(n + 50, dtype="<f4")
    src.tofile(tmp_path / "bb_params.bin")
    src[:100].tofile(tmp_path / "prefix.bin")         # a flat prefix file holds exactly the prefix
    c = dataclasses.replace(net.spec.train, bootstrap_backbone=(str(tmp_path / "prefix.bin"), 100))
    before = flatten(params)
    p = list(params)
    apply_bootstrap(p, list(state), net, c)
    after = flatten(p)
    assert np.array_equal(after[:100], src[:100]) and np.array_equal(after[100:], before[100:])
    c = dataclasses.replace(net.spec.train, bootstrap_backbone=(str(tmp_path / "bb_params.bin"), 100))
    with pytest.raises(CheckpointError, match=f"has {n + 50:,} floats, but the prefix is 100"):
        apply_bootstrap(list(params), list(state), net, c)
    c = dataclasses.replace(net.spec.train, bootstrap_backbone_range=(str(tmp_path / "bb_params.bin"), 10, 40, 7))
    p = list(params)
    apply_bootstrap(p, list(state), net, c)
    after = flatten(p)
    assert np.array_equal(after[10:17], src[40:47]) and np.array_equal(after[:10], before[:10])
    assert np.array_equal(after[17:], before[17:])
    c = dataclasses.replace(net.spec.train, bootstrap_backbone_range=(str(tmp_path / "bb_params.bin"), n - 3, 0, 7))
    with pytest.raises(CheckpointError, match="destination window .* past the end of the spec's"):
        apply_bootstrap(list(params), list(state), net, c)


def test_bootstrap_by_name_from_a_checkpoint_or_run(tmp_path):
    net = net_of()
    src_params, opt, src_state = _arrays(net, seed=3)
    src_state = [s + 1.5 for s in src_state]
    keys = [(s, p.name) for s in ("m", "v") for p in net.params]
    run = tmp_path / "R"
    save_checkpoint(run / "last.npz", net, keys, src_params, opt, src_state, {"step": 1})
    params, _, state = _arrays(net, seed=0)
    sizes = np.cumsum([p.type.size for p in net.params])
    k = 2                                      # the first layer's weight and bias
    c = dataclasses.replace(net.spec.train, bootstrap_backbone=(str(run), int(sizes[k - 1])))
    p, s = list(params), list(state)
    notes = apply_bootstrap(p, s, net, c)
    assert all(np.array_equal(p[i], src_params[i]) for i in range(k))
    assert all(np.array_equal(p[i], params[i]) for i in range(k, len(params)))
    layer0 = net.params[0].name.split(".")[0]
    for st, a, b in zip(net.state, s, src_state):       # BN statistics of the copied layers only
        assert np.array_equal(a, b) == (st.name.split(".")[0] == layer0), st.name
    assert "2 tensors" in notes[0]
    c = dataclasses.replace(net.spec.train, bootstrap_backbone=(str(run / "last.npz"), int(sizes[0]) + 1))
    with pytest.raises(CheckpointError, match="ends inside"):
        apply_bootstrap(list(params), list(state), net, c)
    np.savez(tmp_path / "other.npz", x=np.zeros(3, np.float32))
    c = dataclasses.replace(net.spec.train, bootstrap_backbone=(str(tmp_path / "other.npz"), int(sizes[0])))
    with pytest.raises(CheckpointError, match=f"has no tensor '{net.params[0].name}'"):
        apply_bootstrap(list(params), list(state), net, c)
    (tmp_path / "zip.bin").write_bytes((tmp_path / "other.npz").read_bytes()[:260])     # zip bytes as .bin
    c = dataclasses.replace(net.spec.train, bootstrap_backbone=(str(tmp_path / "zip.bin"), 65))
    with pytest.raises(CheckpointError, match="NumPy file, not a flat float32"):
        apply_bootstrap(list(params), list(state), net, c)


def test_det_prior_sets_the_objectness_biases_only():
    from pathlib import Path
    from lmc.graph.infer import infer
    from lmc.graph.init import apply_det_prior, init_tensors
    from lmc.spec.netspec import load_spec
    spec = load_spec(Path(__file__).resolve().parents[1] / "specs" / "digits_fpn_det.yaml")  # det_prior_pi: 0.01
    net = infer(spec)
    params, _ = init_tensors(net, 0)
    before = [p.copy() for p in params]
    notes = apply_det_prior(params, net, spec.train)
    assert len(notes) == 1
    changed = [p.name for p, a, b in zip(net.params, params, before) if not np.array_equal(a, b)]
    assert changed == [f"05.fpn_detect.head{lvl}.bias" for lvl in (3, 4, 5)]
    for name in changed:
        bias = params[[p.name for p in net.params].index(name)]
        obj = np.zeros(bias.shape, bool)
        obj[4::15] = True                                          # [tx, ty, tw, th, obj, 10 classes] per anchor
        assert np.allclose(1 / (1 + np.exp(-bias[obj])), 0.01) and (bias[~obj] == 0).all()
