"""Box lists for the FPN detector path: the dataset's YOLO grid targets → per-image box lists →
(box-aware affine augmentation, `fpn_affine_*`) → the flat multi-scale anchor target of
the YOLO loss with `fpn_scales` (losses.md §7).

A box list is float32 [N, MAX_BOXES, 5]: (class, cx, cy, w, h) in image units [0, 1], rows with
class −1 unused.  The grid targets of the single-box layout ([N, 11 + K, g, g]: box0 x, y in the
cell, w, h, confidence, box1, K classes, mask) are a lossless container of one box per cell;
the FPN path reads its boxes from them, so the embedded `digits_det` data trains it too.

Assignment (encode_fpn, YOLOv3's rule — the seed gives none): each box goes to the (scale,
anchor) whose prior has the largest shape IoU with it, min(w, a_w)·min(h, a_h) /
(w·h + a_w·a_h − min(w, a_w)·min(h, a_h)), in the cell of its centre; when that slot is taken by
an earlier box of the image, the next best free (scale, anchor) is used, and a box with none
free is dropped (counted by `encode_fpn`'s second result).  Target per assigned slot: tx, ty =
the centre's offset in the cell, tw, th = w, h (image units: the DIoU term's prior multiplies
exp(tw) predictions, the target is the box itself), obj = 1, the one-hot class."""
from __future__ import annotations

import numpy as np

MAX_BOXES = 32


def grid_to_list(t: np.ndarray) -> np.ndarray:
    """Single-box grid targets [N, 11 + K, g, g] (mask last) → box lists [N, MAX_BOXES, 5]."""
    n, c, gh, gw = t.shape
    num_classes = c - 11
    out = np.full((n, MAX_BOXES, 5), -1.0, np.float32)
    for k in range(n):
        ii, jj = np.nonzero(t[k, c - 1] > 0.5)
        if len(ii) > MAX_BOXES:
            raise ValueError(f"{len(ii)} boxes in one image, more than {MAX_BOXES}")
        out[k, :len(ii), 0] = t[k, 10:10 + num_classes, ii, jj].argmax(axis=-1)
        out[k, :len(ii), 1] = (jj + t[k, 0, ii, jj]) / gw
        out[k, :len(ii), 2] = (ii + t[k, 1, ii, jj]) / gh
        out[k, :len(ii), 3] = t[k, 2, ii, jj]
        out[k, :len(ii), 4] = t[k, 3, ii, jj]
    return out


def as_list(y: np.ndarray) -> np.ndarray:
    """Box lists as given, or converted from single-box grid targets."""
    return y if y.ndim == 3 else grid_to_list(y)


def shape_iou(w, h, aw, ah):
    inter = np.minimum(w, aw) * np.minimum(h, ah)
    return inter / (w * h + aw * ah - inter)


def encode_fpn(boxes: np.ndarray, slots, num_classes: int) -> tuple[np.ndarray, int]:
    """Box lists [N, M, 5] → the flat multi-scale target [N, Σ A·S·g²] of `slots`
    (the YOLO loss's fpn_slots: per scale (offset, size, grid, anchors, slot size S = 5 + K)), and
    the number of boxes dropped for want of a free slot."""
    n = len(boxes)
    total = sum(sz for _, sz, _, _, _ in slots)
    out = np.zeros((n, total), np.float32)
    priors = [(s, a, aw, ah) for s, (_, _, _, an, _) in enumerate(slots) for a, (aw, ah) in enumerate(an)]
    dropped = 0
    for k in range(n):
        for cls, cx, cy, w, h in boxes[k]:
            if cls < 0:
                continue
            order = sorted(priors, key=lambda p: -shape_iou(w, h, p[2], p[3]))
            for s, a, _, _ in order:
                off, _, g, _, S = slots[s]
                i, j = min(int(cy * g), g - 1), min(int(cx * g), g - 1)

                def at(ch):
                    return off + ((a * S + ch) * g + i) * g + j
                if out[k, at(4)]:
                    continue
                out[k, at(0)], out[k, at(1)] = cx * g - j, cy * g - i
                out[k, at(2)], out[k, at(3)], out[k, at(4)] = w, h, 1.0
                out[k, at(5 + int(cls))] = 1.0
                break
            else:
                dropped += 1
    return out, dropped


