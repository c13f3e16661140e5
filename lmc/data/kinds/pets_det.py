"""pets_det: Pets heads as YOLOv1 targets, the reference's DIR/{train,val}.bin records
(lmc/data/seg_bins.py): RGB images, the 7×7 grid target and its cell mask."""
from __future__ import annotations

from lmc.data import seg_bins
from lmc.data.kinds import Kind, register
from lmc.data.kinds.pets import REFERENCE
from lmc.losses import BOXES


@register("pets_det")
class PetsDet(Kind):
    order = 5
    label_format = BOXES
    fetch = REFERENCE

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return seg_bins.load(cls.name, path, seg_bins.det_split, cls.hint())
