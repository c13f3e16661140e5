"""The trust tools (docs/trust.md): statistics against independent closed forms, `lmc compare`
and `lmc eval --dump-correct/--json` through the CLI, and [iree] `lmc eval` on a run's
checkpoint equal to the run's own last eval record."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lmc.trust.stats import clopper_pearson_lower, mcnemar
from cli_run import run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "specs" / "digits_mlp.yaml"



def bitmaps(b: int, c: int, both: int, neither: int):
    a = np.array([1] * b + [0] * c + [1] * both + [0] * neither, np.uint8)
    bb = np.array([0] * b + [1] * c + [1] * both + [0] * neither, np.uint8)
    return a, bb


# ------------------------------------------------------------------ statistics

def _binom_two_sided(b: int, d: int) -> float:
    """Exact two-sided binomial p at ½ (symmetric: twice the smaller tail, capped at 1)."""
    k = min(b, d - b)
    return min(1.0, 2 * sum(math.comb(d, i) for i in range(k + 1)) / 2 ** d)


@pytest.mark.parametrize("b,c", [(10, 2), (2, 10), (7, 7), (0, 5), (30, 12), (1, 0)])
def test_mcnemar_matches_closed_forms(b, c):
    r = mcnemar(*bitmaps(b, c, both=40, neither=3))
    assert (r.n, r.b, r.c, r.correct_a, r.correct_b) == (b + c + 43, b, c, b + 40, c + 40)
    assert r.p_exact == pytest.approx(_binom_two_sided(b, b + c), rel=1e-9)
    chi2 = max(abs(b - c) - 1, 0) ** 2 / (b + c)
    assert r.chi2 == pytest.approx(chi2)
    assert r.p_chi2 == pytest.approx(math.erfc(math.sqrt(chi2 / 2)), rel=1e-9)    # χ²(1) survival


def test_mcnemar_known_value_and_no_discordant_pairs():
    r = mcnemar(*bitmaps(10, 2, 0, 0))
    assert r.p_exact == pytest.approx(158 / 4096)            # 2·(1 + 12 + 66)/2¹²
    r = mcnemar(*bitmaps(0, 0, 5, 5))
    assert (r.p_exact, r.p_chi2) == (1.0, 1.0)


@pytest.mark.parametrize("k,n,alpha", [(95, 100, 0.001), (50, 100, 0.05), (3, 10, 0.01), (999, 1000, 0.001)])
def test_clopper_pearson_lower_is_the_binomial_tail_root(k, n, alpha):
    """The lower bound p solves P(Bin(n, p) ≥ k) = α (the tail computed here by summation)."""
    p = clopper_pearson_lower(k, n, alpha)
    tail = sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))
    assert 0 < p < k / n and tail == pytest.approx(alpha, rel=1e-6)


def test_clopper_pearson_edges():
    assert clopper_pearson_lower(0, 50, 0.01) == 0.0
    assert clopper_pearson_lower(1000, 1000, 0.001) == pytest.approx(0.001 ** (1 / 1000))   # unanimous: α^(1/n)


# ------------------------------------------------------------------ lmc compare

def test_compare_cli_json_and_table(tmp_path):
    a, b = bitmaps(10, 2, 40, 3)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    r = run("compare", tmp_path / "a.npy", tmp_path / "b.npy", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {k: d[k] for k in ("n", "b", "c")} == {"n": 55, "b": 10, "c": 2}
    assert d["acc_a"] == pytest.approx(50 / 55) and d["acc_b"] == pytest.approx(42 / 55)
    assert d["p_exact"] == pytest.approx(158 / 4096) and 0 < d["p_chi2"] < 1
    assert d["acc_a_ci"][0] < d["acc_a"] < d["acc_a_ci"][1]
    r = run("compare", tmp_path / "a.npy", tmp_path / "b.npy")
    assert r.exit_code == 0 and "b = 10" in r.stdout and "c = 2" in r.stdout


def test_compare_refuses_bad_bitmaps(tmp_path):
    np.save(tmp_path / "a.npy", np.ones(10, np.uint8))
    np.save(tmp_path / "short.npy", np.ones(9, np.uint8))
    np.save(tmp_path / "odd.npy", np.full(10, 2, np.uint8))
    np.save(tmp_path / "flat.npy", np.ones((2, 5), np.uint8))
    for other, msg in (("short.npy", "different lengths (10 vs 9)"), ("odd.npy", "expected 0/1 entries"),
                       ("flat.npy", "expected a non-empty 1-D bitmap"), ("none.npy", "no such bitmap file")):
        r = run("compare", tmp_path / "a.npy", tmp_path / other)
        assert r.exit_code == 2 and msg in r.stderr, (other, r.output)


# ------------------------------------------------------------------ lmc eval on a run's checkpoint [iree]

def _records(run_dir: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


@pytest.mark.iree
@pytest.mark.parametrize("sets", [[], ["--set", "train.use_ema=true", "--set", "train.ema_decay=0.9"]],
                         ids=["live", "ema"])
def test_eval_equals_the_runs_last_eval_record(tmp_path, sets):
    """`lmc eval --region auto` on RUN/last.npz: the same n, correct count and interval as the
    run's last eval record (same weights region, batching and denominator); the bitmap it dumps
    sums to that count; `lmc compare` of the bitmap with itself finds no discordant pair."""
    pytest.importorskip("iree.runtime")
    out = tmp_path / "run"
    r = run("train", MLP, "--epochs", 2, "--out", out, *sets)
    assert r.exit_code == 0, r.output
    ev = _records(out, "eval")[-1]
    r = run("eval", MLP, "--init", out / "last.npz", "--json", "--dump-correct", tmp_path / "ok.npy", *sets)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["region"] == ev["region"] == ("ema" if sets else "live")
    assert d["n"] == ev["n"] == 360
    assert d["correct"] == round(ev["top1"] * ev["n"]) and d["top1"] == ev["top1"]
    assert d["top1_ci"] == [ev["top1_lo"], ev["top1_hi"]] and d["top5"] == ev["top5"]
    mask = np.load(tmp_path / "ok.npy")
    assert mask.dtype == np.uint8 and mask.shape == (360,) and int(mask.sum()) == d["correct"]
    r = run("compare", tmp_path / "ok.npy", tmp_path / "ok.npy", "--json")
    assert json.loads(r.stdout)["b"] == 0


def test_eval_dump_correct_wants_npy(tmp_path):
    r = run("eval", MLP, "--init", tmp_path / "x.npz", "--dump-correct", tmp_path / "ok.txt")
    assert r.exit_code == 2 and "expected a .npy file name" in r.stderr


# ------------------------------------------------------------------ lmc attack

def test_projection_keeps_the_ball_and_the_box():
    from lmc.trust.attack import _start, project
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (50, 8)).astype(np.float32)
    for norm in ("linf", "l2"):
        far = x + rng.standard_normal(x.shape).astype(np.float32) * 3
        p = project(far, x, 0.3, norm, 0.0, 1.0)
        d = (p - x).astype(np.float64)
        size = np.abs(d).max(1) if norm == "linf" else np.sqrt((d ** 2).sum(1))
        assert (size <= 0.3 + 1e-6).all() and p.min() >= 0 and p.max() <= 1
        s = _start(rng, x, 0.3, norm)
        size = np.abs(s).max(1) if norm == "linf" else np.sqrt((s.astype(np.float64) ** 2).sum(1))
        assert (size <= 0.3 + 1e-6).all() and size.max() > 0.1
        assert (project(x + _start(rng, x, 0.0, norm), x, 0.0, norm, 0.0, 1.0) == x).all()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """specs/digits_mlp.yaml trained for 3 epochs: (checkpoint, clean correct count)."""
    pytest.importorskip("iree.runtime")
    from conftest import iree_missing
    if iree_missing():
        pytest.skip(iree_missing())
    out = tmp_path_factory.mktemp("trust") / "run"
    r = run("train", MLP, "--epochs", 3, "--out", out)
    assert r.exit_code == 0, r.output
    ev = _records(out, "eval")[-1]
    return out / "last.npz", round(ev["top1"] * ev["n"])


@pytest.mark.iree
def test_attack_eps0_is_clean_and_accuracy_never_rises(trained, tmp_path):
    ckpt, clean = trained
    r = run("attack", MLP, "--init", ckpt, "--eps", "0.2,0,0.05,0.1", "--json", "--plot", tmp_path / "a.png")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["clean"]["correct"] == clean and d["clean"]["n"] == 360
    res = {x["eps"]: x for x in d["results"]}
    assert [x["eps"] for x in d["results"]] == [0.2, 0.0, 0.05, 0.1]        # the order asked for
    assert res[0.0]["correct"] == clean and res[0.0]["top1"] == d["clean"]["top1"]
    accs = [res[e]["correct"] for e in (0.0, 0.05, 0.1, 0.2)]
    assert accs == sorted(accs, reverse=True)
    assert accs[-1] < 0.5 * clean           # the gradient points uphill: ε = 0.2 breaks most examples
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    r = run("attack", MLP, "--init", ckpt, "--eps", "0.5", "--norm", "l2", "--limit", 100, "--restarts", 2,
            "--plot", tmp_path / "b.png")
    assert r.exit_code == 0, r.output
    assert "0.5" in r.stdout and "/100" in r.stdout


@pytest.mark.parametrize("args,msg", [
    (["--eps", "-0.1"], "radii must be finite and ≥ 0, got -0.1"),
    (["--eps", "a,b"], "expected comma-separated numbers"),
    (["--eps", "0.1", "--norm", "l3"], "--norm 'l3': expected linf or l2"),
    (["--eps", "0.1", "--pgd-steps", "0"], "--pgd-steps must be at least 1"),
    (["--eps", "0.1", "--step-size", "-1"], "--step-size must be > 0"),
])
def test_attack_refuses_nonsense(tmp_path, args, msg):
    r = run("attack", MLP, "--init", tmp_path / "none.npz", *args)
    assert r.exit_code == 2 and msg in r.stderr, r.output


def test_trust_tools_refuse_a_net_without_classifier_head(tmp_path):
    p = tmp_path / "seg.yaml"
    p.write_text("name: seg\ninput: {channels: 1, height: 8, width: 8}\nlayers:\n  - conv2d: [1, 4, 3]\n")
    r = run("attack", p, "--init", tmp_path / "none.npz", "--eps", "0.1")
    assert r.exit_code == 2 and "not classifier logits [batch, classes]" in r.stderr, r.output


@pytest.mark.iree
def test_trust_tools_refuse_a_checkpoint_of_another_spec(trained):
    ckpt, _ = trained
    r = run("attack", ROOT / "specs" / "digits_cnn.yaml", "--init", ckpt, "--eps", "0.1")
    assert r.exit_code == 2 and "does not match the spec" in r.stderr, r.output


# ------------------------------------------------------------------ lmc certify

@pytest.mark.iree
def test_certify_json_follows_cohen(trained):
    """Each example: pA_lower is the Clopper–Pearson bound of its count, radius σ·Φ⁻¹(pA_lower)
    (Φ⁻¹ from the standard library, not scipy), abstention exactly when pA_lower ≤ ½; the
    certified accuracy at r counts the correct certificates with radius ≥ r."""
    from statistics import NormalDist
    ckpt, _ = trained
    sigma, n, alpha = 0.25, 400, 0.01
    r = run("certify", MLP, "--init", ckpt, "--sigma", sigma, "--n0", 20, "--n", n, "--alpha", alpha,
            "--limit", 40, "--radii", "0,0.25", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout.strip().splitlines()[-1])
    ex = d["examples"]
    assert len(ex) == 40 and [e["index"] for e in ex] == list(range(40))
    cap = sigma * NormalDist().inv_cdf(alpha ** (1 / n))
    for e in ex:
        assert 0 <= e["count"] <= n
        assert e["pA_lower"] == pytest.approx(clopper_pearson_lower(e["count"], n, alpha))
        if e["pA_lower"] > 0.5:
            assert e["pred"] >= 0 and e["radius"] == pytest.approx(sigma * NormalDist().inv_cdf(e["pA_lower"]), rel=1e-9)
            assert e["radius"] <= cap + 1e-12
        else:
            assert e["pred"] == -1 and e["radius"] == 0 and not e["correct"]
        assert e["correct"] == (e["pred"] == e["label"])
    for c in d["certified"]:
        assert c["top1"] == sum(e["correct"] and e["radius"] >= c["radius"] for e in ex) / 40
    assert d["certified"][0]["top1"] > 0.8 > d["certified"][1]["top1"] > 0     # certifies, and less at 0.25
    # the table
    r = run("certify", MLP, "--init", ckpt, "--sigma", sigma, "--n0", 20, "--n", n, "--limit", 10)
    assert r.exit_code == 0 and "abstained on" in r.stdout
    assert (ckpt.parent / "certify-sigma0.25.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.iree
def test_no_adversarial_example_inside_a_certified_radius(trained):
    """The certificate against the attack: for every example certified at L2 radius R, PGD-L2
    (20 steps on the base net, away from the certified class) at ε = k·R for k = 1, 2, 4, 8
    yields points x'; wherever the smoothed classifier's majority vote at x' is another class
    (an adversarial example of the smoothed net), ‖x' − x‖₂ exceeds R.  Some votes must flip,
    else the check has no teeth."""
    from lmc.graph.infer import infer
    from lmc.lower.lowering import abi
    from lmc.spec.netspec import load_spec
    from lmc.trust.attack import pgd_batch
    from lmc.trust.certify import _votes, certify
    from lmc.trust.model import load_model, pad
    ckpt, _ = trained
    net = infer(load_spec(MLP))
    m = load_model(net, ckpt, None, None, None, lambda t: None, "input_grad", limit=64)
    sigma = 0.25
    certs = certify(m, sigma, n0=50, n=500, alpha=0.001)
    cert = [c for c in certs if c.pred >= 0]
    assert len(cert) > 40
    a = abi(net)
    hp = a.hp_vector(net.spec.train, 0.0, 1)
    R = np.array([c.radius for c in certs])
    labels = a.loss.fit_labels(pad(np.array([max(c.pred, 0) for c in certs]), m.batch), m.num_classes,
                               net.spec.train)
    flips = 0
    for k in (1, 2, 4, 8):
        xa = pgd_batch(m, m.x, labels, k * R, "l2", 20, 2.5 * k * R / 20, np.random.default_rng(k), hp, m.bounds)
        dist = np.sqrt(((xa - m.x).astype(np.float64) ** 2).reshape(len(xa), -1).sum(1))
        for c in cert:
            assert dist[c.index] <= k * c.radius * (1 + 1e-5)
            votes = _votes(m, xa[c.index], sigma, 500, np.random.default_rng([7, k, c.index]))
            if int(np.argmax(votes)) != c.pred:
                flips += 1
                assert dist[c.index] > c.radius, (c, k, dist[c.index], votes)
    assert flips > 0


@pytest.mark.parametrize("args,msg", [
    (["--sigma", "0"], "--sigma must be > 0"),
    (["--sigma", "-1"], "--sigma must be > 0"),
    (["--sigma", "0.25", "--n0", "100", "--n", "50"], "--n (50) must be at least --n0 (100)"),
    (["--sigma", "0.25", "--alpha", "0.7"], "--alpha must be in (0, 0.5)"),
])
def test_certify_refuses_nonsense(tmp_path, args, msg):
    r = run("certify", MLP, "--init", tmp_path / "none.npz", *args)
    assert r.exit_code == 2 and msg in r.stderr, r.output


@pytest.mark.iree
def test_gaussian_noise_sigma_trains_on_noisy_batches(tmp_path):
    """train.gaussian_noise_sigma: the losses change (the batches are noisy), a second run draws
    the same noise (seeded by step), and a resumed run repeats the uninterrupted one."""
    def losses(out, *extra):
        r = run("train", MLP, "--out", out, "--epochs", 2, *extra)
        assert r.exit_code == 0, r.output
        return [x["loss"] for x in _records(out, "step")]
    plain = losses(tmp_path / "a")
    sig = ["--set", "train.gaussian_noise_sigma=0.5"]
    noisy = losses(tmp_path / "b", *sig)
    assert noisy == losses(tmp_path / "c", *sig)
    assert len(noisy) == len(plain) and noisy[0] != plain[0] and np.mean(noisy[-10:]) > np.mean(plain[-10:])
    r = run("train", MLP, "--out", tmp_path / "d", "--epochs", 2, "--max-steps", 30, *sig)
    assert r.exit_code == 0, r.output
    r = run("train", MLP, "--out", tmp_path / "d", "--epochs", 2, "--resume", *sig)
    assert r.exit_code == 0, r.output
    assert [x["loss"] for x in _records(tmp_path / "d", "step")] == noisy


# ------------------------------------------------------------------ lmc lipschitz

def test_conv_tap_sum_bounds_the_conv_operator_norm():
    """The tap-sum bound ≥ the true operator norm of the conv (its matrix built here by
    applying a direct numpy conv, stride 1 and 2, zero padding 1, to every basis input)."""
    from lmc.trust.lipschitz import conv_tap_sum
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2, 3, 3))

    def conv(x, stride):
        xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
        oh = (xp.shape[1] - 3) // stride + 1
        y = np.zeros((3, oh, oh))
        for i in range(oh):
            for j in range(oh):
                y[:, i, j] = np.einsum("oikl,ikl->o", w, xp[:, i * stride:i * stride + 3, j * stride:j * stride + 3])
        return y.ravel()

    for stride in (1, 2):
        A = np.stack([conv(e.reshape(2, 5, 5), stride) for e in np.eye(50)], axis=1)
        true = np.linalg.norm(A, 2)
        assert true <= conv_tap_sum(w) and true > 0.3 * conv_tap_sum(w)


@pytest.mark.iree
def test_lipschitz_is_the_product_of_spectral_norms_and_sound(trained):
    """For the MLP, L = ∏ numpy ‖W‖₂ of the checkpoint's dense weights; and PGD-L2 at each
    example's certified radius never flips the prediction (it does at 8× the radius)."""
    ckpt, clean = trained
    r = run("lipschitz", MLP, "--init", ckpt, "--json", "--radii", "0,0.05,0.1,5")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout.strip().splitlines()[-1])
    with np.load(ckpt) as f:
        norms = [np.linalg.norm(f[f"{i:02d}.dense.weight"].astype(np.float64), 2) for i in range(3)]
    assert [l["name"] for l in d["layers"]] == ["00.dense", "01.dense", "02.dense"]
    assert [l["bound"] for l in d["layers"]] == pytest.approx(norms, rel=1e-12)
    assert d["L"] == pytest.approx(np.prod(norms), rel=1e-12)
    acc = {c["radius"]: c for c in d["certified"]}
    assert acc[0]["correct"] == clean and acc[0.1]["correct"] <= acc[0.05]["correct"] <= clean
    assert d["vacuous_at"] == [5.0]
    r = run("lipschitz", MLP, "--init", ckpt, "--radii", "5", "--plot", ckpt.parent / "l.png")
    assert "the certificate is vacuous at radius 5" in " ".join(r.stdout.split())
    assert (ckpt.parent / "l.png").read_bytes()[:4] == b"\x89PNG"

    from lmc.graph.infer import infer
    from lmc.lower.lowering import abi
    from lmc.spec.netspec import load_spec
    from lmc.trust.attack import pgd_batch
    from lmc.trust.lipschitz import lipschitz, margin_radii
    from lmc.trust.model import load_model, pad
    net = infer(load_spec(MLP))
    m = load_model(net, ckpt, None, None, None, lambda t: None, "input_grad", limit=64)
    L, _, _ = lipschitz(net, m.params, [])
    logits = m.logits(m.x)
    R = margin_radii(logits, m.y, L)
    a = abi(net)
    hp = a.hp_vector(net.spec.train, 0.0, 1)
    labels = a.loss.fit_labels(pad(m.y, m.batch), m.num_classes, net.spec.train)
    flips = {}
    for k in (1, 8):
        xa = pgd_batch(m, m.x, labels, k * R, "l2", 20, 2.5 * k * R / 20, np.random.default_rng(k), hp, m.bounds)
        pred = np.argmax(m.logits(xa), axis=1)
        flips[k] = int(((pred != m.y) & (R > 0)).sum())
    assert flips[1] == 0 and flips[8] > 0, flips


