"""Load a .vmfb with the IREE runtime and call its functions on device-resident arrays."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .compile import RUNTIME_DRIVER
from .errors import TrainError


class Module:
    """A loaded `module @model`: `.train_step(*args)` / `.forward(*args)` take numpy or device
    arrays and return device arrays (feed them straight back; `np.asarray` copies to host)."""

    def __init__(self, vmfb: str | Path, backend: str = "llvm-cpu", driver: str | None = None):
        import iree.runtime as rt
        self.rt = rt
        name = driver or RUNTIME_DRIVER[backend]
        try:
            self.config = rt.Config(name)
        except Exception as e:  # the runtime raises ValueError/RuntimeError variants per driver
            kind = {"hip": "HIP (AMD ROCm)", "cuda": "CUDA"}.get(name, name)
            raise TrainError(f"no {kind} device found (runtime driver '{name}'): {str(e).splitlines()[0][:200]}",
                             hint="use --backend llvm-cpu on a machine without that GPU") from None
        self.device = self.config.device
        self.vm_module = rt.VmModule.mmap(self.config.vm_instance, str(vmfb))
        self.ctx = rt.SystemContext(vm_modules=[self.vm_module], config=self.config)
        self.model = self.ctx.modules.model

    def has(self, fn: str) -> bool:
        try:
            self.model[fn]
            return True
        except (KeyError, AttributeError):
            return False

    def __getattr__(self, fn):
        if fn.startswith("_") or fn in ("rt", "config", "device", "vm_module", "ctx", "model"):
            raise AttributeError(fn)
        return self.model[fn]

    def upload(self, a: np.ndarray):
        return self.rt.asdevicearray(self.device, np.ascontiguousarray(a))
