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

from farm.gpu import native

# waiter key -> (ticket of the last callback run, whether its status was Success). A
# waiter's entry goes with it; a callback for a waiter gone (its device dropped) is ignored.
_FIRED: dict[int, tuple[int, bool]] = {}
_KEYS = itertools.count(1)
_CALLBACKS: dict[str, object] = {}  # signature -> its one ffi callback, never freed (wgpu may call it late)


def _shared_callback(signature: str, success, fired):
    """The one ffi callback of `signature` (made on first use: creating one costs far more
    than a wait): it calls `fired(userdata1, userdata2, status == success)` with both
    userdata pointers as ints. wgpu-py 0.32's own callbacks leave out the message (a
    by-value WGPUStringView), so their userdata arguments would be its pointer and length."""
    made = _CALLBACKS.get(signature)
    if made is None:
        from wgpu.backends.wgpu_native._ffi import ffi

        @ffi.callback(signature)
        def made(status, _message, first, second):
            fired(int(ffi.cast("uintptr_t", first)), int(ffi.cast("uintptr_t", second)), status == success)

        _CALLBACKS[signature] = made
    return made


def _work_done(key: int, ticket: int, ok: bool) -> None:
    if key in _FIRED:
        _FIRED[key] = (ticket, ok)


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
        self._info.callback = _shared_callback(
            "void(WGPUQueueWorkDoneStatus, WGPUStringView, void *, void *)",
            lib.WGPUQueueWorkDoneStatus_Success,
            _work_done,
        )
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


# waiter slot of one pending map -> [resolved, status was Success, Event or None]; the callback
# pops it. A key per map: concurrent reads on one device resolve each their own.
_MAPS: dict[int, list] = {}


def _mapped(key: int, _unused: int, ok: bool) -> None:
    slot = _MAPS.pop(key, None)
    if slot is not None:
        slot[1] = ok
        slot[0] = True  # resolved before the event is read: see MapRead.map
        if slot[2] is not None:
            slot[2].set()


class MapRead:
    """Reads of MAP_READ buffers of one wgpu-py device through the C API: `map` maps a
    range and waits for it, `unmap` ends the read. wgpu-py's own map_async makes a cffi
    callback, a promise and a poller token per call (tens of microseconds on a short read)
    and always waits by its poller thread's wake-up. Here one callback serves every map; the
    wait first spins on non-blocking polls (as SpinWait does), then takes a token of
    wgpu-py's poller thread, whose blocking poll runs the callback, and waits on an event:
    never a second blocking poll beside the poller's (decision 010: two cost milliseconds
    a call on NVIDIA's driver). wgpu-py's buffer object is not told: it reads as unmapped
    throughout, which it is again after `unmap`."""

    def __init__(self, device):
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        self._ffi = ffi
        self._device, self._poller = device._internal, device._poller
        self._lock = threading.Lock()  # one registration at a time through the shared struct
        self._info = ffi.new("WGPUBufferMapCallbackInfo *")
        self._info.mode = lib.WGPUCallbackMode_AllowProcessEvents
        self._info.callback = _shared_callback(
            "void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)", lib.WGPUMapAsyncStatus_Success, _mapped
        )
        self._read = lib.WGPUMapMode_Read  # the C functions: farm.gpu.native's (only used where it is available)

    def map(self, buffer, nbytes: int, spin_s: float):
        """Bytes 0..`nbytes` of wgpu-py MAP_READ `buffer`, mapped once the work submitted
        before is done: a cffi buffer, valid until `unmap`. RuntimeError if the map fails."""
        ffi, lib = self._ffi, native.C  # looked up per call: farm.runtime.costs counts them there
        slot = [False, False, None]
        with self._lock:
            key = next(_KEYS)
            _MAPS[key] = slot
            self._info.userdata1 = ffi.cast("void *", key)
            lib.wgpuBufferMapAsync(buffer._internal, self._read, 0, nbytes, self._info[0])
        if not slot[0] and spin_s > 0:
            poll, device, null = lib.wgpuDevicePoll, self._device, ffi.NULL
            clock, deadline = time.perf_counter, time.perf_counter() + spin_s
            while True:
                poll(device, False, null)  # runs the callbacks of finished work
                if slot[0] or clock() >= deadline:
                    break
        if not slot[0]:
            slot[2] = event = threading.Event()
            token = self._poller.get_token()  # its thread polls (blocking) until the token is done
            try:
                if not slot[0]:  # the callback sets slot[0] before it reads slot[2]
                    event.wait()
            finally:
                token.set_done()
        if not slot[1]:
            raise RuntimeError(f"mapping a staging buffer of {nbytes} bytes for reading failed")
        return ffi.buffer(lib.wgpuBufferGetMappedRange(buffer._internal, 0, nbytes), nbytes)

    def unmap(self, buffer) -> None:
        native.C.wgpuBufferUnmap(buffer._internal)
