"""chain_structure: embedded random 3-D chains, noisy pairwise distances → canonical coordinates
(a small synthetic structure task, float targets; lmc/data/chains.py)."""
from __future__ import annotations

from lmc.data import chains
from lmc.data.kinds import Kind, register
from lmc.losses import FLOAT


@register("chain_structure")
class ChainStructure(Kind):
    order = 17
    label_format = FLOAT
    embedded = True
    takes_path = False

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return chains.load()