def test_lipschitz_walks_a_conv_bn_net_and_refuses_what_it_cannot_bound(tmp_path):
    """digits_cnn (conv_bn, max_pool, flatten, dense): a chain, so L is the product of the
    layers' bounds; a conv_bn layer's bound is its tap sum × max|γ|/√(var + ε); a residual add
    sums its branches; an activation without a known bound is refused."""
    from lmc.graph.infer import infer
    from lmc.graph.init import init_tensors
    from lmc.prims.norm import EPS
    from lmc.spec.netspec import load_spec
    from lmc.core.errors import LmcError
    from lmc.trust.lipschitz import conv_tap_sum, lipschitz
    net = infer(load_spec(ROOT / "specs" / "digits_cnn.yaml"))
    params, state = init_tensors(net, 0)
    rng = np.random.default_rng(0)
    state = [rng.uniform(0.5, 2.0, s.shape).astype(np.float32) for s in state]
    P = {p.name: a for p, a in zip(net.params, params)}
    S = {s.name: a for s, a in zip(net.state, state)}
    L, prims, layers = lipschitz(net, params, state)
    assert L == pytest.approx(np.prod([l["bound"] for l in layers]), rel=1e-9)
    assert {b.prim for b in prims} == {"conv", "batch_norm", "act", "max_pool", "reshape", "dense"}
    var = S["00.conv_bn.running_var"].astype(np.float64)
    want = conv_tap_sum(P["00.conv_bn.weight"]) * np.max(np.abs(P["00.conv_bn.gamma"]) / np.sqrt(var + EPS))
    assert layers[0] == {"name": "00.conv_bn", "bound": pytest.approx(want, rel=1e-9)}
    res = infer(load_spec("r.yaml", text="name: r\ninput: {channels: 2, height: 4, width: 4}\nlayers:\n"
                          "  - residual_block: {ic: 2, oc: 2, n_blocks: 1}\n  - global_avg_pool\n"
                          "  - dense: {fan_in: 2, fan_out: 3}\n"))
    p, s = init_tensors(res, 0)
    Lr, prims, layers = lipschitz(res, p, s)
    assert "add" in {b.prim for b in prims} and Lr == pytest.approx(np.prod([l["bound"] for l in layers]), rel=1e-9)
    gelu = infer(load_spec("g.yaml", text="name: g\ninput: {features: 4}\nlayers:\n"
                           "  - dense: {fan_in: 4, fan_out: 4, act: gelu}\n  - dense: {fan_in: 4, fan_out: 3}\n"))
    with pytest.raises(LmcError, match=r"layer 0 \(dense\): no Lipschitz bound for the primitive act \(gelu\)"):
        lipschitz(gelu, *init_tensors(gelu, 0))


