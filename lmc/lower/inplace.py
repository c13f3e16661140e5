"""In-place state updates: @train_step writes a new parameter, optimizer slot, EMA copy or
running statistic into the buffer of the argument it replaces (IREE's `iree.abi.output`, what
JAX's `donate_argnums` gives XLA), so the step allocates fewer buffers and touches less memory
(mnist_mlp b128: −5 to −12% CPU per step; benchmarks/NOTES.md).

IREE does not order an aliased write after the argument's other reads: "explicit aliasing
side-steps any analysis" (hal.tensor.alias).  So `tie` ties argument A to its result v only
where the module's SSA text proves every read of A is finished before v is computed:

- a value's *sources* are the operands it is computed from; for a call, only the arguments its
  callee's result depends on (the private function's body followed, nested calls too, a region
  counted whole), so `dense_bwd`'s dW does not read W although the call takes W;
- every live value computed directly from A, outside the op that produces v, must be among v's
  sources (recursively).  The weights a layer's dx reads (dx = dy·Wᵀ next to the update of W,
  which needs only dW) fail that, and stay in fresh buffers: ordering them with an
  `optimization_barrier` cost more than the copy it saved (measured, benchmarks/NOTES.md).
- Inside the producing op (an optimizer, EMA or BN-statistics template) every element is read
  before it is written in the same elementwise dispatch.

The same holds for gradient accumulation and data-parallel steps: @apply_step writes P', O',
E' over P, O, E (its zeros for G would be written while G is still read, so G is refused);
@grad_step writes S' over S but not G' over G, because the G a cycle starts from is
@apply_step's zeros — a constant, whose buffer IREE may return shared and read-only.  A caller
must never pass, for a tied argument, a buffer it still needs, or one buffer twice.

`tie(..., on=False)` leaves every result in a fresh buffer: the A/B switch, LowerOptions.inplace
(LMC_INPLACE=off at the command line)."""
from __future__ import annotations

import re

_DEF = re.compile(r"^\s*(%[\w.$-]+)(?::(\d+))? = ")
_VAL = re.compile(r"%[\w.$-]+(?:#\d+)?")
_ARG = re.compile(r"(%[\w.$-]+): ")
_CALL = re.compile(r"func\.call @([\w.$-]+)\(")
_HEAD = re.compile(r"func\.func (?:private )?@([\w.$-]+)\((.*?)\) -> ")
_RET = re.compile(r"^\s*(?:func\.)?return (.*?) :")


class _Graph:
    """The ops of one function body, their defined values and what each value is computed from.
    A call's result depends on the arguments its callee's result is computed from (`deps`,
    per callee: result → argument positions); every other op's results on all its operands."""

    def __init__(self, lines: list[str], deps=None, strict: bool = True):
        self.defs: list[list[str]] = []          # per op: the values it defines
        self.uses: list[list[str]] = []          # per op: its operand values
        self.op_of: dict[str, int] = {}          # value → defining op
        self.src: dict[str, list[str]] = {}      # value → the values it is computed from
        self._up: dict[str, frozenset] = {}
        depth = 0                                # inside a region: its lines belong to its op
        local: set[str] = set()                  # the region's block arguments and values
        for line in lines:
            m = None if depth > 0 else _DEF.match(line)
            if depth == 0:
                local = set()
            depth = max(0, depth + line.count("{") - line.count("}"))
            if m is None:
                if strict:
                    raise ValueError(f"inplace: unexpected line in the function body: {line.strip()[:80]}")
                if self.uses:                    # a region's line or a long op's continuation
                    local |= set(_ARG.findall(line))
                    d = _DEF.match(line)
                    if d is not None:
                        local.add(d.group(1))
                    self.uses[-1] += [u for u in _VAL.findall(line) if u.split("#")[0] not in local]
                    for v in self.defs[-1]:
                        self.src[v] = self.uses[-1]
                continue
            base, n = m.group(1), m.group(2)
            vals = [f"{base}#{k}" for k in range(int(n))] if n else [base]
            rhs = line[m.end():]
            ops = _VAL.findall(rhs.split(") : (")[0] if "func.call" in rhs else rhs)
            self.defs.append(vals)
            self.uses.append(ops)
            c = _CALL.search(rhs)
            per = deps(c.group(1)) if (c is not None and deps is not None) else None
            for k, v in enumerate(vals):
                self.op_of[v] = len(self.defs) - 1
                self.src[v] = [ops[j] for j in per[k] if j < len(ops)] if per is not None else ops

    def upstream(self, v: str) -> frozenset:
        """v and every value it is computed from, recursively (a depth-first walk without
        recursion: bodies are long)."""
        if v in self._up:
            return self._up[v]
        path, stack = {v}, [(v, iter(self.src.get(v, ())))]
        while stack:
            x, it = stack[-1]
            u = next((u for u in it if u not in self._up), None)
            if u is not None:
                if u in path:
                    raise ValueError(f"inplace: {u} depends on itself")
                path.add(u)
                stack.append((u, iter(self.src.get(u, ()))))
                continue
            acc = {x}
            for w in self.src.get(x, ()):
                acc |= self._up[w]
            self._up[x] = frozenset(acc)
            path.discard(x)
            stack.pop()
        return self._up[v]

    def live(self, rets) -> set[str]:
        out: set[str] = set()
        for v, _ in rets:
            out |= self.upstream(v)
        return out


