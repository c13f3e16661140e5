"""A model of iree-compile's cold compile time of one module, from its text: what
`balanced_halves` (lowering.py) balances when it cuts a train step into two modules compiled
side by side.

    seconds ≈ PER_OP · ops + PER_KB · kilobytes + a constant

- ops: the StableHLO ops the module runs once every call is inlined (each call of a private
  function counts that function's ops again, as iree-compile inlines them before its
  whole-program passes);
- kilobytes: the module's text, in which every distinct function appears once (iree-compile
  generates code once per distinct dispatch, so identical blocks cost their code once).

Fitted by least squares on 24 cold compiles on 2 cores (llvm-cpu, Intel Xeon): both halves of
efficientnet_b0@32², efficientnet_v2_s, resnet18@32², resnet50, mobilenet_v2@32² and
convnext_tiny, each at two cuts; rms error 1.7 s, largest 4.0 s, against 8–56 s compiles
(benchmarks/NOTES.md, "Where to cut, modelled").  Only the ratio of the two coefficients
matters to a balance; the constant is left out."""
from __future__ import annotations

import re
from functools import lru_cache

PER_OP = 0.00118        # seconds per inlined op
PER_KB = 0.0362         # seconds per kilobyte of module text

_FUNC = re.compile(r"^\s*func\.func (?:private |public )?@([\w.$-]+)\(")
_CALL = re.compile(r"\bcall @([\w.$-]+)\(")


def measures(text: str) -> tuple[int, float]:
    """(ops once every call is inlined, kilobytes of text) of a module."""
    funcs: dict[str, list] = {}           # name → [own op count, callees]
    private: set[str] = set()
    cur = None
    for line in text.split("\n"):
        m = _FUNC.match(line)
        if m:
            cur = m.group(1)
            funcs[cur] = [0, []]
            if " private @" in line:
                private.add(cur)
            continue
        if cur is None:
            continue
        if "stablehlo." in line:
            funcs[cur][0] += 1
        funcs[cur][1] += [c for c in _CALL.findall(line) if c != cur]

    @lru_cache(maxsize=None)
    def inlined(f: str) -> int:
        own, calls = funcs[f]
        return own + sum(inlined(c) for c in calls if c in funcs)
    ops = sum(inlined(f) for f in funcs if f not in private)
    return ops, len(text) / 1e3


def compile_seconds(text: str) -> float:
    """The model's cold compile time of `text`, without its constant (for comparisons)."""
    ops, kb = measures(text)
    return PER_OP * ops + PER_KB * kb
