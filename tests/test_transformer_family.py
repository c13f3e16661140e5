"""The transformer family's runtime pieces: vit_init / cnx_init, the text dataset, per-token
evaluation, sampling, and flash_attn building the same function as the composed attention."""
from __future__ import annotations

import numpy as np
import pytest

from lmc.data import load_dataset
from lmc.data import text as textdata
from lmc.evaluate.score import EvalResult, _score
from lmc.graph.infer import infer
from lmc.graph.init import init_tensors, recipe_inits
from lmc.evaluate.sample import pick
from lmc.spec.netspec import load_spec

VIT = """name: v
input: {channels: 1, height: 8, width: 8}
layers:
  - patch_embed: {ic: 1, dim: 16, patch_size: 2, n_patches: 16}
  - transformer_encoder: {dim: 16, heads: 2, mlp_dim: 32, n_blocks: 1}
  - dense: {fan_in: 16, fan_out: 10}
train: {batch_size: 4, learning_rate: 0.01, epochs: 1, vit_init: true}
"""

CNX = """name: c
input: {channels: 3, height: 16, width: 16}
layers:
  - conv_next_stem: {ic: 3, oc: 8, patch: 4}
  - conv_next_stage: {channels: 8, n_blocks: 1}
  - global_avg_pool
  - dense: {fan_in: 8, fan_out: 10}
train: {batch_size: 4, learning_rate: 0.01, epochs: 1, cnx_init: true}
"""


def _by_name(net, seed=0):
    params, _ = init_tensors(net, seed)
    return {p.name: a for p, a in zip(net.params, params)}


def test_vit_init_follows_the_seed():
    net = infer(load_spec("v.yaml", text=VIT))
    t = _by_name(net)
    w = t["00.patch_embed.weight"]                      # U(±1/√(ic·p²)) = U(±0.5)
    assert np.abs(w).max() <= 0.5 and np.abs(w).max() > 0.4
    for name in ("00.patch_embed.cls", "00.patch_embed.pos"):
        assert 0.01 < t[name].std() < 0.03
    for name in ("01.transformer_encoder.0.attn.q.weight", "01.transformer_encoder.0.mlp.fc1.weight", "02.dense.weight"):
        a = t[name]
        assert np.abs(a).max() <= 0.04 + 1e-7 and 0.012 < a.std() < 0.02    # trunc-normal 0.02 at ±2σ
    assert not t["01.transformer_encoder.0.attn.q.bias"].any()
    assert (t["01.transformer_encoder.0.ln1.gamma"] == 1).all()
    plain = infer(load_spec("v.yaml", text=VIT.replace("vit_init: true", "vit_init: false")))
    assert recipe_inits(plain) == {}


def test_cnx_init_truncates_every_conv_and_linear():
    net = infer(load_spec("c.yaml", text=CNX))
    rules = recipe_inits(net)
    weights = [p.name for p in net.params if p.name.endswith("weight")]
    assert weights and sorted(rules) == sorted(weights)
    t = _by_name(net)
    for name in weights:
        assert np.abs(t[name]).max() <= 0.04 + 1e-7
    scale = [n for n in t if n.endswith("layer_scale")]
    assert scale and all(np.allclose(t[n], 1e-6) for n in scale)


