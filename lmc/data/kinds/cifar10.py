"""cifar10: the binary version of CIFAR-10 (lmc/data/cifar10.py), 32×32 RGB, 10 classes."""
from __future__ import annotations

from lmc.data import cifar10
from lmc.data.kinds import Kind, register


@register("cifar10")
class Cifar10(Kind):
    order = 1
    names = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    fetch = ("extract the binary version, cifar-10-binary.tar.gz from "
             "https://www.cs.toronto.edu/~kriz/cifar.html (not the python or matlab one)")

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return cifar10.load(path, cls.hint())
