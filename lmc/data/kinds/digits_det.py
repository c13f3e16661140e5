"""digits_det: embedded 64×64 mosaics of digits with YOLO box targets (lmc/data/digits_seg.py)."""
from __future__ import annotations

from lmc.data import digits_seg
from lmc.data.kinds import Kind, register
from lmc.losses import BOXES


@register("digits_det")
class DigitsDet(Kind):
    order = 13
    label_format = BOXES
    embedded = True
    takes_path = False

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return digits_seg.load_det()
