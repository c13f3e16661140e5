"""spec.yaml → NetSpec: the net (input, layers, net-level options), the training recipe and
the dataset, every value type-checked and located (file:line:col) for error messages."""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config import DatasetKind, parse_train
from .errors import Loc, MultiError, SpecError
from .fields import Activation, PadStyle, coerce, hints, snake
from .layers import all_layers
from .yamlsrc import load_yaml

TOP_KEYS = ("name", "input", "layers", "train", "dataset", "image_h", "image_w", "det_stride",
            "build_tag", "conv_bn_act", "conv_pad_style")


@dataclass(frozen=True)
class LayerEntry:
    index: int
    layer: Any          # a registered Layer dataclass instance
    loc: Loc

    @property
    def kind(self) -> str:
        return self.layer.kind


@dataclass(frozen=True)
class NetSpec:
    name: str
    input: tuple[int, ...]            # per-example shape: (C, H, W) or (D,)
    layers: tuple[LayerEntry, ...]
    file: str
    train: Any = None                 # TrainConfig or None
    dataset: DatasetKind | None = None
    dataset_path: str | None = None
    det_stride: int = 32
    build_tag: str = ""
    conv_bn_act: Activation = Activation.relu
    conv_pad_style: PadStyle = PadStyle.xla_same
    text: str = ""                    # the YAML after overrides (for hashing)

    @property
    def image_h(self) -> int:
        return self.input[1] if len(self.input) == 3 else 1

    @property
    def image_w(self) -> int:
        return self.input[2] if len(self.input) == 3 else 1


def apply_overrides(data: Any, overrides: list[str], file: str) -> Any:
    """`--set train.epochs=3`, `--set layers.2.conv_bn.oc=64`: YAML-typed values."""
    for item in overrides or []:
        if "=" not in item:
            raise SpecError(f"--set expects key=value, got {item!r}")
        key, text = item.split("=", 1)
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        parts = [p for p in key.strip().split(".") if p]
        if not parts or not isinstance(data, dict):
            raise SpecError(f"--set {item!r}: empty key or non-mapping spec")
        node = data
        for i, p in enumerate(parts[:-1]):
            if isinstance(node, list):
                if not p.isdigit() or int(p) >= len(node):
                    raise SpecError(f"--set {key}: {'.'.join(parts[:i])} has no item {p}")
                nxt = node[int(p)]
                if isinstance(nxt, dict) and len(nxt) == 1 and parts[i + 1] not in nxt:
                    pass
                node = nxt
            elif isinstance(node, dict):
                if p not in node or node[p] is None:
                    node[p] = {}
                node = node[p]
            else:
                raise SpecError(f"--set {key}: cannot descend into {'.'.join(parts[:i]) or 'the spec'}")
        last = parts[-1]
        if isinstance(node, list):
            if not last.isdigit() or int(last) >= len(node):
                raise SpecError(f"--set {key}: no list item {last}")
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise SpecError(f"--set {key}: cannot set a field of a {type(node).__name__}")
    return data


def load_spec(path: str | Path, overrides: list[str] | None = None, text: str | None = None) -> NetSpec:
    """Read, parse and type-check a spec; every error found is raised at once (MultiError)."""
    file = str(path)
    if text is None:
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise SpecError(f"cannot read spec: {e.strerror}", Loc(file)) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError("the spec is not UTF-8 text", Loc(file)) from None
    data, locs = load_yaml(text, file)
    if overrides:
        data = apply_overrides(data, overrides, file)
    return parse_spec(data, locs, file, text)


