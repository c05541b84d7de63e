"""The wgpu executor: one small backend in the spirit of tinygrad's. A `Device` owns one
wgpu device and queue, compiles pipelines (cached per source + constants), allocates
buffers (with byte accounting), dispatches, reads back, and times dispatches (`Timing`).
Every wgpu failure becomes a `GpuError` that names the step.

This is one idea in one module: timing is dispatching with rules about the GPU's clocks
(warm-up, lead-in, the clock canary's re-timing), and those rules read and update the
device's own record of when it last worked, so a timed dispatch and a plain one are the
same object's business. docs/decisions/002-clock-canary-and-heater.md says why the rules
are what they are.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
import threading
import time
from collections import deque
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
from farm.gpu.clocks import CLOCK_TOLERANCE, trace_check
from farm.gpu.modules import create_module
from farm.gpu.waits import MapRead, SpinWait

STAGING_KEEP = 8  # free readback staging buffers a Device keeps for reuse (a worker has ~6 in flight)

# GPU warm-up (Device._warm_up): idle gaps after which clocks have dropped, the agreement
# between consecutive warm-up rounds that counts as steady, and the least round length.
HOT_GAP_S = 0.25
HOT_SPAN_S = 0.02  # a timing at least this long, ended under HOT_GAP_S ago: no warm-up rounds
# Nor when timings kept the GPU busy for HOT_BUSY of the last HOT_WINDOW_S (back-to-back
# short trials keep the clocks up as one long timing does; a GPU busy less than that may
# be dropping them, and the rounds, themselves busy, bring the share back up).
HOT_WINDOW_S = 0.1
HOT_BUSY = 0.5
LONG_IDLE_S = 1.0
WARM_STEADY = 0.03
WARM_ROUND_S = 0.01
# The timed reps' lead-in (Device._timestamp_samples): GPU seconds of untimed passes in
# the reps' own submission when the reps alone are shorter, and the most passes it may take.
LEAD_IN_S = 0.002
MAX_LEAD_PASSES = 1024
CLOCK_WARM_S = 0.2  # the heater's passes back to back before a timing the clock check read slow is re-timed
# A re-timing's reps sit behind RETIME_LEAD_S of the kernel's own passes in their submission (no
# host gap between warm and timed work), and are timed again, up to RETIME_ATTEMPTS times in all,
# while the canary after them reads slow: the heater alone often left a re-timing still slow.
RETIME_LEAD_S = 0.02
RETIME_ATTEMPTS = 3
# A report's timing (farm bench's rows, the recurrent sweep's fused column): the kernel back
# to back for REPORT_WARM_S, then the canary's heater while the canary reads slow, up to about
# REPORT_WARM_MAX_S (Device.warm_until_clocks). The same for both, so that they agree: a
# report's first rows otherwise read slow after host work left the GPU idle.
REPORT_WARM_S = 0.5
REPORT_WARM_MAX_S = 2.0
# Only timings whose reps hold less GPU time than this are checked: slow trials are short
# kernels', and after long reps a power-capped GPU's sustained clocks would read as "slow"
# against the canary's best.
CLOCK_CHECK_MAX_S = 0.02
# A short timing the clock check read over RECHECK_TOLERANCE x the canary's best (under
# CLOCK_TOLERANCE: not "slow") is re-timed too when, scaled by the canary, it would beat
# `beat_ns` (a tuning worker's best so far on the problem): a small clock wander could
# otherwise send a search into the wrong basin of a flat landscape of short kernels. The
# re-timing is kept when its canary reads faster.
RECHECK_TOLERANCE = 1.05


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


@dataclass(frozen=True)
class Timing:
    """Per-dispatch times in nanoseconds over `reps` measured runs after warm-up."""

    median_ns: float
    p20_ns: float
    p80_ns: float
    min_ns: float
    reps: int
    method: str  # "timestamp" (GPU) or "host"

    @classmethod
    def from_samples(cls, samples: list[float], method: str) -> Timing:
        ordered = sorted(samples)
        return cls(
            median_ns=float(statistics.median(ordered)),
            p20_ns=float(_quantile(ordered, 0.2)),
            p80_ns=float(_quantile(ordered, 0.8)),
            min_ns=float(ordered[0]),
            reps=len(ordered),
            method=method,
        )


def _quantile(ordered: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(ordered, dtype=np.float64), q))


class PendingRead:
    """Output copies submitted to staging buffers (`Device.submit_reads`), not yet read.

    `map()` waits for the copies; call it on the thread that submits work: wgpu maps by
    polling the device until the copy is done, and a poll that waits holds up other
    threads' submissions (a worker's trials would wait while its checker threads map).
    `collect()`, from any thread, maps if needed, copies the data out (numpy's copy,
    without holding the GIL) and frees the staging buffers."""

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


class Device:
    """One wgpu device + queue with a pipeline cache and buffer byte accounting."""

    def __init__(self, adapter=None):
        import wgpu

        self._wgpu = wgpu
        self.adapter = adapter if adapter is not None else choose_adapter()
        self.profile = HardwareProfile.from_adapter(self.adapter)
        features = [f for f in ("timestamp-query", "subgroup", "shader-f16") if f in self.adapter.features]
        limits = {k: self.adapter.limits[k] for k in TOPOLOGY_LIMITS if k in self.adapter.limits}
        try:
            self.device = self.adapter.request_device_sync(required_features=features, required_limits=limits)
        except Exception as exc:  # noqa: BLE001 - any wgpu failure becomes a GpuError
            raise GpuError("device", str(exc)) from exc
        self.timestamps = "timestamp-query" in features
        gpu = not self.profile.is_cpu
        # Warm-up before timing on a GPU, whose clocks drop while it idles (the CPU
        # certifying, computing a reference) and take a while to come back: at least
        # warm_s of work after a short idle gap, warm_idle_s after a long one, then until two
        # consecutive rounds agree, at most warm_max_s. A CPU adapter has no such ramp,
        # and tests on lavapipe stay fast.
        self.warm_s = 0.05 if gpu else 0.0
        self.warm_idle_s = 0.25 if gpu else 0.0
        self.warm_max_s = 1.0 if gpu else 0.0
        self._busy_until = 0.0  # time.perf_counter() when timed work last finished
        self._busy_span = 0.0  # seconds that the last timed work (warm-up and reps) lasted
        self._recent: deque[tuple[float, float]] = deque()  # (start, end) of recent timings
        self.warm_spent_s = 0.0  # seconds spent warming up, all timings together
        self.rounds_spent_s = 0.0  # of them, in warm-up rounds (the rest: keep_busy, re-timings' heater)
        # The clock check after each GPU-timestamp timing (farm.gpu.clocks): on GPUs only
        self.check_clocks = gpu
        self._clock = None
        self.clock_retimes = 0  # timings re-timed because the check read low clocks
        self.clock_retime_s = 0.0  # seconds those re-timings spent (warm-up and reps)
        self.clock_rechecks = 0  # of them, timings re-timed as competitive at slightly low clocks
        self.clock_retimes_slow = 0  # slow timings whose re-timing the canary still read slow
        self._pipelines: dict[str, Pipeline] = {}
        self._staging_buffers: list = []  # reused readback buffers, least recently used first
        self._staging_lock = threading.Lock()
        self._spin_wait: SpinWait | None = None  # made on the first spinning wait
        self._map_read: MapRead | None = None  # made on the first read through the C API
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
        else:  # no intermediate bytes copy: a large input would be copied twice
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
    def bind(
        self,
        pipeline: Pipeline,
        buffers: list,
        schedule: Any = None,
        bindings: tuple[int, ...] | None = None,
        numbers: tuple[int, ...] | None = None,
    ):
        """A bind group of `buffers` at bindings 0, 1, ... or, with `bindings`, of
        buffers[i] at binding i for each i in it (a pass that uses some of a launch's args),
        or at the binding of the same place in `numbers` when given (a farm.Kernel pass).
        An entry is a Buffer, bound whole, or a (Buffer, offset, size) range: `size` bytes from
        byte `offset`, a multiple of the min-uniform-buffer-offset-alignment limit (storage:
        min-storage-...), e.g. one row of a uniform buffer holding many passes' parameters
        (farm.recurrent.paths.BaselinePlan). A range wgpu refuses is a GpuError at "bind"."""
        indices = range(len(buffers)) if bindings is None else bindings
        entries = []
        for i, number in zip(indices, indices if numbers is None else numbers, strict=True):
            buffer, offset, size = buffers[i] if isinstance(buffers[i], tuple) else (buffers[i], 0, buffers[i].nbytes)
            entries.append({"binding": number, "resource": {"buffer": buffer.handle, "offset": offset, "size": size}})
        try:
            layout = pipeline.handle.get_bind_group_layout(0)
            return self.device.create_bind_group(layout=layout, entries=entries)
        except Exception as exc:  # noqa: BLE001
            raise GpuError("bind", str(exc), pipeline.label, schedule) from exc

    def dispatch(
        self,
        pipeline: Pipeline,
        buffers: list,
        groups: int | tuple[int, int, int],
        schedule: Any = None,
        wait: bool = True,
    ) -> None:
        """Run one dispatch of `buffers` (entries as in `bind`; linear group counts folded into 2-D)."""
        self.dispatch_many([(pipeline, self.bind(pipeline, buffers, schedule), groups)], schedule, wait)

    def retire_encoders(self, count: int = 16) -> None:
        """Take the command encoders wgpu would reuse next out of its pool: one that recorded a
        huge submission stays several times slower to reuse. `count` held at once, finished,
        dropped."""
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
        wakes a sleeping thread (benchmarks/runtime_calls.py measures both waits)."""
        if spin_s > 0 and self.spin(spin_s):
            return
        self.device._poll_wait()

    def spin(self, spin_s: float) -> bool:
        """Poll without sleeping, for at most `spin_s`, until the work submitted so far is
        done (`farm.gpu.waits`); True if it was. The polls also run other callbacks of
        finished work, a pending buffer map's included."""
        if self._spin_wait is None:
            self._spin_wait = SpinWait(self.device)
        return self._spin_wait.wait(spin_s)

    def map_read(self, staging, nbytes: int, spin_s: float = 0.0):
        """Bytes 0..`nbytes` of the MAP_READ buffer `staging` once the work submitted so far
        has written them, through wgpu-native's C API (`farm.gpu.waits.MapRead`: spinning up
        to `spin_s` first); valid until `unmap_read(staging)`."""
        if self._map_read is None:
            self._map_read = MapRead(self.device)
        return self._map_read.map(staging, nbytes, spin_s)

    def unmap_read(self, staging) -> None:
        self._map_read.unmap(staging)

    def _encode_pass(self, encoder, pipeline: Pipeline, bind_group, groups, timestamp_writes=None):
        grid = fold_groups(groups) if isinstance(groups, int) else groups
        if max(grid) > MAX_GROUPS_PER_DIM:
            raise GpuError("dispatch", f"grid {grid} exceeds {MAX_GROUPS_PER_DIM} per dimension", pipeline.label)
        compute_pass = encoder.begin_compute_pass(timestamp_writes=timestamp_writes)
        compute_pass.set_pipeline(pipeline.handle)
        compute_pass.set_bind_group(0, bind_group)
        compute_pass.dispatch_workgroups(*grid)
        compute_pass.end()

    # -- timing ------------------------------------------------------------------
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

    def time_calls(
        self, calls: list, warmup: int = 2, reps: int = 10, schedule: Any = None, beat_ns: float | None = None
    ) -> Timing:
        """Time a submission of (pipeline, bind_group, groups) passes: by GPU timestamps all
        reps in one submission (`_timestamp_samples`), by host wall one submission per rep.

        Warm-up is `warmup` submissions and then, on GPUs, rounds of growing batches until two
        consecutive rounds agree within WARM_STEADY, after at least warm_s (idle since the
        last timing over HOT_GAP_S) or warm_idle_s (idle over LONG_IDLE_S) and at most
        warm_max_s: a GPU idle between trials drops to idle clocks, and a few short warm-up
        dispatches would not bring it back (trials read several times slow, even after 50 ms
        of warm-up when the GPU had idled for seconds). No rounds when the last
        timing lasted HOT_SPAN_S or more and ended under HOT_GAP_S ago: the GPU is at its
        clocks (gemm 4096^3 trials back to back), nor while timings have kept the GPU busy
        for HOT_BUSY of the last HOT_WINDOW_S (a tuning worker's back-to-back short trials,
        which would otherwise spend most of their time in rounds). A GPU that ran only short
        kernels now and then is not: its clocks have dropped.
        With timestamp queries the sample is GPU time from the start of the first pass to
        the end of the last ("timestamp"); otherwise host wall time around a synchronous
        submission ("host"). `beat_ns`: see RECHECK_TOLERANCE.
        """
        if reps < 1:
            raise ValueError(f"reps must be >= 1, got {reps}")
        begin = time.perf_counter()
        self._warm_up(calls, warmup, schedule)
        try:
            if self.timestamps:
                samples = self._timestamp_samples(calls, reps, schedule)
                short = sum(samples) < CLOCK_CHECK_MAX_S * 1e9  # long reps kept the GPU at its (sustained) clocks
                if self.check_clocks and short:
                    samples = self._checked(calls, reps, schedule, samples, beat_ns)
                return Timing.from_samples(samples, "timestamp")
            self.wait_idle()  # the warm-up submissions are not part of the first sample
            samples = []
            for _ in range(reps):
                start = time.perf_counter_ns()
                self.dispatch_many(calls, schedule)
                samples.append(float(time.perf_counter_ns() - start))
            return Timing.from_samples(samples, "host")
        finally:
            self._mark_busy(begin, time.perf_counter())

    def _warm_up(self, calls: list, warmup: int, schedule: Any) -> None:
        for _ in range(max(warmup, 0)):
            self.dispatch_many(calls, schedule, wait=False)  # the queue runs them before the timed reps
        if self.warm_s <= 0:
            return
        if self._clocks_up(time.perf_counter()):
            return
        # Rounds compare per-call times: the queue (a certification run, the counted warm-up)
        # must be empty first, or the first round reads slow and one more round is spent.
        self.wait_idle()
        start = time.perf_counter()
        try:
            self._warm_rounds(calls, schedule, start)
        finally:
            spent = time.perf_counter() - start
            self.warm_spent_s += spent
            self.rounds_spent_s += spent

    def _clock_check(self):
        if self._clock is None:
            from farm.gpu.clocks import ClockCheck

            self._clock = ClockCheck(self)
        return self._clock

    def clock_ratio(self) -> float | None:
        """The clock canary now against its best on this device (1.0: at the clocks the device
        has shown; 1.25: a latency-bound kernel runs about 25% slow), None where there is no
        canary (a CPU adapter, no timestamps). Reports put it next to a timing, so that two
        timings of one kernel that differ can be told apart from the clock wandering."""
        return self._clock_check().ratio() if self.check_clocks else None

    def _checked(self, calls: list, reps: int, schedule: Any, samples: list[float], beat_ns: float | None):
        """The samples of a short timing after the clock check: re-timed when it read slow,
        or when it read a little slow and the timing, scaled by the canary, would beat `beat_ns`."""
        clock = self._clock_check()
        ratio = clock.ratio()
        if ratio is not None and ratio > CLOCK_TOLERANCE:  # slow: re-timed after a warm-up
            again, after = self._retime(calls, reps, schedule, samples)
            self.clock_retimes_slow += after is not None and after > CLOCK_TOLERANCE  # the warm-up did not lift them
            trace_check(schedule, samples, ratio, again, after)
            return again
        trace_check(schedule, samples, ratio)
        if beat_ns is None or ratio is None or ratio <= RECHECK_TOLERANCE:
            return samples
        if float(np.median(samples)) / ratio >= beat_ns:  # not competitive even at full clock
            return samples
        self.clock_rechecks += 1
        again, again_ratio = self._retime(calls, reps, schedule, samples, attempts=1)  # the re-timing's own clock
        return again if again_ratio is not None and again_ratio <= ratio else samples

    def _retime(
        self, calls: list, reps: int, schedule: Any, first: list[float], attempts: int = RETIME_ATTEMPTS
    ) -> tuple[list[float], float | None]:
        """The reps again after CLOCK_WARM_S of the canary's heater (every SM busy), behind a
        lead-in of RETIME_LEAD_S of the kernel's own passes in the reps' submission, and again
        (up to `attempts` in all) while the canary after them still reads slow; the fastest
        samples (`first` included) and the canary's ratio after the last attempt. The clock check read the
        first ones (`first`) at low clocks, where warm-up rounds agree (farm.gpu.clocks), and a
        few-workgroup kernel's own passes back to back may not lift them. A slow timing only
        ever reads slower than the kernel is, so the fastest is kept."""
        start = time.perf_counter()
        self.clock_retimes += 1
        clock = self._clock_check()
        lead = max(1, min(MAX_LEAD_PASSES, math.ceil(RETIME_LEAD_S * 1e9 / max(min(first), 1.0))))
        best, after = first, None
        for _ in range(max(1, attempts)):
            self._busy_for(clock.heater(), CLOCK_WARM_S, None)
            samples = self._timestamp_samples(calls, reps, schedule, lead)
            if statistics.median(samples) < statistics.median(best):
                best = samples
            after = clock.ratio()
            if after is None or after <= CLOCK_TOLERANCE:
                break
        self.clock_retime_s += time.perf_counter() - start
        return best, after

    def keep_busy(self, calls: list, seconds: float, schedule: Any = None, force: bool = False) -> float:
        """Dispatch the (pipeline, bind_group, groups) passes in growing batches for at least
        `seconds` (GPUs only; returns the seconds spent). After the GPU idled for a while
        (a tuning campaign between a problem's last trials and its finalists'
        re-measurement), a GPU can take longer than the warm-up rounds to reach its
        clocks, and two rounds at low clocks agree: re-measured medians of short kernels
        read slow. Not when the GPU has not idled (`_clocks_up`: the
        rule that skips the warm-up rounds): a re-measurement right after long trials (gemm
        4096^3's) starts at once. `force`: busy even then (the work before was host-bound:
        the recurrent sweep's op-by-op baseline counts as long timed work but leaves the GPU idle)."""
        if self.warm_s <= 0 or seconds <= 0:
            return 0.0
        if not force and self._clocks_up(time.perf_counter()):
            return 0.0
        return self._busy_for(calls, seconds, schedule)

    def warm_until_clocks(
        self, calls: list, least_s: float, most_s: float, schedule: Any = None, unless_hot: bool = False
    ) -> float:
        """The passes back to back for `least_s` whatever the warm-up rules say (with
        `unless_hot`: not when they say the clocks are up), then, while the clock canary
        still reads slow, the canary's heater (every SM busy) in steps of CLOCK_WARM_S until
        `most_s` in all is reached (the last step may pass it by up to CLOCK_WARM_S); returns
        the seconds spent (0 on a CPU adapter). The canary is read either way: few-workgroup
        kernels back to back satisfy the warm-up rules at low clocks. For a timing right
        after host-bound work, which neither the re-timing's heater nor seconds of a short
        kernel's own few-workgroup dispatches bring back to full clocks."""
        if self.warm_s <= 0:  # a CPU adapter: no clocks to raise
            return 0.0
        spent = self.keep_busy(calls, least_s, schedule, force=not unless_hot)
        clock = self._clock_check() if self.check_clocks else None
        while clock is not None and spent < most_s and clock.slow():
            spent += self._busy_for(clock.heater(), CLOCK_WARM_S, None)
        return spent

    def _busy_for(self, calls: list, seconds: float, schedule: Any) -> float:
        """The passes in growing batches for at least `seconds`; returns the seconds spent."""
        start = time.perf_counter()
        batch = 1
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            self.dispatch_many(calls * batch, schedule)
            if time.perf_counter() - t0 < WARM_ROUND_S:
                batch = min(batch * 2, 4096)
        end = time.perf_counter()
        self._mark_busy(start, end)
        self.warm_spent_s += end - start
        return end - start

    def _clocks_up(self, now: float) -> bool:
        """Whether the GPU is at its clocks without more work: long timed work ended a moment
        ago (HOT_SPAN_S, HOT_GAP_S), or timed work kept it busy for HOT_BUSY of the last
        HOT_WINDOW_S (a worker's back-to-back short trials)."""
        if now - self._busy_until < HOT_GAP_S and self._busy_span >= HOT_SPAN_S:
            return True
        return self._recent_busy(now) >= HOT_BUSY * HOT_WINDOW_S

    def _mark_busy(self, start: float, end: float) -> None:
        """Record timed work from `start` to `end` (what the warm-up rules look back on)."""
        self._busy_until, self._busy_span = end, end - start
        self._recent.append((start, end))
        self._drop_old(end)

    def _drop_old(self, now: float) -> None:
        while self._recent and self._recent[0][1] <= now - HOT_WINDOW_S:
            self._recent.popleft()

    def _recent_busy(self, now: float) -> float:
        """Seconds of the last HOT_WINDOW_S spent in timed work."""
        self._drop_old(now)
        since = now - HOT_WINDOW_S
        return sum(min(end, now) - max(start, since) for start, end in self._recent)

    def _warm_rounds(self, calls: list, schedule: Any, start: float) -> None:
        idle = start - self._busy_until
        least = 0.0 if idle < HOT_GAP_S else self.warm_s if idle < LONG_IDLE_S else self.warm_idle_s
        batch, previous = 1, None
        while True:
            t0 = time.perf_counter()
            self.dispatch_many(calls * batch, schedule)
            now = time.perf_counter()
            per_call = (now - t0) / batch
            if now - start >= self.warm_max_s:
                return
            steady = previous is not None and abs(per_call - previous) <= WARM_STEADY * previous
            if now - start >= least and steady:
                return
            previous = per_call
            if now - t0 < WARM_ROUND_S:
                batch = min(batch * 2, 4096)

    def _timestamp_samples(self, calls: list, reps: int, schedule: Any, lead: int | None = None) -> list[float]:
        """`reps` GPU-timestamp samples of the passes, all in ONE submission, so the GPU runs
        them back to back whatever the host does meanwhile (with one submission a rep, a
        host thread holding the GIL could space them out). That alone does not cure trials
        read slow under such a thread: the clocks had dropped before the timing began, which
        the clock check catches.
        When the timed reps hold less than LEAD_IN_S of GPU work, or their first third reads
        slower than their last (clocks still rising), they are timed again behind a lead-in:
        as many untimed passes as make LEAD_IN_S, in the same submission. `lead` given: one
        submission behind that many untimed passes (a re-timing's)."""
        if lead is not None:
            return self._timestamp_submission(calls, reps, schedule, lead)
        samples = self._timestamp_submission(calls, reps, schedule, lead=0)
        shortest = max(min(samples), 1.0)
        if sum(samples) < LEAD_IN_S * 1e9 or _rising(samples):
            lead = max(1, min(MAX_LEAD_PASSES, math.ceil(LEAD_IN_S * 1e9 / shortest)))
            samples = self._timestamp_submission(calls, reps, schedule, lead)
        return samples

    def _timestamp_submission(self, calls: list, reps: int, schedule: Any, lead: int) -> list[float]:
        wgpu = self._wgpu
        label = calls[0][0].label if calls else ""
        last = len(calls) - 1
        try:
            query_set = self.device.create_query_set(type="timestamp", count=2 * reps)
            resolve = self.device.create_buffer(
                size=16 * reps, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )
            encoder = self.device.create_command_encoder()
            for _ in range(lead):
                for pipeline, bind_group, groups in calls:
                    self._encode_pass(encoder, pipeline, bind_group, groups)
            for rep in range(reps):
                for index, (pipeline, bind_group, groups) in enumerate(calls):
                    writes = {"query_set": query_set}
                    if index == 0:
                        writes["beginning_of_pass_write_index"] = 2 * rep
                    if index == last:
                        writes["end_of_pass_write_index"] = 2 * rep + 1
                    self._encode_pass(encoder, pipeline, bind_group, groups, writes if len(writes) > 1 else None)
            encoder.resolve_query_set(query_set, 0, 2 * reps, resolve, 0)
            self.device.queue.submit([encoder.finish()])
            stamps = np.frombuffer(bytes(self.device.queue.read_buffer(resolve)), dtype=np.uint64)
            resolve.destroy()
            query_set.destroy()
        except GpuError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise GpuError("dispatch", f"timed dispatch: {exc}", label, schedule) from exc
        deltas = stamps[1::2].astype(np.int64) - stamps[0::2].astype(np.int64)
        return [float(max(d, 0)) for d in deltas]

    def memory(self) -> dict[str, int]:
        return {"in_use": self.bytes_in_use, "reserved": self.bytes_peak}


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _rising(samples: list[float]) -> bool:
    """Whether the first third of the samples reads slower than the last third by more than
    WARM_STEADY (the clocks were still rising during the reps)."""
    third = len(samples) // 3
    if third < 1:
        return False
    return statistics.median(samples[:third]) > (1 + WARM_STEADY) * statistics.median(samples[-third:])
