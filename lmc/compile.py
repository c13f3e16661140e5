"""Module text → .vmfb with iree-compile, flags from --backend/--chip or IREE_BACKEND /
IREE_CHIP / IREE_EXTRA_FLAGS, and a content-addressed cache keyed by the module text, the
full flag list, the compiler version (so a changed spec never reuses a stale vmfb) and the
lowering options the text was made with (so two option sets never share an entry, even where
an option leaves the text alone)."""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lmc.core.errors import CompileError
from lmc.core.fields import did_you_mean
from lmc.core.tools import installed
from lmc.lower.lowering import ASYNC, PACKED, PACKED_DENSE, PACKED_INTEL
from lmc.lower.options import LowerOptions

BACKENDS = ("llvm-cpu", "cuda", "rocm")
DEFAULT_CHIP = {"cuda": "sm_86", "rocm": "gfx1100", "llvm-cpu": "host"}
RUNTIME_DRIVER = {"llvm-cpu": "local-task", "cuda": "cuda", "rocm": "hip"}


def cache_dir() -> Path:
    return Path(os.environ.get("LMC_CACHE", Path.home() / ".cache" / "lmc"))


def find_compiler() -> str:
    """iree-compile next to this Python (the pip wheel), else on PATH."""
    found = installed("iree-compile")
    if found:
        return found
    raise CompileError("iree-compile not found", hint="pip install iree-base-compiler (or `make setup`)")


@functools.lru_cache(maxsize=8)
def compiler_version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        lines = [l.strip() for l in out.stdout.splitlines() if l.strip()]
        # iree-compile prints "IREE (https://iree.dev):" first; the version is on a later line
        return next((l for l in lines if "version" in l.lower()), lines[0] if lines else "unknown")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def resolve_backend(backend: str | None) -> str:
    b = backend or os.environ.get("IREE_BACKEND") or "llvm-cpu"
    if b not in BACKENDS:
        raise CompileError(f"unknown backend {b!r}{did_you_mean(b, BACKENDS)} (expected one of {', '.join(BACKENDS)})")
    return b




def task_workers_env() -> int | None:
    """LMC_TASK_WORKERS (data-parallel ranks get their share of the cores), None when unset."""
    n = os.environ.get("LMC_TASK_WORKERS")
    if not n:
        return None
    if not n.isdigit() or int(n) < 1:
        raise CompileError(f"LMC_TASK_WORKERS={n!r}: expected a positive number of worker threads")
    return int(n)


def runtime_workers() -> int:
    """How many task workers the llvm-cpu runtime will run (lmc/run/runtime.py): LMC_TASK_WORKERS
    when set, else one per core."""
    return task_workers_env() or os.cpu_count() or 1


def flags(backend: str | None = None, chip: str | None = None, text: str | None = None) -> list[str]:
    """The iree-compile flags (without input/output), extra flags last so they win; `text`, the
    module, where a flag depends on what it contains (bf16 matmuls, the lowering's packed-matmul
    hint on llvm-cpu)."""
    b = resolve_backend(backend)
    c = chip or os.environ.get("IREE_CHIP") or DEFAULT_CHIP[b]
    out = ["--iree-input-type=stablehlo", f"--iree-hal-target-backends={b}"]
    if b == "llvm-cpu":
        out.append(f"--iree-llvmcpu-target-cpu={c}")
        # the runtime's worker count (LMC_TASK_WORKERS, else the cores), not IREE's default of 8:
        # it caps each dispatch at 2× that many workgroups (train step −2…−7% on 2 cores,
        # benchmarks/NOTES.md)
        out.append(f"--iree-llvmcpu-number-of-threads={runtime_workers()}")
        # No --iree-global-opt-use-im2col-for-convs: the conv templates emit matmuls, not
        # stablehlo.convolution, so it has nothing left to convert (benchmarks/NOTES.md).
    elif b == "cuda":
        if c in ("sm_89", "sm_90", "sm_90a", "sm_100"):
            raise CompileError(f"IREE 3.13 has no target metadata for {c}; compile for sm_86 (PTX is JIT-forwarded)",
                               hint="use --chip sm_86 or sm_80")
        out.append(f"--iree-cuda-target={c}")
    elif b == "rocm":
        out.append(f"--iree-rocm-target={c}")
        # gfx1100 fails to distribute full N-D→scalar reductions (losses) without this
        out.append("--iree-codegen-llvmgpu-use-reduction-vector-distribution=false")
    if text is not None and f"\n{ASYNC}\n" in text:
        # the exported functions take a wait and a signal fence and return once their work is
        # queued (IREE's coarse-fences ABI; LowerOptions.invocation, lmc/run/invoke.py)
        out.append("--iree-execution-model=async-external")
    extra = shlex.split(os.environ.get("IREE_EXTRA_FLAGS", ""))
    # Packed (mmt4d, data-tiled) matmuls where the lowering asks for them (lowering.py
    # `_packed_matmuls`: PACKED, PACKED_DENSE for a target without AVX-512 or with Intel's
    # (dense_packs), PACKED_INTEL for Intel's AVX-512 alone
    # — the target as the flags name it, extra flags included; benchmarks/NOTES.md) and always
    # for train.bf16's bf16×bf16→f32 dots: only packed matmuls use AVX512-BF16's vdpbf16ps;
    # without it IREE widens to f32 and is slower than f32 (vit_tiny step CPU −38% with it,
    # benchmarks/bf16_forms.py).
    # The global-opt path: --iree-opt-data-tiling fails on these modules ("large vector sizes").
    if b == "llvm-cpu" and text is not None and (
            "xbf16>" in text or f"\n{PACKED}\n" in text
            or (f"\n{PACKED_DENSE}\n" in text and dense_packs(out + extra))
            or (f"\n{PACKED_INTEL}\n" in text and target_has_avx512(out + extra) and dense_packs(out + extra))):
        out.append("--iree-global-opt-data-tiling")
    return out + extra