def _did_you_mean(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), 1, 0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def parse_spec(data: Any, locs: dict, file: str, text: str = "") -> NetSpec:
    top = Loc(file, 1, 1)
    if not isinstance(data, dict):
        raise SpecError(f"a spec must be a mapping with `name`, `input` and `layers`, got {type(data).__name__}", top)
    errors: list[SpecError] = []

    def loc(*path):
        while path and path not in locs:
            path = path[:-1]
        return locs.get(path, top)

    def attempt(fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except MultiError as e:
            errors.extend(e.errors)
        except SpecError as e:
            errors.append(e)
        return None

    for key in data:
        if snake(key) not in TOP_KEYS:
            errors.append(SpecError(f"unknown top-level field '{key}'{_did_you_mean(snake(key), TOP_KEYS)}", loc(key)))
    data = {snake(k): v for k, v in data.items()}
    name = attempt(lambda: coerce(data["name"], str, "name") if "name" in data
                   else _raise(SpecError("`name` is required", top)))
    # input shape
    inp = attempt(_parse_input, data, loc)
    # net-level options
    opts = {}
    for key, t, default in (("det_stride", int, 32), ("build_tag", str, ""),
                            ("conv_bn_act", Activation, Activation.relu),
                            ("conv_pad_style", PadStyle, PadStyle.xla_same)):
        if key in data:
            v = attempt(lambda: _at(lambda: coerce(data[key], t, key), loc(key)))
            opts[key] = v if v is not None else default
    # layers
    layers = []
    if "layers" not in data:
        errors.append(SpecError("`layers` is required (a list of layers)", top))
    elif not isinstance(data["layers"], list) or not data["layers"]:
        errors.append(SpecError("`layers` must be a non-empty list", loc("layers")))
    else:
        for i, entry in enumerate(data["layers"]):
            layer = attempt(parse_layer, entry, i, loc("layers", i), lambda *p, i=i: loc("layers", i, *p))
            if layer is not None:
                layers.append(LayerEntry(i, layer, loc("layers", i)))
    train = None
    if "train" in data and data["train"] is not None:
        train = attempt(parse_train, data["train"], locs, file, ("train",) if "train" in {k for k in data} else ("train",))
    dataset, dpath = None, None
    if "dataset" in data and data["dataset"] is not None:
        ds = data["dataset"]
        if isinstance(ds, dict):
            dpath = ds.get("path")
            ds = ds.get("kind")
            if dpath is not None and not isinstance(dpath, str):
                errors.append(SpecError(f"dataset.path: expected a string, got {dpath!r}", loc("dataset")))
        dataset = attempt(lambda: _at(lambda: DatasetKind.parse(ds, "dataset"), loc("dataset")))
    if errors:
        raise errors[0] if len(errors) == 1 else MultiError(errors)
    return NetSpec(name=name, input=inp, layers=tuple(layers), file=file, train=train,
                   dataset=dataset, dataset_path=dpath, text=text, **opts)


def _raise(e):
    raise e


def _at(fn, where: Loc):
    try:
        return fn()
    except SpecError as e:
        raise e.located(where)


def _parse_input(data, loc) -> tuple[int, ...]:
    if "input" in data:
        inp = data["input"]
        if not isinstance(inp, dict):
            raise SpecError("`input` must be {channels, height, width} or {features}", loc("input"))
        keys = {snake(k): v for k, v in inp.items()}
        if set(keys) == {"features"}:
            return (_at(lambda: coerce(keys["features"], int, "input.features"), loc("input", "features")),)
        if set(keys) == {"channels", "height", "width"}:
            return tuple(_at(lambda k=k: coerce(keys[k], int, f"input.{k}"), loc("input", k))
                         for k in ("channels", "height", "width"))
        raise SpecError(f"`input` must have exactly channels/height/width or features, got {sorted(inp)}", loc("input"))
    if "image_h" in data or "image_w" in data:
        h = _at(lambda: coerce(data.get("image_h", 28), int, "image_h"), loc("image_h"))
        w = _at(lambda: coerce(data.get("image_w", 28), int, "image_w"), loc("image_w"))
        first = data.get("layers", [None])[0] if isinstance(data.get("layers"), list) and data.get("layers") else None
        c = 1
        if isinstance(first, dict) and len(first) == 1:
            fields = next(iter(first.values()))
            if isinstance(fields, dict) and "ic" in fields and isinstance(fields["ic"], int):
                c = fields["ic"]
            elif isinstance(fields, list) and fields and isinstance(fields[0], int):
                c = fields[0]
        return (c, h, w)
    raise SpecError("`input` is required: {channels: C, height: H, width: W} or {features: D}", loc())


def parse_layer(entry: Any, index: int, where: Loc, loc_of) -> Any:
    """One list item → a layer instance.  Forms: `flatten`, `{dense: {fan_in: 4, ...}}`,
    `{dense: [4, 3, relu]}` (the seed's argument order), `{global_avg_pool: null}`."""
    layers = all_layers()
    if isinstance(entry, str):
        kind, fields = entry, None
    elif isinstance(entry, dict) and len(entry) == 1:
        (kind, fields), = entry.items()
    else:
        raise SpecError(f"layers[{index}]: expected a layer name or a one-key mapping `kind: {{fields}}`, "
                        f"got {entry!r:.60}", where)
    if not isinstance(kind, str):
        raise SpecError(f"layers[{index}]: layer kind must be a name, got {kind!r}", where)
    k = snake(kind)
    if k not in layers:
        raise SpecError(f"layers[{index}]: unknown layer kind '{kind}'{_did_you_mean(k, layers)}", where,
                        hint="`lmc layers` lists every kind")
    cls = layers[k]
    fdefs = dataclasses.fields(cls)
    types_ = hints(cls)
    if fields is None:
        given = {}
    elif isinstance(fields, list):
        if len(fields) > len(fdefs):
            raise SpecError(f"layers[{index}] ({k}): {len(fields)} positional values but {k} has only "
                            f"{len(fdefs)} fields ({', '.join(f.name for f in fdefs)})", where)
        given = {f.name: v for f, v in zip(fdefs, fields)}
        orig = {f.name: i for f, i in zip(fdefs, range(len(fields)))}
    elif isinstance(fields, dict):
        given, orig = {}, {}
        for key, v in fields.items():
            name = snake(str(key))
            if name not in {f.name for f in fdefs}:
                raise SpecError(f"layers[{index}] ({k}): unknown field '{key}'"
                                f"{_did_you_mean(name, [f.name for f in fdefs])} (fields: "
                                f"{', '.join(f.name for f in fdefs) or 'none'})", loc_of(kind, key))
            given[name] = v
            orig[name] = key
    else:
        raise SpecError(f"layers[{index}] ({k}): fields must be a mapping or a list, got {fields!r:.40}", where)
    values, errs = {}, []
    for f in fdefs:
        if f.name not in given:
            if f.default is dataclasses.MISSING:
                errs.append(SpecError(f"layers[{index}] ({k}): missing field '{f.name}' ({_tn(types_[f.name])})", where))
            continue
        try:
            values[f.name] = coerce(given[f.name], types_[f.name], f"layers[{index}] ({k}).{f.name}",
                                    allow_zero=f.name in cls.zero_ok)
        except SpecError as e:
            errs.append(e.located(loc_of(kind, orig[f.name])))
    if errs:
        raise errs[0] if len(errs) == 1 else MultiError(errs)
    return cls(**values)


def _tn(t):
    from .fields import type_name
    return type_name(t)
