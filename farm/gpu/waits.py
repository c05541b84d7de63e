"""A spinning wait for the GPU: `SpinWait(device).wait(spin_s)` polls without sleeping
until the work submitted so far is done, for at most `spin_s`, and says whether it was.

wgpuDevicePoll's return value can't say so: wgpu-native 29's Rust function returns a
one-byte bool while its header (and wgpu-py's cffi) declares a 32-bit WGPUBool, so the
upper bytes are whatever the register held (lavapipe: e.g. 0x03583000 busy, 0x03583001
idle): nonzero, true, while busy, so a spinning wait on it returns while a long kernel is
still running (docs/decisions/010-spin-wait-and-recorded-submissions.md).
So each wait asks the queue for a callback when the work submitted before it is done
(wgpuQueueOnSubmittedWorkDone) and spins on non-blocking polls, which run that callback,
until it has run. One cffi callback serves every device and wait (creating one costs
far more than a wait): userdata1 names the waiter, userdata2 its ticket. wgpu-py's
poller thread is not involved (it polls only for its own tokens, and none is taken);
if some other poll runs the callback first, on any thread, the wait sees that too.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref

# waiter key -> (ticket of the last callback run, whether its status was Success). A
# waiter's entry goes with it; a callback for a waiter gone (its device dropped) is ignored.
_FIRED: dict[int, tuple[int, bool]] = {}
_KEYS = itertools.count(1)
_CALLBACK = None  # the one ffi callback, made on first use and never freed (wgpu may call it late)


def _callback():
    global _CALLBACK
    if _CALLBACK is None:
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        success = lib.WGPUQueueWorkDoneStatus_Success

        # wgpu-py 0.32's own callback leaves out the message (a by-value WGPUStringView),
        # so its userdata arguments would be the message's pointer and length.
        @ffi.callback("void(WGPUQueueWorkDoneStatus, WGPUStringView, void *, void *)")
        def work_done(status, _message, key, ticket):
            key = int(ffi.cast("uintptr_t", key))
            if key in _FIRED:
                _FIRED[key] = (int(ffi.cast("uintptr_t", ticket)), status == success)

        _CALLBACK = work_done
    return _CALLBACK


class SpinWait:
    """Spinning waits for one wgpu-py device's queue (`wait`); safe from any thread."""

    def __init__(self, device):
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        self._ffi, self._lib = ffi, lib
        self._device, self._queue = device._internal, device.queue._internal
        self._key = next(_KEYS)
        _FIRED[self._key] = (0, True)
        weakref.finalize(self, _FIRED.pop, self._key, None)
        self._tickets = itertools.count(1)
        self._lock = threading.Lock()  # one registration at a time through the shared struct
        self._info = ffi.new("WGPUQueueWorkDoneCallbackInfo *")
        self._info.mode = lib.WGPUCallbackMode_AllowProcessEvents
        self._info.callback = _callback()
        self._info.userdata1 = ffi.cast("void *", self._key)

    def wait(self, spin_s: float) -> bool:
        """True once the work submitted before the call is done (its callback ran with
        status Success); False when `spin_s` passed first or the status was an error: the
        caller then blocks (wgpuDevicePoll with wait=True), which also runs the callback."""
        ffi, key = self._ffi, self._key
        with self._lock:
            ticket = next(self._tickets)
            self._info.userdata2 = ffi.cast("void *", ticket)
            self._lib.wgpuQueueOnSubmittedWorkDone(self._queue, self._info[0])
        poll, device, null, fired = self._lib.wgpuDevicePoll, self._device, ffi.NULL, _FIRED
        clock, deadline = time.perf_counter, time.perf_counter() + spin_s
        while True:
            poll(device, False, null)  # runs the callbacks of finished work; its result is not used
            done, ok = fired[key]
            if done >= ticket:
                return ok
            if clock() >= deadline:
                return False
