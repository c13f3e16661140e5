"""The spec's dataset loaded for a typed net: the loader chosen by the spec (or --data), fitted
to the net's input and head, its token ids checked against the embedding."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lmc.core.errors import DataError
from lmc.data import load_dataset
from lmc.data.kinds import all_datasets, by_suffix, embedded


def load_data(net, data: Path | None, seed: int, stream: bool | None = None, loader_workers: int | None = None):
    """The spec's dataset (or --data), fitted to the net's input and head (`stream`: decode
    image folders per batch; None: the loader decides by size; `loader_workers`: image folders
    decoded in that many processes, 0 or None in threads)."""
    kind = net.spec.dataset.value if net.spec.dataset is not None else None
    path = data if data is not None else net.spec.dataset_path
    if data is not None and by_suffix(data) is not None:     # a .npz file selects the npz loader
        kind = by_suffix(data)
    if kind is None:
        raise DataError(f"{net.spec.file}: the spec names no dataset",
                        hint="add `dataset: digits` (or mnist, cifar10, npz, …) to the spec, or pass --data FILE.npz")
    if path is None and not embedded(kind):
        path = Path("data") / kind
    classes = net.num_classes
    if classes is None and net.output.type.rank == 4:     # per-pixel logits [B, K, H, W]
        classes = net.output.type.dims[1]
    cfg = net.spec.train            # the resolution split acts on the data (lmc.data.resolution)
    res = dict(train_res=cfg.train_res, test_crop_ratio=cfg.test_crop_ratio) if cfg is not None else {}
    kinds = all_datasets()
    for f in kinds[kind].fields if kind in kinds else ():      # the spec's dataset.<field> (text: vocab)
        res[f.name] = getattr(net.spec, f"dataset_{f.name}")
    ds = load_dataset(kind, path, net.input.dims[1:], classes, seed=seed, stream=stream,
                      classes=net.spec.dataset_classes, loader_workers=loader_workers, **res)
    check_token_ids(net, ds)
    return ds


def check_token_ids(net, ds) -> None:
    """Token ids fed to an embedding (token_position_embed with ids_input or gather) must lie in
    [0, vocab_size): a larger id would gather past the table."""
    first = net.spec.layers[0].layer
    if first.kind != "token_position_embed" or not (first.ids_input or first.gather):
        return
    for name in ("x_train", "x_val"):
        x = getattr(ds, name)
        if x.size and (x.min() < 0 or x.max() >= first.vocab_size or not np.array_equal(x, np.round(x))):
            raise DataError(f"{ds.source(name)}: token ids must be integers in [0, {first.vocab_size}) "
                            f"(token_position_embed's vocab_size), found {x.min():g}…{x.max():g}",
                            hint="raise vocab_size to the dataset's vocabulary")