def test_text_windows_are_next_byte_targets(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("hello, world! " * 20)
    ds = load_dataset("text", f, (8,), 256)
    assert ds.x_train.shape[1:] == (8,) and ds.y_train.shape[1:] == (8, 1)
    data = f.read_bytes()
    # window i starts at byte 8·i; its targets are the following bytes
    assert bytes(ds.x_train[1].astype(np.uint8)) == data[8:16]
    assert bytes(ds.y_train[1, :, 0].astype(np.uint8)) == data[9:17]
    n = (len(data) - 1) // 8
    assert len(ds.x_train) + len(ds.x_val) == n and len(ds.x_val) == max(1, n // 10)
    # the validation windows are the tail of the text
    assert bytes(ds.x_val[-1].astype(np.uint8)) == data[8 * (n - 1):8 * n]


def test_text_errors(tmp_path):
    from lmc.core.errors import DataError
    bad = tmp_path / "b.txt"
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DataError, match="not UTF-8"):
        load_dataset("text", bad, (4,), 256)
    with pytest.raises(DataError, match="seq_len"):
        load_dataset("text", bad, (1, 2, 2), 256)
    with pytest.raises(DataError, match="no such file"):
        load_dataset("text", tmp_path / "missing.txt", (4,), 256)


def test_char_vocab_windows_decode_to_the_text(tmp_path):
    f = tmp_path / "t.txt"
    text = "héllo, wörld — ünïcode! " * 20
    f.write_text(text, encoding="utf-8")
    ds = load_dataset("text", f, (8,), 32, vocab="char")
    assert ds.vocab == "".join(sorted(set(text))) and ds.num_classes == 32
    assert textdata.decode(ds.x_train[1], ds.vocab) == text[8:16]          # characters, not bytes
    assert textdata.decode(ds.y_train[1, :, 0], ds.vocab) == text[9:17]
    assert len(ds.x_train) + len(ds.x_val) == (len(text) - 1) // 8
    assert load_dataset("text", f, (8,), 256).x_train.shape[0] > len(ds.x_train)   # bytes: more tokens


def test_char_vocab_errors(tmp_path):
    from lmc.core.errors import DataError, SpecError
    f = tmp_path / "t.txt"
    f.write_text("abcdefghij" * 10)
    with pytest.raises(DataError, match="10 distinct characters, but the net's vocab_size is 8"):
        load_dataset("text", f, (4,), 8, vocab="char")
    with pytest.raises(DataError, match="outside the vocabulary: 'z'"):
        textdata.encode(b"abz", "ab")
    head = "name: t\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 2}\n"
    assert load_spec("t.yaml", text=head + "dataset: {kind: text, vocab: char}\n").dataset_vocab == "char"
    assert load_spec("t.yaml", text=head + "dataset: text\n").dataset_vocab == "byte"
    with pytest.raises(SpecError, match=r"t.yaml:6:16: dataset.vocab: expected one of byte, char, got 'word'"):
        load_spec("t.yaml", text=head + "dataset:\n  {kind: text, vocab: word}\n")
    with pytest.raises(SpecError, match="only a text dataset has a vocabulary"):
        load_spec("t.yaml", text=head + "dataset: {kind: digits, vocab: char}\n")


def test_token_ids_past_the_embedding_are_refused(tmp_path):
    from lmc.core.errors import DataError
    from lmc.data.fit import load_data
    corpus = tmp_path / "c.txt"
    corpus.write_text("ABC~" * 50)                       # '~' is byte 126
    spec = tmp_path / "lm.yaml"
    spec.write_text(LM.replace("PATH", str(corpus)).replace("{vocab_size: 256, seq_len: 8, d_model: 8,",
                                                            "{vocab_size: 100, seq_len: 8, d_model: 8,"))
    with pytest.raises(DataError, match=r"token ids must be integers in \[0, 100\).*found 65…126"):
        load_data(infer(load_spec(spec)), None, 0)


def test_embedded_corpus_is_sizeable():
    data, what = textdata.corpus_bytes(None)
    assert len(data) > 500_000 and "stdlib" in what
    assert 2.5 < textdata.unigram_entropy(textdata.encode(data, None)) < 4.0


def test_per_token_eval_counts_tokens_and_perplexity():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 5, 4, 1)).astype(np.float32)
    y = rng.integers(0, 5, (3, 4, 1)).astype(np.int32)
    res = EvalResult(0, 0, None)
    _score(res, logits, y)
    assert res.n == 12
    assert res.top1 == int((logits.argmax(axis=1) == y).sum())
    z = logits.astype(np.float64)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    nll = -np.take_along_axis(logp, y[:, None], axis=1).sum()
    assert res.nll == pytest.approx(nll, rel=1e-9)
    assert res.as_dict()["perplexity"] == pytest.approx(np.exp(nll / 12), rel=1e-9)


