"""The one mechanism behind lmc's registries (primitives, layers, losses, optimizers): a
decorator that files a class under its name, and discovery that imports every module of a
package once, so adding an entry is adding one file."""
from __future__ import annotations

import importlib
import pkgutil


def registrar(table: dict, what: str, attr: str = "name", on_register=None):
    """`@register("name")` for `table`: refuses a name twice, sets `cls.<attr>`, then calls
    `on_register(cls)` (derived class facts) if given."""
    def register(name: str):
        def deco(cls):
            if name in table:
                raise RuntimeError(f"{what} {name!r} registered twice")
            setattr(cls, attr, name)
            if on_register is not None:
                on_register(cls)
            table[name] = cls
            return cls
        return deco
    return register


_imported: set[str] = set()


def discover(package: str, path) -> bool:
    """Import every module of `package` whose name does not start with "_" (once; in name
    order, so registration order is stable).  Returns True the first time."""
    if package in _imported:
        return False
    _imported.add(package)
    for m in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not m.name.startswith("_"):
            importlib.import_module(f"{package}.{m.name}")
    return True
