"""digits_seg: embedded 32×32 canvases of 1-3 digits with a class per pixel (lmc/data/digits_seg.py)."""
from __future__ import annotations

from lmc.data import digits_seg
from lmc.data.kinds import Kind, register
from lmc.losses import MASK


@register("digits_seg")
class DigitsSeg(Kind):
    order = 11
    names = ("background",) + tuple(str(d) for d in range(10))    # 1 + d: digit d
    label_format = MASK
    embedded = True
    takes_path = False

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return digits_seg.load_seg()