def test_pick_greedy_and_top_k():
    z = np.array([0.0, 3.0, 1.0, 2.0])
    rng = np.random.default_rng(0)
    assert pick(z, 0.0, 0, rng) == 1
    drawn = {pick(z, 1.0, 2, rng) for _ in range(200)}
    assert drawn == {1, 3}


def _enc(flash: bool, causal: bool) -> str:
    return f"""name: e
input: {{channels: 8, height: 6, width: 1}}
layers:
  - spatial_flatten
  - transformer_encoder: {{dim: 8, heads: 2, mlp_dim: 16, n_blocks: 1, keep_sequence: true,
                          causal_mask: {str(causal).lower()}, flash_attn: {str(flash).lower()}}}
"""


def _np_forward(net, P, x):
    """The net's primitive graph evaluated with the float64 NumPy references."""
    vals = {net.graph.x.id: x}
    for n in net.graph.nodes:
        args = [vals[v.id] for v in n.inputs] + [P[p.name] for p in n.params]
        vals[n.out.id] = n.prim.reference(np, *args, **n.prim.attrs)
    return vals[net.output.id]


SWIN = """name: s
input: {channels: 8, height: 4, width: 4}
layers:
  - swin_stage: {dim: 8, heads: 2, mlp_dim: 16, window_size: 2, n_blocks: 2, flash_attn: FLASH}
"""


def test_flash_attn_with_swins_bias_builds_the_same_function():
    """Shifted windows: the relative position bias + shift mask reach flash_attn as its bias."""
    plain = infer(load_spec("s.yaml", text=SWIN.replace("FLASH", "false")))
    flash = infer(load_spec("s.yaml", text=SWIN.replace("FLASH", "true")))
    assert [p.name for p in plain.params] == [p.name for p in flash.params]
    fa = [n for n in flash.graph.nodes if n.prim.name == "flash_attn"]
    assert len(fa) == 2 and all(n.inputs[3].node.prim.name == "window_bias" for n in fa)
    assert "softmax" not in [n.prim.name for n in flash.graph.nodes]
    rng = np.random.default_rng(0)
    P = {p.name: rng.standard_normal(p.type.dims) for p in plain.params}
    x = rng.standard_normal(plain.input.dims)
    np.testing.assert_allclose(_np_forward(plain, P, x), _np_forward(flash, P, x), rtol=1e-10, atol=1e-10)


@pytest.mark.iree
def test_swin_flash_attn_train_step_against_jax():
    """The whole-train-step oracle on the shifted-window stage with flash_attn (the plain stage's
    own case, the same loss and optimizer, is in test_oracle's rotation)."""
    pytest.importorskip("jax")
    from tests.test_oracle import run_oracle
    run_oracle([("swin_stage", dict(dim=8, heads=2, mlp_dim=16, window_size=2, n_blocks=2, flash_attn=True))],
               (2, 8, 4, 4), "xla_same", "per_pixel_ce", "adam#2")


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_builds_the_same_function(causal):
    plain = infer(load_spec("e.yaml", text=_enc(False, causal)))
    flash = infer(load_spec("e.yaml", text=_enc(True, causal)))
    assert [p.name for p in plain.params] == [p.name for p in flash.params]
    assert "flash_attn" in [n.prim.name for n in flash.graph.nodes]
    assert "softmax" not in [n.prim.name for n in flash.graph.nodes]
    rng = np.random.default_rng(0)
    P = {p.name: rng.standard_normal(p.type.dims) for p in plain.params}
    x = rng.standard_normal(plain.input.dims)
    np.testing.assert_allclose(_np_forward(plain, P, x), _np_forward(flash, P, x), rtol=1e-10, atol=1e-10)


