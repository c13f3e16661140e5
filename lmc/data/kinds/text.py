"""text: a UTF-8 file as windows of token ids for a language model (lmc/data/text.py), bytes or
characters (`vocab`); without a path the embedded corpus of standard-library sources."""
from __future__ import annotations

from lmc.data import text
from lmc.data.kinds import Field, Kind, register


@register("text")
class Text(Kind):
    order = 14
    embedded = True               # no path: the embedded corpus
    fields = (Field("vocab", text.VOCABS, "byte"),)
    fetch = "any UTF-8 text file will do; `dataset: text` without a path uses the embedded corpus"

    @classmethod
    def load(cls, path, input_shape, num_classes, *, seed, stream, crop_ratio, **options):
        return text.load(path, input_shape, options.get("vocab", "byte"), num_classes, cls.hint())
