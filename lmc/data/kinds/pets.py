"""pets: Oxford-IIIT Pets for segmentation, the reference's DIR/{train,val}.bin records
(lmc/data/seg_bins.py): RGB images and a trimap class per pixel (3 classes)."""
from __future__ import annotations

from lmc.data import seg_bins
from lmc.data.kinds import Kind, register
from lmc.losses import MASK

REFERENCE = "convert the dataset with the reference's preprocessing scripts"


@register("pets")
class Pets(Kind):
    order = 3
    label_format = MASK
    fetch = REFERENCE

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return seg_bins.load(cls.name, path, seg_bins.pets_split, cls.hint())