DETR = """name: d
input: {channels: 8, height: 5, width: 1}
layers:
  - spatial_flatten
  - transformer_decoder: {dim: 8, heads: 2, mlp_dim: 16, n_blocks: 1, n_queries: 3}
  - detr_heads: {dim: 8, n_classes: 3}
train: {learning_rate: 0.1, batch_size: 2, epochs: 1}
"""


def test_detr_heads_train_with_the_set_loss_only():
    from lmc.core.errors import SpecError
    from lmc.check.net import check_recipe_fits
    from lmc.lower.lowering import lower
    net = infer(load_spec("d.yaml", text=DETR))
    assert "@forward" in lower(net, "forward")
    # the default loss (class_ce) needs [batch, classes]: refused at loss_kind, naming the output
    with pytest.raises(SpecError, match=r"class_ce needs logits \[batch, classes\], but the net's output is \[2, 3, 8\]"):
        check_recipe_fits(net)
    net = infer(load_spec("d.yaml", text=DETR.replace("epochs: 1}", "epochs: 1, loss_kind: detr_set}")))
    text = lower(net, "train_step")
    assert "@train_step" in text and "@detr_set_" in text


# bf16 tolerance against float64 JAX: operands rounded to 8 mantissa bits (relative 2⁻⁹ ≈ 2e-3
# each), products accumulated in f32.  Through a causal block, its backward and one SGD step:
# loss within 1%, each tensor's update within 10% of its largest entry + 1% of the net's largest
# update.  Observed (IREE 3.13, llvm-cpu): loss 4.3e-4 / 2.5e-3 (plain / flash), updates ≤ 3.8%,
# the same in the convert and the emulated form (LowerOptions.bf16_form);
# the f32 module is within 1e-5 of the same reference; a wrong gradient is off by O(1).
BF16_LOSS_RTOL, BF16_UPDATE_RTOL = 1e-2, 0.10


# the nets: a causal block (plain or flash attention); a ViT patch embed (its conv bf16 under bf16
# alone) + block; a conv net under bf16_conv (a stride-1
# conv and a stride-2 residual block: the conv template's forward, dW and phase-split dx
# matmuls; batch norm stays f32)
BF16_NETS = {
    "causal": ([("transformer_encoder", dict(dim=8, heads=2, mlp_dim=16, n_blocks=1, keep_sequence=True,
                                             causal_mask=True))], (4, 6, 8), {}),
    "causal_flash": ([("transformer_encoder", dict(dim=8, heads=2, mlp_dim=16, n_blocks=1, keep_sequence=True,
                                                   causal_mask=True, flash_attn=True))], (4, 6, 8), {}),
    "vit_patch": ([("patch_embed", dict(ic=2, dim=8, patch_size=2, n_patches=9)),     # the patch embed's conv
                   ("transformer_encoder", dict(dim=8, heads=2, mlp_dim=16, n_blocks=1))], (4, 2, 6, 6), {}),
    "conv_bf16_conv": ([("conv2d", dict(ic=2, oc=4, k_size=3)),
                        ("residual_block", dict(ic=4, oc=4, n_blocks=1, first_stride=2))], (4, 2, 6, 6),
                       {"bf16_conv": True}),
}


@pytest.mark.iree
@pytest.mark.parametrize("case,form", [("causal", "convert"), ("causal_flash", "convert"), ("causal", "emulated"),
                                       ("vit_patch", "convert"),
                                       ("conv_bf16_conv", "convert"), ("conv_bf16_conv", "emulated")])
