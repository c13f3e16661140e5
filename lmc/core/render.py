"""The Jinja environment (StrictUndefined) over templates/, and the one helper that turns a
primitive + its types into rendered functions with stable, signature-derived symbols."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from lmc.core.errors import TemplateError
from lmc.core.types import TensorType

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


@lru_cache(maxsize=1)
def env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)


def sig(kind: str, ctx: dict) -> str:
    """Symbol suffix: a short hash of the whole render context (same context → same symbol)."""
    text = kind + repr(sorted((k, repr(v)) for k, v in ctx.items()))
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def render_template(path: str, ctx: dict, what: str) -> str:
    try:
        return env().get_template(path).render(**ctx)
    except jinja2.TemplateError as e:
        raise TemplateError(f"template {path} failed to render for {what}: {e}") from None


@dataclass(frozen=True)
class Rendered:
    fwd: str
    bwd: str
    eval: str | None
    text: str
    saved: tuple[TensorType, ...]
    stats: tuple[TensorType, ...]


def render_prim(prim, ins: list[TensorType], ps: list[TensorType], out: TensorType,
                extra: dict | None = None) -> Rendered:
    """Render one primitive for concrete types.  Context: each input/param name → its MLIR
    type, `y` → output type, `mask` → i1 tensor of y's shape, the prim's attrs and context(),
    then `extra` (the lowering's precision choice: bf16)."""
    ctx: dict = {}
    for n, t in zip(prim.inputs, ins):
        ctx[n] = t.mlir
    for n, t in zip(prim.params, ps):
        ctx[n] = t.mlir
    ctx["y"] = out.mlir
    ctx["mask"] = TensorType(out.dims, "i1").mlir
    ctx.update(prim.attrs)
    ctx["hbwc"] = prim.layout == "hbwc"      # the 4-D types are [H, B, W, C] (lmc/graph/layout.py)
    if prim.mixes_layouts:
        ctx["hbwc_out"] = prim.out_layout == "hbwc"     # the output's (and dy's) layout
    ctx.update(prim.context(ins, ps, out))
    ctx.update(extra or {})
    s = sig(prim.name, ctx)
    ctx.update(fwd=f"{prim.name}_fwd_{s}", bwd=f"{prim.name}_bwd_{s}", eval=f"{prim.name}_eval_{s}")
    text = render_template(prim.template(ctx), ctx, f"primitive {prim.name}")
    saved = tuple(prim.saved(ins, ps, out))
    stats = tuple(prim.stats(ins, ps, out))
    return Rendered(ctx["fwd"], ctx["bwd"], ctx["eval"] if prim.has_eval else None, text, saved, stats)
