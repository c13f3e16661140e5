"""Load a .vmfb with the IREE runtime and call its functions on device-resident arrays."""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path

import numpy as np

from lmc.compile import RUNTIME_DRIVER, task_workers_env
from lmc.core.errors import RunError
from lmc.run.invoke import COARSE_FENCES, AsyncFunction, Timeline


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4     # glibc <malloc.h>
_MADV_HUGEPAGE = 14                          # <sys/mman.h>
_TRIM_MAX = 2 ** 31 - 1                      # mallopt takes an int
_THP_RESERVE = _TRIM_MAX - (64 << 20)        # heap grown once, below the trim threshold
_malloc_tuned = False


def keep_freed_memory() -> bool:
    """Make glibc malloc keep freed memory for reuse instead of returning it to the OS, and
    back the heap with transparent huge pages where the kernel offers them.

    The llvm-cpu runtime allocates every intermediate of a call (conv patches are ~100 MB at
    batch 128) with malloc and frees it at the end.  glibc serves blocks above 32 MB with a
    fresh mmap and unmaps them on free, so each step page-faults and zeroes all of its
    working memory again (measured: ~45% of a conv's CPU time).  With mmap off and no heap
    trimming the step's memory is faulted in once and reused.

    The step's working set (hundreds of MB) then lives in the brk heap.  Where THP is
    `madvise` (or `always`), the heap is grown once by ~2 GB of address space (untouched:
    no memory is used until a step touches it) and advised MADV_HUGEPAGE, so the step's
    buffers sit on 2 MB pages: fewer TLB misses (steps of the conv nets −5 to −11%,
    benchmarks/NOTES.md).  Heap growth beyond that reserve gets normal pages.

    Process-wide; a no-op off glibc.  LMC_MALLOC=system turns all of it off, LMC_MALLOC=nothp
    only the huge pages.  Returns whether malloc was tuned."""
    global _malloc_tuned
    mode = os.environ.get("LMC_MALLOC", "tuned")
    if mode not in ("tuned", "nothp", "system"):
        raise RunError(f"LMC_MALLOC={mode!r}: expected tuned (the default), nothp or system")
    if _malloc_tuned or mode == "system":
        return _malloc_tuned
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_MAX) == 1
    except (OSError, AttributeError):
        ok = False
    _malloc_tuned = ok
    if ok and mode != "nothp":
        heap_huge_pages(libc)
    return ok


def _thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "never"
    return text[text.index("[") + 1:text.index("]")] if "[" in text else "never"


def heap_huge_pages(libc) -> int:
    """Grow the brk heap by _THP_RESERVE (malloc + free: it stays, as trimming is off) and
    advise it MADV_HUGEPAGE.  Returns the advised size in bytes (0: nothing done)."""
    if _thp_mode() not in ("madvise", "always"):
        return 0
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    p = libc.malloc(_THP_RESERVE)
    if not p:                   # strict overcommit: keep normal pages
        return 0
    libc.free(p)
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return 0
    for line in maps:
        if line.endswith("[heap]"):
            lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
            return hi - lo if libc.madvise(lo, hi - lo, _MADV_HUGEPAGE) == 0 else 0
    return 0


_CALLER_NICE = 10
_reniced: set[int] = set()