def test_bf16_train_step_against_jax_at_bf16_tolerance(case, form):
    pytest.importorskip("jax")
    import jax.numpy as jnp
    from lmc.lower.lowering import abi, hyperparams, lower
    from lmc.lower.options import LowerOptions
    from tests.test_oracle import _batch, _init, _module, classifier_yaml, make_jax_step
    layers, x_dims, extra = BF16_NETS[case]
    train = {"learning_rate": 0.5}
    net32 = infer(load_spec("o.yaml", text=classifier_yaml(layers, x_dims, "xla_same", train)))
    net = infer(load_spec("o.yaml", text=classifier_yaml(layers, x_dims, "xla_same",
                                                         {**train, "bf16": True, **extra})))
    # both spellings of train.bf16 (LowerOptions.bf16_form)
    text, text32 = lower(net, "train_step", options=LowerOptions(bf16_form=form)), lower(net32, "train_step")
    assert "xui32>" in text and "xui32>" not in text32           # the bf16 rounding of the operands
    assert ("xbf16>" in text) == (form == "convert")              # … then bf16×bf16→f32 dots
    if extra or case == "vit_patch":                              # the convs' own matmuls: not only the head's
        convs = [f for f in text.split("func.func private @")[1:] if f.startswith("conv_")]
        assert convs and all("xui32>" in f for f in convs)
    a = abi(net)
    rng = np.random.default_rng(0)
    P, S = _init(net, rng)
    x, labels = _batch(net, a, rng)
    hp = np.asarray(hyperparams(a, net.spec.train, 0.5, 1), np.float32)
    args = [P[p.name] for p in net.params] + [S[s.name] for s in net.state] + [x, labels, hp]
    out = [np.asarray(r) for r in _module(text).train_step(*args)]
    out32 = [np.asarray(r) for r in _module(text32).train_step(*args)]
    j64 = {k: jnp.asarray(v, jnp.float64) for k, v in P.items()}       # test_oracle enables x64
    nP, _, _, _, jloss, _, _ = make_jax_step(net, a)(j64, {}, {}, {}, jnp.asarray(x, jnp.float64),
                                                     jnp.asarray(labels), dict(zip(a.hp, map(float, hp))))
    loss, loss32, jloss = float(out[-2]), float(out32[-2]), float(jloss)
    assert abs(loss - jloss) <= BF16_LOSS_RTOL * abs(jloss)
    assert abs(loss32 - jloss) <= 1e-5 * abs(jloss)
    assert abs(loss - loss32) > 1e-5 * abs(jloss), "bf16 gave the f32 result: the operands were not rounded"
    # a tensor with no true gradient (k's bias: softmax ignores a per-row constant) gets bf16
    # noise of the net's scale: the floor is 1% of the largest update of any tensor
    wants = {p.name: np.asarray(nP[p.name]) - P[p.name] for p in net.params}
    floor = 0.01 * max(np.abs(w).max() for w in wants.values())
    worst = {}
    for i, p in enumerate(net.params):
        want, got = wants[p.name], out[i] - P[p.name]
        worst[p.name] = np.abs(got - want).max() / (np.abs(want).max() + floor / BF16_UPDATE_RTOL)
    print(f"bf16 loss rel {abs(loss - jloss) / abs(jloss):.2e}, worst update rel {max(worst.values()):.3f}")
    bad = {k: v for k, v in worst.items() if v > BF16_UPDATE_RTOL}
    assert not bad, bad


LM = """name: lm
input: {features: 8}
layers:
  - token_position_embed: {vocab_size: 256, seq_len: 8, d_model: 8, gather: true}
  - transformer_encoder: {dim: 8, heads: 2, mlp_dim: 16, n_blocks: 1, causal_mask: true}
  - lm_head: {d_model: 8, vocab_size: 256, seq_len: 8}
train: {optimizer: adam, learning_rate: 0.01, batch_size: 4, epochs: 1, loss_kind: per_pixel_ce}
dataset: {kind: text, path: PATH}
"""