# LLVM x86 CPU names with AVX-512 (those a user is likely to name; "host" is read from the CPU)
_AVX512_CPUS = frozenset({
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
    "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
    "diamondrapids", "znver4", "znver5", "x86-64-v4", "knl", "knm"})


def _last(fl: list[str], name: str) -> str | None:
    vals = [f.split("=", 1)[1] for f in fl if f.startswith(name + "=")]
    return vals[-1] if vals else None


@functools.lru_cache(maxsize=None)           # a few fixed key tuples
def _cpuinfo_first(keys: tuple[str, ...]) -> dict[str, str]:
    """The first value of each of `keys` in Linux's /proc/cpuinfo ({} where unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip() in keys:
            out.setdefault(k.strip(), v.strip())
    return out


def host_has_avx512() -> bool:
    """Whether this machine's CPU has AVX-512F (Linux's /proc/cpuinfo; False where unreadable)."""
    return "avx512f" in _cpuinfo_first(("flags",)).get("flags", "").split()


@functools.lru_cache(maxsize=1)
def host_cpu_id() -> str:
    """What `--iree-llvmcpu-target-cpu=host` resolves to, as far as the cache must tell hosts
    apart: the CPU's vendor, family, model and feature flags (/proc/cpuinfo; the machine's
    architecture where that is unreadable). A cache shared between machines (a home directory
    on NFS, a VM that moves between hosts) must not hand one CPU's code to another: code built
    for a CPU with AVX-512 FP16 dies with SIGILL on one without, and code tuned for one vendor's
    cores runs slower on the other's."""
    info = _cpuinfo_first(("vendor_id", "cpu family", "model", "flags", "CPU implementer", "CPU part", "Features"))
    return hashlib.sha256(repr(sorted(info.items()) or platform.machine()).encode()).hexdigest()[:16]


def target_has_avx512(fl: list[str]) -> bool:
    """Whether the llvm-cpu target that iree-compile flags `fl` name (the last
    --iree-llvmcpu-target-cpu / -cpu-features wins, as in iree-compile) has AVX-512F."""
    feats = _last(fl, "--iree-llvmcpu-target-cpu-features") or ""
    if feats == "host":
        return host_has_avx512()
    for f in reversed(feats.split(",")):            # an explicit ±avx512f decides (the last one)
        if f in ("+avx512f", "-avx512f"):
            return f == "+avx512f"
    cpu = _last(fl, "--iree-llvmcpu-target-cpu") or "host"
    return host_has_avx512() if cpu == "host" else cpu in _AVX512_CPUS


# The Intel ones among them (x86-64-v4 names no vendor)
_INTEL_AVX512_CPUS = _AVX512_CPUS - {"znver4", "znver5", "x86-64-v4"}


def dense_packs(fl: list[str]) -> bool:
    """Whether the target that flags `fl` name runs dense matmuls faster packed (mmt4d) than as
    IREE's plain matmul codegen (benchmarks/NOTES.md, measured per class): without AVX-512
    (AVX2's 8×8 tiles) and on Intel's AVX-512 cores (an Intel Xeon: vit_tiny −16%, mnist_mlp
    −17%), not on AMD's (Zen 4: vit_tiny +2% CPU, mnist_mlp +10…+14%)."""
    if not target_has_avx512(fl):
        return True
    cpu = _last(fl, "--iree-llvmcpu-target-cpu") or "host"
    if cpu == "host":
        return _cpuinfo_first(("vendor_id",)).get("vendor_id") == "GenuineIntel"
    return cpu in _INTEL_AVX512_CPUS


