"""imagenette: a class-per-folder image tree DIR/{train,val}/<class>/*.jpg (lmc/data/imagenette.py),
10 ImageNet classes in imagenette2-320; decoded into RAM, or streamed per batch when large."""
from __future__ import annotations

from lmc.data import imagenette
from lmc.data.kinds import Kind, register


@register("imagenette")
class Imagenette(Kind):
    order = 2
    image_folder = True
    fetch = ("extract imagenette2-320.tgz (https://github.com/fastai/imagenette), which "
             "holds train/ and val/ — or lay out any images as DIR/{train,val}/<class>/")

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return imagenette.load(path, input_shape, stream, cls.name, crop_ratio, cls.hint())
