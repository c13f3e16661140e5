"""yolov1_masked: YOLOv1's masked loss over a grid head — single box per cell, the A-anchor
path and the FPN multi-scale path.

Net output (lmc's layout: a fully-convolutional head, no reshape of a flat dense output)
z [B, P, gH, gW], P = 10 + NC: channels [0, 2) box0 x, y (offsets in the cell), [2, 4) box0
w, h (image-relative), 4 box0 confidence, [5, 9) box1 x, y, w, h (never optimized: zero
gradient), 9 box1 confidence (always no-object), [10, P) class scores.
Labels t [B, P + 1, gH, gW] f32: the target in the same layout, with the cell mask m (1 where a
ground-truth centre falls) as the last channel (the Lean kit's separate %m_yolo, packed here).
λc = 5, λn = 0.5, ε = 1e-6;  L = (T1 + … + T6)/B,  each a sum over cells:
  T1 = λc Σ m·‖xy_p − xy_t‖²          T2 = λc Σ m·‖√max(wh_p, ε) − √max(wh_t, ε)‖²
  T3 = Σ m·(c0 − 1)²                  T4 = λn Σ (1 − m)·c0²          T5 = λn Σ c1²
  T6 = −Σ m·Σ_c t_c·log_softmax(cls)_c
use_focal (γ = focal_gamma): T3..T5 become sigmoid focal BCE on the confidence logits,
the focal weight detached (the Lean kit's output gradient, not the exact gradient of the reported loss).
use_diou_box: T1 + T2 become λc Σ m·(1 − DIoU) with the σ/exp parameterization, hand-
derived backward; decoding then uses the same parameterization.
anchors [[a_w, a_h], …]: the A-anchor path, head and labels [B, A·(5 + NC), gH, gW] per
anchor [tx, ty, tw, th, obj, classes] (the mask is the target's obj channel): per slot the DIoU
box term with its prior, detached focal objectness (α = 1 / λn, γ = focal_gamma) and the masked
class CE, × yolo_cls_weights[c_true] when given, × (1 − p_t)^γc under yolo_cls_focal_gamma γc > 0
(the seed's class focal: FL = −ω·(1 − p_t)^γc·log p_t on assigned cells, its exact gradient).
fpn_scales [[g, [[a_w, a_h], …]], …] (§7, after fpn_detect): the flat head [B, Σ A·S·g²] and the
flat target of its shape are cut into per-scale blocks [B, A·S, g, g] (P3, P4, P5 order), each
scored by the anchor path with its anchors, the gradients concatenated back.
Refused (never ignored): yolo_cls_weights and yolo_cls_focal_gamma without anchors or
fpn_scales (the seed weighs and focuses the anchor paths' class term only)."""
from __future__ import annotations

import yaml
import numpy as np

from lmc.core.types import TensorType, f32, flt
from lmc.losses import BOXES, Loss, Rule, detach, register
from lmc.core.render import render_template, sig
from lmc.losses._yolo_decode import BOX_CH, EXP_CAP, decode, ground_truth
from lmc.losses.boxes import as_list, encode_fpn

LAMBDA_COORD, LAMBDA_NOOBJ, EPS = 5.0, 0.5, 1e-6
W_FLOOR = 1e-12               # the focal weight's floor (§6.1)
SLOT_MIN = 6                  # an anchor slot: tx, ty, tw, th, obj and at least one class
TINY = 1e-9                   # the DIoU union and enclosing diagonal are clamped at this