# ------------------------------------------------------------------ train.spectral_cap

def _power(a: np.ndarray, u: np.ndarray, iters: int):
    """The template's math in float64 numpy: a [T, M, N], u [T, N] → (u', σ per tap)."""
    for _ in range(iters):
        v = np.einsum("tmn,tn->tm", a, u)
        v = v / (np.linalg.norm(v, axis=1, keepdims=True) + 1e-12)
        w = np.einsum("tmn,tm->tn", a, v)
        s = np.linalg.norm(w, axis=1)
        u = w / (s[:, None] + 1e-12)
    return u, s


@pytest.mark.iree
def test_spectral_project_matches_numpy_power_iteration():
    """@spectral_project on a conv kernel (9 taps) and a dense weight: the same warm-started
    power iterations and rescaling as numpy's float64 version; repeated calls converge to
    ‖W‖₂ = c (dense) and Σ_taps ‖W_tap‖₂ = c (conv), and leave a weight inside the cap alone."""
    from lmc.compile import compile_module
    from lmc.graph.infer import infer
    from lmc.lower.lowering import lower
    from lmc.run.runtime import Module
    from lmc.spec.netspec import load_spec
    from lmc.trust.lipschitz import conv_tap_sum, spectral_norm
    from lmc.lower.spectral import ITERS, capped, initial_u
    net = infer(load_spec("s.yaml", text="name: s\ninput: {channels: 2, height: 6, width: 6}\nlayers:\n"
                          "  - conv2d: [2, 3, 3]\n  - flatten\n  - dense: {fan_in: 108, fan_out: 4}\n"
                          "train: {learning_rate: 0.1, batch_size: 2, epochs: 1, spectral_cap: 0.5}\n"))
    caps = capped(net)
    assert [(c.conv, c.taps, c.m, c.n) for c in caps] == [(True, 9, 3, 2), (False, 1, 108, 4)]
    mod = Module(compile_module(lower(net)).path, driver="local-sync")
    rng = np.random.default_rng(0)
    W = [rng.standard_normal(c.param.type.dims).astype(np.float32) for c in caps]
    U = initial_u(caps, 0)
    cap = np.asarray(0.5, np.float32)
    out = [np.asarray(r) for r in mod.spectral_project(*W, *U, cap)]
    taps = [W[0].astype(np.float64).transpose(2, 3, 0, 1).reshape(9, 3, 2), W[1].astype(np.float64)[None]]
    for i, (a, u) in enumerate(zip(taps, U)):
        u2, s = _power(a, u.astype(np.float64), ITERS)
        assert out[2 + i] == pytest.approx(u2, rel=1e-4, abs=1e-5)
        assert out[i] == pytest.approx(W[i] * min(1.0, 0.5 / s.sum()), rel=1e-4, abs=1e-6)
    Wk, Uk = out[:2], out[2:]
    for _ in range(30):
        res = [np.asarray(r) for r in mod.spectral_project(*Wk, *Uk, cap)]
        Wk, Uk = res[:2], res[2:]
    assert conv_tap_sum(Wk[0]) == pytest.approx(0.5, rel=1e-3)
    assert spectral_norm(Wk[1]) == pytest.approx(0.5, rel=1e-3)
    small = [w * 0.01 for w in W]
    res = [np.asarray(r) for r in mod.spectral_project(*small, *U, cap)]
    assert np.array_equal(res[0], small[0]) and np.array_equal(res[1], small[1])


