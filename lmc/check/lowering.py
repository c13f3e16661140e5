"""What a valid spec asks for that lmc cannot lower yet, and the recipe's fit to what the
lowering can build: layers whose primitives have no template, a loss or optimizer kind that is
declared but not implemented (their registries say so), loss fields the loss refuses, train.bf16
on a net with no bf16 form, an optimizer with nothing to act on, head_lr_mult without a dense
head."""
from __future__ import annotations

from lmc.core.errors import NotImplementedKind, SpecError
from lmc.graph.infer import bf16_operands, head_params
from lmc.losses import make_loss
from lmc.optim import assign, selection
from lmc.spec.config import effective_loss


def layer_refusals(net) -> list[NotImplementedKind]:
    """Layers with no lowering yet (`lmc info` counts them; render, compile and train refuse)."""
    return [NotImplementedKind(f"not implemented yet: {l.kind} (layer {l.index}): `lmc info` counts it, but it is "
                               f"not lowered to StableHLO, so lmc render, compile and train refuse it", l.loc,
                               hint="`lmc layers` lists the kinds that lower")
            for l in net.layers if not l.lowered]


def train_step_problems(net) -> tuple[list, list]:
    """(errors, refusals) of the training functions: what the loss and optimizer registries
    refuse (refusals: not implemented yet), what does not fit the net (errors)."""
    cfg, spec = net.spec.train, net.spec
    errors, refusals = [], []
    try:
        loss = make_loss(effective_loss(cfg, spec.dataset), cfg)
    except NotImplementedKind as e:
        refusals.append(e.located(spec.loc("train", "loss_kind")))
        loss = None
    refused = loss.refused(cfg) if loss is not None else []
    if refused:
        refusals.append(NotImplementedKind(f"not implemented yet: {', '.join('train.' + f for f in refused)} "
                                           f"(with loss {loss.name})", spec.loc("train", refused[0]),
                                           hint="remove the field from the recipe (or set it to its default)"))
    if cfg.bf16 and not any(bf16_operands(n, cfg.bf16_conv) for n in net.graph.nodes):
        errors.append(SpecError("train.bf16 rounds the operands of the primitives with a bf16 form (dense, linear, "
                                "matmul, attention; standard convs with bf16_conv), and this net has none"
                                + ("" if cfg.bf16_conv else " (its convs would need bf16_conv: true)"),
                                spec.loc("train", "bf16")))
    try:
        assign(net)
    except NotImplementedKind as e:
        refusals.append(e.located(spec.loc("train", selection(cfg)[1])))
    except SpecError as e:              # an optimizer with no tensor to act on: the recipe does not fit
        errors.append(e.located(spec.loc("train", selection(cfg)[1])))
    if cfg.head_lr_mult != 1.0:
        try:
            head_params(net)
        except SpecError as e:
            errors.append(e)
    return errors, refusals
