"""Shared test plumbing: tests marked `iree` skip, saying why, when the compiler or the
runtime is missing (jax tests use pytest.importorskip in their own module)."""
from __future__ import annotations

import functools
import importlib
import signal

import pytest

# A run started in the background (nohup, `make test &`) inherits SIGINT ignored, and so would the
# subprocesses of the Ctrl-C tests (test_train, test_dist, test_loader_workers): a child exec'd from
# a process that handles SIGINT gets the default disposition back, as under a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

try:        # the loss references' xp contract (lmc.losses.detach): the oracle's jax.numpy stops gradients
    import jax
    import jax.numpy as _jnp
    if not hasattr(_jnp, "stop_gradient"):
        _jnp.stop_gradient = jax.lax.stop_gradient
except ImportError:         # jax tests skip themselves
    pass


@functools.lru_cache(maxsize=1)
def iree_missing() -> str | None:
    """None when iree-compile and iree.runtime are usable, else the reason they are not."""
    try:
        importlib.import_module("iree.runtime")
    except ImportError as e:
        return f"IREE runtime not installed ({e}); pip install iree-base-runtime"
    from lmc.compile import find_compiler
    from lmc.core.errors import CompileError
    try:
        find_compiler()
    except CompileError as e:
        return f"{e.message}; {e.hint}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if item.get_closest_marker("iree") is not None:
            reason = reason or iree_missing()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
