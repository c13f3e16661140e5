"""Host-side box decoding of the yolov1_masked loss's head and labels (the eval's mAP, lmc
predict's boxes): `loss` is the loss instance (its single-box, A-anchor or FPN configuration)."""
from __future__ import annotations

import numpy as np

BOX_CH = 10                   # channels before the class scores (2 boxes × 5)
EXP_CAP = 8.0                 # tw, th are capped before exp (exp overflows to inf, then NaN, in f32)


def _decode_slot(z, aw, ah):
    """One anchor slot [B, 5 + NC, gH, gW] → (boxes [B, cells, 4], scores, classes), the σ/exp
    parameterization of its DIoU term, score = σ(obj) × top class probability."""
    b, s, gh, gw = z.shape
    ii, jj = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    sig = lambda v: 1 / (1 + np.exp(-v))      # noqa: E731
    cx, cy = (jj + sig(z[:, 0])) / gw, (ii + sig(z[:, 1])) / gh
    w, h = aw * np.exp(np.minimum(z[:, 2], EXP_CAP)), ah * np.exp(np.minimum(z[:, 3], EXP_CAP))
    c = z[:, 5:] - z[:, 5:].max(axis=1, keepdims=True)
    prob = np.exp(c) / np.exp(c).sum(axis=1, keepdims=True)
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1).reshape(b, -1, 4)
    return boxes, (sig(z[:, 4]) * prob.max(axis=1)).reshape(b, -1), prob.argmax(axis=1).reshape(b, -1)


def decode(loss, z: np.ndarray):
    """Predictions z [B, P, gH, gW] → per cell boxes [B, gH·gW, 4] (x0, y0, x1, y1 in image
    units [0, 1]), scores [B, gH·gW] = confidence × top class probability (the confidence
    through σ when use_focal trained it as a logit, as the loss reads it) and classes; box0
    only (box1 is never trained)."""
    if loss.fpn:
        parts = [decode(loss._scale(an), z[:, off:off + n].reshape(len(z), len(an) * slot, g, g))
                 for off, n, g, an, slot in loss.fpn_slots(z.shape[1])]
        return tuple(np.concatenate(x, axis=1) for x in zip(*parts))
    b, p, gh, gw = z.shape
    z = z.astype(np.float64)
    if loss.anchors:                  # per anchor slot, its prior, σ on the objectness logit
        s = p // len(loss.anchors)
        parts = [_decode_slot(z[:, k * s:(k + 1) * s], aw, ah) for k, (aw, ah) in enumerate(loss.anchors)]
        return tuple(np.concatenate(x, axis=1) for x in zip(*parts))
    conf = 1 / (1 + np.exp(-z[:, 4])) if loss.focal else np.clip(z[:, 4], 0.0, 1.0)
    c = z[:, BOX_CH:p] - z[:, BOX_CH:p].max(axis=1, keepdims=True)
    prob = np.exp(c) / np.exp(c).sum(axis=1, keepdims=True)
    ii, jj = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    if loss.diou:                     # the σ/exp parameterization the DIoU term trains
        cx, cy = (jj + 1 / (1 + np.exp(-z[:, 0]))) / gw, (ii + 1 / (1 + np.exp(-z[:, 1]))) / gh
        w, h = np.exp(np.minimum(z[:, 2], EXP_CAP)), np.exp(np.minimum(z[:, 3], EXP_CAP))
    else:
        cx, cy = (jj + z[:, 0]) / gw, (ii + z[:, 1]) / gh
        w, h = np.clip(z[:, 2], 0.0, 1.0), np.clip(z[:, 3], 0.0, 1.0)
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1).reshape(b, -1, 4)
    return boxes, (conf * prob.max(axis=1)).reshape(b, -1), prob.argmax(axis=1).reshape(b, -1)


def ground_truth(loss, t: np.ndarray):
    """Labels t → per image (boxes [n, 4] in image units, classes [n]): single box
    [B, P + 1, gH, gW] (mask last), or per anchor slot (its objectness channel)."""
    if t.ndim == 3:                   # box lists (lmc/losses/boxes.py)
        out = []
        for b in t:
            b = b[b[:, 0] >= 0].astype(np.float64)
            cx, cy, w, h = b[:, 1], b[:, 2], b[:, 3], b[:, 4]
            out.append((np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1).reshape(-1, 4),
                        b[:, 0].astype(np.int64)))
        return out
    if loss.fpn and t.ndim == 2:
        per = [ground_truth(loss._scale(an), t[:, off:off + n].reshape(len(t), len(an) * slot, g, g))
               for off, n, g, an, slot in loss.fpn_slots(t.shape[1])]
        return [(np.concatenate([p[k][0] for p in per]), np.concatenate([p[k][1] for p in per]))
                for k in range(len(t))]
    b, c, gh, gw = t.shape
    if loss.anchors and not loss.fpn:         # (the FPN path reads single-box grids too)
        s = c // len(loss.anchors)
        slots = [(k * s, k * s + 4, k * s + 5, (k + 1) * s) for k in range(len(loss.anchors))]
    else:
        slots = [(0, c - 1, BOX_CH, c - 1)]
    out = []
    for k in range(b):
        boxes, classes = [], []
        for o, mch, c0, c1 in slots:
            ii, jj = np.nonzero(t[k, mch] > 0.5)
            x, y, w, h = (t[k, o + d, ii, jj].astype(np.float64) for d in range(4))
            cx, cy = (jj + x) / gw, (ii + y) / gh
            boxes.append(np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1).reshape(-1, 4))
            classes.append(t[k, c0:c1, ii, jj].argmax(axis=-1) if len(ii) else np.zeros(0, np.int64))
        out.append((np.concatenate(boxes), np.concatenate(classes)))
    return out