@pytest.mark.iree
def test_spectral_cap_training_caps_every_dense_and_resumes_exactly(tmp_path):
    sets = ["--set", "train.spectral_cap=2.0", "--set", "train.spectral_every=3"]
    r = run("train", MLP, "--epochs", 2, "--out", tmp_path / "a", *sets)
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "a" / "last.npz") as f:
        norms = [np.linalg.norm(f[f"{i:02d}.dense.weight"].astype(np.float64), 2) for i in range(3)]
        assert {f"spectral_u.{i:02d}.dense.weight" for i in range(3)} <= set(f.files)
        a = {k: f[k] for k in f.files if k != "__lmc__"}
    assert max(norms) <= 2.0 * (1 + 1e-3) and max(norms) > 1.99      # the cap binds, and holds
    # interrupted at step 31 (not a multiple of spectral_every) and resumed: the same weights
    r = run("train", MLP, "--epochs", 2, "--max-steps", 31, "--out", tmp_path / "b", *sets)
    assert r.exit_code == 0, r.output
    r = run("train", MLP, "--epochs", 2, "--resume", "--out", tmp_path / "b", *sets)
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "b" / "last.npz") as f:
        b = {k: f[k] for k in f.files if k != "__lmc__"}
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_spectral_knobs_are_checked():
    from lmc.check import load_net
    from lmc.core.errors import LmcError
    from lmc.spec.netspec import load_spec
    base = "name: m\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 3}\ntrain: {learning_rate: 0.1, batch_size: 2, epochs: 1, "
    with pytest.raises(LmcError, match="spectral_every.*spectral_cap"):
        load_net("m.yaml", text=base + "spectral_every: 3}\n")
    from lmc.check.training import check_recipe
    with pytest.raises(LmcError, match="not implemented yet: train.spectral_cap with grad_accum_steps > 1"):
        check_recipe(load_spec("m.yaml", text=base + "spectral_cap: 1.0, grad_accum_steps: 2}\n").train)


