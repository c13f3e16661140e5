"""mnist: the original IDX files (lmc/data/mnist.py), 28×28 grey digits, 10 classes."""
from __future__ import annotations

from lmc.data import mnist
from lmc.data.kinds import Kind, register


@register("mnist")
class Mnist(Kind):
    image_shape = (1, 28, 28)
    names = ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9")
    order = 0
    fetch = ("put the four IDX files (from http://yann.lecun.com/exdb/mnist/ or a mirror, "
             "e.g. https://ossci-datasets.s3.amazonaws.com/mnist/) in one directory")

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return mnist.load(path, cls.hint())
