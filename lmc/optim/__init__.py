"""The optimizer registry: one module per optimizer, each an `Optimizer` subclass owning its
state slots, the runtime hyperparameters it reads (entries of the hp vector), which tensors it
applies to (the rest go to its `fallback`), how each slot starts, and a float64 reference of its
update written against `xp` (NumPy or jax.numpy).  Its template `templates/optim/<name>.mlir.j2`
holds one function per tensor type:

    @<name>_<sig>(w, g, slots..., lr, wd, hp...) -> (w', slots'...)

`lr` is the tensor's learning rate (the head's under head_lr_mult), `wd` the weight decay, and
the context's `decay` says whether this tensor takes it (wd_exclude_norm_bias).  `select` is the
one place that reads the recipe's `optimizer` and the seed's older booleans.  Modules are
discovered automatically."""
from __future__ import annotations

from typing import ClassVar

from lmc.core.errors import NotImplementedKind, SpecError
from lmc.core.registry import discover, registrar

OPTIMIZERS: dict[str, type] = {}
# hyperparameters every optimizer may read under these names (not namespaced)
GLOBAL_HP = ("t",)


register = registrar(OPTIMIZERS, "optimizer")


class Optimizer:
    name: ClassVar[str]
    # the tensors' state slots, in ABI order (checkpoint keys opt.<slot>.<param>)
    slots: ClassVar[tuple[str, ...]] = ()
    # runtime hyperparameters after (lr, wd), in template argument order; "t" is the global
    # 1-based step, every other name is this optimizer's own (hp vector entry "<name>.<hp>")
    hp: ClassVar[tuple[str, ...]] = ()
    # the optimizer for the tensors this one does not apply to (Muon, Shampoo: AdamW)
    fallback: ClassVar[str | None] = None
    # what the tensors it applies to are, for the error when a net has none
    applies_to: ClassVar[str] = "every parameter"
    # multiplies the oracle tests' f32 tolerance on this optimizer's updated weights: a step that
    # is ill-conditioned in g amplifies the f32 rounding of the gradient (Shampoo's inverse 4th
    # roots of an εI-regularised, rank-deficient L and R); 1 for everything linear or normalized
    oracle_tolerance: ClassVar[float] = 1.0
    # the whole-step oracle's recipes for it: [(train fields, [(variant, runtime overrides)])];
    # every variant must lower to the same module text (hyperparameters are runtime values)
    examples: ClassVar[list] = []
    # the oracle's grid net for this optimizer's examples, (layers, input dims), where the default
    # small MLP has no tensor it applies to (Muon, Shampoo: dense weights ≥ 16); the test appends
    # its dense head.  None: the default grid net
    oracle_net: ClassVar[tuple | None] = None
    # its place in the seed's OptimizerKind (the order `optimizer:`'s choices are listed in);
    # None for an optimizer the seed does not name (listed after, by name)
    seed_index: ClassVar[int | None] = None
    # the `--set` overrides with which it trains specs/digits_mlp.yaml (Adam, 30 epochs) to ≥ 97%
    # validation top-1, per variant (tests/test_train.py runs each): {variant: overrides}
    digits_mlp: ClassVar[dict[str, tuple[str, ...]]] = {}
    # the recipe fields this optimizer adds (core.fields.RecipeField); its hp_values reads them
    recipe_fields: ClassVar[tuple] = ()
    # other names `optimizer:` accepts for exactly this optimizer (Adam's decoupled decay is AdamW)
    aliases: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg):
        self.cfg = cfg

    def applies(self, p, net) -> bool:
        return True

    def hp_values(self, cfg) -> dict[str, float]:
        """Values of this optimizer's own hyperparameters (not t) for the recipe `cfg` (runtime
        values: read from the recipe of the step, not the one the module was lowered for)."""
        return {}

    def context(self, p) -> dict:
        """Template variables for one tensor (numbers computed here)."""
        return {}

    def slot_init(self, slot: str) -> float:
        """Every element of a fresh slot starts at this value."""
        return 0.0

    @staticmethod
    def error_gain(slots: dict, **hp):
        """For the oracle's tolerance: the elementwise factor by which the step amplifies an
        error in the gradient's scale (Adam: 1/(√v̂ + ε), from the new slots); None where the
        step is linear in g with gain lr (SGD)."""
        return None

    @classmethod
    def step_gain(cls, old: dict, new: dict, noise: float = 0.0, w=None, wd: float = 0.0, decay: bool = False, **hp):
        """`error_gain` given the step's slots before (`old`) and after (`new`): an update that is
        not a smooth function of the new slots alone (Lion's sign of an interpolation of the old
        momentum and the gradient) needs both; one scaled by a norm of the whole tensor (LAMB's
        trust ratio) also needs the tensor before the step `w`, the weight decay `wd` and whether
        the tensor takes decay.  `noise`: the net-wide first-moment size below which a value is
        f32 rounding noise (the oracle's floor).  By default, error_gain(new)."""
        return cls.error_gain(new, **hp)

    @staticmethod
    def reference(xp, w, g, slots: dict, lr, wd, decay: bool, **hp):
        """(w', slots') in float64: the update this optimizer's template must compute."""
        raise NotImplementedError


