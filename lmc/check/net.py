"""The recipe against the inferred net: the loss's logits layout against the output, class
counts of the loss's weights and of the head prior, the training resolution (train_res) and the
eval crop (test_crop_ratio) against the net's input and head."""
from __future__ import annotations

from lmc.core.errors import SpecError
from lmc.core.types import TensorType
from lmc.graph.infer import image_classifier_problem, train_net
from lmc.losses import all_losses, loss_class, loss_for
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


def check_det_stride(net) -> None:
    """det_stride (the Lean kit's detStride: the detection grid is the image size / det_stride) is
    checked against the grid head the layers build: it must divide the input and give the head's
    gH × gW.  It is refused where there is no single grid to check it against: a recipe whose loss
    has no grid head (Loss.grid_head; the kit consults det_stride on the detection path only) and
    the multi-scale head, whose fpn_scales give each scale its own grid."""
    s = net.spec
    if s.det_stride is None:
        return
    where = s.loc("det_stride")
    if s.det_stride < 1:
        raise SpecError(f"det_stride must be at least 1, got {s.det_stride}", where)
    kind = effective_loss(s.train, s.dataset) if s.train is not None else None
    loss = kind.kind if kind is not None else None
    if loss is None or not loss_class(loss).grid_head:
        grids = ", ".join(k for k, c in all_losses().items() if c.grid_head)
        raise SpecError(f"det_stride is the stride of a detection grid head (the {grids} loss); this spec's {'loss is ' + loss if loss else 'net has no recipe'}, "
                        "so nothing would read it", where, hint="drop det_stride")
    if s.train.fpn_scales:
        raise SpecError("det_stride: the multi-scale head's grids are train.fpn_scales' (one per scale), "
                        "not one stride", where, hint="drop det_stride")
    out = net.output.type.dims
    if len(s.input) != 3 or len(out) != 4:
        return                 # the loss's own output check names the layout it needs
    h, w = s.input[1], s.input[2]
    if h % s.det_stride or w % s.det_stride or (h // s.det_stride, w // s.det_stride) != tuple(out[2:]):
        raise SpecError(f"det_stride {s.det_stride} on a {h}×{w} input asks for a "
                        f"{h / s.det_stride:g}×{w / s.det_stride:g} grid, but the net's head is "
                        f"{out[2]}×{out[3]} (stride {h / out[2]:g})", where,
                        hint=f"det_stride: {h // out[2]}, or change the layers' strides"
                        if h % out[2] == 0 and w % out[3] == 0 and h // out[2] == w // out[3] else None)


def check_recipe_fits(net) -> None:
    """The recipe against the inferred net (check_against_net): the loss's label layout
    against the output's rank, the class count of weights and priors, train_res and
    test_crop_ratio against the net (a loss of logits [B, NC] on a rank-4 output would render a
    module iree-compile rejects).  The check stage runs it once per net, for every command."""
    s = net.spec
    check_det_stride(net)
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
