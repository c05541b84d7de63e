"""What a ForgeRuntime call costs the host beyond the GPU's own work, measured
the two ways benchmarks/runtime_calls.py reports and tests/test_runtime_costs.py keeps
from regressing:

- `count_wgpu_calls()` counts, by name, every call into wgpu-native made on this thread.
  Each one goes through wgpu-py's error-capturing proxy, and most build cffi structs and
  wrapper objects first, which makes them most of a synced call's host time
  (docs/decisions/010-spin-wait-and-recorded-submissions.md). A
  runtime call should make exactly the calls plain wgpu-py makes for the same work
  (`plain_dispatch`, the benchmark's submit+wait floor), or fewer.
- `no_gpu(runtime)` replaces the runtime's wgpu device (its queue, encoders, passes and
  any buffer it creates) with no-ops, so a timed call is the runtime's own Python:
  argument checks, plan lookup, pool, DeviceArrays. The same stub under `plain_dispatch`
  costs what merely making the floor's calls costs; the difference is the runtime's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from farm.gpu import native
from farm.runtime.calls import encode_passes
from farm.runtime.pool import BufferPool


@contextmanager
def count_wgpu_calls() -> Iterator[Counter]:
    """Counts of wgpu-native functions (`wgpuQueueSubmit`, ...) called on this thread
    while the block runs (wgpu-py's poller thread is not counted)."""
    from wgpu.backends.wgpu_native import _api

    counts: Counter = Counter()
    thread = threading.get_ident()

    def counted(name, function):
        def call(*args):
            if threading.get_ident() == thread:
                counts[name] += 1
            return function(*args)

        return call

    proxies = {name: f for name, f in vars(_api.libf).items() if name.startswith("wgpu")}
    names = {id(f): name for name, f in proxies.items()}
    # libf's functions, and the class attributes that hold one (set_bind_group's, the releases)
    places = [(_api.libf, name, f) for name, f in proxies.items()]
    for cls in vars(_api).values():
        if isinstance(cls, type):
            places += [(cls, attr, f) for attr, f in vars(cls).items() if id(f) in names]
    # the raw C calls of farm.gpu.native, by the same names
    raw = {name: f for name, f in vars(native.C).items() if name.startswith("wgpu")}
    names.update({id(f): name for name, f in raw.items()})
    places += [(native.C, name, f) for name, f in raw.items()]
    for owner, attr, f in places:
        setattr(owner, attr, counted(names[id(f)], f))
    try:
        yield counts
    finally:
        for owner, attr, f in places:
            setattr(owner, attr, f)


def per_call(counts: Counter, calls: int) -> dict[str, float]:
    """`counts` over `calls` repetitions, per call (releases of objects made by the last
    call may land in the next one: round to the nearest hundredth)."""
    return {name: round(n / calls, 2) for name, n in sorted(counts.items())}


def plain_dispatch(gpu, passes: list, wait: bool = True) -> None:
    """Plain wgpu-py for one submission of `passes` ((pipeline, bind group, (x, y, z)) with
    wgpu objects): an encoder, a compute pass each, finish, submit and, with `wait`, a
    blocking poll. The floor a DeviceArray call with a sync each call is measured against."""
    encoder = gpu.create_command_encoder()
    encode_passes(encoder, passes)
    gpu.queue.submit([encoder.finish()])
    if wait:
        gpu._poll_wait()


def plain_transfer(gpu, writes: list, passes: list, reads: list) -> list[np.ndarray]:
    """Plain wgpu-py for one call from numpy: each (buffer, array) of `writes` by
    `queue.write_buffer`, the passes, each (buffer, staging, nbytes) of `reads` copied into
    its staging buffer, one submit, then each staging buffer mapped ("READ"), copied out and
    unmapped. The floor a numpy call is measured against (the benchmark's TransferFloor)."""
    for buffer, array in writes:
        gpu.queue.write_buffer(buffer, 0, array)
    encoder = gpu.create_command_encoder()
    encode_passes(encoder, passes)
    for buffer, staging, nbytes in reads:
        encoder.copy_buffer_to_buffer(buffer, 0, staging, 0, nbytes)
    gpu.queue.submit([encoder.finish()])
    out = []
    for _, staging, nbytes in reads:
        staging.map_sync("READ", 0, nbytes)
        out.append(np.frombuffer(staging.read_mapped(0, nbytes, copy=False), np.uint8).copy())
        staging.unmap()
    return out


class NoBuffer:
    """A buffer `_NoGpu` makes (or a benchmark's stub staging buffer): mapping, writing and
    destroying do nothing, reading gives zeros."""

    map_state = "unmapped"

    def __init__(self, size: int):
        self.size = size
        self._zeros = None  # made on the first read: a pooled input of 1 GB never is

    def map_async(self, mode, offset=0, size=None):
        self.map_state = "mapped"
        return self

    def sync_wait(self) -> None:
        pass

    def map_sync(self, mode, offset=0, size=None) -> None:
        self.map_state = "mapped"

    def read_mapped(self, offset=0, size=None, copy=True):
        if self._zeros is None:
            # written, as a mapped buffer the GPU copied into is: reading calloc's untouched
            # pages cost 5x more on the CPU machine (a page fault per 4 KB)
            self._zeros = memoryview(bytearray(b"\0" * self.size))
        return self._zeros[offset : offset + (size if size is not None else self.size)]

    def write_mapped(self, data, offset=0) -> None:
        pass

    def unmap(self) -> None:
        self.map_state = "unmapped"

    def destroy(self) -> None:
        pass


class _NoGpu:
    """wgpu's device, queue, command encoder and compute pass in one object, doing nothing:
    real methods (no __getattr__), so the stub itself costs little more than the calls."""

    @property
    def queue(self) -> _NoGpu:
        return self

    def create_buffer(self, *, size: int, usage: int, label: str = "", mapped_at_creation: bool = False):
        return NoBuffer(size)

    def create_bind_group(self, **kw) -> _NoGpu:
        return self

    def create_command_encoder(self, **kw) -> _NoGpu:
        return self

    def begin_compute_pass(self, **kw) -> _NoGpu:
        return self

    def set_pipeline(self, pipeline) -> None:
        pass

    def set_bind_group(self, index, bind_group, *offsets) -> None:
        pass

    def dispatch_workgroups(self, x, y=1, z=1) -> None:
        pass

    def end(self) -> None:
        pass

    def copy_buffer_to_buffer(self, source, source_offset, destination, destination_offset, size) -> None:
        pass

    def clear_buffer(self, buffer, offset=0, size=None) -> None:
        pass

    def finish(self, **kw) -> _NoGpu:
        return self

    def submit(self, command_buffers) -> None:
        pass

    def write_buffer(self, buffer, buffer_offset, data, data_offset=0, size=None) -> None:
        pass

    def _poll_wait(self) -> None:
        pass


class _NoNative(native.NativeEncoder):
    """farm.gpu.native's NativeEncoder doing nothing (its passes hold the stub's objects)."""

    def __init__(self):
        self.encoder, self._pass = None, None

    def record(self, passes) -> None:
        pass

    def copy_buffer_to_buffer(self, source, source_offset, destination, destination_offset, size) -> None:
        pass

    def write_buffer(self, buffer, data) -> None:
        pass

    def submit(self) -> None:
        pass

    def drop(self) -> None:
        pass


class _NoMapRead:
    """farm.gpu.waits.MapRead for a stub staging buffer: its zeros."""

    def map(self, buffer, nbytes: int, spin_s: float):
        return buffer.read_mapped(0, nbytes, copy=False)

    def unmap(self, buffer) -> None:
        pass


@contextmanager
def no_gpu(runtime) -> Iterator[object]:
    """`runtime` with its wgpu device replaced by no-ops for the block (yields the stub,
    which `plain_dispatch` takes too). Calls must repeat a call made before, so that no
    pipeline is compiled; their outputs come from a pool of stub buffers of its own, the
    runtime's pool and the device's byte counts are as before afterwards."""
    device, caller = runtime.device, runtime._caller
    caller.flush()  # what was recorded on the real device goes there
    saved = device.device, caller.pool, device._staging_buffers, device.bytes_in_use, device.bytes_peak
    native_saved, map_saved = caller._native, device._map_read
    stub = _NoGpu()
    device.device, device._staging_buffers, device._map_read = stub, [], _NoMapRead()
    caller.pool = BufferPool(device, idle_bytes=1 << 62)
    if native_saved is not None:
        caller._native = _NoNative()
    try:
        yield stub
    finally:
        caller.flush()
        device.device, caller.pool, device._staging_buffers, device.bytes_in_use, device.bytes_peak = saved
        caller._native, device._map_read = native_saved, map_saved