@dataclass
class Compiled:
    path: Path
    cached: bool
    seconds: float
    command: list[str]


def cache_key(text: str, fl: list[str], version: str, options: LowerOptions | None) -> str:
    """The cache entry's name: the text, flags and compiler version, the options' canonical text
    (options=None: a module lmc did not lower, e.g. an .mlir file — keyed by its text alone), and
    for a `host` llvm-cpu target the CPU it resolves to (host_cpu_id)."""
    parts = [text, *fl, version] + ([f"lmc-lower-options:{options.canonical()}"] if options is not None else [])
    if "host" in (_last(fl, "--iree-llvmcpu-target-cpu"), _last(fl, "--iree-llvmcpu-target-cpu-features")):
        parts.append(f"host-cpu:{host_cpu_id()}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def compile_module(text: str, out: Path | None = None, backend: str | None = None, chip: str | None = None,
                   verbose: bool = False, options: LowerOptions | None = LowerOptions(),
                   during=None, cdir: Path | None = None) -> Compiled:
    """Compile `text` (cached); options: what lower() made it with (the defaults unless the caller
    lowered with others), None for a text lmc did not lower.  during: a context-manager factory
    entered around a real iree-compile run (not on a cache hit): `lmc train`'s spinner.  cdir: the
    cache directory (default: cache_dir() now)."""
    exe = find_compiler()
    fl = flags(backend, chip, text)
    key = cache_key(text, fl, compiler_version(exe), options)
    cdir = cdir if cdir is not None else cache_dir()
    cdir.mkdir(parents=True, exist_ok=True)
    cached = cdir / f"{key}.vmfb"
    mlir = cdir / f"{key}.mlir"
    # Per-process temp names: parallel test workers may compile the same module at once.
    mlir_tmp = cdir / f"{key}.{os.getpid()}.mlir"
    tmp_out = f"{cached}.{os.getpid()}.tmp"
    cmd = [exe, str(mlir), *fl, "-o", str(cached)]          # as shown to the user (--verbose)
    t0 = time.time()
    hit = cached.exists()
    if not hit:
        mlir_tmp.write_text(text)
        try:
            with (during() if during is not None else contextlib.nullcontext()):
                proc = _run([exe, str(mlir_tmp), *fl, "-o", tmp_out])
        except OSError as e:
            mlir_tmp.unlink(missing_ok=True)
            raise CompileError(f"cannot run {exe}: {e}") from None
        except BaseException:       # Ctrl-C: the compiler is stopped (_run), its files go
            mlir_tmp.unlink(missing_ok=True)
            Path(tmp_out).unlink(missing_ok=True)
            raise
        if proc.returncode != 0 and _cancelled():
            mlir_tmp.unlink(missing_ok=True)
            Path(tmp_out).unlink(missing_ok=True)
            raise CompileError("the compile was stopped")
        if proc.returncode != 0:
            os.replace(mlir_tmp, mlir)
            Path(tmp_out).unlink(missing_ok=True)
            raise CompileError(_diagnose(proc.stderr, text, mlir), hint=f"full module: {mlir}")
        os.replace(tmp_out, cached)
        if verbose:
            os.replace(mlir_tmp, mlir)
        else:
            mlir_tmp.unlink(missing_ok=True)
    dt = time.time() - t0
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        shutil.copyfile(cached, tmp)
        os.replace(tmp, out)
    return Compiled(out or cached, hit, dt, cmd)


# iree-compile processes running now: one a background compile started and the process is leaving
# behind (compile_background) is stopped at exit rather than left to run on.
_RUNNING: dict[subprocess.Popen, "Pending | None"] = {}   # → the background compile it is (None: a caller's own)
_LOCK = threading.Lock()
_HERE = threading.local()           # .pending: the Pending whose thread this is


def _cancelled() -> bool:
    pend = getattr(_HERE, "pending", None)
    return pend is not None and pend._cancelled


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    # a session of its own: the pip wheel's iree-compile is a Python launcher that runs the real
    # compiler as its child, and stopping a compile must stop both (_kill signals the group)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        with _LOCK:
            _RUNNING[proc] = getattr(_HERE, "pending", None)
            if _cancelled():            # stopped before it started: stop it now
                _killpg(proc)
        try:
            out, err = proc.communicate()
        except BaseException:       # Ctrl-C (which no longer reaches the compiler's own session)
            _killpg(proc)
            raise
        finally:
            with _LOCK:
                _RUNNING.pop(proc, None)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill(pending: "Pending | None" = None):
    """Stop the iree-compile processes of the background compile `pending` (None: all of them)."""
    with _LOCK:
        procs = [p for p, t in _RUNNING.items() if pending is None or t is pending]
    for p in procs:
        _killpg(p)


