"""detr_set: DETR's set loss (Carion et al. 2020) for a net ending in detr_heads — beyond the
Lean kit, whose DETR head has no loss.

Net output z [B, Q, K + 4] (detr_heads): per query K = n_classes + 1 class logits (the last is
"no object"), then the box cx, cy, w, h (image-relative, already through the head's sigmoid).
Labels t [B, Q, 6] f32 per query: the class id (n_classes = no object), the target box
cx, cy, w, h (zeros where no object), the match mask m (1 exactly where the class is a real one).

Host side (`prepare_labels`, before each train step): the data pipeline's box targets become the
image's objects in rows 0..n−1 (`fit_labels`); then the compiled @forward's predictions for the
batch are matched to them by the Hungarian algorithm (scipy.optimize.linear_sum_assignment),
cost C[q, j] = COST_CLASS·(−p_q(c_j)) + COST_BBOX·‖b_q − b_j‖₁ + COST_GIOU·(−GIoU(b_q, b_j)),
p the softmax over all K classes (DETR's HungarianMatcher: 1, 5, 2), and each object's row is
moved to its query.  @forward runs the eval graph (BN running statistics, no dropout): where a
net has neither, the predictions matched are exactly the train step's (the detr_digits demo);
with BN they are the running-statistics predictions, which is DETR's own frozen-BN backbone.

In the graph (hand-derived gradient), DETR's SetCriterion without auxiliary decoder losses:
  L_ce   = Σ_q w_q·(−log softmax(z_q)[t_q]) / Σ_q w_q,  w = EOS_COEF for "no object", else 1
           (PyTorch's weighted-mean cross-entropy over all B·Q queries)
  L_l1   = Σ_q m_q·‖b_q − b̂_q‖₁ / N,   L_giou = Σ_q m_q·(1 − GIoU(b_q, b̂_q)) / N,
           N = max(Σ m, 1) the batch's number of objects
  L      = W_CE·L_ce + W_L1·L_l1 + W_GIOU·L_giou      (1, 5, 2)
GIoU = I/U − (C − U)/C over the boxes' corners (cx ∓ w/2, cy ∓ h/2), U and C (the enclosing
box's area) clamped at TINY.  The weights are fixed constants (DETR's defaults), not recipe
fields.  Detection is scored by mAP (`decode`: per query the top real class's probability
and its box)."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import DataError
from lmc.core.types import f32
from lmc.losses import BOXES, Loss, Rule, register
from lmc.losses._yolo_decode import BOX_CH as YOLO_BOX_CH      # the single-box grid target: 2 boxes × 5 before the classes

EOS_COEF = 0.1                              # the "no object" class's CE weight
W_CE, W_L1, W_GIOU = 1.0, 5.0, 2.0          # the loss terms' weights
COST_CLASS, COST_BBOX, COST_GIOU = 1.0, 5.0, 2.0   # the matching cost's weights
TINY = 1e-9                                 # the union and enclosing area are clamped at this
BOX = 4                                     # cx, cy, w, h after the class logits
LABEL_COLS = 6                              # class id, cx, cy, w, h, match mask


def corners(xp, b):
    """cx, cy, w, h (last axis) → x1, y1, x2, y2."""
    cx, cy, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2


def giou(xp, b, t):
    """GIoU of boxes b and t (cx, cy, w, h on the last axis, broadcast against each other)."""
    x1, y1, x2, y2 = corners(xp, b)
    X1, Y1, X2, Y2 = corners(xp, t)
    iw = xp.maximum(xp.minimum(x2, X2) - xp.maximum(x1, X1), 0.0)
    ih = xp.maximum(xp.minimum(y2, Y2) - xp.maximum(y1, Y1), 0.0)
    inter = iw * ih
    union = xp.maximum(b[..., 2] * b[..., 3] + t[..., 2] * t[..., 3] - inter, TINY)
    enc = xp.maximum((xp.maximum(x2, X2) - xp.minimum(x1, X1)) * (xp.maximum(y2, Y2) - xp.minimum(y1, Y1)), TINY)
    return inter / union - (enc - union) / enc


def match_cost(z: np.ndarray, objects: np.ndarray) -> np.ndarray:
    """The Hungarian cost [Q, n] of one image's predictions z [Q, K + 4] against its n objects
    [n, 6] (class, cx, cy, w, h, mask), float64."""
    z = z.astype(np.float64)
    k = z.shape[1] - BOX
    c = z[:, :k] - z[:, :k].max(axis=1, keepdims=True)
    prob = np.exp(c) / np.exp(c).sum(axis=1, keepdims=True)
    cls = objects[:, 0].astype(np.int64)
    b, t = z[:, None, k:], objects[None, :, 1:5].astype(np.float64)
    return (COST_CLASS * -prob[:, cls] + COST_BBOX * np.abs(b - t).sum(axis=2)
            + COST_GIOU * -giou(np, b, t))


def match(z: np.ndarray, labels: np.ndarray, nc: int) -> np.ndarray:
    """Fitted labels [B, Q, 6] (each image's objects in its first rows) → the same objects moved
    to the queries the Hungarian matching of the predictions z [B, Q, K + 4] assigns them."""
    from scipy.optimize import linear_sum_assignment
    out = np.zeros_like(labels)
    out[..., 0] = nc
    for i in range(len(labels)):
        objects = labels[i][labels[i, :, 5] > 0.5]
        if not len(objects):
            continue
        rows, cols = linear_sum_assignment(match_cost(z[i], objects))
        out[i, rows] = objects[cols]
    return out


@register("detr_set")
class DetrSet(Loss):
    order = 10                    # lmc's addition after the seed's ten
    label_format = BOXES          # the box targets of the detection datasets, regrouped per object
    logits_rank = 3
    logits_layout = "per-query outputs [batch, queries, classes + 1 + 4] (detr_heads)"
    rank_hint = "end the net with transformer_decoder and detr_heads"
    counts_correct = False        # detection is scored by mAP
    host_labels = True            # prepare_labels: the Hungarian matching on @forward's predictions
    batch_mean = False            # L1 and GIoU are divided by the batch's object count
    oracle_net = ([("layer_norm", {"dim": 6})], (2, 5, 6))
    examples = [({"loss_kind": "detr_set"}, [("", {})])]

    @staticmethod
    def oracle_head(out, nc):
        if out.rank != 3:
            return None
        return [("detr_heads", {"dim": out.dims[2], "n_classes": nc})]

    def rules(self, cfg, soft_aug):
        out = []
        if soft_aug:
            on = next(f for f in ("use_mixup", "use_cutmix", "use_knn_mixup") if getattr(cfg, f))
            out.append(Rule("detr_set (box targets) cannot be combined with mixup/cutmix/knn-mixup", on,
                            also=("loss_kind",), hint=f"drop {on}"))
        if cfg.label_smoothing != 0.0:
            out.append(Rule("detr_set requires label_smoothing = 0 (DETR's class term is unsmoothed)",
                            "label_smoothing", also=("loss_kind",)))
        for name in ("use_yolov1", "use_diou_box", "anchors", "fpn_scales", "yolo_cls_weights",
                     "yolo_cls_focal_gamma"):
            if getattr(cfg, name):
                out.append(Rule(f"{name} is a YOLOv1-loss option, but the loss is detr_set", name,
                                hint=f"drop {name}"))
        return out

    def check_output(self, out):
        why = super().check_output(out)
        if why is None and out.dims[2] < BOX + 2:
            why = f"{self.kind} needs {self.logits_layout}, but the net's output has {out.dims[2]} per query"
        return why

    def labels(self, out):
        self.queries = out.dims[1]        # fit_labels places each image's objects among these
        self.nc = out.dims[2] - BOX - 1
        return f32(out.dims[0], out.dims[1], LABEL_COLS)

    def context(self, logits, labels):
        b, q, p = logits.dims
        k = p - BOX

        def t(*d):
            return f32(*d).mlir
        return {"b": b, "q": q, "k": k, "p": p, "cls": t(b, q, k), "box": t(b, q, BOX), "col": t(b, q, 1),
                "row": t(b, q), "qmask": f"tensor<{b}x{q}xi1>", "cmask": f"tensor<{b}x{q}x{k}xi1>",
                "icls": f"tensor<{b}x{q}x{k}xi32>", "no_obj": f"{k - 1}.0", "eos": f"{EOS_COEF:.9e}",
                "w_ce": f"{W_CE:.9e}", "w_l1": f"{W_L1:.9e}", "w_giou": f"{W_GIOU:.9e}", "tiny": f"{TINY:.9e}"}

    # ---------------------------------------------------------------- host side
    def objects(self, y: np.ndarray):
        """Box targets → per image (classes [n], boxes [n, 4] cx, cy, w, h): the single-box grid
        target [N, 10 + NC + 1, gH, gW] of the detection datasets (the cell mask last; box0's
        x, y are offsets in the cell, w, h image-relative; the class one-hot from channel 10)."""
        n, c, gh, gw = y.shape
        out = []
        for i in range(n):
            ii, jj = np.nonzero(y[i, c - 1] > 0.5)
            cx, cy = (jj + y[i, 0, ii, jj]) / gw, (ii + y[i, 1, ii, jj]) / gh
            boxes = np.stack([cx, cy, y[i, 2, ii, jj], y[i, 3, ii, jj]], axis=-1).reshape(-1, 4)
            out.append((y[i, YOLO_BOX_CH:c - 1, ii, jj].argmax(axis=-1).reshape(-1), boxes))
        return out

    def fit_labels(self, y, num_classes, cfg):
        """Box targets → [N, Q, 6], each image's objects in its first rows (unmatched: the
        matching of prepare_labels moves them to their queries)."""
        t = np.zeros((len(y), self.queries, LABEL_COLS), np.float32)
        t[..., 0] = self.nc
        for i, (cls, boxes) in enumerate(self.objects(y)):
            n = min(len(cls), self.queries)      # check_data refuses more objects than queries
            t[i, :n, 0], t[i, :n, 1:5], t[i, :n, 5] = cls[:n], boxes[:n], 1.0
        return t

    def prepare_labels(self, y, predict):
        """The step's labels: y (fit_labels') matched to `predict()`, @forward's outputs on the batch."""
        return match(np.asarray(predict()), y, self.nc)

    def check_data(self, ds, labels, fit):
        for name in ("y_train", "y_val"):
            y = getattr(ds, name)
            if y.ndim != 4 or y.dtype != np.float32 or y.shape[1] != YOLO_BOX_CH + self.nc + 1:
                raise DataError(f"{ds.source(name)}: loss {self.kind} reads single-box grid targets "
                                f"[N, {YOLO_BOX_CH} + classes + 1, gH, gW] with {self.nc} classes (the net's "
                                f"detr_heads), got {list(y.shape)}",
                                hint="set detr_heads' n_classes to the dataset's class count")
            most = int((y[:, -1] > 0.5).sum(axis=(1, 2)).max(initial=0))
            if most > self.queries:
                raise DataError(f"{ds.source(name)}: an image holds {most} objects, but the net has "
                                f"{self.queries} queries (each object is matched to its own query)",
                                hint=f"give transformer_decoder n_queries >= {most}")
        super().check_data(ds, labels, fit)       # the augmentations that would move the boxes

    def draw_labels(self, rng, labels, logits):
        b, q, _ = labels.dims
        t = np.zeros(labels.dims, np.float32)
        m = rng.random((b, q)) < 0.5
        m[:, 0] = True                                       # at least one object per image
        t[..., 0] = np.where(m, rng.integers(0, self.nc, (b, q)), self.nc)
        t[..., 1:3] = rng.uniform(0.2, 0.8, (b, q, 2))
        t[..., 3:5] = rng.uniform(0.1, 0.6, (b, q, 2))
        t[..., 1:5] *= m[..., None]
        t[..., 5] = m
        return t

    @staticmethod
    def reference(xp, logits, labels):
        k = logits.shape[2] - BOX
        z, b = logits[..., :k], logits[..., k:]
        cls, tb, m = labels[..., 0], labels[..., 1:5], labels[..., 5]
        zs = z - z.max(axis=-1, keepdims=True)
        logp = zs - xp.log(xp.exp(zs).sum(axis=-1, keepdims=True))
        hot = (cls[..., None] == xp.arange(k)).astype(logp.dtype)
        w = xp.where(cls == k - 1, EOS_COEF, 1.0)
        ce = -(w * (hot * logp).sum(axis=-1)).sum() / w.sum()
        n = xp.maximum(m.sum(), 1.0)
        l1 = (m * xp.abs(b - tb).sum(axis=-1)).sum() / n
        lg = (m * (1.0 - giou(xp, b, tb))).sum() / n
        return W_CE * ce + W_L1 * l1 + W_GIOU * lg

    @staticmethod
    def correct_reference(logits, labels):
        return 0, 0

    def decode(self, z: np.ndarray):
        """Predictions z [B, Q, K + 4] → per query boxes [B, Q, 4] (x0, y0, x1, y1 in image units),
        scores [B, Q] (the top real class's softmax probability over all K) and classes [B, Q]
        (DETR's PostProcess)."""
        z = z.astype(np.float64)
        k = z.shape[2] - BOX
        c = z[..., :k] - z[..., :k].max(axis=-1, keepdims=True)
        prob = (np.exp(c) / np.exp(c).sum(axis=-1, keepdims=True))[..., :k - 1]
        x1, y1, x2, y2 = corners(np, z[..., k:])
        return np.stack([x1, y1, x2, y2], axis=-1), prob.max(axis=-1), prob.argmax(axis=-1)

    def ground_truth(self, t: np.ndarray):
        """Box targets (the dataset's, as eval reads them) → per image (boxes [n, 4] x0, y0, x1, y1, classes [n])."""
        out = []
        for cls, boxes in self.objects(t):
            x1, y1, x2, y2 = corners(np, boxes.astype(np.float64))
            out.append((np.stack([x1, y1, x2, y2], axis=-1).reshape(-1, 4), cls))
        return out

