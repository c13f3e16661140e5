"""digits_ddpm: the embedded 8×8 digits for a DDPM noise predictor — input [x_t, t/T], target the
noise ε, drawn per batch on the cosine schedule with T = 1000 (lmc/data/diffusion.py)."""
from __future__ import annotations

from lmc.data import diffusion
from lmc.data.kinds import Kind, register
from lmc.losses import FLOAT


@register("digits_ddpm")
class DigitsDDPM(Kind):
    order = 18
    label_format = FLOAT
    embedded = True
    takes_path = False
    schedule = diffusion.Schedule(diffusion.DIGITS_T)

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return diffusion.load_digits(input_shape, cls.schedule)
