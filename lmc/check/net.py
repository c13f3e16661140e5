"""The recipe against the inferred net: the loss's logits layout against the output, class
counts of the loss's weights and of the head prior, the training resolution (train_res) and the
eval crop (test_crop_ratio) against the net's input and head."""
from __future__ import annotations

from lmc.core.errors import SpecError
from lmc.core.types import TensorType
from lmc.graph.infer import image_classifier_problem, train_net
from lmc.losses import loss_for
from lmc.spec.config import TRAIN_FIELDS, effective_loss


def check_against_net(cfg, num_classes: int | None, loc_of, output_dims: tuple | None = None,
                      dataset=None) -> None:
    """Rules that need the net: the loss's parameters against the class count
    (Loss.check_classes), the head prior's length.  With the output's dims the loss's logits
    layout is checked first (Loss.check_output: e.g. a per-pixel loss needs [B, NC, H, W], where
    NC is then the class count; the one definition of that rule, lower.abi asks it through here)."""
    loss = loss_for(effective_loss(cfg, dataset), cfg)
    if output_dims is not None:
        why = loss.check_output(TensorType(tuple(output_dims)))
        if why:
            by = "use_yolov1" if cfg.use_yolov1 and cfg.loss_kind == TRAIN_FIELDS["loss_kind"][1] else None
            raise SpecError(f"{by}: {why}" if by else why, loc_of(by or "loss_kind"), hint=loss.rank_hint)
        if loss.is_seg:          # per-pixel logits [B, NC, H, W] carry the class count in dim 1
            num_classes = output_dims[1]
    why = loss.check_classes(num_classes)
    if why:
        raise SpecError(why, loc_of("loss_kind"))
    if cfg.head_prior_bias and num_classes and len(cfg.head_prior_bias) != num_classes:
        raise SpecError(f"head_prior_bias has {len(cfg.head_prior_bias)} values but the net has "
                        f"{num_classes} classes", loc_of("head_prior_bias"))


def check_recipe_fits(net) -> None:
    """The recipe against the inferred net (check_against_net): the loss's label layout
    against the output's rank, the class count of weights and priors, train_res and
    test_crop_ratio against the net (a loss of logits [B, NC] on a rank-4 output would render a
    module iree-compile rejects).  The check stage runs it once per net, for every command."""
    s = net.spec
    if s.train is None:
        return
    check_against_net(s.train, net.num_classes, lambda f: s.loc("train", f),
                      output_dims=net.output.type.dims, dataset=s.dataset)
    train_net(net)             # train_res: the net at the training resolution holds the same weights
    if s.train.test_crop_ratio:
        why = image_classifier_problem(net)
        if why:
            raise SpecError(f"train.test_crop_ratio resizes and crops the validation images, not their labels: "
                            f"{why}", s.loc("train", "test_crop_ratio"))