def _killpg(proc: subprocess.Popen):
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)


class Pending:
    """A compile_module call running on a thread of its own (compile_background); .result()
    waits for it and returns its Compiled, or raises what it raised."""

    def __init__(self, text: str, backend: str | None, chip: str | None, options: LowerOptions | None,
                 cdir: Path | None = None, after: tuple = ()):
        self._value: Compiled | None = None
        self._error: BaseException | None = None
        # finished: an Event, not Thread.join — a join that Ctrl-C interrupts marks the thread
        # stopped while it still runs (CPython 3.11), and a later join would then not wait
        self._finished = threading.Event()
        self._cancelled = False
        cdir = cdir if cdir is not None else cache_dir()    # now: LMC_CACHE may change after this returns
        self._after = tuple(after)
        self._thread = threading.Thread(target=self._run, args=(text, backend, chip, options, cdir),
                                        name="lmc-compile", daemon=True)
        _PENDING.add(self)
        self._thread.start()

    def _run(self, text, backend, chip, options, cdir):
        _HERE.pending = self
        try:
            for first in self._after:        # their compiles end (or fail) before this one starts
                while not first._finished.wait(0.05):
                    if self._cancelled:
                        break
            if self._cancelled:
                raise CompileError("the compile was stopped")
            self._value = compile_module(text, None, backend, chip, options=options, cdir=cdir)
        except BaseException as e:  # handed to whoever asks for the result
            self._error = e
        finally:
            _PENDING.discard(self)
            self._finished.set()

    def done(self) -> bool:
        return self._finished.is_set()

    def cancel(self):
        """Stop the compile (nobody will want it) and wait for its thread to tidy up."""
        if self.done():
            return
        with _LOCK:
            self._cancelled = True
        _kill(self)
        self._finished.wait(timeout=10)

    def wait(self):
        """Until the compile has finished (or failed)."""
        self._finished.wait()

    def result(self) -> Compiled:
        self._finished.wait()
        if self._error is not None:
            raise self._error
        return self._value


_PENDING: set[Pending] = set()


def compile_background(text: str, backend: str | None = None, chip: str | None = None,
                       options: LowerOptions | None = LowerOptions(), cdir: Path | None = None,
                       after: tuple = ()) -> Pending:
    """Start compiling `text` (as compile_module, cached) beside whatever the caller does next:
    `lmc train` compiles its modules this way while it loads the data — the training functions
    (one module, or the two halves of Abi.halves side by side: iree-compile keeps about one of
    two cores busy, so the second costs the first little; benchmarks/NOTES.md) and the net's
    @forward — and loads @forward's when an eval first calls it.  after: compiles this one
    waits for before it starts (@forward after the two halves, whose compiles a third would
    slow down; a cancel stops the wait too)."""
    return Pending(text, backend, chip, options, cdir, after)


def compile_training(texts: list[str], fwd_text: str, backend: str | None = None, chip: str | None = None,
                     options: LowerOptions | None = LowerOptions(), cdir: Path | None = None) -> tuple[list[Pending], Pending]:
    """Start the compiles of `lmc train`'s modules: the training functions' (lowering.lower_train:
    one, or an Abi.halves net's two side by side) and @forward's — beside one, after two (a third
    compile on two cores slows the halves the first step waits for).  The caller cancels them
    all where it stops before their results."""
    train = [compile_background(t, backend, chip, options=options, cdir=cdir) for t in texts]
    fwd = compile_background(fwd_text, backend, chip, options=options, cdir=cdir,
                             after=train if len(train) > 1 else ())
    return train, fwd


@atexit.register
def _stop_background():
    """A background compile nobody waited for: stop its iree-compile, let its thread tidy up."""
    _kill()
    for pend in list(_PENDING):
        pend._finished.wait(timeout=5)


def _diagnose(stderr: str, text: str, mlir: Path) -> str:
    """First lines of IREE's diagnostic, plus the spec layer its location names."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    errs = [l for l in lines if "error" in l] or lines
    head = "\n".join(errs[:6])
    layer = re.search(r'layers\[(\d+)\]\.(\w+)', stderr)
    where = f" (from layers[{layer.group(1)}], {layer.group(2)})" if layer else ""
    return f"iree-compile failed{where}:\n{head}"
