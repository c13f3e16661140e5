"""`lmc predict`: a trained net applied to the user's own inputs through its compiled @forward.

Input: a TypedNet (the run's spec), a checkpoint, and inputs — image files (PNG/JPEG/… through
Pillow, any size and mode), folders of them, `.npy`/`.npz` arrays (taken as the net's input
exactly as they are: [N, …] of the spec's per-example shape, or one example), or text prompts
for a language model.  Images get exactly the validation split's preprocessing, which the
dataset kind owns (`Kind.read_image`: channel conversion, resize, x/255 or the ImageNet
mean/std, train.test_crop_ratio's resize and centre crop).  The weights are those the run's own
eval scored (`eval_region`: EMA under use_ema, the SWA mean at the end of a SWA run).
Output, per family (the labels the eval scores):
- classes: `top` [{class, name, prob}] and the logits per input;
- masks (segmentation): the class map per input, written as a palette PNG and a colour overlay;
- boxes (detection): the eval's decode + NMS (metrics.detections), as COCO results JSON and
  drawn on the image;
- float targets (denoisers, dense regressors): the output image;
- a language model: the prompt's continuation (lmc.evaluate.sample)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lmc.compile import compile_module, resolve_backend
from lmc.core.errors import EvalError
from lmc.data.kinds import Kind, all_datasets
from lmc.evaluate.checkpoint import _train_abi, _weights
from lmc.evaluate.metrics import detections
from lmc.evaluate.sample import sample
from lmc.losses import BOXES, CLASS, FLOAT, MASK, MULTI_HOT
from lmc.lower.lowering import lower
from lmc.lower.options import LowerOptions
from lmc.run.rundir import read_run_info, run_of_spec
from lmc.run.runtime import Module
from lmc.spec.config import dataset_labels

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
ARRAY_SUFFIXES = (".npy", ".npz")
SCORE_SHOWN = 0.3          # boxes drawn and listed: score at least this (the eval's picture's cut)


def family(net, loss=None) -> str:
    """What the net predicts: lm, classes, masks, boxes, float or multi-hot (the eval's labels)."""
    first = net.spec.layers[0].layer
    if first.kind == "token_position_embed" and (first.ids_input or first.gather) and \
            net.spec.layers[-1].layer.kind == "lm_head":
        return "lm"
    fmt = dataset_labels(net.spec.dataset)
    if fmt == FLOAT and loss is not None and loss.label_format == MULTI_HOT:
        fmt = MULTI_HOT
    return {CLASS: "classes", MASK: "masks", BOXES: "boxes", FLOAT: "float", MULTI_HOT: "multi-hot"}.get(fmt, "classes")


@dataclass
class Predictor:
    """A net's compiled @forward with a checkpoint's weights on the device."""
    net: object
    init: Path
    module: Module
    params: list
    state: list
    region: str
    loss: object                      # the recipe's loss (detection decodes with it), or None
    family: str
    names: list | None = None         # class names in label order
    backend: str = "llvm-cpu"
    chip: str | None = None
    options: LowerOptions = field(default_factory=LowerOptions)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.net.input.dims[1:])

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Outputs for x [N, *input]: batches of the module's static size, the tail zero-padded
        and its padding rows dropped (as the eval's batches)."""
        x = np.ascontiguousarray(x, np.float32)
        if tuple(x.shape[1:]) != self.input_shape:
            raise EvalError(f"the inputs have shape {list(x.shape[1:])} per example; the net takes "
                            f"{list(self.input_shape)}")
        b, out = self.net.batch, []
        for i in range(0, len(x), b):
            xb = x[i:i + b]
            n = len(xb)
            if n < b:
                xb = np.concatenate([xb, np.zeros((b - n,) + xb.shape[1:], np.float32)])
            out.append(np.asarray(self.module.forward(*self.params, *self.state, xb))[:n].copy())   # off the device buffer
        return np.concatenate(out) if out else np.zeros((0,), np.float32)


def load_predictor(net, init: Path, backend: str | None = None, chip: str | None = None,
                   options: LowerOptions = LowerOptions(), labels: Path | None = None) -> Predictor:
    """Compile (cached: the @forward module `lmc train` compiled) and upload."""
    w = _weights(net, Path(init), "auto", 0)
    if net.state and w.got.state is None:
        raise EvalError(f"{init} has no BN running statistics, which the forward needs for this net")
    b = resolve_backend(backend)
    a = _train_abi(net)
    c = compile_module(lower(net, "forward", backend=b, options=options), None, b, chip, options=options)
    mod = Module(c.path, b)
    params = w.mean if w.region == "swag" else w.params     # SWAG: its mean (one forward, not samples)
    fam = family(net, a.loss if a is not None else None)
    return Predictor(net, Path(init), mod, [mod.upload(p) for p in params],
                     [mod.upload(s) for s in (w.got.state or [])], "swa" if w.region == "swag" else w.region,
                     a.loss if a is not None else None, fam, class_names(net, init, labels), b, chip, options)


def class_names(net, init, labels: Path | None) -> list[str] | None:
    """--labels FILE (one name a line), else what the dataset kind knows (folder names, digits)."""
    if labels is not None:
        try:
            names = [l.strip() for l in Path(labels).read_text(encoding="utf-8").splitlines() if l.strip()]
        except OSError as e:
            raise EvalError(f"--labels {labels}: cannot read it ({e.strerror})") from None
        k = net.num_classes
        if k is not None and len(names) != k:
            raise EvalError(f"--labels {labels}: {len(names)} names for the net's {k} classes")
        return names
    kind = net.spec.dataset.value if net.spec.dataset is not None else None
    if kind not in all_datasets():
        return None
    path = net.spec.dataset_path
    run = run_of_spec(net.spec.file)
    info = read_run_info(run) if run is not None else None
    if info is not None and info.get("dataset", {}).get("path"):
        path = info["dataset"]["path"]
    return all_datasets()[kind].class_names(Path(path) if path else Path("data") / kind)


# ------------------------------------------------------------------------------------ inputs

@dataclass
class Inputs:
    names: list                # a file (or file[i] for rows of an array), per example
    x: np.ndarray              # [N, *input], preprocessed
    images: list               # per example: the file's image (for overlays), or None


def read_inputs(pred: Predictor, items) -> Inputs:
    """Files, folders (their image files, sorted) and arrays → the net's inputs."""
    kind = pred.net.spec.dataset.value if pred.net.spec.dataset is not None else None
    reader = all_datasets()[kind] if kind in all_datasets() else Kind
    crop = pred.net.spec.train.test_crop_ratio if pred.net.spec.train is not None else 0.0
    names, xs, images = [], [], []
    for item in items:
        p = Path(item)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES + ARRAY_SUFFIXES)
            if not files:
                raise EvalError(f"{p}: no image or .npy/.npz files in it")
        elif p.is_file():
            files = [p]
        else:
            raise EvalError(f"no such input file or folder: {p}")
        for f in files:
            if f.suffix.lower() in ARRAY_SUFFIXES:
                a = _read_array(f, pred.input_shape)
                names += [f"{f}[{i}]" for i in range(len(a))] if len(a) > 1 else [str(f)]
                xs.append(a)
                images += [None] * len(a)
            else:
                xs.append(reader.read_image(f, pred.input_shape, crop)[None])
                names.append(str(f))
                images.append(f)
    return Inputs(names, np.concatenate(xs) if xs else np.zeros((0,) + pred.input_shape, np.float32), images)


