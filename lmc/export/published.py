"""`lmc import SPEC WEIGHTS --from torchvision|timm -o CKPT`: a published model's state_dict → an lmc
checkpoint, table-driven (no torch needed: a `.safetensors` file is read with the safetensors
package; a `.pth` is refused with the one-line conversion: lmc never imports PyTorch).

The mapping (docs/export.md, "Importing published weights"):
1. the library's tensors in its module order.  A safetensors file keeps no order, so the order
   is rebuilt from the names: numeric path parts by value, the rest by the library's child
   order (`Library.child_order`: the registration order of every child module that holds weights, over
   the models the table covers), a module's own tensors (`leaf_order`) before its children's;
2. tensors that are no weight (`NOT_WEIGHTS`) dropped; a fused q‖k‖v in-projection split in
   three; the tensors lmc's parameter order puts elsewhere moved (`moves`);
3. the weights filled into lmc's parameters and the BN running statistics into its state, in
   order, each converted (`convert`: linear weights transposed, a 1×1 conv held as a dense
   flattened, BN variance shifted for the library's ε, Swin's relative-position table scaled),
   its shape checked; lmc tensors the library has no counterpart for get the value that makes
   them the identity (`EXTRA`).
A library tensor left over, an lmc tensor left unfilled, or a shape that differs is an error
naming the tensor."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmc.core.errors import ExportError
from lmc.core.fields import did_you_mean
from lmc.prims.norm import EPS
from lmc.run.checkpoint import safetensors_module, save_checkpoint

@dataclass(frozen=True)
class Library:
    """How one library lays out its state_dicts (the module docstring's steps)."""
    name: str
    covers: str                    # the models its table is checked on (for messages and docs)
    child_order: tuple[str, ...]   # child modules that hold weights, consistent with every model's order
    leaf_order: tuple[str, ...]    # a module's own tensors, in registration order (parameters, then buffers)
    moves: tuple = ()              # (pattern, the name it follows in lmc's order)
    split_qkv: bool = False        # `….qkv.weight` [3D, D] is lmc's separate q, k, v linears
    bn_eps: dict = None            # model name → its batch norms' ε, where not torch's 1e-5


# tensors torch keeps that are no weight: a step counter, and Swin's constant index of its
# relative position table (lmc's window_bias primitive builds the same index in-graph)
NOT_WEIGHTS = re.compile(r"(num_batches_tracked|relative_position_index)$")

# lmc tensors the library has no counterpart for, and the value that makes them the identity
EXTRA = {r"patch_merging\.bias$": 0.0}     # the Lean kit's bias on Swin's merge reduction
TORCH_BN_EPS = 1e-5

QKV_BIAS_MOVE = (r"(.*)\.([qkv])\.bias", r"\1.\2.weight")          # q.w, q.b, k.w, k.b, …

TORCHVISION = Library(
    "torchvision", "resnet, mobilenet v2/v3, efficientnet v1/v2, convnext, swin, vit, shufflenet v2",
    child_order=("conv1", "features", "conv", "block", "fc1", "norm1", "qkv", "reduction", "branch1", "conv_proj",
                 "layers", "ln_1", "out_proj", "bn1", "stage2", "classifier", "fc2", "attn", "proj", "norm",
                 "branch2", "encoder", "ln", "self_attention", "layer1", "conv2", "stage3", "norm2", "head", "heads",
                 "ln_2", "layer2", "bn2", "stage4", "mlp", "layer3", "conv3", "conv5", "layer4", "bn3", "fc",
                 "downsample"),
    leaf_order=("class_token", "weight", "in_proj_weight", "bias", "in_proj_bias", "pos_embedding", "layer_scale",
                "relative_position_bias_table", "running_mean", "running_var", "num_batches_tracked",
                "relative_position_index"),
    moves=((r"class_token", "conv_proj.bias"),                                  # ViT: cls after the patch conv
           (r"(.*)\.layer_scale", r"\1.block.5.bias"),                          # ConvNeXt: γ after the 2nd 1×1
           (r"(.*)\.relative_position_bias_table", r"\1.proj.bias"),            # Swin: table after the out proj
           (r"(.*)\.reduction\.weight", r"\1.norm.bias"),                       # Swin merge: LN, then linear
           QKV_BIAS_MOVE),
    bn_eps={"mobilenet_v3_large": 1e-3, "mobilenet_v3_small": 1e-3, "efficientnet_v2_s": 1e-3,
            "efficientnet_v2_m": 1e-3, "efficientnet_v2_l": 1e-3})

TIMM = Library(
    "timm", "resnet, vit, convnext",
    child_order=("conv1", "bn1", "layer1", "layer2", "layer3", "layer4", "conv2", "bn2", "conv3", "bn3",
                 "downsample", "patch_embed", "stem", "stages", "blocks", "conv_dw", "norm1", "attn", "qkv", "proj",
                 "norm2", "norm", "mlp", "fc1", "fc2", "head", "fc"),
    leaf_order=("gamma", "cls_token", "pos_embed", "weight", "bias", "running_mean", "running_var",
                "num_batches_tracked"),
    moves=((r"cls_token", "patch_embed.proj.bias"),                           # ViT: cls, then positions,
           (r"pos_embed", "cls_token"),                                       # after the patch conv
           (r"(.*)\.gamma", r"\1.mlp.fc2.bias"),                               # ConvNeXt: γ after the 2nd 1×1
           QKV_BIAS_MOVE),
    split_qkv=True, bn_eps={})

LIBRARIES = {"torchvision": TORCHVISION, "timm": TIMM}
SOURCES = tuple(LIBRARIES)
BN_EPS = TORCHVISION.bn_eps


def library(source: str) -> Library:
    if source not in LIBRARIES:
        raise ExportError(f"--from {source!r}: expected one of {', '.join(SOURCES)}{did_you_mean(source, SOURCES)}")
    return LIBRARIES[source]


def module_order(names, lib: Library = TORCHVISION) -> list[str]:
    """The library's state_dict order of `names` (see the module docstring, step 1); a name
    with a part the table does not know is refused naming it."""
    def part(k: str, c: str, leaf: bool):
        if leaf:
            if c not in lib.leaf_order:
                raise ExportError(f"tensor {k!r}: {c!r} is not a tensor the {lib.name} table knows")
            return (0, lib.leaf_order.index(c))
        m = re.fullmatch(r"(?:encoder_layer_)?(\d+)", c)
        if m:
            return (1, int(m.group(1)))
        if c not in lib.child_order:
            raise ExportError(f"tensor {k!r}: module {c!r} is not one the {lib.name} table knows",
                              hint=f"lmc import knows {lib.name}'s {lib.covers} layouts (docs/export.md)")
        return (2, lib.child_order.index(c))

    def key(k: str):
        ps = k.split(".")
        return [part(k, c, False) for c in ps[:-1]] + [part(k, ps[-1], True)]
    return sorted(names, key=key)


def _kind(name: str, a: np.ndarray) -> str:
    """How a library tensor's layout differs from lmc's, from its name and rank."""
    leaf = name.rpartition(".")[2]
    if leaf == "weight" and a.ndim == 2:
        return "linear"
    if leaf == "weight" and a.ndim == 4:
        return "conv"
    if leaf == "running_var":
        return "bn_var"
    if leaf == "relative_position_bias_table":
        return "rel_table"
    return "plain"


def convert(kind: str, a: np.ndarray, s: tuple, head_dim: int | None, bn_eps: float) -> np.ndarray:
    """One library tensor → the lmc tensor it becomes (s: lmc's shape)."""
    if kind == "linear":                       # torch (out, in); lmc dense/linear (in, out),
        return a.T if len(s) == 2 else a.reshape(s) if a.size == math.prod(s) else a   # ConvNeXt's 1×1 convs
    if kind == "conv" and len(s) == 2:         # a 1×1 conv that lmc holds as a dense (in, out)
        return a.reshape(a.shape[:2]).T if a.shape[2:] == (1, 1) else a
    if kind == "bn_var":
        # lmc's batch norm has the Lean kit's ε = 1e-5; in eval, (σ² + ε_lib) = (σ²' + ε_lmc)
        # exactly for σ²' = σ² + ε_lib − ε_lmc
        a = (a.astype(np.float64) + bn_eps - EPS).astype(np.float32)
    if kind == "rel_table":
        # lmc adds the bias before softmax's 1/√dh scale (docs/layers.md, swin_stage): its table
        # is torchvision's times √dh
        a = a * np.float32(math.sqrt(head_dim))
    # same layout up to singleton axes (class token [1, 1, D], positions [1, N, D], layer scale
    # [C, 1, 1]); anything else is left as it is, for the shape check to refuse
    same = tuple(d for d in a.shape if d != 1) == tuple(d for d in s if d != 1)
    return a.reshape(s) if same else a


def _extra(t) -> float | None:
    return next((v for p, v in EXTRA.items() if re.search(p, t.name)), None)


def map_state_dict(sd: dict[str, np.ndarray], net, bn_eps: float = TORCH_BN_EPS, source: str = "torchvision"):
    """A library's state_dict (name → array, any order) → lmc's (params, state) in train-step
    argument order.  Every library tensor is used exactly once (NOT_WEIGHTS aside) and every
    lmc tensor set exactly once (EXTRA aside); anything else is an ExportError naming it."""
    lib = library(source)
    flat = {}
    for k in module_order(list(sd), lib):
        if NOT_WEIGHTS.search(k):
            continue
        if not (np.issubdtype(sd[k].dtype, np.floating) or sd[k].dtype.name == "bfloat16"):
            raise ExportError(f"{source} tensor {k!r} has dtype {sd[k].dtype}; expected a float tensor")
        v = np.asarray(sd[k], np.float32)
        owner, _, leaf = k.rpartition(".")
        fused = leaf.startswith("in_proj_") or (lib.split_qkv and owner.rpartition(".")[2] == "qkv")
        if fused:                                  # fused q‖k‖v rows: lmc's q, k, v linears
            if v.shape[0] % 3:
                raise ExportError(f"tensor {k!r} {list(v.shape)}: a fused q/k/v projection needs 3·D rows")
            stem, end = (owner, leaf[len("in_proj_"):]) if leaf.startswith("in_proj_") else (owner[:-4], leaf)
            for part, rows in zip("qkv", np.split(v, 3)):
                flat[f"{stem}.{part}.{end}"] = rows
        else:
            flat[k] = v
    names = list(flat)
    for pat, after in lib.moves:
        for k in [k for k in names if re.fullmatch(pat, k)]:
            target = re.sub(pat, after, k)
            if target not in names:
                raise ExportError(f"tensor {k!r}: expected {target!r} next to it (the {lib.name} layout)")
            names.remove(k)
            names.insert(names.index(target) + 1, k)
    buffers = [k for k in names if k.endswith(("running_mean", "running_var"))]
    weights = [k for k in names if k not in buffers]

    def head_dim(k):
        owner = k.rpartition(".")[0]
        proj = flat.get(f"{owner}.proj.weight")
        return proj.shape[1] // flat[k].shape[1] if proj is not None else None

    def fill(targets, sources):
        out, i = [], 0

        def extras():
            nonlocal i
            while i < len(targets) and _extra(targets[i]) is not None:
                out.append(np.full(targets[i].type.dims, _extra(targets[i]), np.float32))
                i += 1

        for k in sources:
            extras()
            if i >= len(targets):
                raise ExportError(f"{source} tensor {k!r} {list(flat[k].shape)} has no lmc tensor left to go to",
                                  hint="is the state_dict of another model than the spec's? `lmc info --params "
                                       "SPEC` lists lmc's tensors")
            t = targets[i]
            kind = _kind(k, flat[k])
            a = convert(kind, flat[k], tuple(t.type.dims), head_dim(k) if kind == "rel_table" else None, bn_eps)
            if a.shape != tuple(t.type.dims):
                raise ExportError(f"{source} tensor {k!r} {list(flat[k].shape)} does not fit lmc's {t.name} "
                                  f"{list(t.type.dims)}", hint="is the state_dict of another model (or width, "
                                                               "or class count) than the spec's?")
            out.append(np.ascontiguousarray(a, np.float32))
            i += 1
        extras()
        if i < len(targets):
            left = [t.name for t in targets[i:]]
            raise ExportError(f"lmc tensor{'s' if len(left) > 1 else ''} {', '.join(left[:5])}"
                              f"{' …' if len(left) > 5 else ''} got no {source} tensor (the state_dict has "
                              f"too few)", hint="is the state_dict of another model than the spec's?")
        return out

    return fill(net.params, weights), fill(net.state, buffers)


def read_state_dict(path: Path) -> dict[str, np.ndarray]:
    """A state_dict saved as .safetensors (the safetensors package); a .pth/.pt is refused with
    the one-line conversion (lmc never imports PyTorch)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        st = safetensors_module(f"reading {path}")
        if not path.is_file():
            raise ExportError(f"no such file: {path}")
        try:
            return dict(st.numpy.load_file(str(path)))       # int tensors too (num_batches_tracked)
        except (OSError, ValueError, TypeError, st.SafetensorError) as e:
            raise ExportError(f"{path}: not a readable safetensors file ({e})") from None
    if path.suffix in (".pth", ".pt"):
        # reading a pickle of torch tensors would need PyTorch; the product never imports it
        raise ExportError(f"{path}: a PyTorch pickle; lmc reads state_dicts as safetensors (it never imports PyTorch)",
                          hint="convert it where torch is installed: safetensors.torch.save_file("
                               "torch.load(PATH, weights_only=True), 'w.safetensors')")
    raise ExportError(f"{path}: expected a .safetensors state_dict")


@dataclass
class Imported:
    path: Path
    n_params: int
    n_state: int
    bn_eps: float


def import_weights(net, weights: Path, source: str, out: Path, model: str | None = None) -> Imported:
    """`lmc import`: read `weights`, map them onto `net`, write an lmc checkpoint to `out`.
    `model`: the library's model name (default: the spec's name), which sets the library's BN ε."""
    lib = library(source)
    out = Path(out)
    if out.suffix != ".npz":
        raise ExportError(f"-o {out}: an lmc checkpoint is a .npz file")
    name = model or net.spec.name.replace("-", "_").lower()
    if model is not None and not re.fullmatch(r"[a-z0-9_]+", model):
        raise ExportError(f"--model {model!r}: expected a {lib.name} model name (e.g. mobilenet_v3_large)")
    bn_eps = lib.bn_eps.get(name, TORCH_BN_EPS)
    sd = read_state_dict(Path(weights))
    params, state = map_state_dict(sd, net, bn_eps, source)
    meta = {"step": 0, "epoch": 0, "batch": 0, "imported_from": str(weights), "source": source, "model": name,
            "bn_eps": bn_eps}
    save_checkpoint(out, net, [], params, [], state, meta)
    return Imported(out, len(params), len(state), bn_eps)
