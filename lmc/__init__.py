"""lmc: declarative deep-learning compiler — YAML nets → StableHLO train steps → IREE.

`lmc.load(RUN)`, `lmc.train(SPEC, **overrides)`: the Python API (lmc/api.py, docs/api.md),
imported on first use so that `import lmc` (and `lmc --help`) stays light."""
from lmc._version import __version__

__all__ = ["__version__"]          # and, on first use, load / train / Model (below)

_API = ("load", "train", "Model")


def __getattr__(name):
    if name in _API:
        from lmc import api
        # `lmc.train` is then the training package, made callable by lmc.api (lmc.train(spec, …))
        return globals()[name] if name in globals() else getattr(api, name)
    raise AttributeError(f"module 'lmc' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
