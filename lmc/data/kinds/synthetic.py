"""synthetic: seeded random data of the spec's shapes (lmc/data/synthetic.py), for smoke tests."""
from __future__ import annotations

import inspect

from lmc.data import synthetic
from lmc.data.kinds import Kind, register


@register("synthetic")
class Synthetic(Kind):
    order = 10
    embedded = True
    takes_path = False
    # the loader's keyword options (n_train, n_val, signal), as its signature has them
    options = tuple(sorted(set(inspect.signature(synthetic.load).parameters) - {"input_shape", "num_classes", "seed"}))

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return synthetic.load(input_shape, num_classes, seed=seed, **options)
