"""The recipe audit [iree]: every `train:` field, set to a non-default valid value on a small
spec, is either refused by `lmc train` (exit 2, the message naming the field), or changes the
trained state (parameters, optimizer state, averages, BN statistics: every array of the
checkpoint) against the same run without it, or — for the eval- and cadence-only fields — changes
the records it governs (asserted directly).  No field may be accepted and have no effect.

Each field's probe: (value, companions, spec, full).  `companions` are set in both runs (a field
under a switch is probed with its switch on: the baseline is the switch alone); `full` runs two
whole epochs instead of 3 steps (fields that act at epoch ends).  The judgement of every field is
printed (`pytest -s`) and checked against lmc.fieldmap.WHERE (an entry starting "refused" must be
refused here; a field refused here must say where it is refused)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("iree.runtime")

from lmc.cli import app  # noqa: E402
from lmc.spec.config import TRAIN_FIELDS  # noqa: E402
from lmc.optim import declared_fields  # noqa: E402
from lmc.spec.fieldmap import WHERE  # noqa: E402

pytestmark = pytest.mark.iree
SPECS = Path(__file__).resolve().parents[1] / "specs"
MLP, CNN, MOBILE = SPECS / "digits_mlp.yaml", SPECS / "digits_cnn.yaml", SPECS / "digits_mobile.yaml"
YOLO = SPECS / "yolo_digits.yaml"
FPN = SPECS / "digits_fpn_det.yaml"
AFFINE = {"fpn_affine_prob": 1.0, "fpn_affine_scale": 0.5, "fpn_affine_translate": 0.3}
SWA = {"use_swa": True, "use_swag": True}
PRIOR = [0.05, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.15, 0.15]

# field: (value, companions, spec, full)
PROBES = {
    "learning_rate": (0.01, {}, MLP, False),
    "batch_size": (32, {}, MLP, False),
    "epochs": (7, {"warmup_epochs": 0}, MLP, False),    # (steps 1–3 of a warm-up do not see the length)
    "seed": (11, {}, MLP, False),
    "momentum": (0.9, {"use_adam": False}, MLP, False),
    "use_adam": (False, {}, MLP, False),
    "optimizer": ("rmsprop", {}, MLP, False),
    "use_muon": (True, {}, MLP, False),
    "use_shampoo": (True, {}, MLP, False),
    "rmsprop_decay": (0.5, {"optimizer": "rmsprop"}, MLP, False),
    "rmsprop_eps": (0.1, {"optimizer": "rmsprop"}, MLP, False),
    "weight_decay": (0.1, {}, MLP, False),
    "cosine_decay": (False, {"warmup_epochs": 0}, MLP, False),
    "warmup_epochs": (2, {}, MLP, False),
    "exp_lr_decay_rate": (0.5, {"warmup_epochs": 0}, MLP, False),
    "exp_lr_decay_epochs": (0.01, {"exp_lr_decay_rate": 0.5, "warmup_epochs": 0}, MLP, False),
    "wd_exclude_norm_bias": (True, {"weight_decay": 0.1}, MLP, False),
    "grad_accum_steps": (2, {}, MLP, False),
    "grad_clip_norm": (0.01, {}, MLP, False),
    "head_lr_mult": (5.0, {}, MLP, False),
    "bn_momentum": (0.5, {}, CNN, False),
    "use_ema": (True, {}, MLP, False),
    "ema_decay": (0.05, {"use_ema": True}, MLP, False),     # below the warm-up's (1 + t)/(10 + t)
    "use_swa": (True, {}, MLP, True),
    "swa_start_epoch": (1, {"use_swa": True}, MLP, True),
    "use_swag": (True, {"use_swa": True}, MLP, True),
    "swag_k": (1, SWA, MLP, True),          # 2 snapshots in 2 epochs: K = 1 keeps one deviation
    "swag_samples": (2, SWA, MLP, True),
    "spectral_cap": (0.5, {}, MLP, False),
    "spectral_every": (2, {"spectral_cap": 0.5}, MLP, False),
    "fp8": ("e4m3", {}, MLP, False),
    "sync_bn": (True, {}, CNN, False),
    "label_smoothing": (0.2, {}, MLP, False),
    "loss_kind": ("bce", {}, MLP, False),
    "use_focal": (True, {}, MLP, False),
    "focal_gamma": (0.5, {"use_focal": True}, MLP, False),
    "use_yolov1": (True, {}, MLP, False),
    "use_diou_box": (True, {}, YOLO, False),
    "anchors": ([[1.0, 2.0]], {}, MLP, False),
    "fpn_scales": ([[8, [[1.0, 1.0]]]], {}, MLP, False),
    "yolo_cls_weights": ([0.5] * 5 + [2.0] * 5, {}, YOLO, False),
    "yolo_cls_focal_gamma": (2.0, {}, YOLO, False),
    "augment": (True, {}, CNN, False),
    "random_erasing": (True, {}, CNN, False),
    "random_erasing_prob": (0.9, {"random_erasing": True}, CNN, False),
    "use_mixup": (True, {}, MLP, False),
    "mixup_alpha": (0.2, {"use_mixup": True}, MLP, False),
    "use_cutmix": (True, {}, CNN, False),
    "cutmix_alpha": (0.3, {"use_cutmix": True}, CNN, False),
    "use_knn_mixup": (True, {}, MLP, False),
    "knn_mixup_alpha": (0.3, {"use_knn_mixup": True}, MLP, False),
    "use_rand_augment": (True, {}, CNN, False),
    "rand_augment_n": (4, {"use_rand_augment": True}, CNN, False),
    "rand_augment_m": (3.0, {"use_rand_augment": True}, CNN, False),
    "rand_augment_geometric": (True, {"use_rand_augment": True}, CNN, False),
    "rand_augment_mstd": (2.0, {"use_rand_augment": True, "rand_augment_geometric": True}, CNN, False),
    "rand_augment_inc": (True, {"use_rand_augment": True, "rand_augment_geometric": True}, CNN, False),
    "use_auto_augment": (True, {}, CNN, False),
    "repeated_aug": (3, {}, MLP, False),
    "gaussian_noise_sigma": (0.3, {}, MLP, False),
    "fpn_affine_scale": (0.3, {"fpn_affine_prob": 1.0, "fpn_affine_translate": 0.1}, FPN, False),
    "fpn_affine_translate": (0.1, {"fpn_affine_prob": 1.0, "fpn_affine_scale": 0.3}, FPN, False),
    "fpn_affine_prob": (0.5, AFFINE, FPN, False),                     # against prob 1
    "fpn_affine_wh_thr_px": (12.0, AFFINE, FPN, False),
    "fpn_affine_area_thr": (0.9, AFFINE, FPN, False),
    "train_res": (6, {}, MOBILE, False),          # global pool before the head: the same weights at 6×6
    "test_crop_ratio": (0.75, {}, CNN, False),
    "dropout": (0.2, {}, MLP, False),
    "drop_path": (0.1, {}, MOBILE, False),
    "head_prior_bias": (PRIOR, {}, MLP, False),
    "det_prior_pi": (0.05, {}, FPN, False),                          # against the spec's 0.01
    "vit_init": (True, {}, MLP, False),
    "cnx_init": (True, {}, CNN, False),
    "bootstrap_backbone": ("BIN,640", {}, MLP, False),
    "bootstrap_backbone_range": ("BIN,64,0,128", {}, MLP, False),
    "bf16": (True, {}, MLP, False),
    "bf16_conv": (True, {"bf16": True}, CNN, False),
    "eval_every_n_epochs": (1, {}, MLP, True),
    "checkpoint_every_n_epochs": (1, {}, MLP, True),
    "keep_best": ({"metric": "loss", "k": 2}, {"eval_every_n_epochs": 1}, MLP, True),
    "early_stop": ({"metric": "top1", "patience": 1, "min_delta": 1.0}, {"eval_every_n_epochs": 1, "epochs": 3},
                   MLP, True),     # no eval can improve top-1 by 1: it stops after epoch 2 of 3
    "val_every_epochs": (2, {}, MLP, False),
    "use_tta": (True, {"augment": True}, CNN, False),
    "tta_samples": (2, {"augment": True, "use_tta": True}, CNN, False),
    "running_bn": (True, {}, CNN, False),
}
# the fields a registry entry declares: its own probe, on the MLP
PROBES.update({f.name: (f.probe[0], f.probe[1], MLP, False) for f in declared_fields()})
# Fields that act on records, not on the trained state: field → what must differ.
OBSERVED = {
    "eval_every_n_epochs": "eval",
    "checkpoint_every_n_epochs": "checkpoint",
    "keep_best": "checkpoint",          # its checkpoints (RUN/best-epoch-N.npz, best.npz) are records
    "swag_samples": "swag_draws",
    "running_bn": "same_eval",     # lmc's only mode (fieldmap.WHERE): the run equals the default's
    "use_tta": "tta_views",
    "tta_samples": "tta_views",
    "test_crop_ratio": "eval_images",   # the validation images change, the training does not
}


def _yaml(v):
    return json.dumps(v) if isinstance(v, (list, dict)) else (str(v).lower() if isinstance(v, bool) else str(v))


def _train(tmp, spec, fields, full, bin_path):
    out = tmp / "run"
    args = ["train", str(spec), "--out", str(out), "--overwrite"] + ([] if "epochs" in fields else ["--epochs", "2"])
    if not full:
        args += ["--max-steps", "3"]
    for k, v in fields.items():
        v = v.replace("BIN", str(bin_path)) if isinstance(v, str) and "BIN" in v else v
        if isinstance(v, str) and "," in v:
            v = json.dumps([x if not x.strip().lstrip("-").isdigit() else int(x) for x in v.split(",")])
        args += ["--set", f"train.{k}={_yaml(v)}"]
    r = CliRunner().invoke(app, args)
    return r, out


def _state(out):
    with np.load(out / "last.npz") as f:
        return {k: f[k] for k in f.files if k != "__lmc__"}


def _records(out, kind):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


_BASE: dict = {}


def _baseline(tmp_path_factory, spec, companions, full, bin_path):
    key = (spec, json.dumps(companions, sort_keys=True), full)
    if key not in _BASE:
        tmp = tmp_path_factory.mktemp("base")
        r, out = _train(tmp, spec, companions, full, bin_path)
        assert r.exit_code == 0, r.output
        _BASE[key] = (_state(out), {k: len(_records(out, k)) for k in ("eval", "checkpoint")}, _records(out, "eval"))
    return _BASE[key]


@pytest.fixture(scope="module")
def bin_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("bin") / "backbone.bin"
    # a flat .bin holds exactly bootstrap_backbone's prefix (640 floats); the range probe reads in it
    np.random.default_rng(0).standard_normal(640).astype("<f4").tofile(p)
    return p


def test_every_field_has_a_probe_and_a_place():
    assert set(PROBES) == set(TRAIN_FIELDS), set(PROBES) ^ set(TRAIN_FIELDS)
    assert set(WHERE) == set(TRAIN_FIELDS), set(WHERE) ^ set(TRAIN_FIELDS)


@pytest.mark.parametrize("field", sorted(PROBES))
def test_field_is_honoured_or_refused(field, tmp_path, tmp_path_factory, bin_path, monkeypatch):
    value, companions, spec, full = PROBES[field]
    draws = []
    if OBSERVED.get(field) == "tta_views":
        import lmc.data.batcher as bt
        real_view = bt.TTA.view
        monkeypatch.setattr(bt.TTA, "view", lambda self, *a: draws.append(1) or real_view(self, *a))
    if OBSERVED.get(field) == "eval_images":
        import lmc.train.callbacks as tr
        real_eval = tr.evaluate
        monkeypatch.setattr(tr, "evaluate", lambda *a, **k: draws.append(np.array(a[3])) or real_eval(*a, **k))
    if OBSERVED.get(field) == "swag_draws":
        import lmc.evaluate.score as ev
        real = ev.swag_sample
        monkeypatch.setattr(ev, "swag_sample", lambda *a: draws.append(1) or real(*a))
    r, out = _train(tmp_path, spec, {**companions, field: value}, full, bin_path)
    n_draws = len(draws)                 # before a baseline run adds its own
    refused_here = r.exit_code == 2
    if refused_here:
        judged = "refused"
        assert field in r.output, f"{field}: refused, but the message does not name it:\n{r.output}"
    else:
        assert r.exit_code == 0, r.output
        base_state, base_counts, base_evals = _baseline(tmp_path_factory, spec, companions, full, bin_path)
        state = _state(out)
        changed = state.keys() != base_state.keys() or any(
            state[k].shape != base_state[k].shape or not np.array_equal(state[k], base_state[k]) for k in state)
        kind = OBSERVED.get(field)
        if changed:
            judged = "changes the trained state"
        elif kind in ("eval", "checkpoint"):
            assert len(_records(out, kind)) != base_counts[kind], f"{field}: the {kind} records did not change"
            judged = f"changes the {kind} records ({base_counts[kind]} → {len(_records(out, kind))})"
        elif kind == "swag_draws":
            assert n_draws == value * sum(r["region"] == "swag" for r in _records(out, "eval")) > 0, n_draws
            judged = f"the SWAG eval draws {value} weight samples per eval"
        elif kind == "tta_views":
            views = value if field == "tta_samples" else 5          # tta_samples' default
            n_batches = -(-360 // 64)                                # the digits validation split
            assert n_draws == views * n_batches * len(_records(out, "eval")), n_draws
            judged = f"eval averages {views} augmented views per batch"
        elif kind == "eval_images":
            from lmc.data import load_dataset
            stored = load_dataset("digits", None, (1, 8, 8), 10).x_val
            seen = draws[:n_draws]                   # (a baseline run adds its own)
            assert seen and all(x.shape == stored.shape and not np.array_equal(x, stored) for x in seen)
            judged = "changes the images the eval scores"
        elif kind == "same_eval":
            assert _records(out, "eval")[-1]["top1"] == base_evals[-1]["top1"]
            judged = "lmc's only mode: the run equals the default's (documented)"
        else:
            pytest.fail(f"train.{field}={value} was accepted and changed nothing: neither refused nor honoured")
    print(f"\n  {field:28s} {judged:42s} | {WHERE[field]}")
    # WHERE "refused: …" = always refused; "… refused without/on/with …" = where it cannot apply
    where = WHERE[field]
    assert (not where.startswith("refused") or refused_here) and (not refused_here or "refused" in where), \
        f"{field}: judged '{judged}', but lmc.fieldmap.WHERE says '{where}'"
