"""Fuzzing the spec front end: no input may end in anything but an LmcError.

(a) random YAML documents (random nested data dumped with yaml.safe_dump, spec-shaped
    documents built from the real layer registry and TrainConfig fields, random text and
    bytes) go through load_spec → infer → check_against_net;
(b) the specs in tests/data/ are mutated line by line (delete, duplicate, swap, re-indent,
    rename a key, replace a number) and go through the same pipeline;
(c) a few mutated files go through `python -m lmc.cli validate`: exit 0 or 2, no traceback.

LMC_FUZZ_EXAMPLES raises the number of examples for a longer local run."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from lmc.check.net import check_against_net
from lmc.spec.config import TRAIN_FIELDS
from lmc.core.errors import LmcError
from lmc.core.fields import MAX_INT
from lmc.graph.infer import infer
from lmc.layers import all_layers
from lmc.spec.netspec import TOP_KEYS, load_spec

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
SPECS = sorted(DATA.glob("*.yaml")) + sorted((ROOT / "specs").glob("*.yaml"))
N = int(os.environ.get("LMC_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=N, deadline=None, derandomize=not os.environ.get("LMC_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def run_pipeline(text: str, file: str = "fuzz.yaml", overrides=None) -> None:
    """Everything `lmc validate` does; only LmcError may escape (pytest reports the rest)."""
    try:
        spec = load_spec(file, overrides, text=text)
        net = infer(spec, batch=2)
        if spec.train is not None:
            check_against_net(spec.train, net.num_classes, lambda f: spec.loc("train", f),
                              output_dims=net.output.type.dims, dataset=spec.dataset)
    except LmcError as e:
        e.render()          # rendering must not crash either


# ---------------------------------------------------------------- value strategies

KINDS = sorted(all_layers())
FIELD_NAMES = sorted({f.name for c in all_layers().values() for f in dataclasses.fields(c)})
WORDS = (list(TOP_KEYS) + KINDS + FIELD_NAMES + list(TRAIN_FIELDS) +
         ["same", "valid", "relu", "gelu", "features", "channels", "height", "width", "kind", "path",
          "convBn", "kSize", "fanIn", "class_ce", "per_pixel_weighted_ce", "weights", "gamma", "mnist"])

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(-5, 70),
    st.integers(),
    st.sampled_from([0, -1, MAX_INT, 2**31, 2**40, 2**63, 10**30, 10**400, -10**400, 1e308]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=12),
)
# values that broke the front end once, or sit at a limit: offered often in spec-shaped places
EDGES = st.sampled_from([10**400, -10**400, 2**31, MAX_INT, 2**40, 0, -1, 1.5, 1e308, float("nan"),
                         True, "x", "", [], {}, None, [1, 2], {"a": 1}])
keys = st.one_of(st.sampled_from(WORDS), st.text(max_size=8), st.integers(-3, 3), st.booleans())
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(keys, inner, max_size=5)),
    max_leaves=30)


def layer_entry():
    """A plausible layer: a kind from the registry (sometimes camelCased or misspelt) with
    random values for its real fields, in any of the three forms."""
    def build(kind, form, vals, spell):
        cls = all_layers()[kind]
        names = [f.name for f in dataclasses.fields(cls)]
        name = {"plain": kind, "camel": re.sub(r"_(\w)", lambda m: m.group(1).upper(), kind),
                "typo": kind[:-1]}[spell]
        if form == "bare" or not names:
            return name
        if form == "list":
            return {name: vals[:len(names) + 1]}
        return {name: dict(zip(names, vals))}
    small = st.one_of(st.integers(1, 64), EDGES, scalars)
    return st.builds(build, st.sampled_from(KINDS), st.sampled_from(["bare", "list", "map"]),
                     st.lists(small, max_size=6), st.sampled_from(["plain"] * 6 + ["camel", "typo"]))


def train_section():
    names = st.sampled_from(sorted(TRAIN_FIELDS))
    return st.dictionaries(names, st.one_of(EDGES, scalars, documents), max_size=6).map(
        lambda d: {"learning_rate": 0.1, "batch_size": 4, "epochs": 2, **d})


spec_docs = st.fixed_dictionaries(
    {"name": st.one_of(st.just("fuzz"), scalars),
     "input": st.one_of(
         st.builds(lambda c, h, w: {"channels": c, "height": h, "width": w},
                   st.integers(1, 4), st.integers(1, 12), st.integers(1, 12)),
         st.builds(lambda f: {"features": f}, st.integers(1, 64)),
         documents),
     "layers": st.lists(layer_entry(), min_size=0, max_size=6)},
    optional={"train": st.one_of(train_section(), documents),
              "dataset": st.one_of(st.sampled_from(["mnist", "digits", "npz", "cifar"]), documents),
              "conv_pad_style": st.one_of(st.sampled_from(["xla_same", "symmetric", "xlaSame"]), scalars),
              "conv_bn_act": scalars, "det_stride": scalars, "build_tag": scalars,
              "image_h": scalars, "image_w": scalars})


def dump(doc) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


# ---------------------------------------------------------------- (a) random documents


@FUZZ
@given(documents)
def test_random_documents(doc):
    run_pipeline(dump(doc))


@FUZZ
@given(spec_docs)
def test_spec_shaped_documents(doc):
    run_pipeline(dump(doc))


@FUZZ
@given(train_section(), st.sampled_from([None, "mnist", "brats", "pets_det", {"kind": "npz", "path": 3}]))
def test_train_sections(train, dataset):
    doc = {"name": "t", "input": {"channels": 1, "height": 4, "width": 4},
           "layers": ["flatten", {"dense": [16, 3]}], "train": train}
    if dataset is not None:
        doc["dataset"] = dataset
    run_pipeline(dump(doc))


@FUZZ
@given(spec_docs, st.lists(st.tuples(st.sampled_from(["train.epochs", "layers.0", "layers.0.dense.fan_out",
                                                     "name", "input.features", "train", "layers.9.x",
                                                     "", ".", "layers.x.y", "name.x", "layers.0.0"]),
                                    st.sampled_from(["3", "-1", "[1, 2]", "{a: 1}", "{1: 2}", "", "x: [", "1.0e400", "9" * 5000, "\t3", "null"])),
                          max_size=3))
def test_overrides(doc, sets):
    run_pipeline(dump(doc), overrides=[f"{k}={v}" for k, v in sets] + ["noequals"][: len(sets) % 2])


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text):
    run_pipeline(text)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(tmp_path_factory, raw):
    p = tmp_path_factory.mktemp("bytes") / "spec.yaml"
    p.write_bytes(raw)
    try:
        spec = load_spec(p)
        infer(spec, batch=2)
    except LmcError:
        pass


# ---------------------------------------------------------------- (b) mutations of real specs

NUMBER = re.compile(r"-?\b\d+(\.\d+)?\b")
KEY = re.compile(r"^(\s*-?\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:)")
replacements = st.one_of(st.integers(-10, 10**6).map(str), st.floats(allow_nan=True).map(repr),
                         st.sampled_from(["-3", "0", "2.5", "1e400", "abc", "true", "null", "[1, 2]",
                                          "{a: 1}", str(2**40), "9" * 5000, "0x10", "1_000", ".inf",
                                          "'7'", "&a 3", "*a", "!!python/object:os.system x"]))


@st.composite
def mutated(draw):
    path = draw(st.sampled_from(SPECS))
    lines = path.read_text().splitlines()
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "number", "rename", "indent", "dedent"]))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "number":
            nums = list(NUMBER.finditer(lines[i]))
            if nums:
                m = nums[draw(st.integers(0, len(nums) - 1))]
                lines[i] = lines[i][:m.start()] + draw(replacements) + lines[i][m.end():]
        elif op == "rename":
            m = KEY.match(lines[i])
            if m:
                new = draw(st.one_of(st.sampled_from(WORDS), st.text("abcxyz_", min_size=1, max_size=6)))
                lines[i] = m.group(1) + new + lines[i][m.end(2):]
        elif op == "indent":
            lines[i] = " " * draw(st.integers(1, 3)) + lines[i]
        elif op == "dedent":
            lines[i] = lines[i].lstrip()
    return path.name, "\n".join(lines) + "\n"


def test_there_are_specs_to_mutate():
    assert len(SPECS) >= 3


@FUZZ
@given(mutated())
def test_mutated_specs(named):
    name, text = named
    run_pipeline(text, name)


def test_cli_validate_on_mutated_files(tmp_path):
    """A few mutated files through the real CLI in a subprocess: exit 0 or 2, never a traceback."""
    examples = []

    @settings(max_examples=8, deadline=None, derandomize=True, database=None)
    @given(mutated())
    def collect(named):
        examples.append(named)
    collect()
    files = []
    for i, (name, text) in enumerate(examples):
        p = tmp_path / f"{i}_{name}"
        p.write_text(text)
        files.append(p)
    files.append(tmp_path / "missing.yaml")
    # one process per file keeps the exit code per file; the CLI is quick to start
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for p in files:
        r = subprocess.run([sys.executable, "-m", "lmc.cli", "validate", str(p)],
                           capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode in (0, 2), (p.read_text() if p.exists() else p, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        if r.returncode == 2:
            assert r.stderr.startswith("error: "), r.stderr
