"""image_coords: an embedded RGBA picture to fit from its pixel coordinates — (u, v, view) → (alpha,
r, g, b), float targets (lmc/data/coord_image.py)."""
from __future__ import annotations

from lmc.data import coord_image
from lmc.data.kinds import Kind, register
from lmc.losses import FLOAT


@register("image_coords")
class ImageCoords(Kind):
    order = 16
    label_format = FLOAT
    embedded = True
    takes_path = False

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return coord_image.load()
