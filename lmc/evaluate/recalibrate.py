"""`lmc eval --recalibrate N`: re-estimate the BN running statistics of a checkpoint from N
training batches in train mode (the seed's fallback for checkpoints without them, e.g. a Lean
kit `.bin` with no `_bn_stats` companion, and a repair for stale ones).

The compiled `@train_step` (or `@grad_step` under accumulation; of a step split in halves only
`@train_late`, which holds the forward) runs with lr = 0 and its updated parameters discarded —
only its new running statistics are kept, and the same parameters go into every call.  Its
running update is running ← m·running + (1 − m)·batch with m = bn_momentum a runtime value, so
calling it with m = (k − 1)/k at the k-th batch makes the result the plain mean of the N
batches' statistics (PyTorch's momentum=None), independent of what the checkpoint held.
Batches: the training split in epoch order (shuffled from the recipe's seed), without
augmentation."""
from __future__ import annotations

import numpy as np

from lmc.core.errors import EvalError
from lmc.data import Batcher
from lmc.graph.init import init_tensors
from lmc.run.runtime import state_function


def recalibrate_bn(mod, net, a, params: list[np.ndarray], n_batches: int, ds, log) -> list:
    """Device arrays of the recalibrated running statistics (net.state order)."""
    cfg = net.spec.train
    if n_batches < 1:
        raise EvalError(f"--recalibrate must be at least 1 batch, got {n_batches}")
    if not net.state:
        raise EvalError("--recalibrate: the net has no BN running statistics to re-estimate")
    if cfg is None:
        raise EvalError("--recalibrate runs the train step in train mode: the spec needs its `train:` recipe")
    up = mod.upload
    nc = net.num_classes or 1
    batcher = Batcher(ds, net.batch, seed=cfg.seed, shuffle=True, labels=lambda y: a.loss.fit_labels(y, nc, cfg))
    # host arrays for what the step updates and this discards: each call copies them into fresh
    # buffers, as @train_step writes its new state over its arguments (lmc/lower/inplace.py)
    P = [np.asarray(p, np.float32) for p in params]
    S = [up(s) for s in init_tensors(net, cfg.seed)[1]]        # any start: the first batch replaces it (m = 0)
    hp = a.hp_vector(cfg, 0.0, 1)
    ib = a.hp.index("bn_momentum")
    if a.accum == 1:
        O = list(a.initial_opt())
        E = P if a.ema else []
    else:
        G = [np.zeros(p.type.dims, np.float32) for p in net.params]
    new_state = state_function(a, mod) if a.accum == 1 else None      # @train_step, or @train_late alone
    spe = batcher.steps_per_epoch
    nP = len(P)
    for k in range(n_batches):
        x, y = batcher.batch(k // spe, k % spe)
        hp[ib] = k / (k + 1)
        if a.accum == 1:
            S = new_state(*P, *O, *E, *S, x, y, hp, *a.mask_ones())     # no dropout / drop path
        else:
            out = mod.grad_step(*P, *S, *G, x, y, hp, *a.mask_ones())
            S = list(out[nP:nP + len(S)])
    log(f"recalibrated {len(S)} BN statistics from {n_batches} training batches of {net.batch} "
        f"({n_batches * net.batch:,} examples, train mode)")
    return S
