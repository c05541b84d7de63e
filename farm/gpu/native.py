"""Compute passes recorded and submitted through wgpu-native's C API, not wgpu-py's objects.

Encoding one pass through wgpu-py costs tens of microseconds of host time: every call goes
through an error-capturing proxy, builds its descriptor struct, wraps the result in a
Python object whose finalizer releases it. A repeated runtime call needs none of that: its
pipelines and bind groups exist already, so `NativeEncoder` makes the same C calls
(wgpuDeviceCreateCommandEncoder, then per pass wgpuCommandEncoderBeginComputePass,
wgpuComputePassEncoderSetPipeline, wgpuComputePassEncoderSetBindGroup,
wgpuComputePassEncoderDispatchWorkgroups, wgpuComputePassEncoderEnd,
wgpuComputePassEncoderRelease; then wgpuCommandEncoderFinish, wgpuQueueSubmit and the
releases) on the raw handles (`obj._internal`) through wgpu-py's own cffi `lib`, with its
descriptors built once. Validation errors still surface: wgpu-native defers a pass's
errors to wgpuCommandEncoderFinish, and finish and submit go through wgpu-py's
error-capturing proxies (once per submission), so a bad pass raises there. (A submission
that binds a destroyed buffer aborts the process inside wgpu-native 29's wgpuQueueSubmit,
through wgpu-py's objects as well: the runtime's pool pins what recorded passes bind.)

Written against wgpu-py 0.32.0 with wgpu-native 29.0.1.1 (`PINNED`): the functions' C
signatures are those of that webgpu.h. `available()` is False, with one warning on the
logger `farm.gpu`, when the wgpu-native library is of another major version, a function
is missing, or wgpu-py's objects hold no `_internal` handle: the runtime then records
through wgpu-py's objects (farm.runtime.calls), slower and otherwise the same.

`C` holds the functions by their C names, so farm.runtime.costs can count these calls
like wgpu-py's.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

log = logging.getLogger("farm.gpu")

PINNED = {"wgpu-py": "0.32.0", "wgpu-native": "29.0.1.1"}
NATIVE_MAJOR = 29  # the C API these calls were written for (webgpu.h changes across majors)
PASS_FUNCTIONS = (
    "wgpuDeviceCreateCommandEncoder",
    "wgpuCommandEncoderBeginComputePass",
    "wgpuComputePassEncoderSetPipeline",
    "wgpuComputePassEncoderSetBindGroup",
    "wgpuComputePassEncoderDispatchWorkgroups",
    "wgpuComputePassEncoderEnd",
    "wgpuComputePassEncoderRelease",
    "wgpuCommandEncoderRelease",
    "wgpuCommandBufferRelease",
    "wgpuCommandEncoderCopyBufferToBuffer",
    "wgpuBufferMapAsync",
    "wgpuBufferGetMappedRange",
    "wgpuBufferUnmap",
    "wgpuDevicePoll",
)
# through wgpu-py's proxy: errors raise
CHECKED_FUNCTIONS = ("wgpuCommandEncoderFinish", "wgpuQueueSubmit", "wgpuQueueWriteBuffer")

C = SimpleNamespace()  # C name -> function, filled by `available()`
_state: dict[str, object] = {}  # "ok": bool, "why": str; decided once per process


def available() -> bool:
    """Whether the raw calls can be used (decided on first use; a warning once if not)."""
    ok = _state.get("ok")
    if ok is None:
        why = _load()
        _state["ok"], _state["why"] = why is None, why
        if why is not None:
            log.warning("recording compute passes through wgpu-py's objects (slower): %s", why)
        ok = _state["ok"]
    return bool(ok)


def unavailable_reason() -> str | None:
    """Why `available()` is False (None when it is True or not decided yet)."""
    return _state.get("why")  # type: ignore[return-value]


def _load() -> str | None:
    try:
        from wgpu.backends.wgpu_native import _api, ffi, lib, lib_version_info
    except ImportError as exc:
        return f"wgpu-py's wgpu_native backend is not importable ({exc})"
    if not lib_version_info or lib_version_info[0] != NATIVE_MAJOR:
        return f"wgpu-native {'.'.join(map(str, lib_version_info))}, written for {NATIVE_MAJOR}.x"
    missing = [n for n in PASS_FUNCTIONS if not hasattr(lib, n)]
    missing += [n for n in CHECKED_FUNCTIONS if not hasattr(getattr(_api, "libf", None), n)]
    if missing:
        return f"wgpu-native lacks {', '.join(missing)}"
    for name in PASS_FUNCTIONS:
        setattr(C, name, getattr(lib, name))
    for name in CHECKED_FUNCTIONS:
        setattr(C, name, getattr(_api.libf, name))
    C.ffi, C.NULL = ffi, ffi.NULL
    return None


def raw(obj):
    """A wgpu-py object's C handle (None when it has none: released, or another backend)."""
    return getattr(obj, "_internal", None)


