"""spec.yaml → NetSpec: the net (input, layers, net-level options), the training recipe and
the dataset, every value type-checked and located (file:line:col) for error messages."""
from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lmc.spec.config import DatasetKind, parse_train
from lmc.core.errors import Loc, MultiError, SpecError
from lmc.core.fields import Activation, PadStyle, coerce, did_you_mean, hints, show, snake, type_name
from lmc.data.kinds import label_format
from lmc.data.text import VOCABS      # a text dataset's vocabulary: the byte values or the corpus's characters
from lmc.layers import AUTO, all_layers
from lmc.losses import CLASS
from lmc.spec.yamlsrc import load_yaml

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
    dataset_vocab: str = "byte"       # text datasets: byte (256 ids) or char (the corpus's characters)
    dataset_classes: tuple | None = None   # class-id datasets: only the examples of these classes
    det_stride: int | None = None     # detection: input / det_stride = the head's grid (None: the head's own)
    build_tag: str = ""
    conv_bn_act: Activation = Activation.relu
    conv_pad_style: PadStyle = PadStyle.xla_same
    text: str = ""                    # the YAML as read (before the overrides)
    overrides: tuple = ()             # the `--set key=value` items applied to it, in order
    locs: dict = field(default_factory=dict, compare=False, repr=False)  # path → Loc (yamlsrc)

    def loc(self, *path) -> Loc:
        """Where `path` (snake_case names, list indices) was written, or its nearest parent:
        `spec.loc("train", "loss_kind")`."""
        norm = {tuple(snake(k) if isinstance(k, str) else k for k in p): v for p, v in self.locs.items()}
        while path:
            if path in norm:
                return norm[path]
            path = path[:-1]
        return Loc(self.file, 1, 1)

    @property
    def image_h(self) -> int:
        return self.input[1] if len(self.input) == 3 else 1

    @property
    def image_w(self) -> int:
        return self.input[2] if len(self.input) == 3 else 1


def apply_overrides(data: Any, overrides: list, file: str, locs: dict | None = None) -> Any:
    """`--set train.epochs=3`, `--set layers.2.conv_bn.oc=64`: the value is read as YAML, by the
    same loader as the file (an empty value is null).  A positional layer
    (`conv_bn: [3, 8, 3]`) can be set by field name.  Errors in a set value are located at
    the `--set` itself, not at the line it replaced.  An item may be a pair (`key=value`, option)
    for a value another option sets (`("train.epochs=1", "--epochs")`): errors then name that option."""
    for item in overrides or []:
        item, flag = item if isinstance(item, tuple) else (item, None)
        if "=" not in item:
            raise SpecError(f"--set expects key=value, got {show(item)}")
        key, text = item.split("=", 1)
        origin = flag or f"--set {key}"
        value = load_yaml(text.strip(), origin)[0] if text.strip() else None
        parts = [p for p in key.strip().split(".")]
        if not key.strip() or "" in parts:
            raise SpecError(f"--set {show(item)}: expected a dotted key such as train.epochs")
        if not isinstance(data, dict):
            raise SpecError(f"--set {key}: the spec is not a mapping")
        node, path = data, ()
        for i, p in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not p.isdigit() or int(p) >= len(node):
                    where = ".".join(parts[:i])
                    raise SpecError(f"--set {key}: {where} has {len(node)} items; no item {p!r}")
                p = int(p)
            elif isinstance(node, dict):
                # `--set layers.0.conv_bn.k_size=5` also finds a field written `kSize`
                p = next((k for k in node if snake(k) == snake(p)), p)
                if not last and node.get(p) is None:
                    node[p] = {}
                if not last and isinstance(node[p], list) and path[:1] == ("layers",) and len(path) == 2:
                    node[p] = _positional_to_mapping(p, node[p], path + (p,), locs)
            else:
                raise SpecError(f"--set {key}: {'.'.join(parts[:i])} is {show(node)}, not a mapping or list")
            path += (p,)
            if locs is not None and path not in locs:
                locs[path] = Loc(origin)    # a mapping the override created
            if last:
                node[p] = value
            else:
                node = node[p]
        if locs is not None:
            for k in [k for k in locs if k[:len(path)] == path]:
                del locs[k]
            locs[path] = Loc(origin)
    return data


