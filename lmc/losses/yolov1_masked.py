"""yolov1_masked (declared, not lowered yet): YOLOv1's 5-term masked MSE over box targets
(losses.md §1).  Its label ABI is not defined in lmc yet: the seed feeds a target
[B, perCell, gH, gW] and a cell mask [B, gH, gW] (single box), or [B, A·15, gH, gW] (anchors)."""
from __future__ import annotations

from . import BOXES, Loss, Rule, register


@register("yolov1_masked")
class YoloV1Masked(Loss):
    order = 8
    label_format = BOXES
    # on the yolo path use_focal switches objectness to focal BCE
    accepts_focal = True
    logits_rank = None            # the grid head's layout is not defined yet: no rule
    dataset_need = "needs the yolov1_masked loss (use_yolov1: true)"

    def rules(self, cfg, soft_aug):
        out = []
        if soft_aug:
            out.append(Rule("yolov1_masked (use_yolov1) cannot be combined with mixup/cutmix/knn-mixup",
                            "use_yolov1"))
        # added (losses.md §1): the yolo target is a box tensor; there is nothing to smooth
        if cfg.label_smoothing != 0.0:
            out.append(Rule("yolov1_masked (use_yolov1) requires label_smoothing = 0", "label_smoothing"))
        return out

    def labels(self, out):
        raise NotImplementedError("lmc bug: yolov1_masked's label ABI is not defined yet (it is not lowered)")
