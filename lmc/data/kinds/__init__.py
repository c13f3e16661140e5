"""The dataset registry: one module per dataset kind (`dataset: <kind>` in a spec), each a
`Kind` subclass that owns everything the spec, the recipe checks and the data pipeline need to
know about it — its place in the `expected one of ...` list (`order`), the label format it
delivers (what the loss must consume: config.dataset_labels), whether it is embedded (needs no
files, so no default path data/<kind>), whether it reads a path, the spec keys it has beyond
`kind` and `path` (`fields`: text's `vocab`) and the loader's further keyword options, whether
it is an image-folder tree (streamed, its validation images cropped from their files), the file
suffix that selects it from --data (npz: .npz), where its files come from (`fetch`: the hint
when they are missing; lmc never downloads), the recipe combinations it refuses (`rules`), and
its loader (`load`, which calls the format's reader in lmc/data/<format>.py).

Modules are discovered automatically (config.DatasetKind is built from this registry, and
`load_dataset` dispatches through it), so adding a dataset kind is adding one module here."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lmc.core.errors import DataError
from lmc.core.registry import discover, registrar
from lmc.data.dataset import Dataset, fetch_hint
from lmc.data.resolution import eval_crop
from lmc.losses import CLASS, Rule

DATASETS: dict[str, type] = {}


def _derive(cls):
    # a kind is loaded exactly when it defines its loader (a declared kind without one is refused)
    cls.loaded = cls.load.__func__ is not Kind.load.__func__
    if not (cls.embedded or cls.takes_path):
        raise RuntimeError(f"lmc bug: dataset kind {cls.name} neither is embedded nor reads a path")


register = registrar(DATASETS, "dataset kind", on_register=_derive)


@dataclass(frozen=True)
class Field:
    """A key of the spec's `dataset:` mapping beyond `kind` and `path` (text's `vocab`); its
    value reaches the loader as the keyword option of the same name (NetSpec.dataset_<name>)."""
    name: str
    choices: tuple[str, ...]
    default: Any


class Kind:
    name: ClassVar[str]
    loaded: ClassVar[bool]               # set by register: the kind has a loader
    # the seed's DatasetKind order (the order `expected one of ...` lists the kinds)
    order: ClassVar[int]
    # the label format the spec can count on (a lmc.losses label format): a loss that consumes
    # another one is refused with this dataset (npz reads its format from the file: class ids here)
    label_format: ClassVar[str] = CLASS
    # needs no files (built in memory, or shipped with lmc's dependencies): no default path
    embedded: ClassVar[bool] = False
    # reads the files at a path (an embedded kind may also take one: text's own corpus)
    takes_path: ClassVar[bool] = True
    # the spec's `dataset:` keys beyond kind and path, each also a loader option
    fields: ClassVar[tuple[Field, ...]] = ()
    # further keyword options of the loader (not spec keys: load_dataset's callers)
    options: ClassVar[tuple[str, ...]] = ()
    # a class-per-folder image tree: --stream decodes it per batch, and train.test_crop_ratio
    # crops its validation images as they are decoded from their files
    image_folder: ClassVar[bool] = False
    # a --data file with this suffix selects the kind (whatever the spec names)
    suffix: ClassVar[str | None] = None
    # where the files come from, for the hint when they are missing (lmc never downloads)
    fetch: ClassVar[str | None] = None

    @classmethod
    def hint(cls) -> str | None:
        """The hint for missing files: lmc never downloads; where they come from, how to point
        lmc at them (None for a kind that reads no files)."""
        return fetch_hint(cls.name, cls.fetch) if cls.fetch is not None else None

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """Every keyword option the loader takes: the spec fields', then the others."""
        return tuple(f.name for f in cls.fields) + tuple(cls.options)

    # the stored image shape (C, H, W) of a kind whose examples a flat spec input reads
    # flattened (digits: an MLP's 64 features are its 8×8 images); None: the spec's own shape
    image_shape: ClassVar[tuple[int, ...] | None] = None
    # the class names in label order, when the kind knows them (digits: 0–9)
    names: ClassVar[tuple[str, ...] | None] = None
    # a diffusion dataset's noise schedule (lmc.data.diffusion.Schedule): the net predicts the
    # noise, and `lmc sample` draws images from it with this schedule; None: not a diffusion
    schedule: ClassVar[Any] = None

    @classmethod
    def class_names(cls, path: Path | None) -> list[str] | None:
        """The names of the classes in label order (`lmc predict`'s table), None when unknown."""
        return list(cls.names) if cls.names is not None else None

    @classmethod
    def read_image(cls, file: Path, input_shape: tuple[int, ...], crop_ratio: float):
        """One image file as the validation split holds its examples (`lmc predict`): float32 of
        the spec's per-example shape.  By default: Pillow converts it to the channel count (L or
        RGB), squashes it bilinearly to the stored H×W, scales x/255 to [0, 1] (as the kinds'
        loaders store their pixels), applies train.test_crop_ratio's resize and centre crop as
        the eval does to stored images (lmc.data.resolution.eval_crop), and flattens it for a flat
        input.  Image-folder kinds override it with their own decoding."""
        from PIL import Image

        shape = tuple(input_shape)
        img = shape if len(shape) == 3 else cls.image_shape
        if img is None or (len(shape) != 3 and int(np.prod(img)) != int(np.prod(shape))):
            raise DataError(f"{file}: the spec's input {list(shape)} is not an image (give a .npy/.npz array "
                            f"of that shape instead)")
        c, h, w = img
        if c not in (1, 3):
            raise DataError(f"{file}: the net takes {c}-channel images; image files give 1 (L) or 3 (RGB)",
                            hint="give a .npy/.npz array of the input's shape instead")
        try:
            with Image.open(file) as im:
                im = im.convert("L" if c == 1 else "RGB")
                if im.size != (w, h):
                    im = im.resize((w, h), Image.BILINEAR)
                a = np.asarray(im, dtype=np.float32) / np.float32(255.0)
        except (OSError, ValueError) as e:
            raise DataError(f"{file}: cannot read image ({e})") from None
        a = a[None] if c == 1 else a.transpose(2, 0, 1)
        if crop_ratio:
            a = eval_crop(a[None], crop_ratio)[0]
        return np.ascontiguousarray(a.reshape(shape), dtype=np.float32)

    @classmethod
    def check_stream(cls, stream: bool | None) -> None:
        """Refuse a --stream/--no-stream choice the kind cannot follow (beyond the rule that
        only image folders stream, which load_dataset applies)."""

    @classmethod
    def eval_every(cls, cfg) -> int:
        """The in-run eval cadence in epochs (0: the final eval only), for the loop's EvalCadence:
        lmc's eval_every_n_epochs (imagenet overrides it with its own cadence)."""
        return cfg.eval_every_n_epochs

    @classmethod
    def rules(cls, cfg) -> list[Rule]:
        """The recipe combinations this dataset refuses (lmc.losses' Rule: message, field, the
        rule's other fields, hint), asked by the check stage.  By default: val_every_epochs > 1,
        the seed's ImageNet-streaming cadence, belongs to imagenet (which overrides this)."""
        if cfg.val_every_epochs > 1:
            return [Rule(f"val_every_epochs is the ImageNet cadence (dataset: imagenet), not for dataset {cls.name}",
                         "val_every_epochs", hint="set eval_every_n_epochs, lmc's cadence for every dataset")]
        return []

    @classmethod
    def load(cls, path: Path | None, input_shape: tuple[int, ...], num_classes: int | None, *, seed: int,
             stream: bool | None, crop_ratio: float, **options) -> Dataset:
        """The dataset as its reader delivers it (load_dataset then fits it to the spec).
        path: a Path (None where the kind reads no path, or an embedded kind was given none);
        input_shape: the spec's per-example shape; num_classes: the head's (None: unknown);
        seed: the run's (only drawn data depends on it); stream: --stream/--no-stream (None: the
        loader decides); crop_ratio: train.test_crop_ratio for image folders (0: none);
        options: those of `option_names()` that were given."""
        raise NotImplementedError(f"lmc bug: dataset kind {cls.name} has no loader")


