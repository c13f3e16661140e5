"""brats224: the BraTS slices centre-cropped to 224×224, in brats' record layout."""
from __future__ import annotations

from lmc.data.kinds import register
from lmc.data.kinds.brats import Brats


@register("brats224")
class Brats224(Brats):
    order = 7
