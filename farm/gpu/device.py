"""The wgpu executor: one small backend in the spirit of tinygrad's. A `Device` owns one
wgpu device and queue, compiles pipelines (cached per source + constants), allocates
buffers (with byte accounting), dispatches and reads back; its timing half (GPU
timestamp queries, warm-up rules) is `farm.gpu.timing.TimedDevice`. Every wgpu failure
becomes a `GpuError` that names the step.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from farm.gpu.adapter import (
    MAX_GROUPS_PER_DIM,
    TOPOLOGY_LIMITS,
    CpuAdapterRefused,
    GpuError,
    HardwareProfile,
    choose_adapter,
    refuse_cpu,
)
from farm.gpu.modules import create_module
from farm.gpu.timing import TimedDevice, Timing
from farm.gpu.waits import SpinWait

STAGING_KEEP = 8  # free readback staging buffers a Device keeps for reuse (a worker has ~6 in flight)


def benchmark_device(allow_cpu: bool) -> Device | None:
    """The Device a benchmark script measures on, or None (the refusal printed to stderr)
    when it is a CPU adapter and `allow_cpu` is false."""
    device = Device()
    try:
        refuse_cpu(device.profile, allow_cpu, "benchmark")
    except CpuAdapterRefused as exc:
        print(exc, file=sys.stderr)
        return None
    return device

def fold_groups(count: int, max_per_dim: int = MAX_GROUPS_PER_DIM) -> tuple[int, int, int]:
    """Fold a linear workgroup count into a 2-D grid that respects the per-dimension cap.

    Kernels recover the linear id as `wid.x + wid.y * nwg.x` and skip ids >= count.
    """
    if count < 1:
        raise ValueError(f"workgroup count must be >= 1, got {count}")
    if count <= max_per_dim:
        return (count, 1, 1)
    y = -(-count // max_per_dim)
    if y > max_per_dim:
        raise ValueError(f"workgroup count {count} exceeds {max_per_dim}^2")
    x = -(-count // y)
    return (x, y, 1)


class PendingRead:
    """Output copies submitted to staging buffers (`Device.submit_reads`), not yet read.

    `map()` waits for the copies; call it on the thread that submits work: wgpu maps by
    polling the device until the copy is done, and a poll that waits holds up other
    threads' submissions (on the H200 a worker's submissions waited 31 ms per trial while
    checker threads mapped). `collect()`, from any thread, maps if needed, copies the data
    out (numpy's copy, without holding the GIL) and frees the staging buffers."""

    def __init__(self, device: Device, parts: list):
        self._device = device
        self._parts = parts
        self._mapped = False

    @property
    def nbytes(self) -> int:
        """Staging bytes held until `collect()` (0 once collected)."""
        return sum(part[2] for part in self._parts)

    def map(self) -> None:
        if self._mapped or not self._parts:
            return
        try:
            for _, staging, size, *_ in self._parts:
                staging.map_sync("READ", 0, size)
        except Exception as exc:  # noqa: BLE001
            self._release()
            raise GpuError("readback", str(exc)) from exc
        self._mapped = True

    def collect(self) -> dict[str, np.ndarray]:
        """{name: array}: the copies' data, owned by the caller; frees the staging buffers."""
        self.map()
        out = {}
        try:
            for name, staging, size, dtype, count, shape in self._parts:
                view = np.frombuffer(staging.read_mapped(0, size, copy=False), dtype=dtype)
                array = (view[:count] if count is not None else view).copy()
                out[name] = array.reshape(shape) if shape is not None else array
        except Exception as exc:  # noqa: BLE001
            raise GpuError("readback", str(exc)) from exc
        finally:
            self._release()
        return out

    def _release(self) -> None:
        for _, staging, *_ in self._parts:
            if staging.map_state == "mapped":
                staging.unmap()
            self._device._give_staging(staging)
        self._parts = []
        self._mapped = False


@dataclass
class Buffer:
    """A device buffer and its role in a binding (storage, read-only storage or uniform)."""

    handle: Any
    nbytes: int
    kind: str  # "read" | "storage" | "uniform"


@dataclass
class Pipeline:
    handle: Any
    label: str

class Device(TimedDevice):
    """One wgpu device + queue with a pipeline cache and buffer byte accounting."""

    def __init__(self, adapter=None, features: tuple[str, ...] = ()):
        """`features`: adapter features to require besides timestamp-query, subgroup and
        shader-f16 (asked for where the adapter has them), e.g. ("cooperative-matrix",) for
        benchmarks/coop_gemm.py; one the adapter lacks is a GpuError at step "device"."""
        import wgpu

        self._wgpu = wgpu
        self.adapter = adapter if adapter is not None else choose_adapter()
        self.profile = HardwareProfile.from_adapter(self.adapter)
        if missing := [f for f in features if f not in self.adapter.features]:
            raise GpuError("device", f"the adapter lacks the feature(s) {', '.join(missing)}")
        defaults = [f for f in ("timestamp-query", "subgroup", "shader-f16") if f in self.adapter.features]
        features = defaults + [f for f in features if f not in defaults]
        limits = {k: self.adapter.limits[k] for k in TOPOLOGY_LIMITS if k in self.adapter.limits}
        try:
            self.device = self.adapter.request_device_sync(required_features=features, required_limits=limits)
        except Exception as exc:  # noqa: BLE001 - any wgpu failure becomes a GpuError
            raise GpuError("device", str(exc)) from exc
        self.timestamps = "timestamp-query" in features
        self._init_timing(gpu=not self.profile.is_cpu)
        self._pipelines: dict[str, Pipeline] = {}
        self._staging_buffers: list = []  # reused readback buffers, least recently used first
        self._staging_lock = threading.Lock()
        self._spin_wait: SpinWait | None = None  # made on the first spinning wait
        self.bytes_in_use = 0
        self.bytes_peak = 0

    # -- compile -----------------------------------------------------------------
    def pipeline(
        self,
        source: str,
        entry_point: str = "main",
        constants: dict[str, float] | None = None,
        label: str = "",
        schedule: Any = None,
        checked: bool = True,
    ) -> Pipeline:
        """Compile (or fetch from cache) a compute pipeline for `source` + `constants`, its
        module with naga's runtime checks unless `checked` is False (farm.gpu.modules)."""
        constants = dict(constants or {})
        key = hashlib.sha256(
            (label + source + entry_point + json.dumps(constants, sort_keys=True) + f"checked={checked}").encode()
        ).hexdigest()
        cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        try:
            module = create_module(self.device, source, label, checked)
        except Exception as exc:  # noqa: BLE001
            raise GpuError("compile", str(exc), label, schedule) from exc
        stage = {"module": module, "entry_point": entry_point}
        if constants:
            stage["constants"] = constants
        try:
            handle = self.device.create_compute_pipeline(layout="auto", compute=stage, label=label)
        except Exception as exc:  # noqa: BLE001
            raise GpuError("pipeline", str(exc), label, schedule) from exc
        pipeline = Pipeline(handle=handle, label=label)
        self._pipelines[key] = pipeline
        return pipeline

    @property
    def cached_pipelines(self) -> int:
        return len(self._pipelines)

    # -- buffers -----------------------------------------------------------------
    def upload(self, data: np.ndarray | bytes, kind: str = "read") -> Buffer:
        """A buffer holding `data`; `kind` is read (read-only storage), storage or uniform."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            raw = memoryview(data).cast("B")
        else:  # no intermediate bytes copy: a 256 MB input was copied twice before
            raw = memoryview(np.ascontiguousarray(data)).cast("B")
        nbytes = max(_align4(len(raw)), 4 if kind != "uniform" else 16)
        buffer = self.empty(nbytes, kind)
        if len(raw):
            if len(raw) % 4:
                raw = memoryview(bytes(raw) + bytes(4 - len(raw) % 4))
            try:
                self.device.queue.write_buffer(buffer.handle, 0, raw)
            except Exception as exc:  # noqa: BLE001
                self.release(buffer)
                raise GpuError("bind", f"upload of {len(raw)} bytes: {exc}") from exc
        return buffer

    def empty(self, nbytes: int, kind: str = "storage") -> Buffer:
        usage = self._wgpu.BufferUsage
        flags = usage.COPY_DST | usage.COPY_SRC
        flags |= usage.UNIFORM if kind == "uniform" else usage.STORAGE
        nbytes = max(_align4(nbytes), 4)
        try:
            handle = self.device.create_buffer(size=nbytes, usage=flags)
        except Exception as exc:  # noqa: BLE001
            raise GpuError("bind", f"allocating {nbytes} bytes: {exc}") from exc
        self.bytes_in_use += nbytes
        self.bytes_peak = max(self.bytes_peak, self.bytes_in_use)
        return Buffer(handle=handle, nbytes=nbytes, kind=kind)

    def track(self, nbytes: int) -> None:
        """Count `nbytes` (negative: freed) of buffers made outside `empty` (the runtime's pool)."""
        self.bytes_in_use += nbytes
        self.bytes_peak = max(self.bytes_peak, self.bytes_in_use)

    def release(self, *buffers: Buffer) -> None:
        for buffer in buffers:
            if buffer.handle is None:
                continue
            buffer.handle.destroy()
            buffer.handle = None
            self.bytes_in_use -= buffer.nbytes

    def read(self, buffer: Buffer, dtype=np.float32, count: int | None = None) -> np.ndarray:
        """The first `count` elements (all when None) of `buffer`, copied to the host through
        a reused mappable staging buffer (wgpu-py's read_buffer allocates one per call)."""
        return self.submit_reads([("out", buffer, dtype, count, None)]).collect()["out"]

    def run_and_read(self, calls: list, clear: list[Buffer], reads: list, schedule: Any = None) -> PendingRead:
        """One submission: zero `clear`, run the (pipeline, bind_group, groups) passes, copy
        `reads` out (see `submit_reads`). Doesn't wait: the caller may queue more work (the
        timing) first."""
        label = calls[0][0].label if calls else ""
        try:
            encoder = self.device.create_command_encoder()
            for buffer in clear:
                encoder.clear_buffer(buffer.handle, 0, buffer.nbytes)
            for pipeline, bind_group, groups in calls:
                self._encode_pass(encoder, pipeline, bind_group, groups)
        except GpuError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise GpuError("dispatch", str(exc), label, schedule) from exc
        return self.submit_reads(reads, encoder)

    def submit_reads(self, reads: list, encoder=None) -> PendingRead:
        """Copy each (name, buffer, dtype, count, shape) into its own staging buffer and
        submit (with `encoder`'s commands before the copies, when given) without waiting;
        `PendingRead.collect()`, from any thread, maps and reads them. The queue runs in
        order, so work submitted later (timing) need not wait for the host's reading."""
        parts = []
        try:
            encoder = encoder if encoder is not None else self.device.create_command_encoder()
            for name, buffer, dtype, count, shape in reads:
                dtype = np.dtype(dtype)
                size = buffer.nbytes if count is None else min(buffer.nbytes, _align4(count * dtype.itemsize))
                staging = self._take_staging(size)
                parts.append((name, staging, size, dtype, count, shape))
                encoder.copy_buffer_to_buffer(buffer.handle, 0, staging, 0, size)
            self.device.queue.submit([encoder.finish()])
        except Exception as exc:  # noqa: BLE001
            for part in parts:
                self._give_staging(part[1])
            raise GpuError("readback", str(exc)) from exc
        return PendingRead(self, parts)

    def _take_staging(self, size: int):
        """A MAP_READ buffer of at least `size` bytes, exclusively the caller's until
        `_give_staging` (the smallest free one that fits, else a new one)."""
        with self._staging_lock:
            fits = [(c.size, i) for i, c in enumerate(self._staging_buffers) if c.size >= size]
            if fits:
                return self._staging_buffers.pop(min(fits)[1])
        usage = self._wgpu.BufferUsage
        return self.device.create_buffer(size=max(size, 4), usage=usage.COPY_DST | usage.MAP_READ)

    def _give_staging(self, staging) -> None:
        """Back to the free list (most recently used last; at most STAGING_KEEP kept)."""
        with self._staging_lock:
            self._staging_buffers.append(staging)
            while len(self._staging_buffers) > STAGING_KEEP:
                self._staging_buffers.pop(0).destroy()

    def write(self, buffer: Buffer, data: np.ndarray | bytes) -> None:
        raw = data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes()
        self.device.queue.write_buffer(buffer.handle, 0, raw)

    # -- dispatch ----------------------------------------------------------------
    def bind(self, pipeline: Pipeline, buffers: list, schedule: Any = None, bindings: tuple[int, ...] | None = None):
        """A bind group of `buffers` at bindings 0, 1, ... or, with `bindings`, of
        buffers[i] at binding i for each i in it (a pass that uses some of a launch's args).
        An entry is a Buffer, bound whole, or a (Buffer, offset, size) range: `size` bytes from
        byte `offset`, a multiple of the min-uniform-buffer-offset-alignment limit (storage:
        min-storage-...), e.g. one row of a uniform buffer holding many passes' parameters
        (farm.recurrent.paths.BaselinePlan). A range wgpu refuses is a GpuError at "bind"."""
        numbers = range(len(buffers)) if bindings is None else bindings
        entries = []
        for i in numbers:
            buffer, offset, size = buffers[i] if isinstance(buffers[i], tuple) else (buffers[i], 0, buffers[i].nbytes)
            entries.append({"binding": i, "resource": {"buffer": buffer.handle, "offset": offset, "size": size}})
        try:
            layout = pipeline.handle.get_bind_group_layout(0)
            return self.device.create_bind_group(layout=layout, entries=entries)
        except Exception as exc:  # noqa: BLE001
            raise GpuError("bind", str(exc), pipeline.label, schedule) from exc

    def dispatch(
        self, pipeline: Pipeline, buffers: list, groups: int | tuple[int, int, int], schedule: Any = None,
        wait: bool = True,
    ) -> None:
        """Run one dispatch of `buffers` (entries as in `bind`; linear group counts folded into 2-D)."""
        self.dispatch_many([(pipeline, self.bind(pipeline, buffers, schedule), groups)], schedule, wait)

    def retire_encoders(self, count: int = 16) -> None:
        """Take the command encoders wgpu would reuse next out of its pool: one that recorded a
        huge submission stays slow to reuse (H200: small submissions 1.3 against 0.3-0.4 ms
        after 32,768 passes; lavapipe 12 against 0.6). `count` held at once, finished, dropped."""
        unsubmitted = [self.device.create_command_encoder().finish() for _ in range(count)]
        del unsubmitted

    def dispatch_many(self, calls: list, schedule: Any = None, wait: bool = True) -> None:
        """Encode several (pipeline, bind_group, groups) dispatches into one submission."""
        label = calls[0][0].label if calls else ""
        try:
            encoder = self.device.create_command_encoder()
            for pipeline, bind_group, groups in calls:
                self._encode_pass(encoder, pipeline, bind_group, groups)
            self.device.queue.submit([encoder.finish()])
            if wait:
                self.wait_idle()
        except GpuError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise GpuError("dispatch", str(exc), label, schedule) from exc

    def wait_idle(self, spin_s: float = 0.0) -> None:
        """Block until submitted work is done (wgpuDevicePoll, wait=True; wgpu-py 0.32's
        on_submitted_work_done_sync has a broken callback signature). With `spin_s` > 0 it
        first polls without blocking for up to that long until the queue's work-done
        callback runs (a core busy meanwhile; `farm.gpu.waits`: the poll's own result is
        garbage): a short kernel's wait then ends when the GPU does, not when the driver
        wakes a sleeping thread (the lever behind submit+wait's 121 us on the H200 against
        torch's 20 us op + synchronize; benchmarks/runtime_calls.py measures both waits)."""
        if spin_s > 0:
            if self._spin_wait is None:
                self._spin_wait = SpinWait(self.device)
            if self._spin_wait.wait(spin_s):
                return
        self.device._poll_wait()

    def _encode_pass(self, encoder, pipeline: Pipeline, bind_group, groups, timestamp_writes=None):
        grid = fold_groups(groups) if isinstance(groups, int) else groups
        if max(grid) > MAX_GROUPS_PER_DIM:
            raise GpuError("dispatch", f"grid {grid} exceeds {MAX_GROUPS_PER_DIM} per dimension", pipeline.label)
        compute_pass = encoder.begin_compute_pass(timestamp_writes=timestamp_writes)
        compute_pass.set_pipeline(pipeline.handle)
        compute_pass.set_bind_group(0, bind_group)
        compute_pass.dispatch_workgroups(*grid)
        compute_pass.end()
    def time(
        self,
        pipeline: Pipeline,
        buffers: list[Buffer],
        groups: int | tuple[int, int, int],
        warmup: int = 2,
        reps: int = 10,
        schedule: Any = None,
    ) -> Timing:
        """Median/p20/p80/min per-dispatch time of one kernel; see `time_calls`."""
        calls = [(pipeline, self.bind(pipeline, buffers, schedule), groups)]
        return self.time_calls(calls, warmup, reps, schedule)

    def memory(self) -> dict[str, int]:
        return {"in_use": self.bytes_in_use, "reserved": self.bytes_peak}


def _align4(n: int) -> int:
    return (n + 3) & ~3
