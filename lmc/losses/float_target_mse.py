"""float_target_mse: mean squared error against an f32 target of the net output's own shape
(DDPM noise prediction, autoencoders, denoising), N = the output's element count:
loss = (1/N) Σ (o − y)²;  output gradient 2(o − y)/N.  No classes, so no `correct` count: it is 0 and the
training loop reports the loss (evaluation reports MSE and PSNR)."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import DataError
from lmc.core.types import f32, flt
from lmc.losses import FLOAT, Loss, register


@register("float_target_mse")
class FloatTargetMSE(Loss):
    known_as = ("mse", "l2", "mean_squared_error")
    order = 7
    label_format = FLOAT
    logits_rank = None            # any output: the target has its shape
    counts_correct = False        # a regression: `correct` is 0
    dataset_need = "has float targets and needs float_target_mse"
    # the grid runs it on an image-shaped output (a 1×1 conv head), as a denoiser's
    oracle_net = ([("conv2d", {"ic": 2, "oc": 3, "k_size": 3, "act": "relu"})], (2, 2, 4, 5))
    examples = [({"loss_kind": "float_target_mse"}, [("", {})])]

    def labels(self, out):
        return out

    @staticmethod
    def oracle_head(out, nc):
        if out.rank == 4:
            return [("conv2d", {"ic": out.dims[1], "oc": nc, "k_size": 1, "act": "identity"})]
        return Loss.oracle_head(out, nc)

    def context(self, logits, labels):
        d = logits.dims
        # sum over dim 1 first, then the rest: a product reduced straight to a scalar
        # miscompiles on llvm-cpu (iree.md §5 #8)
        rest = tuple(x for i, x in enumerate(d) if i != 1)
        return {"scale": flt(2.0 / logits.size), "n": flt(float(logits.size)),
                "part": f32(*rest).mlir, "rest_dims": list(range(len(rest)))}

    def fit_labels(self, y, num_classes, cfg):
        y = np.asarray(y)
        if y.dtype != np.float32:
            raise DataError(f"loss {self.kind} needs float32 targets of the output's shape, "
                            f"but the dataset delivers {y.dtype} labels of shape {list(y.shape)}",
                            hint="use a dataset with float targets (an npz whose y is float32 [N, ...])")
        return np.ascontiguousarray(y)

    def draw_labels(self, rng, labels, logits):
        return rng.standard_normal(labels.dims).astype(np.float32)

    @staticmethod
    def reference(xp, logits, labels):
        return ((logits - labels) ** 2).mean()

    @staticmethod
    def correct_reference(logits, labels):
        return 0, 0
