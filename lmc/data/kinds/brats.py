"""brats: BraTS slices, the reference's DIR/{train,val}.bin records (lmc/data/seg_bins.py): four
MRI modalities, a class per pixel (4 classes)."""
from __future__ import annotations

from lmc.data import seg_bins
from lmc.data.kinds import Kind, register
from lmc.data.kinds.pets import REFERENCE
from lmc.losses import MASK


@register("brats")
class Brats(Kind):
    order = 6
    label_format = MASK
    fetch = REFERENCE

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return seg_bins.load(cls.name, path, seg_bins.brats_split, cls.hint())
