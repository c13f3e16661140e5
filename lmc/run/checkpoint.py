"""Checkpoints: save/restore a run, and read the files `--init` and the bootstrap fields accept.

lmc checkpoint = one .npz (no pickles) holding
  <param name>            every parameter, named as `lmc info --params` prints it, ABI order
  opt.<slot>.<param name> optimizer state: each optimizer's slots (opt.m.*, opt.v.* for adam,
                          opt.momentum.* for sgd+momentum, …; lmc.lower.Abi.opt is the layout)
  <state name>            BN running statistics (…running_mean, …running_var)
  <region>.<param name>   the averaged and accumulated weights the recipe keeps (REGIONS):
                          ema.* (use_ema), swa.* and swa_sq.* (use_swa / use_swag),
                          swag_dev.* ([K', *shape]: the last K' ≤ swag_k deviations θ − swa),
                          grad_acc.* (grad_accum_steps > 1: the accumulators mid-cycle),
                          spectral_u.* (spectral_cap: [taps, n] power-iteration vectors of the
                          capped weights, lmc/lower/spectral.py)
  __lmc__                 JSON metadata (a 0-d unicode array): format, net_hash, step, epoch,
                          batch (the data position of the next step), seed, shuffle, …
written atomically: a temp file in the same directory, fsync, os.replace, fsync of the directory.

net_hash covers the net's structure only (parameter and state names and shapes), not the
recipe, so a checkpoint can be fine-tuned with another lr or optimizer but never loaded into a
different net: a mismatch is refused naming the first tensor that differs.

`--init` also takes a bare .npz or .safetensors of tensors keyed by the same names, or the
Lean kit's flat parameter file (.bin: raw little-endian float32, every parameter concatenated
in ABI order, C order, no header; a `_bn_stats` companion next to it is used when its size is
exact, as the reference does)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmc.core.arrays import read_npz
from lmc.core.errors import CheckpointError
from lmc.run.rundir import checkpoint_path

FORMAT = "lmc-checkpoint"
VERSION = 1
META_KEY = "__lmc__"


def net_hash(net) -> str:
    """Hash of parameter and state names and shapes in ABI order (not of the recipe)."""
    layout = [[p.name, list(p.type.dims)] for p in net.params] + [[s.name, list(s.type.dims)] for s in net.state]
    return hashlib.sha256(json.dumps(layout).encode()).hexdigest()[:16]


def opt_key(slot: str, name: str) -> str:
    return f"opt.{slot}.{name}"


# per-parameter regions besides the live weights and the optimizer state
REGIONS = ("ema", "swa", "swa_sq", "swag_dev", "grad_acc", "spectral_u")
IGNORED_PREFIXES = ("opt.",) + tuple(f"{r}." for r in REGIONS)


@dataclass
class Checkpoint:
    params: list[np.ndarray]
    opt: list[np.ndarray]          # in Abi.opt order (slot-major)
    state: list[np.ndarray]
    meta: dict
    regions: dict = None           # region → {param name: array} (REGIONS)


# ------------------------------------------------------------------------------------ saving

def save_checkpoint(path: Path, net, opt_keys, params, opt, state, meta: dict, regions: dict | None = None) -> Path:
    """Write an lmc checkpoint atomically (a crash leaves the previous file intact).
    opt_keys: [(slot, param name)] in the order of `opt` (lmc.lower.Abi.opt_keys)."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    for p, a in zip(net.params, params):
        arrays[p.name] = a
    for (slot, name), a in zip(opt_keys, opt):
        arrays[opt_key(slot, name)] = a
    for s, a in zip(net.state, state):
        arrays[s.name] = a
    for region, tensors in (regions or {}).items():
        assert region in REGIONS, region
        for name, a in tensors.items():
            arrays[f"{region}.{name}"] = a
    full = {"format": FORMAT, "version": VERSION, "net_hash": net_hash(net), "opt": [list(k) for k in opt_keys],
            "regions": sorted(regions or {}),
            "params": [p.name for p in net.params], "state": [s.name for s in net.state], **meta}
    arrays[META_KEY] = np.array(json.dumps(full, sort_keys=True))
    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path


