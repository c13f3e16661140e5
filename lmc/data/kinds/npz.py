"""npz: your arrays x, y (optional x_val, y_val) in one .npz file (lmc/data/npz.py); the label
format is read from the file (class ids, masks, float or YOLO targets)."""
from __future__ import annotations

from lmc.data import npz
from lmc.data.kinds import Kind, register


@register("npz")
class Npz(Kind):
    order = 9
    suffix = ".npz"
    fetch = ("write the file yourself, numpy.savez(PATH, x=x, y=y) "
             "(and x_val=, y_val= for a fixed validation split)")

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return npz.load(path, cls.hint())
