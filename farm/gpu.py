"""The wgpu executor: adapter choice, hardware profile, compile, bind, dispatch, time.

One small backend in the spirit of tinygrad's: a `Device` owns one wgpu device
and queue, compiles pipelines (cached per source + constants), allocates
buffers (with byte accounting), dispatches, reads back and times with GPU
timestamp queries. Every wgpu failure becomes a `GpuError` that names the step.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

MAX_GROUPS_PER_DIM = 65535
PREFERRED_BACKENDS = ("Vulkan", "Metal", "D3D12")

# Limits that change which schedules are legal or fast: part of the topology hash.
TOPOLOGY_LIMITS = (
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-storage-size",
    "max-compute-workgroups-per-dimension",
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-storage-buffers-per-shader-stage",
)
# Features that change which kernels can be emitted.
TOPOLOGY_FEATURES = ("timestamp-query", "subgroup", "shader-f16", "shader-f64")

_instance_configured = False
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
STAGING_KEEP = 8  # free readback staging buffers a Device keeps for reuse (a worker has ~6 in flight)


class GpuError(RuntimeError):
    """A wgpu failure at a named step (compile, pipeline, bind, dispatch, readback)."""

    def __init__(self, step: str, message: str, kernel: str = "", schedule: Any = None):
        self.step = step
        self.kernel = kernel
        self.schedule = schedule
        where = f" for kernel {kernel!r}" if kernel else ""
        sched = f" schedule {schedule}" if schedule is not None else ""
        super().__init__(f"{step} failed{where}{sched}: {message}")


class NoAdapterError(RuntimeError):
    pass


class CpuAdapterRefused(ValueError):
    """Work whose numbers mean nothing on a CPU adapter (lavapipe), asked for without --allow-cpu."""


def refuse_cpu(profile: HardwareProfile, allow_cpu: bool, what: str) -> None:
    """Raise CpuAdapterRefused when `profile` is a CPU adapter and `allow_cpu` is false."""
    if profile.is_cpu and not allow_cpu:
        raise CpuAdapterRefused(f"refusing to {what} on CPU adapter {profile.summary}; pass --allow-cpu")


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


def _configure_instance() -> None:
    """Ask for ns-normalized timestamps; must run before the first adapter request."""
    global _instance_configured
    if _instance_configured:
        return
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    from wgpu.backends.wgpu_native import extras

    try:
        extras.set_instance_extras(flags=["Default", "AutomaticTimestampNormalization"])
    except Exception:  # noqa: BLE001 - instance already created by someone else
        pass
    _instance_configured = True


def enumerate_adapters() -> list:
    """Every compute-capable adapter wgpu sees, preferred ones first."""
    _configure_instance()
    import wgpu

    adapters = wgpu.gpu.enumerate_adapters_sync()
    return sorted(adapters, key=_adapter_rank)


def _adapter_rank(adapter) -> tuple[int, int]:
    info = adapter.info
    type_rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    backend = info.get("backend_type", "")
    backend_rank = 0 if backend in PREFERRED_BACKENDS else 1
    return (backend_rank, type_rank.get(info.get("adapter_type", ""), 4))


def choose_adapter(spec: str | None = None):
    """The adapter to use: `spec` (or $FARM_ADAPTER) as an index or summary substring,
    otherwise the best GPU on Vulkan/Metal/D3D12, otherwise a CPU adapter."""
    adapters = enumerate_adapters()
    if not adapters:
        raise NoAdapterError("no wgpu adapter found; on Debian install mesa-vulkan-drivers for a CPU adapter")
    spec = spec if spec is not None else os.environ.get("FARM_ADAPTER")
    if spec:
        if spec.isdigit():
            index = int(spec)
            if index >= len(adapters):
                raise NoAdapterError(f"FARM_ADAPTER index {index} out of range: {len(adapters)} adapters")
            return adapters[index]
        for adapter in adapters:
            if spec.lower() in adapter.summary.lower():
                return adapter
        names = "; ".join(a.summary for a in adapters)
        raise NoAdapterError(f"no adapter matches FARM_ADAPTER={spec!r}; have: {names}")
    return adapters[0]


@dataclass(frozen=True)
class HardwareProfile:
    """What identifies an adapter for tuning purposes; winners are keyed by its hash."""

    backend: str
    adapter_type: str
    vendor_id: int
    device_id: int
    device_name: str
    driver_description: str
    limits: tuple[tuple[str, int], ...]
    features: tuple[str, ...]
    # The smallest subgroup the adapter may run (0: unknown). Not part of the topology
    # hash: the device and driver above determine it, and hashes stored before it existed
    # must keep matching.
    subgroup_min_size: int = 0

    @classmethod
    def from_adapter(cls, adapter) -> HardwareProfile:
        info = adapter.info
        limits = adapter.limits
        return cls(
            backend=str(info.get("backend_type", "")),
            adapter_type=str(info.get("adapter_type", "")),
            vendor_id=int(info.get("vendor_id", 0)),
            device_id=int(info.get("device_id", 0)),
            device_name=str(info.get("device", "")),
            driver_description=str(info.get("description", "")),
            limits=tuple((k, int(limits[k])) for k in TOPOLOGY_LIMITS if k in limits),
            features=tuple(sorted(f for f in adapter.features if f in TOPOLOGY_FEATURES)),
            # wgpu-py 0.32 spells the key "stackgroup_min_size"; later versions fix it.
            subgroup_min_size=int(info.get("subgroup_min_size", info.get("stackgroup_min_size", 0)) or 0),
        )

    def topology_hash(self) -> str:
        identity = self.to_dict()
        identity.pop("subgroup_min_size")
        payload = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()

    def limit(self, name: str) -> int:
        return dict(self.limits)[name]

    def has(self, feature: str) -> bool:
        return feature in self.features

    @property
    def is_cpu(self) -> bool:
        return self.adapter_type == "CPU"

    @property
    def summary(self) -> str:
        return f"{self.device_name} ({self.adapter_type}) via {self.backend}"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["limits"] = dict(self.limits)
        data["features"] = list(self.features)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> HardwareProfile:
        return cls(
            **{k: data[k] for k in ("backend", "adapter_type", "vendor_id", "device_id")},
            device_name=data["device_name"],
            driver_description=data["driver_description"],
            limits=tuple(sorted(data["limits"].items(), key=lambda kv: TOPOLOGY_LIMITS.index(kv[0]))),
            features=tuple(sorted(data["features"])),
            subgroup_min_size=int(data.get("subgroup_min_size", 0)),
        )

    def subgroup_lanes(self) -> int:
        """Lanes guaranteed to share a subgroup: the adapter's minimum subgroup size when
        it has the subgroup feature (WebGPU's floor of 4 when the size is unknown), else 0."""
        if not self.has("subgroup"):
            return 0
        return max(4, self.subgroup_min_size)


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
    layout_kinds: tuple[str, ...] = field(default=())


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
        # Warm-up before timing on a GPU, whose clocks drop while it idles (the CPU
        # certifying, computing a reference) and take a while to come back: at least
        # warm_s of work after a short idle gap, warm_idle_s after a long one, then until two
        # consecutive rounds agree, at most warm_max_s. A CPU adapter has no such ramp,
        # and tests on lavapipe stay fast.
        gpu = not self.profile.is_cpu
        self.warm_s = 0.05 if gpu else 0.0
        self.warm_idle_s = 0.25 if gpu else 0.0
        self.warm_max_s = 1.0 if gpu else 0.0
        self._busy_until = 0.0  # time.perf_counter() when timed work last finished
        self._busy_span = 0.0  # seconds that the last timed work (warm-up and reps) lasted
        self._recent: deque[tuple[float, float]] = deque()  # (start, end) of recent timings
        self.warm_spent_s = 0.0  # seconds spent warming up, all timings together
        self._pipelines: dict[str, Pipeline] = {}
        self._staging_buffers: list = []  # reused readback buffers, least recently used first
        self._staging_lock = threading.Lock()
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
    ) -> Pipeline:
        """Compile (or fetch from cache) a compute pipeline for `source` + `constants`."""
        constants = dict(constants or {})
        key = hashlib.sha256(
            (label + source + entry_point + json.dumps(constants, sort_keys=True)).encode()
        ).hexdigest()
        cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        try:
            module = self.device.create_shader_module(code=source, label=label)
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
        self, pipeline: Pipeline, buffers: list[Buffer], schedule: Any = None, bindings: tuple[int, ...] | None = None
    ):
        """A bind group of `buffers` at bindings 0, 1, ... or, with `bindings`, of
        buffers[i] at binding i for each i in it (a pass that uses some of a launch's args)."""
        numbers = range(len(buffers)) if bindings is None else bindings
        entries = [
            {"binding": i, "resource": {"buffer": buffers[i].handle, "offset": 0, "size": buffers[i].nbytes}}
            for i in numbers
        ]
        try:
            layout = pipeline.handle.get_bind_group_layout(0)
            return self.device.create_bind_group(layout=layout, entries=entries)
        except Exception as exc:  # noqa: BLE001
            raise GpuError("bind", str(exc), pipeline.label, schedule) from exc

    def dispatch(
        self,
        pipeline: Pipeline,
        buffers: list[Buffer],
        groups: int | tuple[int, int, int],
        schedule: Any = None,
        wait: bool = True,
    ) -> None:
        """Run one dispatch (linear group counts are folded into 2-D)."""
        self.dispatch_many([(pipeline, self.bind(pipeline, buffers, schedule), groups)], schedule, wait)

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

    def wait_idle(self) -> None:
        """Block until submitted work is done. wgpu-py 0.32's on_submitted_work_done_sync
        has a broken callback signature, so poll the device (wgpuDevicePoll, wait=True)."""
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

    def time_calls(self, calls: list, warmup: int = 2, reps: int = 10, schedule: Any = None) -> Timing:
        """Time a submission of (pipeline, bind_group, groups) passes, one submission per rep.

        Warm-up is `warmup` submissions and then, on GPUs, rounds of growing batches until two
        consecutive rounds agree within WARM_STEADY, after at least warm_s (idle since the
        last timing over HOT_GAP_S) or warm_idle_s (idle over LONG_IDLE_S) and at most
        warm_max_s: a GPU idle between trials drops to idle clocks, and a few short warm-up
        dispatches would not bring it back (seen on the H200: 2.5-5x slower trials, also
        after 50 ms of warm-up when the GPU had idled for seconds). No rounds when the last
        timing lasted HOT_SPAN_S or more and ended under HOT_GAP_S ago: the GPU is at its
        clocks (gemm 4096^3 trials back to back), nor while timings have kept the GPU busy
        for HOT_BUSY of the last HOT_WINDOW_S (a tuning worker's back-to-back short trials:
        gemv 4096^2 trials spent 13 of their 21 ms in rounds). A GPU that ran only short
        kernels now and then is not: skipping the rounds after 7 reps of a 50 us kernel
        measured the H200 5x slow.
        With timestamp queries the sample is GPU time from the start of the first pass to
        the end of the last ("timestamp"); otherwise host wall time around a synchronous
        submission ("host").
        """
        if reps < 1:
            raise ValueError(f"reps must be >= 1, got {reps}")
        begin = time.perf_counter()
        self._warm_up(calls, warmup, schedule)
        try:
            if self.timestamps:
                return Timing.from_samples(self._timestamp_samples(calls, reps, schedule), "timestamp")
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
        now = time.perf_counter()
        if now - self._busy_until < HOT_GAP_S and self._busy_span >= HOT_SPAN_S:
            return  # long work that ended a moment ago: clocks are up, the timed reps can start
        if self._recent_busy(now) >= HOT_BUSY * HOT_WINDOW_S:
            return  # busy most of the last HOT_WINDOW_S: the clocks are up too
        # Rounds compare per-call times: the queue (a certification run, the counted warm-up)
        # must be empty first, or the first round reads slow and one more round is spent.
        self.wait_idle()
        start = time.perf_counter()
        try:
            self._warm_rounds(calls, schedule, start)
        finally:
            self.warm_spent_s += time.perf_counter() - start

    def keep_busy(self, calls: list, seconds: float, schedule: Any = None) -> float:
        """Dispatch the (pipeline, bind_group, groups) passes in growing batches for at least
        `seconds` (GPUs only; returns the seconds spent). After the GPU idled for a while
        (a tuning campaign between a problem's last trials and its finalists'
        re-measurement), the H200 can take longer than the warm-up rounds to reach its
        clocks, and two rounds at low clocks agree: re-measured medians of short kernels
        read up to 2.3x their bench time."""
        if self.warm_s <= 0 or seconds <= 0:
            return 0.0
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

    def _timestamp_samples(self, calls: list, reps: int, schedule: Any) -> list[float]:
        wgpu = self._wgpu
        label = calls[0][0].label if calls else ""
        last = len(calls) - 1
        try:
            query_set = self.device.create_query_set(type="timestamp", count=2 * reps)
            resolve = self.device.create_buffer(
                size=16 * reps, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )
            for rep in range(reps):
                encoder = self.device.create_command_encoder()
                for index, (pipeline, bind_group, groups) in enumerate(calls):
                    writes = {"query_set": query_set}
                    if index == 0:
                        writes["beginning_of_pass_write_index"] = 2 * rep
                    if index == last:
                        writes["end_of_pass_write_index"] = 2 * rep + 1
                    self._encode_pass(encoder, pipeline, bind_group, groups, writes if len(writes) > 1 else None)
                self.device.queue.submit([encoder.finish()])
            encoder = self.device.create_command_encoder()
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


def adapters_report() -> list[dict]:
    """Every adapter with its profile and hash, for `farm adapters`."""
    chosen = choose_adapter().summary
    rows = []
    for index, adapter in enumerate(enumerate_adapters()):
        profile = HardwareProfile.from_adapter(adapter)
        rows.append(
            {
                "index": index,
                "summary": adapter.summary,
                "chosen": adapter.summary == chosen,
                "topology_hash": profile.topology_hash(),
                "profile": profile,
            }
        )
    return rows
