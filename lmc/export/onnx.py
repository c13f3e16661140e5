"""`lmc export --format onnx`: an ONNX model of the eval forward, built from the net's graph of
primitives with the `onnx` package (the `export` extra).

Each primitive that can be exported says how, in its own `onnx(b, ins, ps, st)` method
(lmc/prims): given this module's builder `b` and the ONNX names of its inputs, parameters and
running state, it adds the nodes that compute its eval form and returns its output's name.  A
primitive without that method is refused by name (`ExportError`, docs/export.md lists them).

The model takes `input` [batch, …] and returns `logits`, with a dynamic batch.  The net's graph
is built for a fixed batch, so the builder builds it twice (batch 2 and 3): an attribute entry
that differs between the two (a reshape's leading dimension, a broadcast target, a window
count times the batch) is k·batch, and is computed in the graph from the input's shape.
Parameters and BN statistics are initializers under lmc's names; BN is a BatchNormalization
node, dropout and stochastic depth (all ones in eval) are the identity."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmc._version import __version__
from lmc.core.errors import ExportError
from lmc.export.weights import Weights
from lmc.graph.infer import infer
from lmc.prims import Prim
from lmc.run.checkpoint import atomic_write

OPSET = 17
INPUT, OUTPUT = "input", "logits"


def onnx_module():
    try:
        import onnx
    except ImportError:
        raise ExportError("lmc export --format onnx needs the onnx package", hint="pip install 'lmc[export]'") from None
    return onnx


@dataclass(frozen=True)
class Batch:
    """An attribute entry that is k × the batch size."""
    k: int


def exportable(prim) -> bool:
    """Whether a primitive (an instance or its class) has an ONNX form."""
    cls = prim if isinstance(prim, type) else type(prim)
    return cls.onnx is not Prim.onnx


def refused_prims(net) -> dict[str, int]:
    """The primitives of the net that have no ONNX form → the first layer using each."""
    out = {}
    for n in net.graph.nodes:
        if not exportable(n.prim):
            out.setdefault(n.prim.name, n.layer)
    return out


class Builder:
    """What a primitive's `onnx` method builds with: nodes, constants, shapes with a dynamic
    batch.  `ins`/`pt`/`out`: the current node's input, parameter and output types (at batch 2)."""

    def __init__(self, onnx):
        self.onnx = onnx
        self.nodes, self.inits = [], []
        self._n = 0
        self._consts = {}
        self.node = self.twin = None
        self.ins, self.pt, self.out = [], [], None

    def name(self, hint="t") -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        """One ONNX node; returns its (single) output's name."""
        out = self.name(op_type.lower())
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def init(self, name: str, a: np.ndarray) -> str:
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def const(self, a, dtype=np.float32) -> str:
        """A constant tensor (an initializer), shared between equal constants."""
        a = np.asarray(a, dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        if key not in self._consts:
            self._consts[key] = self.init(self.name("const"), a)
        return self._consts[key]

    def ints(self, values) -> str:
        return self.const(list(values), np.int64)

    def sym(self, attr: str):
        """The current node's attribute `attr` with its batch-proportional entries as Batch(k)."""
        a, b = getattr(self.node.prim, attr), getattr(self.twin.prim, attr)
        if isinstance(a, (int, np.integer)):
            a, b = [a], [b]
        out = []
        for x, y in zip(a, b):
            if x == y:
                out.append(int(x))
            elif 2 * (y - x) == x:
                out.append(Batch(int(y - x)))
            else:
                raise ExportError(f"lmc bug: {self.node.prim.name}.{attr} changes with the batch as {x} → {y}, "
                                  f"not in proportion to it")
        return out

    def shape(self, dims) -> str:
        """An int64 shape tensor of `dims` (ints and Batch entries, computed from the input)."""
        if not any(isinstance(d, Batch) for d in dims):
            return self.ints(dims)
        parts = []
        for d in dims:
            if isinstance(d, Batch):
                parts.append(self.batch if d.k == 1 else self.op("Mul", self.batch, self.ints([d.k])))
            else:
                parts.append(self.ints([d]))
        return self.op("Concat", *parts, axis=0)

    def channel(self, p: str, rank: int, axis: int = 1) -> str:
        """A [C] tensor reshaped to broadcast along `axis` of a rank-`rank` tensor."""
        dims = [1] * rank
        dims[axis] = -1
        return self.op("Reshape", p, self.ints(dims[axis:]))


def check_exportable(net, out: Path | None = None, **_) -> None:
    """Refuse a net with a primitive that has no ONNX form (naming them), or a wrong -o."""
    if out is not None and Path(out).suffix != ".onnx":
        raise ExportError(f"-o {out}: an ONNX export is written to a .onnx file")
    onnx_module()
    refused = refused_prims(net)
    if refused:
        kinds = {e.index: e.layer.kind for e in net.spec.layers}
        what = ", ".join(f"{p} (layer {i}, {kinds.get(i, '?')})" for p, i in refused.items())
        raise ExportError(f"{net.spec.name} cannot be exported to ONNX: no ONNX form for the "
                          f"primitive{'s' if len(refused) > 1 else ''} {what}",
                          hint="docs/export.md lists the primitives ONNX export refuses; --format vmfb or "
                               "safetensors export any net")


def build_model(net, w: Weights):
    """The ONNX ModelProto of `net`'s eval forward with the weights `w` (checked)."""
    onnx = onnx_module()
    check_exportable(net)
    n2, n3 = infer(net.spec, 2), infer(net.spec, 3)
    b = Builder(onnx)
    for p, a in zip(net.params, w.params):
        b.init(p.name, np.asarray(a, np.float32))
    for s, a in zip(net.state, w.state):
        b.init(s.name, np.asarray(a, np.float32))
    names = {n2.graph.x.id: INPUT}
    b.batch = b.op("Slice", b.op("Shape", INPUT), b.ints([0]), b.ints([1]))
    masks = {m.value.id for m in n2.graph.masks}
    for node, twin in zip(n2.graph.nodes, n3.graph.nodes):
        if node.prim.name == "mul" and node.inputs[1].id in masks:     # dropout / drop path: ones in eval
            names[node.out.id] = names[node.inputs[0].id]
            continue
        b.node, b.twin = node, twin
        b.ins, b.pt, b.out = [v.type for v in node.inputs], [p.type for p in node.params], node.out.type
        y = node.prim.onnx(b, [names[v.id] for v in node.inputs], [p.name for p in node.params],
                           [s.name for s in node.state])
        names[node.out.id] = y
    out = names[n2.output.id]
    b.nodes.append(onnx.helper.make_node("Identity", [out], [OUTPUT]))
    tp = onnx.TensorProto.FLOAT
    x_dims = ["batch"] + list(net.input.dims[1:])
    y_dims = ["batch"] + list(n2.output.type.dims[1:])
    graph = onnx.helper.make_graph(b.nodes, net.spec.name, [onnx.helper.make_tensor_value_info(INPUT, tp, x_dims)],
                                   [onnx.helper.make_tensor_value_info(OUTPUT, tp, y_dims)], b.inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="lmc", producer_version=__version__)
    model.ir_version = min(model.ir_version, 8)     # readable by onnxruntime ≥ 1.15
    onnx.checker.check_model(model, full_check=True)
    return model


def write_onnx(net, w: Weights, path: Path) -> Path:
    path = Path(path)
    check_exportable(net, path)
    model = build_model(net, w)
    blob = model.SerializeToString()
    if len(blob) >= 2 ** 31:
        raise ExportError(f"{net.spec.name}: the ONNX model would be {len(blob):,} bytes, past protobuf's 2 GiB")
    atomic_write(path, lambda f: f.write(blob))
    return path