class NativeEncoder:
    """Recorded passes of one wgpu device, submitted together; not thread-safe (the
    runtime's lock serializes its calls). Each pass is a tuple (pipeline handle, bind group
    handle, x, y, z) of raw handles whose wgpu-py objects the caller keeps alive until the
    pass is recorded (wgpu-native holds its own references from then on)."""

    def __init__(self, device):
        ffi = C.ffi
        self._device, self._queue = device._internal, device.queue._internal
        # descriptors with every field zero: no label, no timestamp writes, no chained struct
        self._encoder_desc = ffi.new("WGPUCommandEncoderDescriptor *")
        self._pass_desc = ffi.new("WGPUComputePassDescriptor *")
        self._buffer_desc = ffi.new("WGPUCommandBufferDescriptor *")
        self._buffers = ffi.new("WGPUCommandBuffer[1]")
        self.encoder = None  # the open command encoder, or None
        self._pass = None  # the compute pass open in it, or None

    def record(self, passes) -> None:
        """`passes` into the open encoder (opened first when there is none), as dispatches of
        one compute pass kept open across calls: WebGPU gives each dispatch its own usage
        scope, so wgpu orders dependent dispatches inside a pass as it does across passes,
        and the GPU is spared a pass boundary per call."""
        encoder = self.encoder
        if encoder is None:
            encoder = self.encoder = C.wgpuDeviceCreateCommandEncoder(self._device, self._encoder_desc)
        compute_pass = self._pass
        if compute_pass is None:
            compute_pass = self._pass = C.wgpuCommandEncoderBeginComputePass(encoder, self._pass_desc)
        set_pipeline, set_group = C.wgpuComputePassEncoderSetPipeline, C.wgpuComputePassEncoderSetBindGroup
        dispatch, null = C.wgpuComputePassEncoderDispatchWorkgroups, C.NULL
        for pipeline, group, x, y, z in passes:
            set_pipeline(compute_pass, pipeline)
            set_group(compute_pass, 0, group, 0, null)
            dispatch(compute_pass, x, y, z)

    def _end_pass(self) -> None:
        compute_pass, self._pass = self._pass, None
        if compute_pass is not None:
            C.wgpuComputePassEncoderEnd(compute_pass)
            C.wgpuComputePassEncoderRelease(compute_pass)

    def copy_buffer_to_buffer(self, source, source_offset: int, destination, destination_offset: int, size: int):
        """wgpu-py's GPUCommandEncoder.copy_buffer_to_buffer (same arguments, wgpu-py buffers)
        into the open encoder: a numpy call's uploads and read-back copies go where its
        passes go. A bad copy raises at `submit`, as a bad pass does."""
        self._end_pass()
        encoder = self.encoder
        if encoder is None:
            encoder = self.encoder = C.wgpuDeviceCreateCommandEncoder(self._device, self._encoder_desc)
        C.wgpuCommandEncoderCopyBufferToBuffer(
            encoder, source._internal, source_offset, destination._internal, destination_offset, size
        )

    def write_buffer(self, buffer, data) -> None:
        """wgpu-py's queue.write_buffer(buffer, 0, data) for a contiguous numpy array of whole
        words, without its argument checks and conversions (through wgpu-py's error-capturing
        proxy: a bad write raises)."""
        C.wgpuQueueWriteBuffer(self._queue, buffer._internal, 0, C.ffi.from_buffer(data), data.nbytes)

    def submit(self) -> None:
        """Finish and submit the open encoder (a no-op when none is open). A wgpu error in
        any recorded pass raises here, after the encoder is released."""
        self._end_pass()
        encoder, self.encoder = self.encoder, None
        if encoder is None:
            return
        try:
            command_buffer = C.wgpuCommandEncoderFinish(encoder, self._buffer_desc)
        finally:
            C.wgpuCommandEncoderRelease(encoder)
        try:
            self._buffers[0] = command_buffer
            C.wgpuQueueSubmit(self._queue, 1, self._buffers)
        finally:
            C.wgpuCommandBufferRelease(command_buffer)

    def drop(self) -> None:
        """Release the open encoder unsubmitted (its passes are not run)."""
        compute_pass, self._pass = self._pass, None
        if compute_pass is not None:
            C.wgpuComputePassEncoderRelease(compute_pass)
        encoder, self.encoder = self.encoder, None
        if encoder is not None:
            C.wgpuCommandEncoderRelease(encoder)

    def __del__(self) -> None:
        try:
            self.drop()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the library may be gone already
            pass