def _positional_to_mapping(kind: str, values: list, path: tuple, locs: dict | None) -> Any:
    """`[3, 8, 3]` under `conv_bn` → `{ic: 3, oc: 8, k_size: 3}`, so `--set` can name a field;
    the values keep their locations."""
    cls = all_layers().get(snake(kind))
    if cls is None or len(values) > len(dataclasses.fields(cls)):
        return values               # parse_layer reports the real problem
    names = [f.name for f in dataclasses.fields(cls)]
    if locs is not None:
        for i, name in enumerate(names[:len(values)]):
            if path + (i,) in locs:
                locs[path + (name,)] = locs.pop(path + (i,))
    return dict(zip(names, values))


def load_spec(path: str | Path, overrides: list | None = None, text: str | None = None) -> NetSpec:
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
        data = apply_overrides(data, overrides, file, locs)
    spec = parse_spec(data, locs, file, text)
    sets = tuple(o[0] if isinstance(o, tuple) else o for o in overrides or ())
    return dataclasses.replace(spec, overrides=sets) if sets else spec


def resolved_data(spec: NetSpec) -> Any:
    """The spec's YAML data after its overrides (plain mappings and lists)."""
    data, _ = load_yaml(spec.text, spec.file)
    return apply_overrides(data, list(spec.overrides), spec.file) if spec.overrides else data


def resolved_yaml(spec: NetSpec) -> str:
    """The spec as it was trained: its text as read when no `--set` changed it (comments kept),
    else the YAML after the overrides, headed by a comment naming the source and the overrides.
    Loading it with no overrides gives the same net and recipe."""
    if not spec.overrides:
        return spec.text
    data = resolved_data(spec)
    head = [f"# {spec.file} with"] + [f"#   --set {o}" for o in spec.overrides]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False, default_flow_style=None,
                                                    allow_unicode=True, width=100)


def _did_you_mean(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), 1, 0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


