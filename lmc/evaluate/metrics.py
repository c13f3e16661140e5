"""Validation metrics beyond top-1 (losses.md §9, training.md §7), chosen by what the dataset's
labels are (Dataset.label_format):

- per-pixel masks: a confusion matrix over every validation pixel → pixel accuracy, per-class
  IoU_c = TP/(row + col − TP) (classes absent from both labels and predictions are left out of
  the mean), mIoU; and region Dice for unions of classes (BraTS: WT = {1,2,3}, TC = {2,3},
  ET = {3}): Dice_R = 2|R_gt ∩ R_pred|/(|R_gt| + |R_pred|), 1.0 when R is absent everywhere.
- box targets (YOLO): the loss decodes boxes (Loss.decode, the parameterization it trains), NMS
  per class, then mAP@0.5 and mAP@[.5:.95] from pycocotools' COCOeval (DetResult).
- float targets: MSE over every element and PSNR = 10·log10(peak²/MSE), peak 1 (the targets are
  images in [0, 1]), from the dataset's overall MSE.

Each result has `n`, `region`, `as_dict()` (JSONL, `lmc eval --json`) and `describe()` (the
epoch line), as EvalResult does."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import math
from dataclasses import dataclass, field

import numpy as np
from lmc.core.errors import EvalError
from lmc.evaluate.interval import wilson95
from lmc.losses import BOXES, FLOAT, MASK, MULTI_HOT


@dataclass
class SegResult:
    num_classes: int
    regions: dict = field(default_factory=dict)        # name → class ids (region Dice)
    n: int = 0                                           # images
    conf: np.ndarray | None = None                       # [K, K] int64: rows true, cols predicted
    region: str = "live"

    def add(self, logits: np.ndarray, labels: np.ndarray, x: np.ndarray | None = None) -> None:
        """logits [B, K, H, W], labels [B, H, W]; the first maximal class wins ties.  K is the
        logits' (the count the caller passes is the head's, None for per-pixel logits)."""
        keep_sample(self, x, logits, labels)
        k = self.num_classes = logits.shape[1]
        pred = np.argmax(logits, axis=1).astype(np.int64)
        y = labels.astype(np.int64)
        c = np.bincount((y * k + pred).ravel(), minlength=k * k).reshape(k, k)
        self.conf = c if self.conf is None else self.conf + c
        self.n += len(labels)

    def iou(self) -> list[float | None]:
        c = self.conf if self.conf is not None else np.zeros((self.num_classes,) * 2, np.int64)
        tp = np.diag(c).astype(np.float64)
        union = c.sum(0) + c.sum(1) - tp
        return [float(t / u) if u > 0 else None for t, u in zip(tp, union)]

    def miou(self) -> float | None:
        present = [v for v in self.iou() if v is not None]
        return float(np.mean(present)) if present else None

    def pixel_acc(self) -> float | None:
        total = int(self.conf.sum()) if self.conf is not None else 0
        return float(np.trace(self.conf)) / total if total else None

    def dice(self, classes) -> float:
        c = self.conf
        idx = list(classes)
        inter = c[np.ix_(idx, idx)].sum()
        gt, pr = c[idx, :].sum(), c[:, idx].sum()
        return 1.0 if gt + pr == 0 else float(2 * inter / (gt + pr))

    def as_dict(self) -> dict:
        out = {"n": self.n, "pixel_acc": self.pixel_acc(), "miou": self.miou(), "iou": self.iou()}
        if self.conf is not None:
            out.update({f"dice_{r}": self.dice(cl) for r, cl in self.regions.items()})
        return out

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        s = f"pixel acc {100 * self.pixel_acc():.2f}%, mIoU {self.miou():.4f} ({self.num_classes} classes, {self.n} images)"
        if self.regions:
            s += ", Dice " + ", ".join(f"{r} {self.dice(cl):.4f}" for r, cl in self.regions.items())
        return s


PSNR_PEAK = 1.0
N_SHOWN = 8             # validation examples drawn by save_predictions


def keep_sample(res, x, out, labels) -> None:
    """Keep the first N_SHOWN validation examples (input, net output, labels) for the PNG."""
    if x is not None and getattr(res, "sample", None) is None:
        res.sample = (np.array(x[:N_SHOWN]), np.array(out[:N_SHOWN]), np.array(labels[:N_SHOWN]))


@dataclass
class RegressionResult:
    n: int = 0                  # examples
    sse: float = 0.0
    count: int = 0              # elements
    region: str = "live"

    def add(self, out: np.ndarray, target: np.ndarray, x: np.ndarray | None = None) -> None:
        keep_sample(self, x, out, target)
        d = out.astype(np.float64) - target.astype(np.float64)
        self.sse += float(np.sum(d * d))
        self.count += d.size
        self.n += len(target)

    def mse(self) -> float | None:
        return self.sse / self.count if self.count else None

    def psnr(self) -> float | None:
        m = self.mse()
        if m is None:
            return None
        return math.inf if m == 0 else 10.0 * math.log10(PSNR_PEAK ** 2 / m)

    def as_dict(self) -> dict:
        return {"n": self.n, "mse": self.mse(), "psnr": self.psnr()}

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        return f"MSE {self.mse():.5f}, PSNR {self.psnr():.2f} dB (peak 1; {self.n} examples)"


def scorer(label_format: str, num_classes: int, regions: dict | None = None, loss=None):
    """The result that scores labels of `label_format` (None: class ids, EvalResult's top-1)."""
    if label_format == BOXES:
        if loss is None or not hasattr(loss, "decode"):
            raise EvalError("scoring box targets needs the recipe's detection loss (its decoder): the spec has no train: recipe")
        return DetResult(loss)
    if label_format == MULTI_HOT:
        return MultiHotResult()
    if label_format == MASK:
        return SegResult(num_classes, dict(regions or {}))
    if label_format == FLOAT:
        return RegressionResult()
    return None


def eval_format(dataset_format: str, loss) -> str:
    """What the validation labels are scored as: the dataset's format, except that float
    targets [N, NC] consumed by a multi-hot loss are scored as multi-hot."""
    if dataset_format == FLOAT and loss is not None:
        return loss.label_format
    return dataset_format


@dataclass
class MultiHotResult:
    """Multi-hot / soft targets [N, NC]: top-1 = rows whose arg-max logit holds the row's
    largest target (the multi-hot loss template's `correct`), with its 95% Wilson interval."""
    n: int = 0
    top1: int = 0
    region: str = "live"

    def add(self, logits: np.ndarray, targets: np.ndarray, x: np.ndarray | None = None) -> None:
        top = np.argmax(logits, axis=1)
        self.top1 += int((targets[np.arange(len(targets)), top] >= targets.max(axis=1)).sum())
        self.n += len(targets)

    def as_dict(self) -> dict:
        lo, hi = wilson95(self.top1, self.n)
        return {"n": self.n, "top1": self.top1 / self.n if self.n else None, "top1_lo": lo, "top1_hi": hi}

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        return f"top-1 (a largest target) {100 * self.top1 / self.n:.2f}% ({self.top1}/{self.n})"


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Greedy non-maximum suppression: indices kept, by descending score; a box is dropped when
    its IoU with a kept one exceeds `iou`.  boxes [n, 4] as x0, y0, x1, y1."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    area = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
    while len(order):
        i = order[0]
        keep.append(i)
        rest = order[1:]
        w = np.clip(np.minimum(boxes[i, 2], boxes[rest, 2]) - np.maximum(boxes[i, 0], boxes[rest, 0]), 0, None)
        h = np.clip(np.minimum(boxes[i, 3], boxes[rest, 3]) - np.maximum(boxes[i, 1], boxes[rest, 1]), 0, None)
        inter = w * h
        union = area[i] + area[rest] - inter
        order = rest[inter / np.maximum(union, 1e-12) <= iou]
    return np.asarray(keep, np.int64)


@dataclass
class DetResult:
    """Detection: the loss decodes each image's predictions (Loss.decode: boxes, scores,
    classes) and its targets (Loss.ground_truth); per class, boxes scoring at least SCORE_MIN
    go through NMS at IoU NMS_IOU; mAP@0.5 and mAP@[.5:.95] come from pycocotools' COCOeval."""
    loss: object
    n: int = 0
    dets: list = field(default_factory=list)      # per image (boxes, scores, classes)
    gts: list = field(default_factory=list)       # per image (boxes, classes)
    region: str = "live"
    _maps: tuple | None = None

    SCORE_MIN = 0.01
    NMS_IOU = 0.5
    SCALE = 1000.0          # image units → COCO's absolute coordinates (IoU does not depend on it)

    def add(self, logits: np.ndarray, labels: np.ndarray, x: np.ndarray | None = None) -> None:
        keep_sample(self, x, logits, labels)
        self.dets += detections(self.loss, logits)
        self.gts += self.loss.ground_truth(labels)
        self.n += len(labels)
        self._maps = None

    def maps(self) -> tuple[float, float]:
        """(mAP@0.5, mAP@[.5:.95]) by COCOeval; 0 when nothing was detected."""
        if self._maps is None:
            self._maps = coco_map(self.gts, self.dets, self.SCALE)
        return self._maps

    def as_dict(self) -> dict:
        m50, m = self.maps()
        return {"n": self.n, "map50": m50, "map": m}

    def describe(self) -> str:
        if not self.n:
            return "no validation examples"
        m50, m = self.maps()
        return f"mAP@0.5 {m50:.4f}, mAP@[.5:.95] {m:.4f} ({self.n} images, {sum(len(g[1]) for g in self.gts)} objects)"


def detections(loss, logits: np.ndarray) -> list[tuple]:
    """Per image (boxes [n, 4] in image units x0 y0 x1 y1, scores, classes): the loss's decode,
    then per class the boxes scoring at least DetResult.SCORE_MIN through NMS at
    DetResult.NMS_IOU — what eval scores and `lmc predict` draws."""
    boxes, scores, classes = loss.decode(logits)
    out = []
    for k in range(len(boxes)):
        keep_all = []
        for c in np.unique(classes[k]):
            idx = np.nonzero((classes[k] == c) & (scores[k] >= DetResult.SCORE_MIN))[0]
            keep_all += list(idx[nms(boxes[k][idx], scores[k][idx], DetResult.NMS_IOU)])
        keep = np.asarray(keep_all, np.int64)
        out.append((boxes[k][keep], scores[k][keep], classes[k][keep]))
    return out


def require_coco() -> None:
    """Detection is scored by pycocotools (the `det` extra): refuse before training or loading
    anything, not at the first evaluation."""
    if importlib.util.find_spec("pycocotools") is None:
        raise EvalError("detection mAP needs pycocotools (this net is scored by mAP at every evaluation)",
                        hint="pip install 'lmc[det]' (pycocotools)")


def coco_map(gts, dets, scale: float) -> tuple[float, float]:
    """COCOeval (bbox) over per-image ground truth (boxes, classes) and detections (boxes,
    scores, classes), boxes x0, y0, x1, y1."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise EvalError("detection mAP needs pycocotools", hint="pip install 'lmc[det]' (pycocotools)") from None
    cats = sorted({int(c) for _, cl in gts for c in cl} | {int(c) for *_, cl in dets for c in cl})
    if not cats or not any(len(cl) for _, cl in gts):
        return 0.0, 0.0

    def xywh(b):
        return [float(b[0] * scale), float(b[1] * scale), float((b[2] - b[0]) * scale), float((b[3] - b[1]) * scale)]
    anns = []
    for k, (bx, cl) in enumerate(gts):
        for b, c in zip(bx, cl):
            box = xywh(b)
            anns.append({"id": len(anns) + 1, "image_id": k + 1, "category_id": int(c) + 1, "bbox": box,
                         "iscrowd": 0, "area": box[2] * box[3]})
    res = [{"image_id": k + 1, "category_id": int(c) + 1, "bbox": xywh(b), "score": float(s)}
           for k, (bx, sc, cl) in enumerate(dets) for b, s, c in zip(bx, sc, cl)]
    if not res:
        return 0.0, 0.0
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": [{"id": k + 1} for k in range(len(gts))], "annotations": anns,
                      "categories": [{"id": c + 1} for c in cats]}
        gt.createIndex()
        dt = gt.loadRes(res)
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(max(ev.stats[1], 0.0)), float(max(ev.stats[0], 0.0))


def save_predictions(res, path) -> bool:
    """A PNG of the kept validation examples (first N_SHOWN), for results that have one:
    segmentation (input / ground truth / prediction, classes coloured), detection (ground-truth
    boxes green, predicted boxes after NMS with score ≥ 0.3 red, with their class), regression
    (input / output / target).  Returns whether one was written."""
    sample = getattr(res, "sample", None)
    if sample is None or not isinstance(res, (SegResult, DetResult, RegressionResult)):
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x, out, y = sample
    n = len(x)
    img = x[:, 0] if x.ndim == 4 else x.reshape(n, -1)[:, None]
    rows = 2 if isinstance(res, DetResult) else 3
    fig, axes = plt.subplots(rows, n, figsize=(1.6 * n, 1.7 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.set_axis_off()
    if isinstance(res, SegResult):
        k = out.shape[1]
        pred = out.argmax(axis=1)
        for i in range(n):
            axes[0, i].imshow(img[i], cmap="gray")
            axes[1, i].imshow(y[i], cmap="tab20", vmin=0, vmax=max(k - 1, 1), interpolation="nearest")
            axes[2, i].imshow(pred[i], cmap="tab20", vmin=0, vmax=max(k - 1, 1), interpolation="nearest")
        titles = ["input", "ground truth", f"prediction (mIoU {res.miou():.3f})"]
    elif isinstance(res, RegressionResult):
        for i in range(n):
            for r, a in enumerate((img[i], out[i, 0] if out.ndim == 4 else out[i], y[i, 0] if y.ndim == 4 else y[i])):
                # a flat target ([N, D]: a coordinate field's values) is drawn as a 1×D strip
                axes[r, i].imshow(np.atleast_2d(a), cmap="gray", vmin=0, vmax=1)
        titles = ["input", f"output (PSNR {res.psnr():.2f} dB)", "target"]
    else:
        boxes, scores, classes = res.loss.decode(out)
        gts = res.loss.ground_truth(y)
        h, w = img.shape[1:]
        for i in range(n):
            for r in range(2):
                axes[r, i].imshow(img[i], cmap="gray")
            for b, c in zip(*gts[i]):
                axes[0, i].add_patch(plt.Rectangle((b[0] * w, b[1] * h), (b[2] - b[0]) * w, (b[3] - b[1]) * h,
                                                   fill=False, color="lime", lw=1))
                axes[0, i].text(b[0] * w, b[1] * h, str(int(c)), color="lime", fontsize=7, va="bottom")
            det_b, det_s, det_c = res.dets[i]
            for b, s, c in zip(det_b, det_s, det_c):
                if s >= 0.3:
                    axes[1, i].add_patch(plt.Rectangle((b[0] * w, b[1] * h), (b[2] - b[0]) * w, (b[3] - b[1]) * h,
                                                       fill=False, color="red", lw=1))
                    axes[1, i].text(b[0] * w, b[1] * h, f"{int(c)} {s:.2f}", color="red", fontsize=6, va="bottom")
        m50, _ = res.maps()
        titles = ["ground truth", f"predictions, score ≥ 0.3 (mAP@0.5 {m50:.3f})"]
    for r, t in enumerate(titles):
        axes[r, 0].set_title(t, fontsize=8, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
