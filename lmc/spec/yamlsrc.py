"""YAML text → plain Python data plus a map from each value's path to its file position.

PyYAML's `compose` keeps line/column marks on nodes; we convert nodes ourselves so that
(a) every mapping key, list item and scalar keeps its Loc for error messages, (b) duplicate
keys are refused (PyYAML silently keeps the last), and (c) nothing a user types can raise
anything but SpecError (tabs, huge integers, aliases bombs, binary junk)."""
from __future__ import annotations

from typing import Any

import yaml

from lmc.core.errors import Loc, SpecError

Path_ = tuple  # ("layers", 3, "conv_bn", "ic")

_MAX_NODES = 200_000     # far above any real spec; stops alias ("billion laughs") blow-ups
MAX_CHARS = 1_000_000    # a spec is a page or two; a megabyte is the wrong file (and slow to parse)

# libyaml's parser where PyYAML has it (4x faster, same node marks), else the pure-Python one
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _loc(file: str, node: yaml.Node) -> Loc:
    return Loc(file, node.start_mark.line + 1, node.start_mark.column + 1)


def load_yaml(text: str, file: str) -> tuple[Any, dict[Path_, Loc]]:
    """Parse `text`; return (data, locs) where locs maps a path tuple to where it was written."""
    if len(text) > MAX_CHARS:
        raise SpecError(f"the spec is {len(text):,} characters long; specs over {MAX_CHARS:,} are refused "
                        f"(is this the right file?)", Loc(file))
    if "\t" in text:
        for i, line in enumerate(text.splitlines(), 1):
            if "\t" in line[: len(line) - len(line.lstrip())]:
                raise SpecError("tab character used for indentation; YAML needs spaces",
                                Loc(file, i, line.index("\t") + 1))
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        loc = Loc(file, mark.line + 1, mark.column + 1) if mark else Loc(file)
        raise SpecError(f"invalid YAML: {e.problem or e.context}", loc) from None
    except yaml.reader.ReaderError as e:    # a control character, not valid in YAML text
        before = text[:e.position]
        loc = Loc(file, before.count("\n") + 1, e.position - (before.rfind("\n") + 1) + 1)
        code = e.character if isinstance(e.character, int) else ord(e.character)
        raise SpecError(f"invalid YAML: character {code:#06x} is not allowed in YAML text", loc) from None
    except RecursionError:
        raise SpecError("invalid YAML: the spec is nested too deeply", Loc(file)) from None
    except (yaml.YAMLError, ValueError) as e:
        raise SpecError(f"invalid YAML: {e}", Loc(file)) from None
    if node is None:
        raise SpecError("the spec is empty; expected a mapping with `name`, `input` and `layers`",
                        Loc(file, 1, 1))
    locs: dict[Path_, Loc] = {}
    count = [0]
    constructor = yaml.constructor.SafeConstructor()     # one per load: it caches by node

    def convert(n: yaml.Node, path: Path_) -> Any:
        count[0] += 1
        if count[0] > _MAX_NODES:
            raise SpecError(f"the spec has more than {_MAX_NODES} values (alias expansion?)",
                            _loc(file, n))
        locs.setdefault(path, _loc(file, n))
        if isinstance(n, yaml.MappingNode):
            out: dict = {}
            for k, v in n.value:
                if not isinstance(k, yaml.ScalarNode):
                    raise SpecError("mapping keys must be plain names", _loc(file, k))
                key = _scalar(k, file, constructor)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    raise SpecError(f"mapping key {k.value!r} must be a name", _loc(file, k))
                key = str(key) if not isinstance(key, str) else key
                if key in out:
                    raise SpecError(f"duplicate key '{key}' (first at line {locs[path + (key,)].line})",
                                    _loc(file, k))
                locs[path + (key,)] = _loc(file, k)
                out[key] = convert(v, path + (key,))
            return out
        if isinstance(n, yaml.SequenceNode):
            return [convert(v, path + (i,)) for i, v in enumerate(n.value)]
        return _scalar(n, file, constructor)

    try:
        return convert(node, ()), locs
    except RecursionError:
        raise SpecError("the spec is nested too deeply", Loc(file)) from None


def _scalar(n: yaml.ScalarNode, file: str, constructor) -> Any:
    try:
        return constructor.construct_object(n, deep=True) if n.tag != "tag:yaml.org,2002:str" else n.value
    except (ValueError, OverflowError, yaml.YAMLError, TypeError) as e:
        if n.tag == "tag:yaml.org,2002:int":    # Python refuses int("9" * 5000) (int_max_str_digits)
            raise SpecError(f"the number {n.value[:20]}… ({len(n.value)} digits) is far too large",
                            _loc(file, n)) from None
        raise SpecError(f"cannot read value {n.value[:40]!r}: {e}", _loc(file, n)) from None