# ------------------------------------------------------------------ lmc eval --recalibrate

BN_SPEC = """name: tiny_bn
input: {channels: 1, height: 8, width: 8}
dataset: digits
layers:
  - conv_bn: {ic: 1, oc: 6, k_size: 3}
  - max_pool: {size: 2, stride: 2}
  - flatten
  - dense: {fan_in: 96, fan_out: 10}
train: {learning_rate: 0.01, batch_size: 64, epochs: 4, use_adam: true, seed: 1, eval_every_n_epochs: 0,
        running_bn: true}
"""


@pytest.mark.iree
def test_running_bn_false_evaluates_with_batch_statistics(tmp_path):
    """train.running_bn false (the Lean kit's default) scores with each eval batch's own BN
    statistics: the run's own eval, `lmc eval` of its checkpoint, and `lmc eval --batch-stats` of a
    running_bn: true spec (the diagnostic) agree, and none of them reads the running statistics
    (garbage ones change nothing), where the running-statistics eval collapses on them.  The
    digits' 360 validation examples are not a multiple of the batch of 64: the tail batch is
    filled with real examples, so all 360 are scored."""
    spec = tmp_path / "bn.yaml"
    spec.write_text(BN_SPEC)
    out = tmp_path / "run"
    r = run("train", spec, "--out", out, "--set", "train.running_bn=false")
    assert r.exit_code == 0, r.output
    ev = _records(out, "eval")[-1]
    assert ev["n"] == 360 and ev["top1"] > 0.8, ev

    def score(init, *extra):
        r = run("eval", spec, "--init", init, "--json", *extra)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout.strip().splitlines()[-1])

    ck = out / "last.npz"
    assert score(ck, "--set", "train.running_bn=false")["top1"] == ev["top1"]
    assert score(ck, "--batch-stats")["top1"] == ev["top1"]
    with np.load(ck) as f:
        t = {k: f[k] for k in f.files}
    for k in t:
        if "running_mean" in k:
            t[k] = t[k] + 100.0
    bad = tmp_path / "bad.npz"
    np.savez(bad, **t)
    assert score(bad, "--batch-stats")["top1"] == ev["top1"]
    assert score(bad)["top1"] < ev["top1"] - 0.3        # running statistics: these garbage ones are read
    r = run("eval", spec, "--init", ck, "--set", "train.running_bn=false", "--recalibrate", 2)
    assert r.exit_code == 2 and "running_bn false" in r.stderr


