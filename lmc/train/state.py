"""The training state on the device: what a checkpoint holds, kept between steps.

Input: the initial host tensors of the plan (lmc.train.plan.Start: init, --init or the resumed
checkpoint) and the loaded module.
Output: device arrays fed straight from one step's results to the next call — P (params),
O (optimizer state), E (EMA), S (BN state), A/Q (SWA mean / SWAG mean of squares), G (gradient
accumulators), U (spectral_cap's power-iteration vectors) — SWAG's host-side deviations, the
SWA snapshot count and the run's position (step, epoch, batch); their host copies
(`host_regions`, `to_host`) and the checkpoint (`save`, atomic, lmc.run.checkpoint)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmc.lower.spectral import capped, initial_u
from lmc.run.checkpoint import save_checkpoint
from lmc.run.dist import check_same


def to_host(arrays) -> list[np.ndarray]:
    """Fresh host copies of device arrays (a read waits for the work that produces them)."""
    return [np.array(a.to_host() if hasattr(a, "to_host") else a, dtype=np.float32, copy=True) for a in arrays]


def scalar(v) -> float:
    """A loss or count as a float: a device scalar read back, or a host number."""
    return float(v.to_host() if hasattr(v, "to_host") else v)


def region_names(cfg, accum: int) -> list[str]:
    """The per-parameter regions this recipe keeps next to the live weights (checkpoint.REGIONS)."""
    out = []
    if cfg.use_ema:
        out.append("ema")
    if cfg.use_swa:
        out.append("swa")
    if cfg.use_swag:
        out += ["swa_sq", "swag_dev"]
    if accum > 1:
        out.append("grad_acc")
    if cfg.spectral_cap > 0:
        out.append("spectral_u")
    return out


@dataclass
class Position:
    """Where the run is: the global step (of the last step run, 1-based), the epoch (0-based)
    and the next batch of that epoch.  The data order, the masks and the lr depend only on it."""
    step: int = 0
    epoch: int = 0
    batch: int = 0


class NonFinite(Exception):
    """A parameter or BN statistic is not finite: no checkpoint was written."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class DeviceState:
    def __init__(self, module, net, cfg, abi, world, pos: Position):
        self.module, self.net, self.cfg, self.abi, self.world = module, net, cfg, abi, world
        self.pos = pos
        self.P, self.O, self.S = [], [], []
        self.E, self.A, self.Q, self.G, self.U = [], [], [], [], []
        self.caps = []                 # spectral_cap: the capped weights (lower.spectral.capped)
        self.devs = []                 # SWAG's last K deviations θ − swa, host side
        self.swa_n = 0                 # SWA snapshots averaged so far

    @classmethod
    def upload(cls, plan, start) -> "DeviceState":
        """The plan's initial host tensors (`start`) uploaded once to the plan's module."""
        st = cls(plan.module, plan.net, plan.cfg, plan.abi, plan.world, Position(start.step, start.epoch, start.batch))
        up = st.module.upload
        st.P = [up(a) for a in start.params]
        st.O = [up(a) for a in start.opt]
        st.S = [up(a) for a in start.state]
        st._upload_regions(start)
        return st

    def _upload_regions(self, start):
        """Device arrays of the regions: EMA starts at θ₀, SWA/SWAG means at 0 with no snapshot,
        accumulators at 0 — or all of them as the checkpoint left them."""
        up, cfg = self.module.upload, self.cfg
        names = [p.name for p in self.net.params]
        got = start.regions
        zeros = [np.zeros(p.type.dims, np.float32) for p in self.net.params]

        def region(r, default):
            return [got[r][n] for n in names] if r in got else default

        self.E = [up(a) for a in region("ema", start.params)] if cfg.use_ema else []
        self.A = [up(a) for a in region("swa", zeros)] if cfg.use_swa else []
        self.Q = [up(a) for a in region("swa_sq", zeros)] if cfg.use_swag else []
        # the accumulators: k-step accumulation keeps them in checkpoints; data-parallel steps
        # without accumulation pass zeros (which @apply_step hands back)
        self.G = [up(a) for a in region("grad_acc", zeros)] if self.abi.split else []
        self.swa_n = start.swa_n
        # spectral_cap: the capped weights' power-iteration vectors (warm starts)
        self.caps, self.U = [], []
        if cfg.spectral_cap > 0:
            self.caps = capped(self.net)
            U = ([got["spectral_u"][c.param.name] for c in self.caps] if "spectral_u" in got
                 else initial_u(self.caps, cfg.seed))
            self.U = [up(a) for a in U]
        # SWAG's last K deviations θ − swa, host side (only sampling at eval reads them)
        self.devs = []
        if cfg.use_swag and "swag_dev" in got:
            d = [got["swag_dev"][n] for n in names]
            self.devs = [[a[i] for a in d] for i in range(d[0].shape[0])]

    def regions(self) -> list[str]:
        return region_names(self.cfg, self.abi.accum)

    def host_regions(self) -> dict:
        names = [p.name for p in self.net.params]
        out = {}
        for r, arrays in (("ema", self.E), ("swa", self.A), ("swa_sq", self.Q), ("grad_acc", self.G)):
            if r in self.regions():
                # a mid-cycle accumulator differs per rank: its rank mean, which every rank of
                # a resumed run starts from, sums to the same total (exact up to rounding)
                host = (self.world.mean_arrays(arrays) if r == "grad_acc" and self.world.size > 1
                        else to_host(arrays))
                out[r] = dict(zip(names, host))
        if self.caps:
            out["spectral_u"] = {c.param.name: u for c, u in zip(self.caps, to_host(self.U))}
        if self.cfg.use_swag:
            out["swag_dev"] = {n: (np.stack([d[i] for d in self.devs]) if self.devs else
                                   np.zeros((0,) + p.type.dims, np.float32))
                               for i, (n, p) in enumerate(zip(names, self.net.params))}
        return out

    def eval_region(self, final: bool) -> str:
        """What an eval scores (the seed's rule): the EMA weights when use_ema; else, at the end
        of training, the SWA mean (SWAG: samples around it) once it has a snapshot; else live."""
        if self.cfg.use_ema:
            return "ema"
        if self.cfg.use_swa and final and self.swa_n > 0:
            return "swag" if self.cfg.use_swag else "swa"
        return "live"

    def sync_ranks(self):
        """Data-parallel: the BN running statistics become the ranks' mean (so every rank
        evaluates and saves the same model), and parameters and optimizer state are checked to
        be bit-identical across ranks.  A collective: every rank calls it at the same step."""
        if self.world.size == 1:
            return
        if self.S:
            self.S = [self.module.upload(a) for a in self.world.mean_arrays(self.S)]
        check_same(self.world, "parameters and optimizer state", to_host(self.P) + to_host(self.O), self.pos.step)

    def save(self, path: Path, meta: dict, write: bool = True) -> None:
        """The checkpoint of this state with `meta` (lmc.run.checkpoint.save_checkpoint: atomic),
        after sync_ranks; raises NonFinite instead if a parameter or BN statistic is not finite.
        A collective under data-parallel ranks; only the rank with `write` writes the file."""
        self.sync_ranks()
        params, opt, state = to_host(self.P), to_host(self.O), to_host(self.S)
        for name, a in zip([p.name for p in self.net.params] + [s.name for s in self.net.state], params + state):
            if not np.isfinite(a).all():
                raise NonFinite(name)
        regions = self.host_regions()                 # a collective under data-parallel ranks
        if write:
            save_checkpoint(path, self.net, self.abi.opt_keys, params, opt, state, meta, regions)