class _Collector:
    """The errors parse_spec's steps find, and where a key (snake_case or as written) was written."""

    def __init__(self, locs: dict, file: str):
        self.locs, self.top = locs, Loc(file, 1, 1)
        self.errors: list[SpecError] = []
        self.orig: dict[str, str] = {}      # snake_case name → the key as written

    def raw_loc(self, *path):               # where `path` (keys as written) is, or its nearest parent
        while path and path not in self.locs:
            path = path[:-1]
        return self.locs.get(path, self.top)

    def loc(self, *path):                   # the same, the first key given by its snake_case name
        return self.raw_loc(*((self.orig.get(path[0], path[0]),) + path[1:])) if path else self.top

    def attempt(self, fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except MultiError as e:
            self.errors.extend(e.errors)
        except SpecError as e:
            self.errors.append(e)
        return None


def parse_spec(data: Any, locs: dict, file: str, text: str = "") -> NetSpec:
    top = Loc(file, 1, 1)
    if not isinstance(data, dict):
        what = ("an empty document" if data is None else "a list" if isinstance(data, list)
                else f"the value {show(data)}")
        raise SpecError(f"a spec must be a mapping with `name`, `input` and `layers`, got {what}", top)
    c = _Collector(locs, file)
    data = _top_level_keys(data, c)
    name = c.attempt(lambda: _at(lambda: _file_name(data["name"], "name"), c.loc("name")) if "name" in data
                     else _raise(SpecError("`name` is required", top)))
    inp = c.attempt(_parse_input, data, c.loc)
    opts = _net_options(data, c)
    layers = _layers(data, c)
    dataset, dpath, dvocab, dclasses = _dataset(data, c)
    train = _train(data, c, file)
    if c.errors:
        raise c.errors[0] if len(c.errors) == 1 else MultiError(c.errors)
    return NetSpec(name=name, input=inp, layers=tuple(layers), file=file, train=train,
                   dataset=dataset, dataset_path=dpath, dataset_vocab=dvocab, dataset_classes=dclasses,
                   text=text, locs=locs, **opts)


def _top_level_keys(data: dict, c: _Collector) -> dict:
    """Unknown or repeated (in two spellings) top-level keys are errors; the rest, by snake_case name."""
    for key in data:
        name = snake(key)
        if name not in TOP_KEYS:
            c.errors.append(SpecError(f"unknown top-level field '{key}'{_did_you_mean(name, TOP_KEYS)}",
                                      c.raw_loc(key)))
        elif name in c.orig:
            c.errors.append(SpecError(f"'{key}' repeats '{c.orig[name]}' (the same field in another spelling)",
                                      c.raw_loc(key)))
        else:
            c.orig[name] = key
    return {name: data[key] for name, key in c.orig.items()}


def _net_options(data: dict, c: _Collector) -> dict:
    opts = {}
    for key, t, default in (("det_stride", int, None), ("build_tag", "tag", ""),
                            ("conv_bn_act", Activation, Activation.relu),
                            ("conv_pad_style", PadStyle, PadStyle.xla_same)):
        if key in data:
            v = c.attempt(lambda: _at(lambda: _file_name(data[key], key, empty_ok=True) if t == "tag"
                                      else coerce(data[key], t, key), c.loc(key)))
            opts[key] = v if v is not None else default
    return opts


def _layers(data: dict, c: _Collector) -> list:
    layers = []
    if "layers" not in data:
        c.errors.append(SpecError("`layers` is required (a list of layers)", c.top))
    elif not isinstance(data["layers"], list) or not data["layers"]:
        c.errors.append(SpecError("`layers` must be a non-empty list", c.loc("layers")))
    else:
        for i, entry in enumerate(data["layers"]):
            layer = c.attempt(parse_layer, entry, i, c.loc("layers", i), lambda *p, i=i: c.loc("layers", i, *p))
            if layer is not None:
                layers.append(LayerEntry(i, layer, c.loc("layers", i)))
    return layers


def _dataset(data: dict, c: _Collector) -> tuple:
    """`dataset: mnist` or `dataset: {kind, path, vocab, classes}` → (kind, path, vocab, classes)."""
    dataset, dpath, dvocab, dclasses = None, None, "byte", None
    if "dataset" not in data or data["dataset"] is None:
        return dataset, dpath, dvocab, dclasses
    ds, ds_loc, has_kind = data["dataset"], c.loc("dataset"), True
    if isinstance(ds, dict):
        for k in ds:
            if k not in ("kind", "path", "vocab", "classes"):
                c.errors.append(SpecError(f"dataset: unknown field '{k}' (fields: kind, path, vocab, classes)",
                                          c.loc("dataset", k)))
        if "classes" in ds:
            dclasses = c.attempt(lambda: _at(lambda: _parse_classes(ds["classes"], ds.get("kind")),
                                             c.loc("dataset", "classes")))
        dpath = ds.get("path")
        if dpath is not None and not isinstance(dpath, str):
            c.errors.append(SpecError(f"dataset.path: expected a string, got {show(dpath)}", c.loc("dataset", "path")))
            dpath = None
        if "vocab" in ds:
            dvocab = ds["vocab"]
            if ds.get("kind") != "text":
                c.errors.append(SpecError("dataset.vocab: only a text dataset has a vocabulary "
                                          f"(this one is {show(ds.get('kind'))})", c.loc("dataset", "vocab")))
            elif dvocab not in VOCABS:
                c.errors.append(SpecError(f"dataset.vocab: expected one of {', '.join(VOCABS)}, got {show(dvocab)}"
                                          f"{did_you_mean(dvocab, VOCABS)}",
                                          c.loc("dataset", "vocab")))
                dvocab = "byte"
        if "kind" in ds:
            ds, ds_loc = ds["kind"], c.loc("dataset", "kind")
        else:
            has_kind = False
            c.errors.append(SpecError("dataset: `kind` is required, e.g. {kind: npz, path: data.npz}", ds_loc))
    if has_kind:
        dataset = c.attempt(lambda: _at(lambda: DatasetKind.parse(ds, "dataset"), ds_loc))
    return dataset, dpath, dvocab, dclasses


def _train(data: dict, c: _Collector, file: str):
    if "train" in data and data["train"] is not None:
        return c.attempt(parse_train, data["train"], c.locs, file, (c.orig["train"],))
    return None


def _parse_classes(value: Any, kind: Any) -> tuple[int, ...]:
    """dataset.classes: distinct class ids ≥ 0 of a dataset whose labels are one class per
    example; the examples of the other classes are left out of both splits (ids unchanged)."""
    if not isinstance(value, list) or not value:
        raise SpecError(f"dataset.classes: expected a non-empty list of class ids, got {show(value)}")
    ids = tuple(coerce(v, int, f"dataset.classes[{i}]", allow_zero=True) for i, v in enumerate(value))
    if len(set(ids)) != len(ids):
        raise SpecError(f"dataset.classes: {list(ids)} repeats a class")
    fmt = label_format(kind if isinstance(kind, str) else None)
    if fmt != CLASS:
        raise SpecError(f"dataset.classes keeps the examples of some classes; dataset {kind} has {fmt} labels, "
                        f"not one class per example")
    return ids


_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def _file_name(value: Any, where: str, empty_ok: bool = False) -> str:
    """`name` and `build_tag` name build files (build/<name>-<tag>.vmfb) and head the module text,
    so they are kept to letters, digits and `_ . + -`: no path separators, spaces or newlines."""
    v = coerce(value, str, where)
    if (v or not empty_ok) and not _FILE_NAME.fullmatch(v):
        raise SpecError(f"{where}: expected letters, digits, '_', '.', '+' or '-' (it names build files), "
                        f"got {show(v)}")
    return v


def _raise(e):
    raise e


def _at(fn, where: Loc):
    try:
        return fn()
    except SpecError as e:
        raise e.located(where)


def _parse_input(data, loc) -> tuple[int, ...]:
    if "input" in data:
        for k in ("image_h", "image_w"):
            if k in data:
                raise SpecError(f"`{k}` is the older spelling of `input`; give one or the other, not both", loc(k))
        inp = data["input"]
        if not isinstance(inp, dict):
            raise SpecError("`input` must be {channels, height, width} or {features}", loc("input"))
        keys = {}
        for k, v in inp.items():
            if snake(k) in keys:
                raise SpecError(f"input: '{k}' is given twice (in two spellings)", loc("input", k))
            keys[snake(k)] = v
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
                        f"got {show(entry)}", where)
    if not isinstance(kind, str):
        raise SpecError(f"layers[{index}]: layer kind must be a name, got {show(kind)}", where)
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
            if name in given:
                raise SpecError(f"layers[{index}] ({k}): '{key}' repeats '{orig[name]}' (the same field "
                                f"in another spelling)", loc_of(kind, key))
            given[name] = v
            orig[name] = key
    else:
        raise SpecError(f"layers[{index}] ({k}): fields must be a mapping or a list, got {show(fields)}", where)
    values, errs = {}, []
    inferred = cls.inferred_fields()
    for f in fdefs:
        if f.name in inferred and given.get(f.name, "auto") == "auto":
            values[f.name] = AUTO       # filled from the incoming shape by shape inference
            continue
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
    return type_name(t)