def all_optimizers() -> dict[str, type]:
    _load()
    return dict(OPTIMIZERS)


def _load():
    discover(__name__, __path__)


def optimizer_names() -> list[str]:
    """Every registered optimizer, in the seed's order, then the others by name: the values
    `train.optimizer` accepts (spec.config.OptimizerKind is made from this)."""
    opts = all_optimizers()
    return sorted(opts, key=lambda n: (opts[n].seed_index is None, opts[n].seed_index or 0, n))


def optimizer_aliases() -> dict[str, str]:
    """{alias: optimizer name}: the other names the optimizers answer to (`adamw` → `adam`)."""
    return {a: n for n, cls in all_optimizers().items() for a in cls.aliases}


def select(cfg) -> str:
    """The optimizer the recipe asks for — the one place this is decided.  The seed's IREE-path
    booleans first, as that path reads them: use_shampoo, then use_muon (each with AdamW for the
    tensors it does not act on, so `optimizer: adam` or `use_adam` alongside is consistent; any
    other `optimizer` is a conflict, refused by the check stage, as is muon with shampoo);
    then `optimizer` when it is not the default sgd; then use_adam; else sgd."""
    return selection(cfg)[0]


def selection(cfg) -> tuple[str, str]:
    """(optimizer, the recipe field that selected it) — select's rule, and where to point an
    error about the choice."""
    if cfg.use_shampoo:
        return "shampoo", "use_shampoo"
    if cfg.use_muon:
        return "muon", "use_muon"
    if cfg.optimizer.value != "sgd":
        return cfg.optimizer.value, "optimizer"
    return ("adam", "use_adam") if cfg.use_adam else ("sgd", "optimizer")


class _Reads:
    """A stand-in recipe that records which fields hp_values reads (the one definition of what
    an optimizer takes from the recipe is its hp_values)."""

    def __init__(self, cfg):
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "seen", set())

    def __getattr__(self, name):
        self.seen.add(name)
        return getattr(self._cfg, name)


def fields_read(name: str, cfg) -> set[str]:
    """The recipe fields optimizer `name` (and its fallback) read."""
    _load()
    seen: set[str] = set()
    while name:
        cls = OPTIMIZERS[name]
        spy = _Reads(cfg)
        cls(cfg).hp_values(spy)
        seen |= spy.seen
        name = cls.fallback
    return seen


class _AnyRecipe:
    """A recipe whose every field reads 0 (what optimizer_fields spies on)."""

    def __getattr__(self, name):
        return 0.0


def optimizer_fields() -> tuple[str, ...]:
    """The recipe fields some optimizer reads (its hp_values): set with an optimizer that does
    not read them, they would do nothing, so the check stage refuses them, naming who reads
    them.  Made from the registry: a new optimizer's own field joins by being read."""
    return tuple(sorted(set().union(*(fields_read(n, _AnyRecipe()) for n in optimizer_names()))))


def declared_fields() -> list:
    """Every optimizer's own recipe fields, in the registry's order."""
    return [f for n in optimizer_names() for f in OPTIMIZERS[n].recipe_fields]


def make_optimizer(name: str, cfg) -> Optimizer:
    _load()
    if name not in OPTIMIZERS:
        raise NotImplementedKind(f"not implemented yet: optimizer {name}",
                                 hint=f"lowered optimizers: {', '.join(sorted(OPTIMIZERS))}")
    return OPTIMIZERS[name](cfg)


def assign(net) -> dict:
    """param name → the Optimizer that updates it (the selected one, or its fallback for the
    tensors it does not apply to).  One instance per optimizer."""
    cfg = net.spec.train
    main = make_optimizer(select(cfg), cfg)
    fb = make_optimizer(main.fallback, cfg) if main.fallback else None
    out = {}
    for p in net.params:
        out[p.name] = main if main.applies(p, net) else fb
    if main.fallback and not any(o is main for o in out.values()):
        raise SpecError(f"optimizer {main.name} applies to {main.applies_to}, and this net has none "
                        f"(every tensor would fall back to {main.fallback})",
                        hint=f"use optimizer: {main.fallback}, or a net with such tensors")
    return out


def dense_weights(net) -> set[str]:
    """Names of the 2-D weight matrices of dense layers (the matrices Muon and Shampoo act on)."""
    return {n.params[0].name for n in net.graph.nodes
            if n.prim.name == "dense" and n.params}
