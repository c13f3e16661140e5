"""Stage 3, check: every rule that refuses a spec or its recipe, run once, before any data is
read or anything is compiled.

Input: a TypedNet (lmc/graph: the spec with every type inferred).  Output: a `Report` of every
problem, each located `file:line:col`:
- `errors`: the spec or its recipe is invalid in itself (the recipe's rules between fields) —
  every command refuses it;
- `fit`: the recipe does not fit the inferred net (the loss against the output, class counts,
  train_res, an optimizer with nothing to act on) — `lmc validate` and every command that needs
  the training functions refuse it; `lmc info` and the forward alone still work, to show the
  shapes the error is about;
- `layers`, `train_step`, `training`: the spec is valid, but lmc cannot lower a layer yet, or the
  training functions (the loss, an optimizer), or the loop cannot run a recipe switch (or run it
  on data-parallel ranks) — render/compile/train refuse what they need, `lmc validate` warns.

The rules are contributed by the modules that own the feature: the recipe's cross-field rules and
the loss's and optimizers' own (recipe.py, through their registry entries: Loss.rules,
Loss.focal_rules, optim.fields_read), the recipe against the net (net.py: Loss.check_output,
Loss.check_classes, train_res), what the lowering cannot build (lowering.py: Prim templates, the
loss and optimizer registries), what the loop cannot run (training.py).  `check(net, world)` is
cached on the net, so a command that checks first and then lowers checks once."""
from __future__ import annotations

from dataclasses import dataclass, field

from lmc.check import lowering, net as net_rules, recipe, training
from lmc.core.errors import LmcError, MultiError, SpecError
from lmc.graph.infer import infer
from lmc.spec.netspec import load_spec

TRAIN_FUNCTIONS = ("all", "train_step", "input_grad")


@dataclass
class Report:
    errors: list[LmcError] = field(default_factory=list)
    fit: list[LmcError] = field(default_factory=list)
    layers: list[LmcError] = field(default_factory=list)
    train_step: list[LmcError] = field(default_factory=list)
    training: list[LmcError] = field(default_factory=list)
    no_recipe: list[LmcError] = field(default_factory=list)   # a net-only spec: valid, nothing to train with

    def refusals(self) -> list[LmcError]:
        """What `lmc train` refuses in a valid spec (and `lmc validate` warns of)."""
        return self.layers + self.train_step + self.training

    def raise_errors(self) -> None:
        """What every command refuses: an invalid spec."""
        _raise(self.errors)

    def raise_invalid(self) -> None:
        """What `lmc validate` refuses: an invalid spec, or a recipe that does not fit the net."""
        _raise(self.errors + self.fit)

    def raise_for(self, functions: str) -> None:
        """What `lower(net, functions)` refuses: an invalid spec, an unlowered layer, and for the
        training functions a recipe that does not fit, the loss and optimizers (the first problem)."""
        train = functions in TRAIN_FUNCTIONS
        errs = self.errors + (self.fit if train else []) + self.layers + (self.train_step if train else [])
        if errs:
            raise errs[0]

    def raise_all(self) -> None:
        """What `lmc train` refuses: every problem, all at once."""
        _raise(self.errors + self.fit + self.refusals() + self.no_recipe)


def _raise(errs: list[LmcError]) -> None:
    if errs:
        raise errs[0] if len(errs) == 1 else MultiError(errs)


def check(net, world: int = 1) -> Report:
    """Every rule, every problem (cached on `net` per rank count)."""
    cache = net.__dict__.setdefault("_checks", {})
    if world not in cache:
        cache[world] = _check(net, world)
    return cache[world]


def _check(net, world: int) -> Report:
    spec, cfg = net.spec, net.spec.train
    r = Report(layers=lowering.layer_refusals(net))
    if cfg is None:
        r.no_recipe = [training.no_recipe(spec)]
        return r
    r.errors = recipe.problems(cfg, lambda name: spec.loc("train", name), spec.dataset)
    if r.errors:            # the rules below assume a recipe whose fields agree
        return r
    try:
        net_rules.check_recipe_fits(net)
    except SpecError as e:
        r.fit.append(e)
        return r
    r.fit, r.train_step = lowering.train_step_problems(net)
    r.training = [e.located(spec.loc("train")) for e in training.recipe_refusals(cfg)]
    if world > 1 and not r.train_step and not r.fit:
        r.training += training.dist_refusals(net, world)
    return r


def load_net(path, sets=None, *, text: str | None = None, batch: int | None = None, world: int = 1):
    """The first three stages in one call: load the spec (with `sets` overrides; `text` instead
    of reading `path`), infer every type, check every rule — an invalid spec is refused with all
    its problems; what is valid but not lowered or trainable yet stays in `check(net)`."""
    net = infer(load_spec(path, sets, text=text), batch)
    check(net, world).raise_errors()
    return net