def _check(kinds: dict) -> None:
    orders = sorted(c.order for c in kinds.values())
    if orders != list(range(len(kinds))):
        raise RuntimeError(f"lmc bug: dataset kind orders {orders} are not 0..{len(kinds) - 1}")


def all_datasets() -> dict[str, type]:
    """Every declared dataset kind, in the seed's order."""
    if discover(__name__, __path__):
        _check(DATASETS)
    return dict(sorted(DATASETS.items(), key=lambda kv: kv[1].order))


def dataset_class(name: str) -> type:
    kinds = all_datasets()
    if name not in kinds:
        raise RuntimeError(f"lmc bug: no dataset module declares {name!r}")
    return kinds[name]


def label_format(name: str | None) -> str:
    """The label format dataset kind `name` delivers (None, no dataset: class ids)."""
    kinds = all_datasets()
    return kinds[name].label_format if name in kinds else CLASS


def embedded(name: str) -> bool:
    """Kind `name` needs no files (an unknown name: False, load_dataset refuses it)."""
    kinds = all_datasets()
    return name in kinds and kinds[name].embedded


def by_suffix(path: Path) -> str | None:
    """The kind a --data file selects by its suffix (npz for x.npz), else None."""
    return next((n for n, c in all_datasets().items() if c.suffix and Path(path).suffix == c.suffix), None)


__all__ = ["DATASETS", "Field", "Kind", "all_datasets", "by_suffix", "dataset_class", "embedded",
           "label_format", "register"]
