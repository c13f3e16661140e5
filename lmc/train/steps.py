"""The training step strategies: one optimizer (micro-)step on the device state.

Input: the DeviceState, a host batch (x, y) and the step's lr.
Output: the (global batch's) loss and correct count, device scalars or host numbers; the
state's device arrays replaced by the step's results (no host copy per step).

One interface, `strategy(state, x, y, lr) -> (loss, correct)`, chosen once (`choose`):
FusedStep (one @train_step call), AccumulatedStep (@grad_step into the accumulators, @apply_step
every k-th micro-batch; data-parallel ranks all-reduce there) and Fp8Step (the fused step on
E4M3-projected weights).  Every input of a step depends only on (seed, step, epoch, batch), so a
resumed run repeats what the uninterrupted one computed."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmc.run.dist import check_same, shard
from lmc.run.runtime import train_function
from lmc.train.fp8 import project, project_params, weight_axes
from lmc.train.masks import draw
from lmc.train.schedule import learning_rate
from lmc.train.state import scalar, to_host

# data-parallel ranks compare their parameters and optimizer state bit for bit this often (and
# at every eval and checkpoint)
CHECK_EVERY = 100


@dataclass
class Stop:
    """A Ctrl-C request.  `requested`: the run stops (checkpoint + Interrupted) at the end of the
    current step; `signalled`: data-parallel, seen by this rank, agreed at the next all-reduce."""
    requested: bool = False
    signalled: bool = False


def lr_at(cfg, accum: int, bpe: int, step: int) -> float:
    """The lr of the optimizer update that micro-batch `step` (1-based) contributes to: the
    schedule at the update's last micro-batch (every step when not accumulating)."""
    k = accum
    return learning_rate(cfg, -(-step // k) * k, bpe)


def noised(cfg, x, step: int):
    """train.gaussian_noise_sigma σ > 0: x + N(0, σ²I), host side, every batch (randomized
    smoothing's matched noise, lmc certify); drawn from (seed, step), so a resumed run
    draws what the uninterrupted one did."""
    sigma = cfg.gaussian_noise_sigma
    if not sigma:
        return x
    rng = np.random.default_rng([cfg.seed, 0x6A55, step])
    return (x + np.float32(sigma) * rng.standard_normal(x.shape, dtype=np.float32)).astype(np.float32)


def step_masks(abi, cfg, pos, world) -> list[np.ndarray]:
    """The dropout / drop-path masks of the current batch (lmc/train/masks.py), from (seed, epoch,
    batch): a resumed run draws the same."""
    return draw(abi.masks, cfg, cfg.seed, pos.epoch, pos.batch, world.rank, world.size)


class StepStrategy:
    """The host side every strategy shares: the batch's noise and host-made labels."""

    def __init__(self, abi, cfg, world):
        self.abi, self.cfg, self.world = abi, cfg, world

    def __call__(self, state, x, y, lr):
        x = noised(self.cfg, x, state.pos.step)
        loss = self.abi.loss
        if loss.host_labels:     # labels made from this batch's predictions (DETR's matching)
            y = loss.prepare_labels(y, lambda: state.module.forward(*state.P, *state.S, x))
        return self.step(state, x, y, lr)

    def step(self, state, x, y, lr):
        raise NotImplementedError


class FusedStep(StepStrategy):
    """One optimizer step in one call of @train_step's layout: forward, backward, update (and
    EMA) — one module function, or the two halves of an Abi.halves module (train_function)."""
    _call: tuple | None = None       # (the module, its train_function), made at the first step

    def step(self, state, x, y, lr):
        hp = self.abi.hp_vector(self.cfg, lr, state.pos.step)
        nP, nO, nE = len(state.P), len(state.O), len(state.E)
        if self._call is None or self._call[0] is not state.module:
            self._call = (state.module, train_function(self.abi, state.module))
        out = self._call[1](*state.P, *state.O, *state.E, *state.S, x, y, hp,
                      *step_masks(self.abi, self.cfg, state.pos, self.world))
        # results are device arrays: feed them straight back, no host copy
        state.P, state.O, state.E = out[:nP], out[nP:nP + nO], out[nP + nO:nP + nO + nE]
        state.S = out[nP + nO + nE:-2]
        return out[-2], out[-1]


class AccumulatedStep(StepStrategy):
    """Micro-batch `pos.step` of a k-cycle: add its gradient into G; after the k-th, apply
    the update (t = the update's number) and zero G.  Data-parallel ranks: the micro-batch is
    this rank's slice of the global batch, and every micro-step ends in one all-reduce —
    of the accumulators (bucketed) before an update, with the loss, the correct count and
    the stop flag riding along — so @apply_step (grad_scale 1/(k·ranks)) sees the global
    sum.  Returns the (global batch's) loss and correct count."""

    def __init__(self, abi, cfg, world, stop: Stop):
        super().__init__(abi, cfg, world)
        self.stop = stop
        self.halves = abi.late_index()      # (late, early) positions in P, once, not per step

    def step(self, state, x, y, lr):
        w, k, step = self.world, self.abi.accum, state.pos.step
        hp = self.abi.hp_vector(self.cfg, lr, -(-step // k))
        nP, nS = len(state.P), len(state.S)
        update = step % k == 0
        args = (shard(x, w.rank, w.size), shard(y, w.rank, w.size), hp,
                *step_masks(self.abi, self.cfg, state.pos, w))
        if self.abi.cut:
            return self._halves(state, args, update, hp)
        out = state.module.grad_step(*state.P, *state.S, *state.G, *args)
        state.G, state.S = out[:nP], out[nP:nP + nS]
        loss, correct = out[-2], out[-1]
        G = state.G
        if w.size > 1:
            G, loss, correct = self._all_reduce(state, update, loss, correct)
        return self._apply(state, update, G, hp, loss, correct)

    def _halves(self, state, args, update: bool, hp):
        """The backward in two calls (Abi.cut, lowering.backward_cut): @grad_late, then — while a
        helper thread sums and uploads its accumulators across ranks before an update —
        @grad_early; the early accumulators, the loss, the correct count and the stop flag are
        summed after it."""
        w, m = self.world, state.module
        late, early = self.halves
        nL, nS = len(late), len(state.S)
        G = list(state.G)
        out = m.grad_late(*state.P, *state.S, *[G[i] for i in late], *args)
        state.S, (loss, correct), carry = out[nL:nL + nS], out[nL + nS:nL + nS + 2], out[nL + nS + 2:]
        for i, g in zip(late, out[:nL]):
            G[i] = g
        started = None
        if update and w.size > 1:
            w.step = state.pos.step
            started = w.sum_started(out[:nL], lambda summed: [m.upload(g) for g in summed])
        res = m.grad_early(*[state.P[i] for i in early], *[G[i] for i in early], *carry)
        res = res if isinstance(res, (list, tuple)) else [res]      # IREE returns one result bare
        for i, g in zip(early, res):
            G[i] = g
        state.G = G
        if w.size > 1:
            summed = list(G)
            if started is not None:
                for i, g in zip(late, started.result()):
                    summed[i] = g
            part = [G[i] for i in early] if update else []
            reduced, loss, correct = self._all_reduce(state, update, loss, correct, part)
            for i, g in zip(early, reduced):
                summed[i] = g
            G = summed
        return self._apply(state, update, G, hp, loss, correct)

    def _apply(self, state, update: bool, G, hp, loss, correct):
        """After the k-th micro-batch: @apply_step on the (summed) accumulators G."""
        w, step, nP = self.world, state.pos.step, len(state.P)
        if update:
            nO, nE = len(state.O), len(state.E)
            res = state.module.apply_step(*state.P, *state.O, *state.E, *G, hp)
            state.P, state.O = res[:nP], res[nP:nP + nO]
            state.E, state.G = res[nP + nO:nP + nO + nE], res[nP + nO + nE:]
            if w.size > 1 and step % CHECK_EVERY == 0:
                check_same(w, "parameters", to_host(state.P), step)
        return loss, correct

    def _all_reduce(self, state, update: bool, loss, correct, arrays=None):
        """The ranks' sum of the accumulators (`arrays`, default all of G, before an update;
        none otherwise), of the losses, the correct counts and the stop flags."""
        w = self.world
        w.step = state.pos.step
        summed, ext = w.sum_buffers((state.G if arrays is None else arrays) if update else [],
                                    np.array([scalar(loss), scalar(correct), float(self.stop.signalled)]))
        G = [state.module.upload(g) for g in summed]
        if ext[2] > 0:
            self.stop.requested = True
        return G, ext[0] / w.size, ext[1]


class Fp8Step(StepStrategy):
    """train.fp8 (lmc/train/fp8.py): the step on E4M3-projected weights and input, its update
    folded into the f32 master (state.P holds the master between steps)."""

    def __init__(self, abi, cfg, world, net):
        super().__init__(abi, cfg, world)
        self.net, self.fused, self.axes = net, FusedStep(abi, cfg, world), None

    def step(self, state, x, y, lr):
        if self.axes is None:
            self.axes = weight_axes(self.net)
        master = to_host(state.P)
        q = project_params(self.net, master, self.axes)
        up = state.module.upload
        state.P = [up(a) for a in q]
        loss, correct = self.fused.step(state, project(np.asarray(x, np.float32), None), y, lr)
        state.P = [up(m + (o - p)) for m, o, p in zip(master, to_host(state.P), q)]
        return loss, correct


def choose(net, cfg, abi, world, stop: Stop) -> StepStrategy:
    """The strategy of this recipe: fp8's projected fused step, else the split (accumulated or
    data-parallel) step when the module has @grad_step/@apply_step, else the fused one."""
    if cfg.fp8.value != "off":
        return Fp8Step(abi, cfg, world, net)
    if abi.split:
        return AccumulatedStep(abi, cfg, world, stop)
    return FusedStep(abi, cfg, world)
