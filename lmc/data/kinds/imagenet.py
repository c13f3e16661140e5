"""imagenet: the ImageNet-1k tree train/<wnid>/*.JPEG, val/<wnid>/*.JPEG, read as imagenette's
(lmc/data/imagenette.py) but always streamed: 1.28 M images (~938 GiB as f32 at 224²) cannot be
preloaded."""
from __future__ import annotations

import dataclasses

from lmc.core.errors import DataError
from lmc.data import imagenette
from lmc.data.kinds import register
from lmc.data.kinds.imagenette import Imagenette
from lmc.losses import Rule


@register("imagenet")
class Imagenet(Imagenette):
    order = 4
    fetch = ("lay out ImageNet-1k (ILSVRC 2012, from https://image-net.org) as DIR/train/<wnid>/*.JPEG and "
             "DIR/val/<wnid>/*.JPEG, the validation images sorted into their class folders")

    @classmethod
    def eval_every(cls, cfg) -> int:
        """The Lean kit's ImageNet-streaming main: validate every val_every_epochs epochs, where
        N ≤ 1 (its default 1) is every epoch; an eval_every_n_epochs the recipe sets explicitly
        (the rules refuse it beside val_every_epochs > 1) is lmc's cadence and is kept."""
        default = next(f.default for f in dataclasses.fields(cfg) if f.name == "eval_every_n_epochs")
        if cfg.val_every_epochs <= 1 and cfg.eval_every_n_epochs != default:
            return cfg.eval_every_n_epochs
        return max(cfg.val_every_epochs, 1)

    @classmethod
    def rules(cls, cfg):
        # val_every_epochs is this dataset's cadence (every N epochs and the last); with lmc's
        # eval_every_n_epochs also set, one evaluation would have two cadences
        default = next(f.default for f in dataclasses.fields(cfg) if f.name == "eval_every_n_epochs")
        if cfg.val_every_epochs > 1 and cfg.eval_every_n_epochs != default:
            return [Rule("val_every_epochs and eval_every_n_epochs are two cadences for one evaluation: set one",
                         "val_every_epochs", also=("eval_every_n_epochs",))]
        return []

    @classmethod
    def check_stream(cls, stream):
        if stream is False:
            raise DataError("--no-stream: imagenet (1.28 M images, ~938 GiB as float32) cannot be held in RAM; "
                            "it always streams", hint="drop --no-stream")

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return imagenette.load(path, input_shape, True, cls.name, crop_ratio, cls.hint(),
                               options.get("loader_workers"))
