"""imagenet: the ImageNet-1k tree train/<wnid>/*.JPEG, val/<wnid>/*.JPEG, read as imagenette's
(lmc/data/imagenette.py) but always streamed: 1.28 M images (~938 GiB as f32 at 224²) cannot be
preloaded."""
from __future__ import annotations

from lmc.core.errors import DataError
from lmc.data import imagenette
from lmc.data.kinds import register
from lmc.data.kinds.imagenette import Imagenette


@register("imagenet")
class Imagenet(Imagenette):
    order = 4
    fetch = ("lay out ImageNet-1k (ILSVRC 2012, from https://image-net.org) as DIR/train/<wnid>/*.JPEG and "
             "DIR/val/<wnid>/*.JPEG, the validation images sorted into their class folders")

    @classmethod
    def check_stream(cls, stream):
        if stream is False:
            raise DataError("--no-stream: imagenet (1.28 M images, ~938 GiB as float32) cannot be held in RAM; "
                            "it always streams", hint="drop --no-stream")

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return imagenette.load(path, input_shape, True, cls.name, crop_ratio, cls.hint())
