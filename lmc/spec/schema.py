"""`lmc schema`: a JSON Schema (draft 2020-12) for spec files, generated from the registries (the
layer kinds and their fields, the recipe fields, the losses, optimizers and dataset kinds), so an
editor with a YAML language server completes and checks specs.  It checks types and names; the
rules between fields stay lmc's (`lmc validate`).  lmc/spec/lmc-spec.schema.json is this output,
shipped with the package (tests/test_schema.py keeps it current)."""
from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from lmc.core.fields import MAX_INT, Activation, Choice, PadStyle, hints
from lmc.layers import all_layers
from lmc.losses import all_losses
from lmc.spec.config import _ZERO_OK, TRAIN_FIELDS, DatasetKind, LossKind
from lmc.spec.netspec import TOP_KEYS

SHIPPED = Path(__file__).with_name("lmc-spec.schema.json")
_AUTO = {"const": "auto", "description": "filled from the incoming shape"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _spellings(props: dict) -> dict:
    """Each property also under its camelCase spelling (the Lean kit's), which lmc accepts."""
    out = dict(props)
    for k, v in props.items():
        out.setdefault(_camel(k), v)
    return out


def _type(t: Any, zero_ok: bool = False) -> dict:
    origin = get_origin(t)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(t) if a is not type(None)]
        return {"anyOf": [_type(args[0], zero_ok), {"type": "null"}]}
    if t is bool:
        return {"type": "boolean"}
    if t is int:
        return {"type": "integer", "minimum": 0 if zero_ok else 1, "maximum": MAX_INT}
    if t is float:
        return {"type": "number", "minimum": 0}
    if t is str:
        return {"type": "string"}
    if isinstance(t, type) and issubclass(t, Choice):
        return {"enum": [m.value for m in t] + sorted(getattr(t, "_choice_aliases", {}))}
    if origin is list:
        return {"type": "array", "items": _type(get_args(t)[0], True)}
    if origin is tuple:
        args = get_args(t)
        return {"type": "array", "prefixItems": [_type(a, True) for a in args], "minItems": len(args),
                "maxItems": len(args)}
    if t is LossKind:
        names = list(all_losses())
        return {"anyOf": [{"enum": names},
                          {"type": "object", "minProperties": 1, "maxProperties": 1,
                           "propertyNames": {"enum": names}}]}
    return {}


def _layer(kind: str, cls) -> dict:
    fields = dataclasses.fields(cls)
    types_ = hints(cls)
    inferred = cls.inferred_fields()
    props = {}
    for f in fields:
        s = _type(types_[f.name], f.name in cls.zero_ok)
        props[f.name] = {"anyOf": [s, _AUTO]} if f.name in inferred else s
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.name not in inferred]
    obj = {"type": "object", "properties": _spellings(props), "additionalProperties": False}
    if required:            # each required field, in either spelling
        obj["allOf"] = [{"anyOf": [{"required": [n]}, {"required": [_camel(n)]}]} if _camel(n) != n
                        else {"required": [n]} for n in required]
    body = {"anyOf": [obj,
                      {"type": "array", "maxItems": len(fields)}]}
    if not required:
        body["anyOf"].append({"type": "null"})
    entry = {"type": "object", "properties": {kind: body}, "required": [kind], "additionalProperties": False}
    if required:
        entry["description"] = f"{kind}: needs {', '.join(required)}"
    return entry


def schema() -> dict:
    layers = all_layers()
    bare = [k for k, c in layers.items()
            if all(f.default is not dataclasses.MISSING or f.name in c.inferred_fields() for f in dataclasses.fields(c))]
    train = {name: _type(t, name in _ZERO_OK) for name, (t, _) in TRAIN_FIELDS.items()}
    datasets = [m.value for m in DatasetKind]
    props = {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.+-]*$"},
        "input": {"anyOf": [
            {"type": "object", "properties": {"features": _type(int)}, "required": ["features"], "additionalProperties": False},
            {"type": "object", "properties": {k: _type(int) for k in ("channels", "height", "width")},
             "required": ["channels", "height", "width"], "additionalProperties": False}]},
        "layers": {"type": "array", "minItems": 1,
                   "items": {"anyOf": [{"enum": bare + [_camel(k) for k in bare if _camel(k) != k]}]
                                      + [_layer(k, c) for k, c in sorted(layers.items())]}},
        "train": {"type": "object", "properties": _spellings(train), "additionalProperties": False},
        "dataset": {"anyOf": [{"enum": datasets}, {"type": "null"},
                              {"type": "object", "properties": {"kind": {"enum": datasets}, "path": {"type": "string"},
                                                                "vocab": {"enum": ["byte", "char"]}},
                               "required": ["kind"], "additionalProperties": False}]},
        "image_h": _type(int), "image_w": _type(int), "det_stride": _type(int),
        "build_tag": {"type": "string"},
        "conv_bn_act": _type(Activation),
        "conv_pad_style": _type(PadStyle),
    }
    assert set(props) == set(TOP_KEYS), "lmc bug: the schema's top-level keys differ from the parser's"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://lmc.invalid/lmc-spec.schema.json",
            "title": "lmc spec", "description": "A net and its training recipe, as lmc reads it (lmc schema).",
            "type": "object", "properties": _spellings(props), "required": ["name", "layers"],
            "additionalProperties": False}


def schema_text() -> str:
    return json.dumps(schema(), indent=1, sort_keys=False) + "\n"