class Deps:
    """Per private function of the module (symbol → text): for each result, the positions of
    the arguments it is computed from (nested calls followed)."""

    def __init__(self, funcs: dict[str, str]):
        self.text = {}
        for t in funcs.values():
            for m in _HEAD.finditer(t):
                self.text[m.group(1)] = t[m.start():]
        self.memo: dict[str, list[set[int]] | None] = {}

    def __call__(self, sym: str):
        if sym in self.memo:
            return self.memo[sym]
        self.memo[sym] = None                    # unknown while in progress (no recursion in modules)
        t = self.text.get(sym)
        if t is None:
            return None
        head = _HEAD.match(t)
        params = re.findall(r"(%[\w.$-]+):", head.group(2))
        body = t[t.index("{", head.end()) + 1:].split("\n")
        end = next((i for i, x in enumerate(body) if _RET.match(x)), None)
        if end is None:
            return None
        g = _Graph([x for x in body[:end] if x.strip()], self, strict=False)
        outs = _VAL.findall(_RET.match(body[end]).group(1))
        pos = {p: i for i, p in enumerate(params)}
        self.memo[sym] = got = [{pos[u] for u in g.upstream(o) if u in pos} for o in outs]
        return got


def tie(args: list[str], lines: list[str], rets: list[tuple[str, str]], pairs,
        funcs: dict[str, str] | None = None, on: bool = True) -> list[str]:
    """args: the entry point's "%name: type" strings; rets: its results (value, type); pairs:
    (argument index, result index) of each state tensor and its new value; lines: the body;
    funcs: the module's private functions (what each call's results are computed from).
    Returns args with `iree.abi.output` on each argument whose result can safely be written
    over it (none when not `on`)."""
    if not on:
        return args
    try:
        g = _Graph(lines, Deps(funcs or {}))
        live = g.live(rets)
    except ValueError:                           # a body this reader does not follow: no ties
        return args                              # (tests/test_inplace.py: none of specs/)
    out = list(args)
    names = [x.split(":", 1)[0] for x in args]
    returned = [v for v, _ in rets]
    for j, k in pairs:
        a, v = names[j], rets[k][0]
        p = g.op_of.get(v)
        # not: an argument passed through unchanged; a value returned twice (the caller would
        # get one buffer for two tensors); an argument also returned as itself (that result
        # would show the new contents)
        if p is None or returned.count(v) > 1 or a in returned:
            continue
        try:
            before = g.upstream(v)
        except ValueError:
            return args
        if all(o in before for i, vals in enumerate(g.defs) if i != p
               for o in vals if o in live and a in g.src[o]):
            out[j] = f"{args[j]} {{iree.abi.output = {k} : index}}"
    return out