def _read_array(f: Path, shape: tuple) -> np.ndarray:
    """A .npy, or a .npz's only array (or its `x`): [N, *shape] or one example of `shape`."""
    try:
        if f.suffix.lower() == ".npz":
            with np.load(f, allow_pickle=False) as z:
                keys = z.files
                key = "x" if "x" in keys else keys[0] if len(keys) == 1 else None
                if key is None:
                    raise EvalError(f"{f}: {len(keys)} arrays ({', '.join(keys[:5])}); name the input `x`")
                a = z[key]
        else:
            a = np.load(f, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise EvalError(f"{f}: not a readable array file ({e})") from None
    if tuple(a.shape) == tuple(shape):
        a = a[None]
    if tuple(a.shape[1:]) != tuple(shape) or not np.issubdtype(a.dtype, np.number):
        raise EvalError(f"{f}: array of shape {list(a.shape)}; the net takes [N, {', '.join(map(str, shape))}] "
                        f"(taken as it is, no preprocessing)")
    return a.astype(np.float32)


# ------------------------------------------------------------------------------------ outputs

def _softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64) - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def classify(pred: Predictor, inputs: Inputs, top_k: int = 5) -> list[dict]:
    logits = pred.forward(inputs.x).reshape(len(inputs.x), -1)
    probs = _softmax(logits)
    out = []
    for name, z, p in zip(inputs.names, logits, probs):
        order = np.argsort(-p, kind="stable")[:max(1, min(top_k, len(p)))]
        top = [{"class": int(c), "name": pred.names[c] if pred.names and c < len(pred.names) else str(int(c)),
                "prob": float(p[c])} for c in order]
        out.append({"file": name, "top": top, "logits": [float(v) for v in z]})
    return out