class BoxAffine:
    """`fpn_affine_*`: per image, with probability `prob`, scale by s = 1 + U(−1, 1)·`scale`
    about the centre and translate by U(−1, 1)·`translate` of the frame (x and y drawn
    separately); the image through Pillow's affine transform (bilinear, zero fill), the boxes
    mapped the same way and clipped to the frame; a box whose clipped width or height is under
    `wh_thr_px` pixels, or which keeps under `area_thr` of its (transformed) area inside the
    frame, is dropped."""

    def __init__(self, scale: float, translate: float, prob: float, wh_thr_px: float, area_thr: float):
        self.scale, self.translate, self.prob = scale, translate, prob
        self.wh_thr_px, self.area_thr = wh_thr_px, area_thr

    @classmethod
    def from_config(cls, cfg):
        if not cfg.fpn_affine_prob:
            return None
        return cls(cfg.fpn_affine_scale, cfg.fpn_affine_translate, cfg.fpn_affine_prob, cfg.fpn_affine_wh_thr_px,
                   cfg.fpn_affine_area_thr)

    def __call__(self, x: np.ndarray, y: np.ndarray, rng: np.random.Generator):
        boxes = as_list(y).copy()
        x = x.copy()
        for k in range(len(x)):
            fire = rng.random() < self.prob
            s = 1.0 + rng.uniform(-1.0, 1.0) * self.scale
            tx, ty = rng.uniform(-1.0, 1.0, 2) * self.translate
            if fire:
                x[k] = warp(x[k], s, tx, ty)
                boxes[k] = self.move(boxes[k], s, tx, ty, x.shape[-1], x.shape[-2])
        return x, boxes

    def move(self, b: np.ndarray, s: float, tx: float, ty: float, width: int, height: int) -> np.ndarray:
        """Boxes [M, 5] under u' = (u − ½)·s + ½ + t, clipped and filtered; kept ones first."""
        keep = b[:, 0] >= 0
        x0 = ((b[:, 1] - b[:, 3] / 2) - 0.5) * s + 0.5 + tx
        x1 = ((b[:, 1] + b[:, 3] / 2) - 0.5) * s + 0.5 + tx
        y0 = ((b[:, 2] - b[:, 4] / 2) - 0.5) * s + 0.5 + ty
        y1 = ((b[:, 2] + b[:, 4] / 2) - 0.5) * s + 0.5 + ty
        area = (x1 - x0) * (y1 - y0)
        cx0, cx1, cy0, cy1 = np.clip(x0, 0, 1), np.clip(x1, 0, 1), np.clip(y0, 0, 1), np.clip(y1, 0, 1)
        cw, ch = cx1 - cx0, cy1 - cy0
        keep &= (cw * width >= self.wh_thr_px) & (ch * height >= self.wh_thr_px)
        keep &= cw * ch >= self.area_thr * np.maximum(area, 1e-12)
        out = np.full_like(b, -1.0)
        m = int(keep.sum())
        out[:m, 0] = b[keep, 0]
        out[:m, 1], out[:m, 2] = ((cx0 + cx1) / 2)[keep], ((cy0 + cy1) / 2)[keep]
        out[:m, 3], out[:m, 4] = cw[keep], ch[keep]
        return out


def warp(img: np.ndarray, s: float, tx: float, ty: float) -> np.ndarray:
    """One image [C, H, W] under the forward map u' = (u − ½)·s + ½ + t (image units), by
    Pillow's affine transform per channel (mode F, bilinear, outside = 0)."""
    from PIL import Image
    c, h, w = img.shape
    # Pillow takes the inverse map in pixels: input = (output − centre − t·size)/s + centre
    cx, cy = w / 2.0, h / 2.0
    a, e = 1.0 / s, 1.0 / s
    b_ = cx - (cx + tx * w) / s
    f = cy - (cy + ty * h) / s
    out = np.empty_like(img)
    for ch in range(c):
        im = Image.fromarray(np.ascontiguousarray(img[ch], np.float32))       # mode F
        out[ch] = np.asarray(im.transform((w, h), Image.Transform.AFFINE, (a, 0.0, b_, 0.0, e, f),
                                          resample=Image.Resampling.BILINEAR, fillcolor=0.0), np.float32)
    return out