def atomic_write(path: Path, write) -> None:
    """write(f) into a temp file next to `path`, fsync it, rename over `path`, fsync the dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    try:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:          # some filesystems cannot fsync a directory; the rename is still atomic
        pass


def atomic_link(src: Path, dst: Path) -> None:
    """`dst` becomes a copy of `src` atomically: a hard link where the filesystem has them (the
    later os.replace of `src` leaves the link's inode alone), else a byte copy."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    try:
        if tmp.exists():
            tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()


# ------------------------------------------------------------------------------------ reading

def read_tensors(path: Path) -> tuple[dict[str, np.ndarray], dict | None]:
    """Named tensors and the lmc metadata (None for a bare file) of a .npz or .safetensors."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory, expected a checkpoint file",
                              hint=f"a run's checkpoint is {path / 'last.npz'}" if (path / "last.npz").is_file() else None)
    if not path.is_file():
        raise CheckpointError(f"no such checkpoint file: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: the file is empty (0 bytes), expected a checkpoint")
    if path.suffix == ".safetensors":
        tensors, meta = _read_safetensors(path)
    elif path.suffix == ".npz":
        tensors = read_npz(path, CheckpointError, "checkpoint")
        meta = None
        if META_KEY in tensors:
            try:
                meta = json.loads(str(tensors.pop(META_KEY)))
            except ValueError:
                raise CheckpointError(f"{path}: its {META_KEY} entry is not JSON") from None
    else:
        raise CheckpointError(f"{path}: unknown checkpoint format {path.suffix or '(no suffix)'!r}",
                         hint="expected .npz (lmc checkpoints, named tensors), .safetensors or .bin (flat float32)")
    if meta is not None and meta.get("format") != FORMAT:
        meta = None
    return tensors, meta


def safetensors_module(what: str):
    """The `safetensors` package (an optional extra), or a CheckpointError naming the extra."""
    try:
        import safetensors.numpy
    except ImportError:
        raise CheckpointError(f"{what} needs the safetensors package",
                              hint="pip install 'lmc[export]'") from None
    return safetensors


def _read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict | None]:
    """A .safetensors file through the safetensors package.  Float tensors of any width are
    accepted (F16/BF16/F64 are widened or narrowed to float32 where they are used); the lmc
    metadata, when the file has one, is the `__lmc__` entry of its header metadata."""
    st = safetensors_module(f"reading {path}")
    try:
        with st.safe_open(str(path), framework="numpy") as f:
            meta_raw = f.metadata() or {}
            out = {k: f.get_tensor(k) for k in f.keys()}
    except (OSError, ValueError, TypeError, st.SafetensorError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    for name, a in out.items():
        if not np.issubdtype(a.dtype, np.floating) and a.dtype.name != "bfloat16":
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {a.dtype}; expected a float type")
        if a.dtype.name == "bfloat16":
            out[name] = a.astype(np.float32)          # exact: bf16 is the top half of an f32
    meta = None
    if META_KEY in meta_raw:
        try:
            meta = json.loads(meta_raw[META_KEY])
        except ValueError:
            meta = None
    return out, meta


def check_layout(tensors: dict[str, np.ndarray], expected: list[tuple[str, tuple]], path,
                 optional: set[str] = frozenset(), ignore_prefix: tuple = IGNORED_PREFIXES) -> None:
    """Refuse a file whose tensors are not exactly `expected` (name → shape), naming the first
    tensor that differs: missing, shaped differently, or extra (a different net)."""
    for name, dims in expected:
        if name not in tensors:
            if name in optional:
                continue
            raise CheckpointError(f"{path} does not match the spec: it has no tensor '{name}' {list(dims)}",
                             hint="was it saved from another spec? `lmc info --params SPEC` lists the expected names")
        have = tuple(tensors[name].shape)
        if have != tuple(dims):
            raise CheckpointError(f"{path} does not match the spec: tensor '{name}' has shape {list(have)} there "
                             f"but {list(dims)} in the spec", hint="a checkpoint only loads into the net it was saved from")
        if not np.issubdtype(tensors[name].dtype, np.floating):
            raise CheckpointError(f"{path}: tensor '{name}' has dtype {tensors[name].dtype}; expected float32")
    names = {n for n, _ in expected}
    for name in tensors:
        if name not in names and not name.startswith(ignore_prefix):
            raise CheckpointError(f"{path} does not match the spec: it has a tensor '{name}' {list(tensors[name].shape)} "
                             f"that the spec does not", hint="a checkpoint only loads into the net it was saved from")


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def load_checkpoint(path: Path, net, opt_keys, regions=()) -> Checkpoint:
    """A whole lmc checkpoint for --resume: params, optimizer state (opt_keys: [(slot, param
    name)], lmc.lower.Abi.opt_keys), BN state, the `regions` the recipe keeps, position."""
    tensors, meta = read_tensors(path)
    if meta is None:
        raise CheckpointError(f"{path} is not an lmc checkpoint (no {META_KEY} metadata)")
    expected = [(p.name, p.type.dims) for p in net.params] + [(s.name, s.type.dims) for s in net.state]
    check_layout(tensors, expected, path)
    if meta.get("net_hash") != net_hash(net):      # names and shapes matched, so this is the order
        raise CheckpointError(f"{path} was saved from a net with the same tensors in another order "
                         f"(hash {meta.get('net_hash')} vs {net_hash(net)})")
    have = [tuple(k) for k in meta.get("opt", [])]
    if have != [tuple(k) for k in opt_keys]:
        slots = sorted({s for s, _ in have}) or "none"
        want = sorted({s for s, _ in opt_keys}) or "none"
        raise CheckpointError(f"{path} holds optimizer state {slots} for {len(have)} tensors but the spec's "
                         f"optimizer needs {want} for {len(opt_keys)}",
                         hint="to change the optimizer, start a new run with --init CHECKPOINT")
    opt = []
    for slot, name in opt_keys:
        k = opt_key(slot, name)
        dims = next(p.type.dims for p in net.params if p.name == name)
        if k not in tensors or tensors[k].shape != dims:
            raise CheckpointError(f"{path} does not match the spec: optimizer tensor '{k}' is missing or misshaped")
        opt.append(_f32(tensors[k]))
    got = {}
    for region in regions:
        if region not in meta.get("regions", []):
            raise CheckpointError(f"{path} has no {region} weights, which this recipe keeps",
                             hint="resume with the recipe the run was started with")
        got[region] = {p.name: _f32(tensors[f"{region}.{p.name}"]) for p in net.params
                       if f"{region}.{p.name}" in tensors}
    return Checkpoint([_f32(tensors[p.name]) for p in net.params], opt,
                      [_f32(tensors[s.name]) for s in net.state], meta, got)


@dataclass
class InitTensors:
    params: list[np.ndarray]
    state: list[np.ndarray] | None      # None: the file has no BN statistics (keep the init's)
    what: str                           # for the "initialized from …" line


def load_init(path: Path, net) -> InitTensors:
    """Parameters (and BN statistics when present) for --init: an lmc checkpoint, a bare
    .npz/.safetensors of named tensors, or a flat .bin.  The optimizer state is not loaded."""
    path = Path(path)
    if path.suffix == ".bin":
        return _load_bin(path, net)
    tensors, meta = read_tensors(path)
    expected = [(p.name, p.type.dims) for p in net.params] + [(s.name, s.type.dims) for s in net.state]
    state_names = {s.name for s in net.state}
    if meta is not None:
        check_layout(tensors, expected, path)
        state = [_f32(tensors[s.name]) for s in net.state]
        what = f"lmc checkpoint (step {meta.get('step', '?')})"
    else:
        check_layout(tensors, expected, path, optional=state_names)
        have = [s.name for s in net.state if s.name in tensors]
        if have and len(have) != len(net.state):
            missing = next(s.name for s in net.state if s.name not in tensors)
            raise CheckpointError(f"{path} has some BN statistics but not '{missing}'")
        state = [_f32(tensors[s.name]) for s in net.state] if have else None
        what = f"{len(tensors)} named tensors"
    return InitTensors([_f32(tensors[p.name]) for p in net.params], state, what)


def load_region(path: Path, net, region: str, tensors=None, meta=None) -> list[np.ndarray]:
    """One averaged-weights region (ema, swa, swa_sq, swag_dev) of an lmc checkpoint, in
    `lmc info --params` order; refused naming what the file has when it lacks it.  `tensors`
    and `meta` (read_tensors' result) spare reading the file again."""
    if tensors is None:
        tensors, meta = read_tensors(path)
    have = (meta or {}).get("regions", [])
    if region not in have:
        raise CheckpointError(f"{path} has no {region} weights (it holds: live{''.join(', ' + r for r in have)})",
                         hint="--region live scores the trained weights; ema/swa exist when the run used "
                              "use_ema / use_swa")
    return [_f32(tensors[f"{region}.{p.name}"]) for p in net.params]


def read_flat(path: Path, what: str) -> np.ndarray:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{what}: no such file: {path}")
    size = path.stat().st_size
    if size % 4:
        raise CheckpointError(f"{what}: {path} has {size:,} bytes, not a whole number of float32 values")
    return np.fromfile(path, dtype="<f4")


def bn_companion(path: Path) -> Path:
    """The reference's BN-statistics file next to a flat parameter file."""
    name = path.name
    if "_params" in name:
        return path.with_name(name.replace("_params", "_bn_stats", 1))
    return path.with_name(path.stem + "_bn_stats" + path.suffix)


def _load_bin(path: Path, net) -> InitTensors:
    n = net.total_params
    if not path.is_file():
        raise CheckpointError(f"no such parameter file: {path}")
    size = path.stat().st_size
    if size != 4 * n:
        raise CheckpointError(f"{path} has {size:,} bytes but the spec's {n:,} parameters need {4 * n:,} "
                         f"(flat little-endian float32 in `lmc info --params` order)",
                         hint="was it saved from another spec?")
    flat = read_flat(path, "--init")
    params = unflatten(flat, [p.type.dims for p in net.params])
    return InitTensors(params, _bn_stats_for(path, net), f"flat parameter file ({n:,} floats)")


def _bn_stats_for(path: Path, net) -> list[np.ndarray] | None:
    """BN statistics from the companion file, only when its size is exact (as the reference)."""
    if not net.state:
        return None
    comp = bn_companion(path)
    n = sum(s.type.size for s in net.state)
    if comp.is_file() and comp.stat().st_size == 4 * n:
        return unflatten(np.fromfile(comp, dtype="<f4"), [s.type.dims for s in net.state])
    return None


def unflatten(flat: np.ndarray, shapes) -> list[np.ndarray]:
    out, off = [], 0
    for dims in shapes:
        k = int(np.prod(dims, dtype=np.int64))
        out.append(np.ascontiguousarray(flat[off:off + k].reshape(dims), dtype=np.float32))
        off += k
    return out


def flatten(arrays) -> np.ndarray:
    return np.concatenate([np.ravel(a) for a in arrays]).astype(np.float32) if arrays else np.zeros(0, np.float32)


def _bootstrap_prefix(params, state, net, src_path: str, count: int) -> list[str]:
    """bootstrap_backbone from named tensors (an lmc checkpoint, a .npz/.safetensors, a run
    directory): the leading parameters in ABI order whose floats make up `count` (the Lean kit's
    layer prefix; it must end on a tensor boundary), each copied by name, and the BN statistics
    of the layers they belong to."""
    path = checkpoint_path(src_path)
    tensors, _ = read_tensors(path)
    what = f"train.bootstrap_backbone: {path}"
    total, names, off = sum(p.type.size for p in net.params), [], 0
    if count > total:
        raise CheckpointError(f"{what}: prefix of {count:,} floats, but the spec has {total:,}")
    for p in net.params:
        if off >= count:
            break
        if off + p.type.size > count:
            raise CheckpointError(f"{what}: the prefix of {count:,} floats ends inside '{p.name}' "
                                  f"{list(p.type.dims)} (floats [{off:,}, {off + p.type.size:,}))",
                                  hint=f"a named prefix ends on a tensor: {off:,} or {off + p.type.size:,}")
        names.append(p.name)
        off += p.type.size
    index = {p.name: i for i, p in enumerate(net.params)}
    for name in names:
        p = net.params[index[name]]
        if name not in tensors:
            raise CheckpointError(f"{what} has no tensor '{name}' {list(p.type.dims)}, which the prefix covers",
                                  hint="`lmc info --params SPEC` lists the names; the source must be a net with the same leading layers")
        if tuple(tensors[name].shape) != tuple(p.type.dims):
            raise CheckpointError(f"{what}: tensor '{name}' has shape {list(tensors[name].shape)} there but "
                                  f"{list(p.type.dims)} in the spec")
        params[index[name]] = _f32(tensors[name])
    layers = {n.split(".", 1)[0] for n in names}
    copied = 0
    for i, s in enumerate(net.state):
        if s.name.split(".", 1)[0] in layers and s.name in tensors:
            if tuple(tensors[s.name].shape) != tuple(s.type.dims):
                raise CheckpointError(f"{what}: BN statistic '{s.name}' has shape {list(tensors[s.name].shape)} "
                                      f"there but {list(s.type.dims)} in the spec")
            state[i] = _f32(tensors[s.name])
            copied += 1
    notes = [f"bootstrap: {len(names)} tensors ({count:,} floats, {names[0]} … {names[-1]}) from {path}"]
    if copied:
        notes.append(f"bootstrap: {copied} BN statistics of those layers from {path}")
    return notes


def _flat_source(src_path: str, what: str) -> np.ndarray:
    """A flat float32 .bin for the bootstrap fields: a file of named tensors (a zip, a
    safetensors header) is refused instead of being read as floats."""
    p = Path(src_path)
    if p.suffix in (".npz", ".safetensors") or p.is_dir():
        raise CheckpointError(f"{what}: {p} holds named tensors, not a flat float32 .bin",
                              hint="train.bootstrap_backbone reads named checkpoints by tensor name")
    if p.is_file():
        with open(p, "rb") as f:
            head = f.read(8)
        if head[:4] == b"PK\x03\x04" or head[:6] == b"\x93NUMPY":
            raise CheckpointError(f"{what}: {p} is a NumPy file, not a flat float32 .bin")
    return read_flat(p, what)


def apply_bootstrap(params: list[np.ndarray], state: list[np.ndarray], net, cfg) -> list[str]:
    """The recipe's bootstrap_backbone (path, prefix_floats) and bootstrap_backbone_range (path,
    dst_off, src_off, count), the Lean kit's order (params and state are replaced in place).
    bootstrap_backbone reads an lmc checkpoint, a .npz/.safetensors of named tensors or a run
    directory by tensor name (_bootstrap_prefix), or a flat .bin whose size is exactly the
    prefix's floats (BN statistics from its `_bn_stats` companion when its size is exact);
    bootstrap_backbone_range copies a window of a flat .bin.  Returns lines describing what was
    done."""
    notes = []
    if cfg.bootstrap_backbone is None and cfg.bootstrap_backbone_range is None:
        return notes
    shapes = [p.type.dims for p in net.params]
    if cfg.bootstrap_backbone is not None:
        src_path, count = cfg.bootstrap_backbone
        p = Path(src_path.rsplit(":", 1)[0] if ":" in src_path and not Path(src_path).exists() else src_path)
        if p.is_dir() or p.suffix in (".npz", ".safetensors"):
            notes += _bootstrap_prefix(params, state, net, src_path, count)
        else:
            src = _flat_source(src_path, "train.bootstrap_backbone")
            if len(src) != count:
                raise CheckpointError(f"train.bootstrap_backbone: {src_path} has {len(src):,} floats, but the prefix "
                                      f"is {count:,}: a flat .bin must hold exactly the prefix",
                                      hint="or bootstrap from the lmc checkpoint (or run directory), by tensor name")
            total = sum(p.type.size for p in net.params)
            if count > total:
                raise CheckpointError(f"train.bootstrap_backbone: prefix of {count:,} floats, but the spec has {total:,}")
            flat = flatten(params)
            flat[:count] = src
            params[:] = unflatten(flat, shapes)
            notes.append(f"bootstrap: first {count:,} floats from {src_path}")
            bn = _bn_stats_for(Path(src_path), net)
            if bn is not None:
                state[:] = bn
                notes.append(f"bootstrap: BN statistics from {bn_companion(Path(src_path))}")
    if cfg.bootstrap_backbone_range is not None:
        src_path, dst, off, count = cfg.bootstrap_backbone_range
        src = _flat_source(src_path, "train.bootstrap_backbone_range")
        flat = flatten(params)
        if off + count > len(src):
            raise CheckpointError(f"train.bootstrap_backbone_range: source window [{off:,}, {off + count:,}) is "
                             f"past the end of {src_path} ({len(src):,} floats)")
        if dst + count > len(flat):
            raise CheckpointError(f"train.bootstrap_backbone_range: destination window [{dst:,}, {dst + count:,}) is "
                             f"past the end of the spec's {len(flat):,} parameters")
        flat[dst:dst + count] = src[off:off + count]
        params[:] = unflatten(flat, shapes)
        notes.append(f"bootstrap: floats [{dst:,}, {dst + count:,}) from {src_path} [{off:,}, {off + count:,})")
    return notes
