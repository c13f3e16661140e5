"""digits: scikit-learn's bundled 8×8 digits (lmc/data/digits.py), the default: never downloads."""
from __future__ import annotations

from lmc.data import digits
from lmc.data.kinds import Kind, register


@register("digits")
class Digits(Kind):
    image_shape = (1, 8, 8)
    names = ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
    order = 8
    embedded = True
    takes_path = False

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return digits.load()
