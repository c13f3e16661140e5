"""The lowering's options: the alternative spellings of one module (same math, same ABI), for
A/B measurements and escape hatches.  One frozen value, passed explicitly from the command
line down to every pass that reads one, so what produced a module is visible in a signature
and recorded with it (the compile cache key, `lmc info --json`, `lmc bench`), never looked up
in the environment halfway through a lowering.

The command line builds it once from the `LMC_*` environment variables (`from_env`); library
callers and tests pass `LowerOptions(...)` or take the defaults, whatever the environment says.

- conv_form (LMC_CONV_FORM): winograd | matmul | direct — conv as patch matmuls with its stride-1
  3×3 convs by Winograd F(2×2, 3×3) (lmc/prims/conv_winograd.py), as patch matmuls only, or as
  stablehlo.convolution (lmc/prims/conv_direct.py);
- bf16_form (LMC_BF16_FORM): convert | emulated — train.bf16's dots (templates/prims/_dot.j2);
- layout (LMC_LAYOUT): hbwc | nchw — the activation-layout pass on, or every value NCHW
  (lmc/graph/layout.py);
- inplace (LMC_INPLACE): on | off — new state written over its argument where safe
  (lmc/lower/inplace.py);
- packed (LMC_PACKED): auto | on | off — the packed-matmul hint for llvm-cpu (lowering.py
  `_packed_matmuls`);
- split (LMC_SPLIT): auto | on | off — `lmc train`'s and `lmc bench`'s training step as two
  functions in two modules compiled side by side, @train_late + @train_early (lowering.py
  `split_rule`, `halves_cut`): where the net is deep enough, always, or never.  The same math
  (the halves' results are the fused step's, bit for bit) and the same state on the host; the
  compiled functions differ, so this one changes the ABI's function list (Abi.halves);
- transients (LMC_TRANSIENTS): auto | external | alloca — where a function's intermediate values
  live: in one storage buffer the caller passes and keeps between calls (IREE's
  `iree.abi.transients`: the runtime's Module appends it, lmc/run/runtime.py), or allocated by
  the function on every call; auto = external on llvm-cpu, whose runtime mallocs and zero-fills
  every allocation over 64 MiB per call (benchmarks/NOTES.md, "Transient storage");
- invocation (LMC_INVOCATION): sync | async — IREE's calling convention for the exported
  functions: a call blocks until its work is done, or returns once it is queued (fences;
  lmc/run/invoke.py), so a training loop that reads its losses back every few steps keeps the
  next step queued.  The same numbers either way.  sync stays the default: on llvm-cpu the host
  and the "device" share the cores and queuing measured no faster (benchmarks/NOTES.md, "Steps
  queued"); async is there for a GPU, not yet measured on one."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields

from lmc.core.errors import UsageError
from lmc.core.fields import did_you_mean

# field → (environment variable, allowed values, default first)
CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "conv_form": ("LMC_CONV_FORM", ("winograd", "matmul", "direct")),
    "bf16_form": ("LMC_BF16_FORM", ("emulated", "convert")),
    "layout": ("LMC_LAYOUT", ("hbwc", "nchw")),
    "inplace": ("LMC_INPLACE", ("on", "off")),
    "packed": ("LMC_PACKED", ("auto", "on", "off")),
    "split": ("LMC_SPLIT", ("auto", "on", "off")),
    "transients": ("LMC_TRANSIENTS", ("auto", "external", "alloca")),
    "invocation": ("LMC_INVOCATION", ("sync", "async")),
}


def switch(name: str, allowed, default: str, environ=None) -> str:
    """An `LMC_*` environment switch: its value, the default when unset; an unknown value is
    refused (a UsageError: exit 2 naming the variable), never read as the default."""
    v = (os.environ if environ is None else environ).get(name, default)
    if v not in allowed:
        raise UsageError(f"{name}={v!r}: expected one of {', '.join(allowed)} (default {default}){did_you_mean(v, allowed)}")
    return v


@dataclass(frozen=True)
class LowerOptions:
    conv_form: str = "winograd"
    bf16_form: str = "convert"
    layout: str = "hbwc"
    inplace: str = "on"
    packed: str = "auto"
    split: str = "auto"
    transients: str = "auto"
    invocation: str = "sync"

    def __post_init__(self):
        # a value built in code is checked as strictly as one read from the environment: a typo
        # would otherwise lower with some other spelling and say nothing
        for f in fields(self):
            v, allowed = getattr(self, f.name), CHOICES[f.name][1]
            if v not in allowed:
                raise UsageError(f"LowerOptions.{f.name}={v!r}: expected one of {', '.join(allowed)} "
                               f"(default {f.default}){did_you_mean(v, allowed)}")

    @classmethod
    def from_env(cls, environ=None) -> "LowerOptions":
        """The options the `LMC_*` variables select (the command line's one read of them)."""
        return cls(**{f.name: switch(CHOICES[f.name][0], CHOICES[f.name][1], f.default, environ)
                      for f in fields(cls)})

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def describe(self) -> str:
        """One line for logs: `conv_form=winograd, bf16_form=convert, …`."""
        return ", ".join(f"{k}={v}" for k, v in self.as_dict().items())

    def canonical(self) -> str:
        """A stable text of the options (sorted keys), for the compile cache's key: every option
        but `split`, which changes which module texts are lowered, never how one compiles (so
        `lmc eval`'s @forward is the cache hit of `lmc train`'s whatever LMC_SPLIT said)."""
        d = {k: v for k, v in self.as_dict().items() if k != "split"}
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    # what the passes ask
    @property
    def hbwc(self) -> bool:
        """The activation-layout pass runs (lmc/graph/layout.py `place`)."""
        return self.layout == "hbwc"

    def external_transients(self, backend: str) -> bool:
        """The exported functions take their transient storage from the caller (`transients`)."""
        return self.transients == "external" or (self.transients == "auto" and backend == "llvm-cpu")

    @property
    def queued(self) -> bool:
        """The exported functions are compiled with IREE's asynchronous ABI (`invocation`)."""
        return self.invocation == "async"

    @property
    def tie(self) -> bool:
        """New state is written over its arguments where safe (lmc/lower/inplace.py `tie`)."""
        return self.inplace == "on"