@pytest.mark.iree
def test_train_then_sample_a_byte_lm(tmp_path):
    from lmc.evaluate.sample import sample
    from lmc.train.trainer import TrainOptions, train
    corpus = tmp_path / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    spec = tmp_path / "lm.yaml"
    spec.write_text(LM.replace("PATH", str(corpus)))
    import io
    from rich.console import Console
    s = train(infer(load_spec(spec)), TrainOptions(out=tmp_path / "run", max_steps=30), Console(file=io.StringIO()))
    assert s.eval.nll is not None and s.eval.n == len(load_dataset("text", corpus, (8,), 256).x_val) * 8
    net1 = infer(load_spec(spec), 1)
    ckpt = tmp_path / "run" / "last.npz"
    a = sample(net1, ckpt, "the ", 12, 0.0, 0, 0)
    assert a.startswith("the ") and a == sample(net1, ckpt, "the ", 12, 0.0, 0, 0)     # greedy: deterministic
    b, c = (sample(net1, ckpt, "the ", 12, 1.0, 5, 7) for _ in range(2))
    assert b == c                                                                      # same seed, same draws
    assert len(sample(net1, ckpt, "", 3, 1.0, 0, 1).encode("utf-8", "replace")) >= 4   # "\n" + 3 bytes


@pytest.mark.iree
def test_train_then_sample_a_char_lm(tmp_path):
    import io
    import json
    from rich.console import Console
    from lmc.run.checkpoint import read_tensors
    from lmc.core.errors import EvalError, LmcError, TrainError
    from lmc.evaluate.sample import sample
    from lmc.train.trainer import TrainOptions, train
    corpus = tmp_path / "c.txt"
    text = "the quick brown fox jumps over the lazy dog — ça va? " * 40
    corpus.write_text(text, encoding="utf-8")
    spec = tmp_path / "lm.yaml"
    spec.write_text(LM.replace("vocab_size: 256", "vocab_size: 40").replace("path: PATH", f"path: {corpus}, vocab: char"))
    run = tmp_path / "run"
    s = train(infer(load_spec(spec)), TrainOptions(out=run, max_steps=30), Console(file=io.StringIO()))
    chars = "".join(sorted(set(text)))
    assert s.eval.n == len(load_dataset("text", corpus, (8,), 40, vocab="char").x_val) * 8   # characters counted
    assert json.loads((run / "vocab.json").read_text(encoding="utf-8"))["chars"] == list(chars)
    assert read_tensors(run / "last.npz")[1]["vocab"] == chars           # saved with the weights
    net1 = infer(load_spec(spec), 1)
    out = sample(net1, run / "last.npz", "ça ", 20, 1.0, 0, 3)
    assert out.startswith("ça ") and len(out) == 23 and set(out) <= set(chars)   # one character per token
    from cli_run import run as cli
    r = cli("sample", spec, "--init", run / "last.npz", "--prompt", "ça ", "--tokens", 20, "--temperature", 1.0,
            "--seed", 3, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"prompt": "ça ", "text": out, "tokens": 20, "temperature": 1.0, "top_k": 0, "seed": 3}
    with pytest.raises(LmcError, match="--prompt: text has 1 character.*'Z'"):
        sample(net1, run / "last.npz", "Zebra", 2, 0.0, 0, 0)
    bare = tmp_path / "bare.npz"
    tensors, _ = read_tensors(run / "last.npz")
    np.savez(bare, **{p.name: tensors[p.name] for p in net1.params})
    with pytest.raises(LmcError, match="carries no character vocabulary"):
        sample(net1, bare, "the", 2, 0.0, 0, 0)
    corpus.write_text(text + "XYZ", encoding="utf-8")          # a changed corpus: other ids
    with pytest.raises(TrainError, match="character vocabulary differs"):
        train(infer(load_spec(spec)), TrainOptions(out=run, max_steps=40, resume=True), Console(file=io.StringIO()))
    from lmc.evaluate.checkpoint import evaluate_checkpoint
    with pytest.raises(EvalError, match="trained on another character vocabulary"):
        evaluate_checkpoint(infer(load_spec(spec)), run / "last.npz", None, None, None, lambda *a: None)


