"""The dataset registry (lmc/data/kinds): every kind of the seed's DatasetKind has its own module,
the spec parses every registered kind, and the checks load_dataset makes for every kind (options,
a path, streaming, the fetch hint of missing files) come from the kind's declaration."""
import pytest

from lmc.core.errors import DataError, SpecError
from lmc.data import load_dataset
from lmc.data.kinds import Kind, all_datasets
from lmc.losses import BOXES, CLASS, FLOAT, MASK
from lmc.spec.config import DatasetKind, dataset_labels
from lmc.spec.netspec import load_spec

KINDS = list(all_datasets())
# The seed's DatasetKind, in its order (the spec being checked, not a copy of the registry), with
# the label format each delivers (losses.md §1); lmc's own kinds follow in the registry.
SEED = [("mnist", CLASS), ("cifar10", CLASS), ("imagenette", CLASS), ("pets", MASK), ("imagenet", CLASS),
        ("pets_det", BOXES), ("brats", MASK), ("brats224", MASK), ("digits", CLASS), ("npz", CLASS),
        ("synthetic", CLASS), ("digits_seg", MASK), ("digits_denoise", FLOAT), ("digits_det", BOXES),
        ("text", CLASS)]
MLP = "name: m\ninput: {features: 4}\nlayers:\n  - dense: {fan_in: 4, fan_out: 2}\n"


def test_the_registry_starts_with_the_seed_kinds_in_the_seed_order():
    assert KINDS[:len(SEED)] == [k for k, _ in SEED]
    assert [c.order for c in all_datasets().values()] == list(range(len(KINDS)))


@pytest.mark.parametrize("kind, fmt", SEED)
def test_the_seed_kinds_deliver_their_label_format(kind, fmt):
    assert dataset_labels(kind) == dataset_labels(DatasetKind(kind)) == fmt
    assert dataset_labels(None) == CLASS


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_its_own_module_and_a_spec_kind(kind):
    cls = all_datasets()[kind]
    assert cls.__module__ == f"lmc.data.kinds.{kind}" and issubclass(cls, Kind) and cls.loaded
    assert cls.embedded or cls.takes_path
    assert load_spec("m.yaml", text=MLP + f"dataset: {kind}\n").dataset == DatasetKind(kind)
    s = load_spec("m.yaml", text=MLP + f"dataset: {{kind: {kind}, path: data/x}}\n")
    assert (s.dataset.value, s.dataset_path) == (kind, "data/x")
    assert dataset_labels(kind) == cls.label_format


@pytest.mark.parametrize("kind", [k for k, c in all_datasets().items() if not c.embedded])
def test_a_kind_that_reads_files_needs_a_path(kind):
    with pytest.raises(DataError) as e:
        load_dataset(kind, None, (3, 32, 32), None)
    assert e.value.message == f"dataset kind {kind} needs a data path"
    assert f"`dataset: {{kind: {kind}, path: PATH}}`" in e.value.hint


@pytest.mark.parametrize("kind", [k for k, c in all_datasets().items() if c.fetch is not None])
def test_missing_files_get_the_kinds_fetch_hint(tmp_path, kind):
    cls = all_datasets()[kind]
    for shape in ((3, 32, 32), (16,)):          # images, or token windows (text)
        with pytest.raises(DataError) as e:
            load_dataset(kind, tmp_path / "nope", shape, None)
        if str(tmp_path / "nope") in e.value.message:
            break
    assert str(tmp_path / "nope") in e.value.message
    assert e.value.hint == cls.hint() and e.value.hint.startswith("lmc never downloads data: ")
    assert cls.fetch in e.value.hint


@pytest.mark.parametrize("kind", KINDS)
def test_options_are_the_declared_ones(tmp_path, kind):
    known = all_datasets()[kind].option_names()
    with pytest.raises(DataError) as e:
        load_dataset(kind, tmp_path, (3, 32, 32), None, bogus=1)
    if known:
        assert e.value.message == f"dataset kind {kind} takes no option(s) bogus (known: {', '.join(sorted(known))})"
    else:
        assert e.value.message == f"dataset kind {kind} takes no options (got bogus)"


@pytest.mark.parametrize("kind", [k for k, c in all_datasets().items() if not c.image_folder])
def test_only_image_folders_stream(tmp_path, kind):
    folders = ", ".join(k for k, c in all_datasets().items() if c.image_folder)
    with pytest.raises(DataError) as e:
        load_dataset(kind, tmp_path, (3, 32, 32), None, stream=True)
    assert e.value.message == f"--stream reads image folders ({folders}), not {kind}"


@pytest.mark.parametrize("kind", KINDS)
def test_a_misspelt_kind_gets_a_did_you_mean(kind):
    typo = kind[:2] + "x" + kind[2:]
    with pytest.raises(SpecError) as e:
        load_spec("m.yaml", text=MLP + f"dataset: {typo}\n")
    assert e.value.message == (f"dataset: expected one of {', '.join(KINDS)}, got '{typo}'; "
                               f"did you mean '{kind}'?")
    assert e.value.loc.line == 5