PALETTE = np.array([[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
                    [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [250, 190, 212],
                    [0, 128, 128], [220, 190, 255], [170, 110, 40], [255, 250, 200], [128, 0, 0],
                    [170, 255, 195], [128, 128, 0], [255, 215, 180], [0, 0, 128]], np.uint8)


def _stem(name: str) -> str:
    return Path(name.replace("[", "-").replace("]", "")).stem


def _grey(x: np.ndarray) -> np.ndarray:
    """A preprocessed input [C, H, W] → uint8 [H, W, 3] for drawing (min–max scaled)."""
    a = x.mean(axis=0) if x.shape[0] != 3 else x.transpose(1, 2, 0)
    lo, hi = float(a.min()), float(a.max())
    a = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
    a = (255 * a).astype(np.uint8)
    return np.repeat(a[..., None], 3, axis=2) if a.ndim == 2 else a


def segment(pred: Predictor, inputs: Inputs, out_dir: Path) -> list[dict]:
    from PIL import Image
    logits = pred.forward(inputs.x)
    masks = logits.argmax(axis=1).astype(np.uint8)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = []
    for name, x, m in zip(inputs.names, inputs.x, masks):
        stem = _stem(name)
        im = Image.fromarray(m, mode="P")
        im.putpalette(PALETTE.ravel().tolist())
        im.save(out_dir / f"{stem}.mask.png")
        base = _grey(x).astype(np.float32)
        colour = PALETTE[m % len(PALETTE)].astype(np.float32)
        over = np.where(m[..., None] > 0, 0.45 * base + 0.55 * colour, base).astype(np.uint8)
        Image.fromarray(over).resize((over.shape[1] * 8, over.shape[0] * 8), Image.NEAREST) \
            .save(out_dir / f"{stem}.overlay.png")
        counts = np.bincount(m.ravel(), minlength=logits.shape[1])
        res.append({"file": name, "mask": str(out_dir / f"{stem}.mask.png"),
                    "overlay": str(out_dir / f"{stem}.overlay.png"),
                    "pixels": {(pred.names[c] if pred.names and c < len(pred.names) else str(c)): int(n)
                               for c, n in enumerate(counts) if n}})
    return res


def detect(pred: Predictor, inputs: Inputs, out_dir: Path) -> list[dict]:
    from PIL import Image, ImageDraw
    if pred.loss is None or not hasattr(pred.loss, "decode"):
        raise EvalError("decoding boxes needs the recipe's detection loss: the spec has no train: recipe")
    logits = pred.forward(inputs.x)
    dets = detections(pred.loss, logits)
    out_dir.mkdir(parents=True, exist_ok=True)
    h, w = pred.input_shape[-2:]
    res, coco = [], []
    for i, (name, x, (boxes, scores, classes)) in enumerate(zip(inputs.names, inputs.x, dets)):
        scale = 8 if max(h, w) < 256 else 1
        im = Image.fromarray(_grey(x)).resize((w * scale, h * scale), Image.NEAREST)
        draw = ImageDraw.Draw(im)
        found = []
        for b, s, c in sorted(zip(boxes, scores, classes), key=lambda t: -t[1]):
            x0, y0, x1, y1 = (float(v) for v in b)
            coco.append({"image_id": i, "file_name": name, "category_id": int(c),
                         "bbox": [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h], "score": float(s)})
            if s < SCORE_SHOWN:
                continue
            label = pred.names[int(c)] if pred.names and int(c) < len(pred.names) else str(int(c))
            found.append({"class": int(c), "name": label, "score": float(s), "box": [x0, y0, x1, y1]})
            col = tuple(int(v) for v in PALETTE[1 + int(c) % (len(PALETTE) - 1)])
            draw.rectangle([x0 * w * scale, y0 * h * scale, x1 * w * scale, y1 * h * scale], outline=col, width=2)
            draw.text((x0 * w * scale + 2, y0 * h * scale + 1), f"{label} {s:.2f}", fill=col)
        im.save(out_dir / f"{_stem(name)}.boxes.png")
        res.append({"file": name, "boxes": found, "drawn": str(out_dir / f"{_stem(name)}.boxes.png")})
    (out_dir / "detections.json").write_text(json.dumps(coco))
    return res


def regress(pred: Predictor, inputs: Inputs, out_dir: Path) -> list[dict]:
    from PIL import Image
    y = pred.forward(inputs.x)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = []
    for name, o in zip(inputs.names, y):
        entry = {"file": name, "output_shape": list(o.shape)}
        if o.ndim == 3 and o.shape[0] in (1, 3):
            a = np.clip(o, 0.0, 1.0)
            a = (255 * (a[0] if o.shape[0] == 1 else a.transpose(1, 2, 0)) + 0.5).astype(np.uint8)
            Image.fromarray(a).save(out_dir / f"{_stem(name)}.output.png")
            entry["output"] = str(out_dir / f"{_stem(name)}.output.png")
        np.save(out_dir / f"{_stem(name)}.output.npy", o)
        entry["array"] = str(out_dir / f"{_stem(name)}.output.npy")
        res.append(entry)
    return res


def predict(pred: Predictor, items, out_dir: Path | None = None, top_k: int = 5, tokens: int = 200,
            temperature: float = 0.0, seed: int = 0) -> list[dict]:
    """One result per input, by the net's family (module docstring); files go to out_dir."""
    if pred.family == "lm":
        return [{"prompt": p, "text": sample(pred.net, pred.init, p, tokens, temperature, 0, seed, pred.backend,
                                             pred.chip, pred.options)} for p in items]
    inputs = read_inputs(pred, items)
    if pred.family in ("classes", "multi-hot"):
        return classify(pred, inputs, top_k)
    out_dir = Path(out_dir) if out_dir is not None else Path("predictions")
    if pred.family == "masks":
        return segment(pred, inputs, out_dir)
    if pred.family == "boxes":
        return detect(pred, inputs, out_dir)
    return regress(pred, inputs, out_dir)