def diou(xp, z, t, aw=1.0, ah=1.0):
    """DIoU of box0 per cell [B, gH, gW] (losses.md §6.2): prediction cx = (j + σ(tx))/gW,
    cy = (i + σ(ty))/gH, w = exp(min(tw, 8)), h = exp(min(th, 8)); target cx = (j + x)/gW, …"""
    gh, gw = z.shape[2:]
    ii = xp.arange(gh).reshape(1, gh, 1)
    jj = xp.arange(gw).reshape(1, 1, gw)
    cx, cy = (jj + 1 / (1 + xp.exp(-z[:, 0]))) / gw, (ii + 1 / (1 + xp.exp(-z[:, 1]))) / gh
    w, h = aw * xp.exp(xp.minimum(z[:, 2], EXP_CAP)), ah * xp.exp(xp.minimum(z[:, 3], EXP_CAP))
    cxt, cyt, wt, ht = (jj + t[:, 0]) / gw, (ii + t[:, 1]) / gh, t[:, 2], t[:, 3]
    iw = xp.maximum(xp.minimum(cx + w / 2, cxt + wt / 2) - xp.maximum(cx - w / 2, cxt - wt / 2), 0.0)
    ih = xp.maximum(xp.minimum(cy + h / 2, cyt + ht / 2) - xp.maximum(cy - h / 2, cyt - ht / 2), 0.0)
    inter = iw * ih
    union = xp.maximum(w * h + wt * ht - inter, TINY)
    ew = xp.maximum(cx + w / 2, cxt + wt / 2) - xp.minimum(cx - w / 2, cxt - wt / 2)
    eh = xp.maximum(cy + h / 2, cyt + ht / 2) - xp.minimum(cy - h / 2, cyt - ht / 2)
    c2 = xp.maximum(ew ** 2 + eh ** 2, TINY)
    return inter / union - ((cx - cxt) ** 2 + (cy - cyt) ** 2) / c2