@pytest.mark.iree
def test_recalibrate_rebuilds_bn_statistics(tmp_path):
    """A checkpoint stripped of its BN statistics is refused (with the hint), and scores about
    what the run scored once `--recalibrate` re-estimates them; the estimate is the plain mean
    of the N batches' statistics (checked for the running mean against numpy's conv of the
    same training batches)."""
    spec = tmp_path / "bn.yaml"
    spec.write_text(BN_SPEC)
    out = tmp_path / "run"
    r = run("train", spec, "--out", out)
    assert r.exit_code == 0, r.output
    ev = _records(out, "eval")[-1]
    with np.load(out / "last.npz") as f:
        t = {k: f[k] for k in f.files if k != "__lmc__"}
    bare = tmp_path / "params.npz"
    np.savez(bare, **{k: v for k, v in t.items() if "." in k and not k.startswith("opt.") and "running" not in k})
    r = run("eval", spec, "--init", bare)
    assert r.exit_code == 2 and "no BN running statistics" in r.stderr and "--recalibrate N" in r.stderr
    r = run("eval", spec, "--init", bare, "--recalibrate", 22, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert abs(d["top1"] - ev["top1"]) < 0.03 and ev["top1"] > 0.8, (d, ev)
    assert "recalibrated 2 BN statistics from 22 training batches" in r.stderr

    from lmc.compile import compile_module
    from lmc.data import Batcher
    from lmc.graph.infer import infer
    from lmc.lower.lowering import abi, lower
    from lmc.run.runtime import Module
    from lmc.spec.netspec import load_spec
    from lmc.data.fit import load_data
    from lmc.evaluate.recalibrate import recalibrate_bn
    net = infer(load_spec(spec))
    mod = Module(compile_module(lower(net)).path, driver="local-sync")
    ds = load_data(net, None, 1)
    params = [t[p.name] for p in net.params]
    S = recalibrate_bn(mod, net, abi(net), params, 3, ds, lambda s: None)
    b = Batcher(ds, 64, seed=1, shuffle=True)
    w = t["00.conv_bn.weight"].astype(np.float64)
    means = []
    for k in range(3):
        x = np.pad(b.batch(0, k)[0].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        y = sum(np.einsum("oc,bchw->bohw", w[:, :, i, j], x[:, :, i:i + 8, j:j + 8]) for i in range(3) for j in range(3))
        means.append(y.mean(axis=(0, 2, 3)))
    got = np.asarray(S[[s.name for s in net.state].index("00.conv_bn.running_mean")])
    assert got == pytest.approx(np.mean(means, axis=0), rel=1e-4, abs=1e-5)
    # a step split in halves (LMC_SPLIT=on): @train_late alone gives the same statistics
    from lmc.lower.lowering import lower_train
    from lmc.run.runtime import training_module
    ah = abi(net, halves="on")
    assert ah.halves
    halves = training_module([compile_module(t).path for t in lower_train(net, ah)])
    calls = []
    early = halves.train_early
    halves._loaded["train_early"] = lambda *args: calls.append(1) or early(*args)
    Sh = recalibrate_bn(halves, net, ah, params, 3, ds, lambda s: None)
    assert not calls and all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(S, Sh))
    r = run("eval", MLP, "--init", bare, "--recalibrate", 3)
    assert r.exit_code == 2 and "no BN running statistics to re-estimate" in r.stderr


# ------------------------------------------------------------------ train.fp8: e4m3

def test_e4m3_projection_is_on_the_grid_per_column():
    import ml_dtypes
    from lmc.train.fp8 import project
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 10)) * np.geomspace(1e-3, 10, 10)).astype(np.float32)   # columns of very different scale
    w[:, 3] = 0
    q = project(w, (0,))
    amax = np.abs(w).max(0)
    scale = np.where(amax > 0, amax / np.float32(448), 1).astype(np.float32)
    grid = q.astype(np.float64) / scale
    on = grid.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert np.allclose(on, grid, rtol=1e-6, atol=0)                                         # on the scaled grid
    assert np.allclose(np.abs(q).max(0), amax, rtol=1e-6) and (q[:, 3] == 0).all()        # amax kept
    normal = np.abs(w / scale) >= 2 ** -6                                                   # E4M3's normal range
    assert (np.abs(q - w)[normal] <= np.abs(w)[normal] * 2 ** -4 * (1 + 1e-5)).all()       # 3 mantissa bits
    assert np.abs(project(w, None)).max() == pytest.approx(np.abs(w).max(), rel=1e-6)


