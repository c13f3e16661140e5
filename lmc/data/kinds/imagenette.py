"""imagenette: a class-per-folder image tree DIR/{train,val}/<class>/*.jpg (lmc/data/imagenette.py),
10 ImageNet classes in imagenette2-320; decoded into RAM, or streamed per batch when large."""
from __future__ import annotations

from lmc.data import imagenette
from lmc.data.kinds import Kind, register


@register("imagenette")
class Imagenette(Kind):
    order = 2
    image_folder = True
    options = ("loader_workers",)      # decoding processes (lmc.data.imagenette.Decoder; 0/None: threads)
    fetch = ("extract imagenette2-320.tgz (https://github.com/fastai/imagenette), which "
             "holds train/ and val/ — or lay out any images as DIR/{train,val}/<class>/")

    @classmethod
    def class_names(cls, path):
        """The train/ folder names, sorted: the loader's label order."""
        train = None if path is None else path / "train"
        return sorted(p.name for p in train.iterdir() if p.is_dir()) if train is not None and train.is_dir() else None

    @classmethod
    def read_image(cls, file, input_shape, crop_ratio):
        """As the folder's validation images: RGB, squashed (or test_crop_ratio's resize and
        centre crop), ImageNet mean/std."""
        return imagenette.read_images([file], tuple(input_shape[1:]), crop_ratio=crop_ratio)[0]

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return imagenette.load(path, input_shape, stream, cls.name, crop_ratio, cls.hint(),
                               options.get("loader_workers"))
