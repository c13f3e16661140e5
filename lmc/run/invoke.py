"""Calls of a module function compiled with IREE's asynchronous ABI (`coarse-fences`:
`--iree-execution-model=async-external`, the lowering's `invocation=async`).

Such a function takes two fences after its arguments, one to wait on and one to signal.  The
call returns as soon as its work is queued, and its results are buffers that are valid once the
signal fence is reached.  With the synchronous ABI every call blocks until its work is done, so
the device sits idle while Python takes the result, builds the next batch and makes the next
call; queued, the next step is already waiting when one ends.  On llvm-cpu, where the host
shares the cores with the runtime's workers, that measured no faster (benchmarks/NOTES.md,
"Steps queued"); it is meant for a GPU.

Every function of one `runtime.Module` (and of the modules it loads later) runs on one
timeline: call k waits for value k − 1 of one semaphore and signals k.  So the device runs the
calls in the order they were made, and one transient-storage buffer can serve them all.  At
most DEPTH calls are in flight: the caller waits for call k − DEPTH before it makes call k, so
a loop that never reads a result still holds at most DEPTH batches on the device.

Results are `FencedArray`s.  Reading one on the host (`np.asarray`, `.to_host()`, a ufunc)
waits for the work first:
- a fresh result (a loss, a logit) waits for the call that made it;
- a result written over its argument (`iree.abi.output`, lmc/lower/inplace.py: the parameters
  and optimizer state) waits for every call made so far, since a later call may be writing the
  same buffer.
Passed to another call, a result is not waited for: the timeline orders the two."""
from __future__ import annotations

import re
from functools import partial

import numpy as np

DEPTH = 2                                   # calls in flight at most
COARSE_FENCES = "coarse-fences"             # the reflection's iree.abi.model of such a function
_TIED = re.compile(r"iree\.abi\.output = (\d+)")


class Timeline:
    """The order of one Module's calls on its device (a timeline semaphore)."""

    def __init__(self, rt, device):
        self.rt, self.sem = rt, device.create_semaphore(0)
        self.value = 0          # the last call's signal value
        self.done = 0           # a value known to be reached

    def fence(self, value: int):
        return self.rt.HalFence.create_at(self.sem, value)

    def wait(self, value: int):
        """Until call `value` is done (raises the device's error if a call failed)."""
        if value > self.done:
            self.fence(value).wait()
            self.done = value

    def drain(self):
        """Until every call made so far is done."""
        self.wait(self.value)


def fenced_array(rt):
    """The DeviceArray class whose host reads wait for the work that writes it."""
    global _FencedArray
    if _FencedArray is None:
        class FencedArray(rt.DeviceArray):
            def __init__(self, device, view, ready):
                super().__init__(device, view, implicit_host_transfer=True)
                self._ready = ready

            def _transfer_to_host(self, implicit):
                self._ready()
                return super()._transfer_to_host(implicit)
        _FencedArray = FencedArray
    return _FencedArray


_FencedArray = None


def tied_results(reflection: dict) -> frozenset[int]:
    """The results a function writes over one of its arguments (`iree.abi.output = k`)."""
    return frozenset(int(k) for k in _TIED.findall(reflection.get("iree.abi.declaration", "")))


class AsyncFunction:
    """A coarse-fences function called like the synchronous ones: numpy or device arrays in,
    one result bare, several as a tuple; `extra()` gives arguments appended after the caller's
    (the transient storage)."""

    def __init__(self, module, vm_context, vm_function, extra=None):
        self.m, self.ctx, self.fn, self.extra = module, vm_context, vm_function, extra
        self.tied = tied_results(vm_function.reflection)
        self.array = fenced_array(module.rt)

    def _view(self, a):
        if isinstance(a, self.m.rt.DeviceArray):
            return a._buffer_view
        if isinstance(a, self.m.rt.HalBufferView):
            return a
        return self.m.upload(np.asarray(a))._buffer_view

    def __call__(self, *args):
        rt, tl = self.m.rt, self.m.timeline
        views = [self._view(a) for a in args] + (list(self.extra()) if self.extra else [])
        k = tl.value + 1
        tl.wait(k - DEPTH)
        al = rt.VmVariantList(len(views) + 2)
        for v in views:
            al.push_ref(v)
        al.push_ref(tl.fence(k - 1))
        al.push_ref(tl.fence(k))
        rl = rt.VmVariantList(len(views) + 2)
        self.ctx.invoke(self.fn, al, rl)
        tl.value = k
        dev = self.m.device
        out = tuple(self.array(dev, rl.get_as_object(i, rt.HalBufferView),
                               tl.drain if i in self.tied else partial(tl.wait, k))
                    for i in range(rl.size))
        return out[0] if len(out) == 1 else (None if not out else out)