def yield_to_workers() -> int | None:
    """Lower the calling thread's CPU priority (nice +10) below the IREE task workers'.

    A call into a local-task module blocks until the step is done, and the caller's wait
    first spins (≈1 ms of CPU per call, IREE 3.13).  The two workers are pinned one per core,
    so on a 2-core machine the spinning caller takes a core away from a worker: short steps
    came out bimodal (mnist_mlp b128: 2.7 ms or 5–8 ms, median 5.0).  With the caller at
    nice 10 the workers win the core and the step is 2.6 ms every time; the caller's real
    work (≈0.2 ms per call) runs when the workers sleep.  Only the calling thread changes
    (threads it starts later inherit it); unprivileged, so it cannot be undone in-process.
    `LMC_CALLER_NICE=0` turns it off.  Returns the thread's nice value, None if unchanged."""
    raw = os.environ.get("LMC_CALLER_NICE", str(_CALLER_NICE))
    try:
        want = int(raw)
    except ValueError:
        raise RunError(f"LMC_CALLER_NICE={raw!r}: expected an integer nice value, 0 (off) to 19") from None
    tid = threading.get_native_id()
    if want <= 0 or tid in _reniced or not hasattr(os, "setpriority"):
        return None
    _reniced.add(tid)
    try:
        cur = os.getpriority(os.PRIO_PROCESS, tid)
        if cur < want:
            os.setpriority(os.PRIO_PROCESS, tid, min(want, 19))
        return os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        return None


_workers_set: int | None = None
# what the IREE runtime reads to decide it runs under mpirun (iree_hal_mpi_is_configured)
_IREE_MPI_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPIEXEC_HOSTNAME")


