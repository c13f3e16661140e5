"""External programs lmc runs (iree-compile, IREE's runtime tools, mpiexec): the pip wheels
install them next to this Python, so that copy wins over PATH's."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path


def installed(*names: str) -> str | None:
    """The first of `names` next to this Python, else the first on PATH; None if none is."""
    here = Path(sys.executable).parent
    for name in names:
        if (here / name).exists():
            return str(here / name)
    return next((p for p in map(shutil.which, names) if p), None)
