"""digits_denoise: embedded noisy 16×16 digits with the clean image as the float target
(lmc/data/digits_seg.py)."""
from __future__ import annotations

from lmc.data import digits_seg
from lmc.data.kinds import Kind, register
from lmc.losses import FLOAT


@register("digits_denoise")
class DigitsDenoise(Kind):
    order = 12
    label_format = FLOAT
    embedded = True
    takes_path = False

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return digits_seg.load_denoise()