@contextlib.contextmanager
def _no_iree_mpi():
    """Create a device without IREE's own MPI channel provider: under a launcher's environment
    the runtime would dlopen libmpi and MPI_Init/MPI_Finalize behind mpi4py's back (and fail
    where libmpi.so is not on the library path).  lmc's collectives are lmc/run/dist.py's; the
    compiled module has none."""
    saved = {k: os.environ.pop(k) for k in _IREE_MPI_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _task_workers(rt, n: int) -> None:
    """Cap the local-task device's worker groups (once per process, before its first device)."""
    global _workers_set
    if _workers_set is None:
        rt.flags.parse_flags(f"--task_topology_group_count={n}")
        _workers_set = n


def _no_device(name: str, e: Exception) -> RunError:
    kind = {"hip": "HIP (AMD ROCm)", "cuda": "CUDA"}.get(name, name)
    return RunError(f"no {kind} device found (runtime driver '{name}'): {str(e).splitlines()[0][:200]}",
                    hint="use --backend llvm-cpu on a machine without that GPU")


def check_device(backend: str, device: str | None = None) -> None:
    """Refuse a GPU backend whose device this machine does not have, before anything is compiled
    or loaded (the CPU's local-task device always exists).  The device made here is the runtime's
    cached one, which Module reuses."""
    name = RUNTIME_DRIVER[backend]
    if name == "local-task":
        return
    import iree.runtime as rt
    try:
        with _no_iree_mpi():
            rt.get_device(f"{name}://{device}" if device is not None else name)
    except Exception as e:  # the runtime raises ValueError/RuntimeError variants per driver
        raise _no_device(name, e) from None


class Module:
    """A loaded `module @model`: `.train_step(*args)` / `.forward(*args)` take numpy or device
    arrays and return device arrays (feed them straight back; `np.asarray` copies to host).
    Functions of a second module on the same device can stand beside the first (`later`)."""

    def __init__(self, vmfb: str | Path, backend: str = "llvm-cpu", driver: str | None = None,
                 device: str | None = None, later: dict | None = None):
        """device: which device of the driver (a data-parallel rank's own: "1" → cuda://1);
        None: the driver's default.  LMC_TASK_WORKERS=n caps the CPU device's worker threads
        (ranks sharing a machine's cores each get their share).  later: {function name: a
        callable returning the .vmfb that holds it} — loaded, in a context of its own on this
        device, when the function is first asked for (`lmc train`'s @forward module, compiled
        beside the train module: lmc.compile.compile_background); device arrays pass between
        the two as between two functions of one module."""
        import iree.runtime as rt
        keep_freed_memory()
        self.rt = rt
        name = driver or RUNTIME_DRIVER[backend]
        workers = task_workers_env()
        if name == "local-task" and workers:
            _task_workers(rt, workers)
        try:
            with _no_iree_mpi():
                self.config = (rt.Config(device=rt.get_device(f"{name}://{device}")) if device is not None
                               else rt.Config(name))
        except Exception as e:  # the runtime raises ValueError/RuntimeError variants per driver
            raise _no_device(name, e) from None
        self.device = self.config.device
        self.timeline = Timeline(rt, self.device)     # the order of the async functions' calls
        self.vm_module = rt.VmModule.mmap(self.config.vm_instance, str(vmfb))
        self.ctx = rt.SystemContext(vm_modules=[self.vm_module], config=self.config)
        self.model = self.ctx.modules.model
        self._later = dict(later or {})
        self._loaded: dict[str, object] = {}      # function name → the later module's function
        self._contexts: list = []                 # theirs, kept alive with this one
        self._storage = None                      # the functions' transient storage (Transients)
        if name == "local-task":            # the device and its workers exist by now
            yield_to_workers()

    def has(self, fn: str) -> bool:
        if fn in self._later or fn in self._loaded:
            return True
        try:
            self.model[fn]
            return True
        except (KeyError, AttributeError):
            return False

    def __getattr__(self, fn):
        if fn.startswith("_") or fn in ("rt", "config", "device", "vm_module", "ctx", "model"):
            raise AttributeError(fn)
        if fn in self._loaded:
            return self._loaded[fn]
        if fn in self._later:
            vmfb = str(self._later.pop(fn)())       # waits for its compile if it still runs
            # the new context's initializer runs on the device outside the timeline: let the
            # queued calls finish first (defensive: an initializer beside queued calls is the
            # suspect of one FAILED_PRECONDITION on a transient buffer in an async test run)
            self.timeline.drain()
            ctx = self.rt.SystemContext(vm_modules=[self.rt.VmModule.mmap(self.config.vm_instance, vmfb)],
                                        config=self.config)
            self._contexts.append(ctx)
            self._loaded[fn] = self._bound(ctx, fn)
            return self._loaded[fn]
        self._loaded[fn] = self._bound(self.ctx, fn)
        return self._loaded[fn]

    def _bound(self, ctx, fn: str):
        """ctx's function `fn` as a callable: queued on this Module's timeline where it was
        compiled asynchronous (lmc/run/invoke.py), with its transient storage appended where it
        takes one."""
        f = ctx.modules.model[fn]
        refl = f.vm_function.reflection
        extra = None
        if "iree.abi.transients.size" in refl:
            if self._storage is None:
                self._storage = Transients(self)
            extra = self._storage.bind(fn, refl.get(TRANSIENTS_SIZE))
        if refl.get("iree.abi.model") == COARSE_FENCES:
            return AsyncFunction(self, ctx.vm_context, f.vm_function, extra)
        return f if extra is None else (lambda *args: f(*args, *extra()))

    def upload(self, a: np.ndarray):
        return self.rt.asdevicearray(self.device, np.ascontiguousarray(a))


# the reflection entry of a function that takes its transient storage from the caller: its size
# in bytes when the compiler folded it to a constant (IREE's `iree.abi.transients`)
TRANSIENTS_SIZE = "iree.abi.transients.size.constant"


class Transients:
    """The transient storage of a Module's functions (the lowering's `with_transients`: the
    last argument, `iree.abi.transients`): one device buffer, grown to the largest size a call
    asks for and passed to every call, so no call allocates (or, on llvm-cpu, mallocs and
    zero-fills) its intermediates.  One buffer serves all of the Module's functions: the device
    runs their calls one at a time (a synchronous call returns when its work is done; the
    asynchronous ones are queued in order on the Module's timeline); their results are
    allocations of their own, never views into the storage."""

    def __init__(self, module: "Module"):
        self.m = module
        self.nbytes = 0
        self.view = None

    def storage(self, nbytes: int):
        if self.view is None or nbytes > self.nbytes:
            self.m.timeline.drain()                 # no queued call still uses the old buffer
            rt, self.nbytes = self.m.rt, max(nbytes, 1)
            self.view = None                        # the old buffer is freed before the larger one
            buf = self.m.device.allocator.allocate_buffer(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
                allocation_size=self.nbytes)
            self.view = rt.HalBufferView(buf, [self.nbytes], rt.HalElementType.UINT_8)
        return self.view

    def bind(self, name: str, constant: str | None):
        """@name's storage argument, as a callable giving the one-element list to append: of
        the size the compiler worked out (lmc's shapes are static, so IREE folds it to a
        constant)."""
        if constant is None:
            raise RunError(f"@{name} takes transient storage of a size known only at run time, which lmc "
                           "does not provide", hint="LMC_TRANSIENTS=alloca compiles it to allocate its own")
        n = int(constant)
        return lambda: [self.storage(n)]


class HalvesCall:
    """@train_step's call on an Abi.halves module (lowering.py `_train_halves`): @train_late,
    then @train_early on the carried values, with @train_step's arguments and results —
    (P, O, E, S, x, labels, hp, M) → (P', O', E', S', loss, correct) — so every caller of the
    fused step (the strategies, `lmc bench`, recalibration) runs either module.  The results
    are device arrays, fed back as they are."""

    def __init__(self, a, module):
        self.m = module
        nP, nO, nE = len(a.params), len(a.opt), len(a.ema)
        late, early = a.late_index()
        side = lambda is_late: ([nP + j for j, (_, p) in enumerate(a.opt) if (p.name in a.late) == is_late]
                                + [nP + nO + j for j, p in enumerate(a.ema) if (p.name in a.late) == is_late])
        # positions in @train_step's P + O + E: @train_late's arguments (all of P, its O and E),
        # each half's P'/O'/E' results, and where each of those goes in @train_step's results
        self.late_args = list(range(nP)) + side(True)
        self.early_args = early + side(False)
        outs = late + side(True) + self.early_args
        self.order = [0] * len(outs)
        for k, i in enumerate(outs):
            self.order[i] = k
        self.n, self.n_late, self.nS = nP + nO + nE, len(outs) - len(self.early_args), len(a.state)

    def __call__(self, *args):
        n, nT, nS = self.n, self.n_late, self.nS
        r = self.m.train_late(*[args[i] for i in self.late_args], *args[n:])
        r2 = self.m.train_early(*[args[i] for i in self.early_args], args[n + nS + 2], *r[nT + nS + 2:])
        new = list(r[:nT]) + (list(r2) if isinstance(r2, (list, tuple)) else [r2])   # IREE returns one result bare
        return [new[k] for k in self.order] + list(r[nT:nT + nS + 2])

    def late_state(self, *args):
        """@train_late alone, with @train_step's arguments: its new state S' (the BN running
        statistics, all of which the forward in @train_late computes) — for a caller that
        needs nothing else (`lmc eval --recalibrate`), to whom @train_early would be waste."""
        r = self.m.train_late(*[args[i] for i in self.late_args], *args[self.n:])
        return list(r[self.n_late:self.n_late + self.nS])


def state_function(a, module):
    """A callable with @train_step's arguments that returns only its new state S'."""
    if a.halves:
        return HalvesCall(a, module).late_state
    nS, f = len(a.state), module.train_step
    return lambda *args: list(f(*args)[-2 - nS:-2])      # (P', O', E', S', loss, correct)


def train_function(a, module):
    """The module's fused train step as one callable: @train_step, or its halves (HalvesCall)."""
    return HalvesCall(a, module) if a.halves else module.train_step


def training_module(paths: list, backend: str = "llvm-cpu", device: str | None = None, forward=None) -> Module:
    """The training functions' compiled module(s) as one Module: the first's functions, an
    Abi.halves net's @train_early from the second (its own context on the same device), and
    @forward from the vmfb `forward()` returns, loaded at its first call."""
    later = {} if forward is None else {"forward": forward}
    if len(paths) > 1:
        later["train_early"] = lambda: paths[1]
    return Module(paths[0], backend, device=device, later=later)