@pytest.mark.iree
def test_fp8_step_folds_the_update_into_the_f32_master(tmp_path):
    """One fp8 step by `lmc train` against the same step done here: the compiled @train_step on
    the E4M3-projected weights and input, master + (out − projected); the moments are the step's.
    The checkpoint records fp8 and refuses to resume into a run without it (and vice versa)."""
    from lmc.compile import compile_module
    from lmc.data import Batcher
    from lmc.graph.infer import infer
    from lmc.graph.init import init_tensors
    from lmc.lower.lowering import abi, lower
    from lmc.run.runtime import Module
    from lmc.train.schedule import learning_rate
    from lmc.spec.netspec import load_spec
    from lmc.data.fit import load_data
    from lmc.train.fp8 import project, project_params, weight_axes
    out = tmp_path / "run"
    sets = ["--set", "train.fp8=e4m3"]
    r = run("train", MLP, "--max-steps", 1, "--out", out, *sets)
    assert r.exit_code == 0, r.output
    net = infer(load_spec(MLP))
    cfg, a = net.spec.train, abi(net)
    p0, s0 = init_tensors(net, cfg.seed)
    ds = load_data(net, None, cfg.seed)
    b = Batcher(ds, net.batch, seed=cfg.seed, shuffle=True, labels=lambda y: a.loss.fit_labels(y, 10, cfg))
    x, y = b.batch(0, 0)
    q = project_params(net, p0, weight_axes(net))
    assert sum(not np.array_equal(u, v) for u, v in zip(q, p0)) == 3        # the three dense weights, not the biases
    mod = Module(compile_module(lower(net)).path, driver="local-sync")
    hp = a.hp_vector(cfg, learning_rate(cfg, 1, b.steps_per_epoch), 1)
    res = [np.asarray(t) for t in mod.train_step(*q, *a.initial_opt(), *s0, project(x, None), y, hp)]
    n = len(p0)
    with np.load(out / "last.npz") as f:
        for i, p in enumerate(net.params):
            assert f[p.name] == pytest.approx(p0[i] + (res[i] - q[i]), rel=1e-6, abs=1e-7), p.name
        for j, (slot, name) in enumerate(a.opt_keys):
            assert f[f"opt.{slot}.{name}"] == pytest.approx(res[n + j], rel=1e-6, abs=1e-9)
        assert json.loads(str(f["__lmc__"]))["fp8"] == "e4m3"
    r = run("train", MLP, "--resume", "--out", out)
    assert r.exit_code == 2 and "trained with fp8 e4m3, this recipe has fp8 off" in r.stderr
    r = run("train", MLP, "--max-steps", 1, "--out", tmp_path / "f32")
    r = run("train", MLP, "--resume", "--out", tmp_path / "f32", *sets)
    assert r.exit_code == 2 and "trained with fp8 off, this recipe has fp8 e4m3" in r.stderr


