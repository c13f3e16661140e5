"""Field types shared by layers, the net and the training recipe, and the one coercion rule
that turns a YAML value into a typed field value (or a SpecError saying what was expected)."""
from __future__ import annotations

import difflib
import enum
import functools
import re
import types
import typing
from typing import Any, Union, get_args, get_origin

from dataclasses import dataclass, field as dc_field

from lmc.core.errors import SpecError


@dataclass(frozen=True)
class RecipeField:
    """A `train:` field declared by the registry entry that reads it (an optimizer, a loss):
    it joins TrainConfig after the seed's and lmc's own fields, `fieldmap.WHERE` (`where`: the
    stage that reads it), the check stage's rules (an optimizer's field is refused with an
    optimizer that does not read it) and the recipe audit (`probe`: a value and the companion
    fields the audit sets with it on specs/digits_mlp.yaml).  `range`: "unit" for [0, 1),
    "prob" for [0, 1], None for the type's own (floats ≥ 0, ints ≥ 1)."""
    name: str
    type: Any
    default: Any
    where: str
    probe: tuple = dc_field(default=())
    range: str | None = None

MAX_INT = 2**31 - 1  # sizes beyond this are typos, and would blow memory long before use


def snake(name: str) -> str:
    """The seed's camelCase spelling → our snake_case (`kSize` → `k_size`, `useSE` → `use_se`,
    `convBn` → `conv_bn`, `mbConvV3` → `mb_conv_v3`).  One rule for every kind and field.
    Not only strings arrive here: a YAML key may be a number (`1: x`), so spell it first."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", str(name))
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


class Choice(str, enum.Enum):
    """An enum spelled in YAML by its snake_case name (camelCase accepted).  An enum may carry
    `_choice_aliases` ({other name: member value}, set after it is made), names it also accepts."""

    @classmethod
    def parse(cls, value: Any, where: str) -> "Choice":
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = snake(value.lstrip("."))
            key = getattr(cls, "_choice_aliases", {}).get(key, key)
            for m in cls:
                if m.value == key:
                    return m
        raise SpecError(f"{where}: expected one of {', '.join(m.value for m in cls)}, got {show(value)}"
                        + did_you_mean(value, [m.value for m in cls]))

    def __str__(self) -> str:
        return self.value


def did_you_mean(value: Any, options) -> str:
    """`"; did you mean 'relu'?"` for the option closest to `value` (compared snake_case, so
    `Reluu` finds `relu`), or "" when nothing is close or `value` is not a name."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(snake(value.lstrip(".")), list(options), 1, 0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


class Activation(Choice):
    relu = "relu"
    relu6 = "relu6"
    identity = "identity"
    swish = "swish"
    h_swish = "h_swish"
    gelu = "gelu"


class Normalization(Choice):
    bn = "bn"
    ln = "ln"


class Padding(Choice):
    same = "same"
    valid = "valid"


class PadStyle(Choice):
    xla_same = "xla_same"
    symmetric = "symmetric"


def show(value: Any, limit: int = 60) -> str:
    """repr() for error messages, cut short: a value can be a 5000-digit number or a long list."""
    try:
        r = repr(value)
    except ValueError:      # an int too long for str() (sys.get_int_max_str_digits)
        return f"<a {value.bit_length()}-bit integer>"
    return r if len(r) <= limit else r[:limit - 3] + "..."


def type_name(t: Any) -> str:
    if t is int:
        return "a positive integer"
    if t is float:
        return "a number"
    if t is bool:
        return "true or false"
    if t is str:
        return "a string"
    if isinstance(t, type) and issubclass(t, Choice):
        return "one of " + ", ".join(m.value for m in t)
    return str(t).replace("typing.", "")


def coerce(value: Any, t: Any, where: str, *, allow_zero: bool = False) -> Any:
    """Check `value` against the type hint `t`; return the typed value or raise SpecError.
    Ints must be integers (not floats, not bools) in [1, 2^31) — or [0, …) where allowed."""
    origin = get_origin(t)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(t) if a is not type(None)]
        if value is None:
            return None
        return coerce(value, args[0], where, allow_zero=allow_zero)
    if t is bool:
        if isinstance(value, bool):
            return value
        raise SpecError(f"{where}: expected true or false, got {show(value)}")
    if t is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: expected an integer, got {show(value)}")
        lo = 0 if allow_zero else 1
        if value < lo or value > MAX_INT:
            raise SpecError(f"{where}: expected an integer in [{lo}, {MAX_INT}], got {show(value)}")
        return value
    if t is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{where}: expected a number, got {show(value)}")
        try:
            v = float(value)
        except OverflowError:   # an int beyond the float range, e.g. 400 digits
            raise SpecError(f"{where}: expected a finite number, got {show(value)}") from None
        if v != v or v in (float("inf"), float("-inf")):
            raise SpecError(f"{where}: expected a finite number, got {show(value)}")
        return v
    if t is str:
        if isinstance(value, str):
            return value
        raise SpecError(f"{where}: expected a string, got {show(value)}")
    if isinstance(t, type) and issubclass(t, Choice):
        return t.parse(value, where)
    if origin is list:
        (arg,) = get_args(t)
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{where}: expected a list, got {show(value)}")
        return tuple(coerce(v, arg, f"{where}[{i}]", allow_zero=True) for i, v in enumerate(value))
    if origin is tuple:
        args = get_args(t)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise SpecError(f"{where}: expected a list of {len(args)} values, got {show(value)}")
        return tuple(coerce(v, a, f"{where}[{i}]", allow_zero=True) for i, (v, a) in enumerate(zip(value, args)))
    if hasattr(t, "parse"):
        return t.parse(value, where)
    raise TypeError(f"lmc bug: no coercion for {t!r}")


@functools.lru_cache(maxsize=None)
def hints(cls) -> dict[str, Any]:
    """The resolved field types of a layer class (cached: get_type_hints evaluates strings)."""
    return typing.get_type_hints(cls)