def test_sample_refuses_a_classifier():
    from lmc.core.errors import LmcError
    from lmc.evaluate.sample import check_lm
    with pytest.raises(LmcError, match="token_position_embed"):
        check_lm(infer(load_spec("v.yaml", text=VIT), 1))


def test_bf16_is_refused_on_a_net_without_a_bf16_primitive():
    from lmc.check import check
    from lmc.core.errors import SpecError
    net = infer(load_spec("c.yaml", text="name: c\ninput: {channels: 1, height: 4, width: 4}\nlayers:\n"
                                        "  - conv2d: {ic: 1, oc: 2, k_size: 3}\n  - global_avg_pool\n"
                                        "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, bf16: true}\n"))
    with pytest.raises(SpecError, match=r"train.bf16 rounds the operands .* this net has none \(its convs would "
                                        r"need bf16_conv: true\)"):
        check(net).raise_invalid()


def test_bf16_conv_rounds_the_standard_convs_only():
    from lmc.core.errors import SpecError
    from lmc.lower.lowering import abi, lower
    from lmc.lower.options import LowerOptions
    src = ("name: c\ninput: {channels: 2, height: 4, width: 4}\nlayers:\n"
           "  - separable_conv: {ic: 2, oc: 2}\n  - global_avg_pool\n"
           "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, bf16: true, bf16_conv: true}\n")
    net = infer(load_spec("c.yaml", text=src))
    abi(net)                                             # a conv-only net: bf16_conv gives it a bf16 form
    funcs = {f.split("(")[0]: f for f in lower(net, "train_step").split("func.func private @")[1:]}
    convs = {k: f for k, f in funcs.items() if k.startswith("conv_fwd")}
    assert len(convs) == 2
    assert sorted("xbf16>" in f for f in convs.values()) == [False, True]      # the depthwise one stays f32
    with pytest.raises(SpecError, match="bf16_conv covers the matmul form of conv, not LMC_CONV_FORM=direct"):
        lower(net, "train_step", options=LowerOptions(conv_form="direct"))


def test_bf16_modules_get_data_tiling_on_llvm_cpu_only(monkeypatch):
    """IREE emits AVX512-BF16's vdpbf16ps only for data-tiled (mmt4d) matmuls; without it the
    convert form is slower than f32 (benchmarks/bf16_forms.py).  An f32 module gets it only where
    the lowering asks (lower._packed_matmuls; off here)."""
    from lmc.compile import flags
    from lmc.core.errors import LmcError
    from lmc.lower.lowering import lower
    from lmc.lower.options import LowerOptions
    monkeypatch.delenv("IREE_EXTRA_FLAGS", raising=False)
    net = infer(load_spec("v.yaml", text=VIT.replace("epochs: 1,", "epochs: 1, bf16: true,")))
    text = lower(net, "train_step")
    assert "xbf16>" in text
    dt = "--iree-global-opt-data-tiling"
    assert dt in flags("llvm-cpu", None, text)
    off = LowerOptions(packed="off")
    unpacked = lower(net, "train_step", options=off)
    assert "xbf16>" in unpacked and dt in flags("llvm-cpu", None, unpacked)
    assert dt not in flags("llvm-cpu", None, lower(infer(load_spec("v.yaml", text=VIT)), "train_step", options=off))
    assert dt not in flags("cuda", None, text) and dt not in flags("rocm", None, text)
    assert "xbf16>" not in lower(net, "train_step", options=LowerOptions(bf16_form="emulated"))
    monkeypatch.setenv("LMC_BF16_FORM", "bf16")
    with pytest.raises(LmcError, match="LMC_BF16_FORM='bf16': expected one of emulated, convert"):
        LowerOptions.from_env()