def test_fp8_refuses_what_it_does_not_combine_with():
    from lmc.core.errors import LmcError
    from lmc.spec.netspec import load_spec
    from lmc.check.training import check_recipe
    base = "name: m\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 3}\ntrain: {learning_rate: 0.1, batch_size: 2, epochs: 1, fp8: e4m3, "
    for extra, what in (("use_ema: true", "use_ema"), ("grad_accum_steps: 2", "grad_accum_steps > 1")):
        with pytest.raises(LmcError, match=f"not implemented yet: train.fp8 with {what}"):
            check_recipe(load_spec("m.yaml", text=base + extra + "}\n").train)
    assert load_spec("m.yaml", text=base.replace("e4m3", "off") + "seed: 1}\n").train.fp8.value == "off"


@pytest.mark.iree
@pytest.mark.slow
def test_fp8_digits_mlp_within_a_point_of_f32(tmp_path):
    """specs/digits_mlp.yaml's recipe trained in fp8 (E4M3) ends within 1 point of f32."""
    acc = {}
    for f in ("off", "e4m3"):
        r = run("train", MLP, "--out", tmp_path / f, "--set", f"train.fp8={f}")
        assert r.exit_code == 0, r.output
        acc[f] = _records(tmp_path / f, "eval")[-1]["top1"]
    assert abs(acc["e4m3"] - acc["off"]) <= 0.01 and acc["e4m3"] > 0.96, acc