@register("yolov1_masked")
class YoloV1Masked(Loss):
    order = 8
    label_format = BOXES
    # on the yolo path use_focal switches objectness to focal BCE
    accepts_focal = True
    logits_rank = 4
    grid_head = True
    logits_layout = "a grid head [batch, 10 + classes, gH, gW]"
    rank_hint = "end the net with a conv2d to 10 + classes channels (box0 xywh c0, box1 xywh c1, classes)"
    dataset_need = "needs the yolov1_masked loss (use_yolov1: true)"
    counts_correct = False        # no in-loop metric (losses.md §9): detection is scored by mAP
    oracle_net = ([("conv2d", {"ic": 2, "oc": 4, "k_size": 3, "act": "relu"})], (2, 2, 3, 4))
    examples = [({"loss_kind": "yolov1_masked"}, [("", {})]),
                ({"loss_kind": "yolov1_masked", "use_focal": True}, [("", {}), ("g0.5", {"focal_gamma": 0.5})]),
                ({"loss_kind": "yolov1_masked", "use_diou_box": True}, [("", {})]),
                ({"loss_kind": "yolov1_masked", "anchors": "[[0.5, 0.8], [1.2, 0.6]]", "focal_gamma": 1.5},
                 [("", {}), ("g0", {"focal_gamma": 0.0})]),
                ({"loss_kind": "yolov1_masked", "anchors": "[[0.7, 0.7]]", "yolo_cls_weights": "[1, 3, 0.5]"},
                 [("", {})]),
                ({"loss_kind": "yolov1_masked", "anchors": "[[0.6, 0.9], [1.1, 0.5]]", "yolo_cls_weights": "[2, 1, 0.5]",
                  "yolo_cls_focal_gamma": 2.0}, [("", {})]),
                ({"loss_kind": "yolov1_masked", "fpn_scales": "[[2, [[0.5, 0.5]]]]", "yolo_cls_focal_gamma": 0.5},
                 [("", {})]),
                ({"loss_kind": "yolov1_masked", "fpn_scales": "[[2, [[0.5, 0.5]]], [1, [[1.0, 1.0], [2.0, 1.5]]]]"},
                 [("", {})])]

    def __init__(self, kind, cfg=None):
        super().__init__(kind, cfg)
        self.focal = bool(cfg is not None and cfg.use_focal)
        self.diou = bool(cfg is not None and cfg.use_diou_box)
        # the A-anchor path (losses.md §7): anchors [[a_w, a_h], …]; its objectness is focal
        self.anchors = tuple(tuple(a) for a in cfg.anchors) if cfg is not None else ()
        self.cls_weights = tuple(cfg.yolo_cls_weights) if cfg is not None else ()
        self.cls_gamma = float(cfg.yolo_cls_focal_gamma) if cfg is not None else 0.0
        # the multi-scale path (losses.md §7): [(grid, anchors), …] in P3, P4, P5 order
        self.fpn = tuple((int(g), tuple(tuple(a) for a in an)) for g, an in cfg.fpn_scales) if cfg is not None else ()
        self.hp = ("focal_gamma",) if self.focal or self.anchors or self.fpn else ()

    def rules(self, cfg, soft_aug):
        out = []
        if soft_aug:
            out.append(Rule("yolov1_masked (use_yolov1) cannot be combined with mixup/cutmix/knn-mixup",
                            "use_yolov1"))
        # added (losses.md §1): the yolo target is a box tensor; there is nothing to smooth
        if cfg.label_smoothing != 0.0:
            out.append(Rule("yolov1_masked (use_yolov1) requires label_smoothing = 0", "label_smoothing"))
        if cfg.fpn_scales and cfg.anchors:
            out.append(Rule("fpn_scales gives each scale its own anchors; anchors would go unused", "anchors",
                            also=("fpn_scales",), hint="drop anchors (or fpn_scales)"))
        return out

    def refused(self, cfg):
        # the seed weighs and focuses the anchor paths' class term only
        return [f for f in ("yolo_cls_weights", "yolo_cls_focal_gamma")
                if getattr(cfg, f) and not (cfg.anchors or cfg.fpn_scales)]

    def fpn_slots(self, n_total: int):
        """The multi-scale head's layout: per scale (offset, size, grid, anchors, slot) in the
        flat output of n_total values (P3, P4, P5 order; each block [A·S, g, g] flattened)."""
        cells = sum(len(an) * g * g for g, an in self.fpn)
        slot = n_total // cells if cells and n_total % cells == 0 else 0
        out, off = [], 0
        for g, an in self.fpn:
            n = len(an) * slot * g * g
            out.append((off, n, g, an, slot))
            off += n
        return out

    def check_output(self, out):
        if self.fpn:
            cells = sum(len(an) * g * g for g, an in self.fpn)
            if out.rank != 2 or out.dims[1] % cells or out.dims[1] // cells < SLOT_MIN:
                return (f"{self.kind} with fpn_scales needs the flat multi-scale head [batch, Σ A·(5 + classes)·g²] "
                        f"(Σ A·g² = {cells}), but the net's output is {list(out.dims)}")
            if self.cls_weights and len(self.cls_weights) != out.dims[1] // cells - 5:
                return f"yolo_cls_weights has {len(self.cls_weights)} weights but the head has {out.dims[1] // cells - 5} classes"
            return None
        why = super().check_output(out)
        if why is not None:
            return why
        c = out.dims[1]
        if self.anchors:
            a = len(self.anchors)
            if c % a or c // a < SLOT_MIN:
                return (f"{self.kind} with {a} anchors needs a head of {a}·(5 + classes) channels "
                        f"[tx, ty, tw, th, obj, classes per anchor], but the net's output has {c}")
            if self.cls_weights and len(self.cls_weights) != c // a - 5:
                return f"yolo_cls_weights has {len(self.cls_weights)} weights but the head has {c // a - 5} classes"
        elif c <= BOX_CH:
            return f"{self.kind} needs {self.logits_layout}, but the net's output has {c} channels"
        return None

    @staticmethod
    def oracle_head(out, nc, fields=None):

        def field(name):                          # as the example writes it, YAML flow text
            v = (fields or {}).get(name)
            return yaml.safe_load(v) if isinstance(v, str) else v
        fpn = field("fpn_scales")
        if fpn:
            n = sum(len(an) * g * g for g, an in fpn) * (5 + nc)
            return ([("flatten", {})] if out.rank > 2 else []) + [("dense", {"fan_in": out.size // out.dims[0], "fan_out": n})]
        if out.rank != 4:
            return None
        anchors = field("anchors")
        oc = len(anchors) * (5 + nc) if anchors else BOX_CH + nc
        return [("conv2d", {"ic": out.dims[1], "oc": oc, "k_size": 1, "act": "identity"})]

    def labels(self, out):
        if self.anchors or self.fpn:      # the target's objectness channels are the masks
            return out
        b, p, gh, gw = out.dims
        return f32(b, p + 1, gh, gw)

    def context(self, logits, labels):
        if self.fpn:
            return self._fpn_context(logits)
        b, p, gh, gw = logits.dims

        def sl(lo, hi):
            return f"[0:{b}, {lo}:{hi}, 0:{gh}, 0:{gw}]"

        def t(c):
            return f32(b, c, gh, gw).mlir
        slot = p // len(self.anchors) if self.anchors else 0
        anchor_ctx = {"anchors": bool(self.anchors), "slot": slot,
                      "anchor_slots": [{"off": k * slot, "aw": flt(aw), "ah": flt(ah)}
                                       for k, (aw, ah) in enumerate(self.anchors)],
                      "slab": f32(b, slot, gh, gw).mlir,
                      "cls_weights": "[" + ", ".join(flt(w) for w in self.cls_weights) + "]" if self.cls_weights else "",
                      "cwt": f32(max(slot - 5, 1)).mlir,
                      "cls_gamma": flt(self.cls_gamma) if self.cls_gamma else "",
                      "cls_gamma_m1": flt(self.cls_gamma - 1.0)}
        return {**anchor_ctx, "fpn": False, "b": b, "p": p, "nc": p - BOX_CH, "focal": self.focal, "diou": self.diou, "gh": gh, "gw": gw,
                "inv_gh": flt(1.0 / gh), "inv_gw": flt(1.0 / gw), "cmask": TensorType((b, gh, gw), "i1").mlir,
                "s1": t(1), "s2": t(2), "s4": t(4), "sc": t(slot - 5 if self.anchors else p - BOX_CH),
                "cell": f32(b, gh, gw).mlir,
                "sl_xy": sl(0, 2), "sl_wh": sl(2, 4), "sl_c0": sl(4, 5), "sl_c1": sl(9, 10), "sl_cls": sl(BOX_CH, p),
                "sl_m": sl(p, p + 1), "lc": flt(LAMBDA_COORD), "ln": flt(LAMBDA_NOOBJ), "eps": flt(EPS),
                "inv_b": flt(1.0 / b), "w_floor": flt(W_FLOOR)}

    def _fpn_context(self, logits):
        """Each scale is the A-anchor loss on its block, rendered here as its own function (this
        template in anchor mode, for that block's types) and called by the flat function."""
        b, n_total = logits.dims
        funcs, scales = {}, []
        for off, n, g, an, slot in self.fpn_slots(n_total):
            sub = self._scale(an)
            block = f32(b, len(an) * slot, g, g)
            ctx = {"logits": block.mlir, "labels": block.mlir, **sub.context(block, block)}
            fn = f"{self.name}_scale_{sig(self.name, ctx)}"
            funcs[fn] = render_template(f"losses/{self.name}.mlir.j2", {**ctx, "name": fn}, f"loss {self.name} (scale {g})")
            scales.append({"off": off, "n": n, "fn": fn, "block": block.mlir, "flat": f32(b, n).mlir})
        return {"fpn": True, "b": b, "scales": scales, "fpn_funcs": "".join(funcs[k] for k in sorted(funcs)),
                "inv_b": flt(1.0 / b)}

    def fit_labels(self, y, num_classes, cfg):
        """The dataset's YOLO targets as the step takes them.  The FPN path encodes its flat
        multi-scale target per batch from box lists (lmc/losses/boxes.py) — or from the single-box
        grid targets of the dataset, read as box lists — so box-aware augmentation can move
        the boxes first."""
        if self.fpn and np.ndim(y) != 2:
            # the flat head's width arrives as `num_classes` (the net's output [B, Σ A·S·g²])
            cells = sum(len(an) * g * g for g, an in self.fpn)
            if not num_classes or num_classes % cells or num_classes // cells < SLOT_MIN:
                raise ValueError(f"lmc bug: FPN labels for a head of {num_classes} values ({cells} anchor cells)")
            nc = num_classes // cells - 5
            return encode_fpn(as_list(np.asarray(y, np.float32)), self.fpn_slots(num_classes), nc)[0]
        return np.ascontiguousarray(y, np.float32)

    def draw_labels(self, rng, labels, logits):
        if self.fpn:
            b, n_total = labels.dims
            parts = []
            for off, n, g, an, slot in self.fpn_slots(n_total):
                sub = self._scale(an)
                block = f32(b, len(an) * slot, g, g)
                parts.append(sub.draw_labels(rng, block, block).reshape(b, n))
            return np.concatenate(parts, axis=1)
        if self.anchors:
            b, c, gh, gw = labels.dims
            s = c // len(self.anchors)
            t = np.zeros(labels.dims, np.float32)
            for k in range(len(self.anchors)):
                o = k * s
                t[:, o:o + 2] = rng.random((b, 2, gh, gw))
                t[:, o + 2:o + 4] = rng.uniform(0.05, 1.0, (b, 2, gh, gw))
                t[:, o + 4] = rng.random((b, gh, gw)) < 0.4
                cls = rng.integers(0, s - 5, (b, gh, gw))
                t[:, o + 5:o + s] = cls[:, None] == np.arange(s - 5)[None, :, None, None]
            return t
        b, p1, gh, gw = labels.dims
        nc = p1 - 1 - BOX_CH
        t = np.zeros(labels.dims, np.float32)
        m = (rng.random((b, gh, gw)) < 0.4).astype(np.float32)
        t[:, 0:2] = rng.random((b, 2, gh, gw))
        t[:, 2:4] = rng.uniform(0.05, 1.0, (b, 2, gh, gw))
        t[:, 4] = m
        t[:, 5:9] = rng.random((b, 4, gh, gw))
        cls = rng.integers(0, nc, (b, gh, gw))
        t[:, BOX_CH:BOX_CH + nc] = (cls[:, None] == np.arange(nc)[None, :, None, None])
        t[:, -1] = m
        return t

    def reference(self, xp, logits, labels, focal_gamma=None):
        if self.fpn:
            b, n_total = logits.shape
            total = 0.0
            for off, n, g, an, slot in self.fpn_slots(n_total):
                sub = self._scale(an)
                shape = (b, len(an) * slot, g, g)
                total = total + sub._anchor_reference(xp, logits[:, off:off + n].reshape(shape),
                                                      labels[:, off:off + n].reshape(shape), focal_gamma)
            return total
        if self.anchors:
            return self._anchor_reference(xp, logits, labels, focal_gamma)
        b, p = logits.shape[:2]
        z, t = logits, labels
        m = t[:, p]
        if self.diou:
            t1, t2 = LAMBDA_COORD * (m * (1.0 - diou(xp, z, t))).sum(), 0.0
        else:
            t1 = LAMBDA_COORD * (m * ((z[:, 0:2] - t[:, 0:2]) ** 2).sum(axis=1)).sum()
            sq = xp.sqrt(xp.maximum(z[:, 2:4], EPS)) - xp.sqrt(xp.maximum(t[:, 2:4], EPS))
            t2 = LAMBDA_COORD * (m * (sq ** 2).sum(axis=1)).sum()
        c0, c1 = z[:, 4], z[:, 9]
        if focal_gamma is None:
            obj = (m * (c0 - 1) ** 2).sum() + LAMBDA_NOOBJ * ((1 - m) * c0 ** 2).sum() + LAMBDA_NOOBJ * (c1 ** 2).sum()
        else:
            def bce(zz, tt):
                return xp.maximum(zz, 0.0) - zz * tt + xp.log1p(xp.exp(-xp.abs(zz)))
            p0, p1 = 1 / (1 + xp.exp(-c0)), 1 / (1 + xp.exp(-c1))
            pt = m * p0 + (1 - m) * (1 - p0)
            w0 = detach(xp, xp.maximum(1 - pt, W_FLOOR) ** focal_gamma)
            w1 = detach(xp, xp.maximum(p1, W_FLOOR) ** focal_gamma)
            a0 = m + LAMBDA_NOOBJ * (1 - m)
            obj = (a0 * w0 * bce(c0, m)).sum() + LAMBDA_NOOBJ * (w1 * bce(c1, 0.0)).sum()
        cz = z[:, BOX_CH:p]
        cz = cz - cz.max(axis=1, keepdims=True)
        logp = cz - xp.log(xp.exp(cz).sum(axis=1, keepdims=True))
        t6 = -(m * (t[:, BOX_CH:p] * logp).sum(axis=1)).sum()
        return (t1 + t2 + obj + t6) / b

    def _scale(self, anchors):
        """This loss on one scale's block: the A-anchor path with that scale's anchors."""
        sub = YoloV1Masked(self.kind, self.cfg)
        sub.fpn, sub.anchors = (), tuple(anchors)
        return sub

    def _anchor_reference(self, xp, z, t, gamma):
        """Σ over anchor slots: λc·m·(1 − DIoU with the slot's prior) + focal objectness (α = 1 on
        assigned cells, λn elsewhere, the weight detached) + m·ω·class CE; / B."""
        b, c = z.shape[:2]
        s = c // len(self.anchors)
        total = 0.0
        for k, (aw, ah) in enumerate(self.anchors):
            zs, ts = z[:, k * s:(k + 1) * s], t[:, k * s:(k + 1) * s]
            m = ts[:, 4]
            total = total + LAMBDA_COORD * (m * (1.0 - diou(xp, zs, ts, aw, ah))).sum()
            o = zs[:, 4]
            p0 = 1 / (1 + xp.exp(-o))
            pt = m * p0 + (1 - m) * (1 - p0)
            w0 = detach(xp, xp.maximum(1 - pt, W_FLOOR) ** gamma)
            bce = xp.maximum(o, 0.0) - o * m + xp.log1p(xp.exp(-xp.abs(o)))
            total = total + ((m + LAMBDA_NOOBJ * (1 - m)) * w0 * bce).sum()
            cz = zs[:, 5:] - zs[:, 5:].max(axis=1, keepdims=True)
            logp = cz - xp.log(xp.exp(cz).sum(axis=1, keepdims=True))
            om = (ts[:, 5:] * xp.asarray(self.cls_weights, z.dtype).reshape(1, -1, 1, 1)).sum(axis=1) \
                if self.cls_weights else 1.0
            lpt = (ts[:, 5:] * logp).sum(axis=1)
            if self.cls_gamma:                    # class focal: × max(1 − p_t, 1e-12)^γc, not detached
                om = om * xp.maximum(-xp.expm1(lpt), W_FLOOR) ** self.cls_gamma
            total = total - (m * om * lpt).sum()
        return total / b

    @staticmethod
    def correct_reference(logits, labels):
        return 0, 0

    def decode(self, z: np.ndarray):
        """Predictions → per cell boxes, scores, classes (lmc/losses/_yolo_decode.py)."""
        return decode(self, z)

    def ground_truth(self, t: np.ndarray):
        """Labels → per image (boxes, classes) (lmc/losses/_yolo_decode.py)."""
        return ground_truth(self, t)
