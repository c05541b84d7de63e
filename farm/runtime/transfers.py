"""Moving a call's bytes between host and device (farm.runtime.calls uses these).

Uploads: under MAPPED_UPLOAD_MIN by `queue.write_buffer`, larger ones through a pooled
MAP_WRITE staging slab that is mapped again as soon as a call gives it back (`give_back`),
so the next large upload rarely waits for a map. Reads: every numpy output of a call is
copied into one of the Device's reused MAP_READ staging buffers, at its own offset, and
that buffer is mapped once. Plain wgpu-py maps one staging buffer per output, and its
"READ" mode submits an empty command buffer before each map (for buffers written through
a mapping, gfx-rs/wgpu-native#305); staging here is only written by the copies just
submitted, so that submission is skipped. Where wgpu-native's C API is available
(farm.gpu.native) a numpy call's uploads, passes, copies, submission and map go through
it, the map's wait spinning first as a sync's does; else through wgpu-py's objects. Either
way a map that is not resolved by this thread's non-blocking polls is resolved by wgpu-py's
poller thread: waiting by this thread's own blocking poll as well is not done: it saves
microseconds per read on lavapipe but costs milliseconds per numpy call on a discrete GPU,
where two threads then sit in a blocking wgpuDevicePoll (benchmarks/runtime_calls.py
measures a call's cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from farm.gpu import Device, GpuError
from farm.gpu.native import NativeEncoder
from farm.runtime.pool import BufferPool, Slab

# Uploads of this many bytes or more go through a mapped staging buffer: past about 2 MB a
# mapped copy beats write_buffer on a discrete GPU (benchmarks/runtime_calls.py's floors),
# and the runtime's staging is mapped ahead.
MAPPED_UPLOAD_MIN = 2 << 20
READ_MAP_MODE = "READ_NOSYNC"  # "READ" without its empty submission (a mode of wgpu-py 0.32, pinned)


@dataclass
class Read:
    """One output of a read: where it lies in the staging buffer."""

    name: str
    dtype: np.dtype
    count: int
    shape: tuple[int, ...]
    offset: int
    nbytes: int  # copied: the output's bytes, 4-byte aligned


def reads_of(outputs: list[tuple[str, np.dtype, tuple[int, ...]]]) -> tuple[list[Read], int]:
    """The staging layout of `outputs` (name, dtype, shape): each at an 8-byte aligned offset
    (what mapping and reading require); returns it and the staging bytes needed."""
    reads, offset = [], 0
    for name, dtype, shape in outputs:
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = max((count * dtype.itemsize + 3) & ~3, 4)
        reads.append(Read(name, dtype, count, shape, offset, nbytes))
        offset = (offset + nbytes + 7) & ~7
    return reads, offset


def read_back(
    device: Device,
    reads: list[Read],
    nbytes: int,
    handles: list,
    encoder,
    into: dict | None = None,
    spin_s: float = 0.0,
) -> dict[str, np.ndarray]:
    """Copy each output (`handles[i]` holds `reads[i]`) into one staging buffer of at least
    `nbytes`, submit `encoder`, map the staging once and copy every output out of it: into
    the caller's array where `into` names one (memory already touched: a fresh array's pages
    fault on first write, 0.8 against 7.5-18 GB/s for 256 MB on the CPU machine), else a new one.

    `encoder` is a farm.gpu.native.NativeEncoder (the call's passes recorded in it) or a
    wgpu-py command encoder. Through the first the copies, submission and map go through
    wgpu-native's C API, the map's wait spinning up to `spin_s` before it waits for
    wgpu-py's poller thread (farm.gpu.waits.MapRead); through the second, wgpu-py's
    map_async, the poller thread resolving it (after this thread's non-blocking polls for up
    to `spin_s`, which resolve it where the GPU is done by then)."""
    staging = device._take_staging(nbytes)
    native = isinstance(encoder, NativeEncoder)
    try:
        for read, handle in zip(reads, handles, strict=True):
            encoder.copy_buffer_to_buffer(handle, 0, staging, read.offset, read.nbytes)
        if native:
            encoder.submit()
            data = device.map_read(staging, nbytes, spin_s)
        else:
            device.device.queue.submit([encoder.finish()])
            mapping = staging.map_async(READ_MAP_MODE, 0, nbytes)
            if spin_s > 0:
                device.spin(spin_s)  # a poll here runs the map's callback once the copies are done
            mapping.sync_wait()  # else wgpu-py's poller thread resolves it
            data = staging.read_mapped(0, nbytes, copy=False)
        out = {}
        for r in reads:
            view = np.frombuffer(data, r.dtype, r.count, r.offset).reshape(r.shape)
            target = into.get(r.name) if into else None
            if target is None:
                out[r.name] = view.copy()
            else:
                np.copyto(target, view)
                out[r.name] = target
        data = view = None  # no view of the mapping outlives it
        if native:
            device.unmap_read(staging)
        else:
            staging.unmap()
    except Exception as exc:
        if native:
            encoder.drop()  # what a failed copy left open
        staging.destroy()  # it may be left mapped or pending: not for reuse
        raise GpuError("readback", str(exc)) from exc
    device._give_staging(staging)
    return out


def write(device: Device, pool: BufferPool, slab: Slab, value: np.ndarray, encoder, taken: list[Slab]) -> None:
    """Upload `value` into `slab`: small ones by `queue.write_buffer`, large ones into a
    pooled mapped staging buffer and a copy recorded in `encoder` (wgpu's write_buffer
    stages through a new buffer each time, several times slower than a reused one;
    benchmarks/runtime_calls.py measures both). The staging slab joins `taken`,
    for `give_back` once the submission is made: mapping it again waits for that copy."""
    raw = np.ascontiguousarray(value)
    if raw.nbytes % 4:  # uploads and copies move whole words
        raw = np.frombuffer(raw.tobytes() + bytes(4 - raw.nbytes % 4), np.uint8)
    if not raw.nbytes:
        return
    if raw.nbytes < MAPPED_UPLOAD_MIN:
        if isinstance(encoder, NativeEncoder):
            encoder.write_buffer(slab.handle, raw)
        else:
            device.device.queue.write_buffer(slab.handle, 0, raw)
        return
    stage = pool.take(raw.nbytes, "upload")
    taken.append(stage)
    if stage.mapping is not None:  # mapped again after its last copy: usually done by now
        mapping, stage.mapping = stage.mapping, None
        mapping.sync_wait()
    else:
        stage.handle.map_sync("WRITE")
    try:
        stage.handle.write_mapped(raw, 0)
    finally:
        stage.handle.unmap()
    encoder.copy_buffer_to_buffer(stage.handle, 0, slab.handle, 0, raw.nbytes)


def give_back(pool: BufferPool, taken: list[Slab]) -> None:
    """A call's own slabs back to the pool once it is submitted, last taken first (so a
    repeated call gets each slot's slab of the last call back: same bind group). An upload
    slab is mapped for writing again first (WebGPU resolves it once the copy from it is
    done; the call's own wait, or the next one, polls it through)."""
    for slab in reversed(taken):
        if slab.use == "upload" and slab.live:
            try:
                slab.mapping = slab.handle.map_async("WRITE")
            except Exception:  # noqa: BLE001 - mapping later, in `write`, still works
                slab.mapping = None
        pool.give(slab)
