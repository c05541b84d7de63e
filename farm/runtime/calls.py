"""The runtime's call path: each (kernel, schedule, problem, input layout) becomes a
`CallPlan` once, and every later call with the same shapes replays it.

Building a plan runs `spec.launch()` — the certified wiring — on zero-filled placeholders
of the inputs' shapes, then sorts every arg of the launch into one of:
- input: the arg's bytes are an input's bytes (passed through, maybe reshaped): the call
  binds that input's buffer (a DeviceArray's own, or a pooled one the numpy array is
  written into);
- transformed: an arg named after an input but not its bytes (gemm pads k or n to its
  vector width): recomputed by `spec.launch()` on the host for every call, reading back a
  DeviceArray input first — the one slow path, said so in the README;
- constant: every other arg with data (params, twiddles, the absent rho's zeros). The
  catalog's contract (farm.catalog) is that such args depend on the schedule and problem
  only, so they are uploaded once and kept with the plan;
- output and scratch: pooled per call, and kept with the plan, respectively.
Pipelines are compiled once (the Device caches them), bind groups are cached per set of
buffers. A call is one submission: uploads by `queue.write_buffer`, the passes, and for
numpy outputs the copies to reused staging buffers, then one wait. With a DeviceArray
anywhere among the inputs the call returns after the submission.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from farm.catalog import KernelSpec, check_launch
from farm.gpu import MAX_GROUPS_PER_DIM, Buffer, Device, GpuError, Pipeline, fold_groups
from farm.oracle.launch import compile_launch
from farm.runtime.arrays import DeviceArray, _Storage
from farm.runtime.pool import BufferPool, Slab
from farm.runtime.validation import check_output_limits
from farm.schedule import Problem, Schedule

MAX_PLANS = 256  # plans kept per runtime (each holds its constants and scratch on the device)
MAX_BIND_SETS = 16  # bind-group sets kept per plan
# Uploads of this many bytes or more go through a mapped staging buffer. H200, plain wgpu-py
# (benchmarks/runtime_calls.py floors): write_buffer 63/242/1010/3820 us for 256 KB/1/4/16 MB,
# mapped (map included) 179/361/581/1610 us; the runtime's staging is mapped ahead.
MAPPED_UPLOAD_MIN = 2 << 20


@dataclass
class Slot:
    """How one launch arg gets its buffer in a call."""

    role: str  # "input" | "transformed" | "constant" | "output" | "scratch"
    name: str  # the input's name (input, transformed), else the arg's
    kind: str  # binding kind: read | storage | uniform
    nbytes: int
    dtype: np.dtype | None = None
    shape: tuple[int, ...] = ()
    buffer: Buffer | None = None  # constant and scratch: the plan's own

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class CallPlan:
    spec: KernelSpec
    schedule: Schedule
    problem: Problem
    pipelines: list[Pipeline]
    passes: list  # (bindings, groups) per pass, in order
    slots: list[Slot]
    owned: list[Buffer]
    bind_sets: OrderedDict = field(default_factory=OrderedDict)
    transformed: bool = False  # any arg recomputed on the host per call

    @property
    def outputs(self) -> list[Slot]:
        return [s for s in self.slots if s.role == "output"]

    def reads(self, buffers: list[Buffer]) -> list:
        """The Device's read list (name, buffer, dtype, count, shape) for the outputs."""
        return [
            (slot.name, buffer, slot.dtype, slot.count, slot.shape)
            for slot, buffer in zip(self.slots, buffers, strict=True)
            if slot.role == "output"
        ]


def _grid(groups: int | tuple[int, int, int]) -> tuple[int, int, int]:
    """A pass's dispatch grid (a linear count folded to 2-D past 65535, as the Device does)."""
    grid = fold_groups(groups) if isinstance(groups, int) else tuple(groups)
    if max(grid) > MAX_GROUPS_PER_DIM:
        raise GpuError("dispatch", f"grid {grid} exceeds {MAX_GROUPS_PER_DIM} per dimension")
    return grid


def _same_bytes(data: np.ndarray, placeholder: np.ndarray) -> bool:
    """`data` is exactly `placeholder`'s bytes (the array itself or a full-size view of it)."""
    return (
        data.nbytes == placeholder.nbytes
        and data.flags.c_contiguous
        and data.__array_interface__["data"][0] == placeholder.__array_interface__["data"][0]
    )


def check_out(plan: CallPlan, inputs: dict, out: dict[str, DeviceArray], owner: object) -> None:
    """ValueError/TypeError unless each `out` array is this runtime's, live, of its output's
    shape and dtype, and shares no buffer with an input or another output."""
    slots = {slot.name: slot for slot in plan.outputs}
    for name, array in out.items():
        slot = slots[name]
        if not isinstance(array, DeviceArray):
            raise TypeError(f"out: expected a DeviceArray, got {type(array).__name__}")
        array.buffer("storage", owner, "out")
        if array.shape != slot.shape or array.dtype != slot.dtype:
            raise ValueError(
                f"out: expected a DeviceArray of shape {slot.shape} and dtype {slot.dtype}, "
                f"got {array.shape} {array.dtype}"
            )
        clash = [n for n, v in inputs.items() if isinstance(v, DeviceArray) and v.same_buffer(array)]
        others = [n for n, v in out.items() if n != name and v.same_buffer(array)]
        if clash or others:
            raise ValueError(f"out: must not share its buffer with {(clash + others)[0]} of the same call")


class Caller:
    """Plans and runs calls for one ForgeRuntime (its device, pool and lock are the runtime's)."""

    def __init__(self, device: Device, pool: BufferPool, owner: object):
        self.device = device
        self.pool = pool
        self.owner = owner
        self._plans: OrderedDict[tuple, CallPlan] = OrderedDict()
        self._recent: dict[tuple, CallPlan] = {}  # the runtime's own call keys -> plan

    def recent(self, key: tuple) -> CallPlan | None:
        return self._recent.get(key)

    def forget_recent(self) -> None:
        """Drop the call keys -> plan map (their schedules came from lookups now stale)."""
        self._recent.clear()

    def remember(self, key: tuple, plan: CallPlan) -> None:
        if len(self._recent) >= 4 * MAX_PLANS:
            self._recent.clear()
        self._recent[key] = plan

    # -- plans --------------------------------------------------------------------------
    def plan(self, spec: KernelSpec, schedule: Schedule, problem: Problem, inputs: dict, limit: int) -> CallPlan:
        layout = tuple((name, value.dtype.str, value.shape) for name, value in inputs.items())
        key = (spec.name, schedule, problem, layout)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        spec.check(schedule, problem, self.device.profile)  # InvalidSchedule, as the certified path
        placeholders = {name: np.zeros(shape, np.dtype(dtype)) for name, dtype, shape in layout}
        launch = spec.launch(schedule, problem, placeholders)
        check_output_limits(spec.name, launch, limit)
        check_launch(spec, schedule, launch, self.device.profile)
        pipelines = compile_launch(self.device, spec, schedule, launch)
        slots, owned = [], []
        try:
            for arg in launch.args:
                slots.append(self._slot(arg, placeholders, owned))
        except Exception:
            self.device.release(*owned)
            raise
        passes = [(step.bindings, _grid(step.groups)) for step in launch.passes()]  # folded once, not per call
        plan = CallPlan(spec, schedule, problem, pipelines, passes, slots, owned)
        plan.transformed = any(s.role == "transformed" for s in slots)
        self._plans[key] = plan
        while len(self._plans) > MAX_PLANS:
            _, old = self._plans.popitem(last=False)
            self.device.release(*old.owned)
            self._recent.clear()  # it may name the plan just released
        return plan

    def _slot(self, arg, placeholders: dict[str, np.ndarray], owned: list[Buffer]) -> Slot:
        if arg.output:
            return Slot("output", arg.name, arg.kind, arg.nbytes, np.dtype(arg.dtype), tuple(arg.shape))
        if arg.data is None:
            buffer = self.device.empty(arg.nbytes, arg.kind)
            owned.append(buffer)
            return Slot("scratch", arg.name, arg.kind, arg.nbytes, buffer=buffer)
        source = next((n for n, p in placeholders.items() if _same_bytes(arg.data, p)), None)
        if source is not None:
            return Slot("input", source, arg.kind, arg.nbytes)
        if arg.name in placeholders:
            return Slot("transformed", arg.name, arg.kind, arg.nbytes)
        buffer = self.device.upload(arg.data, arg.kind)
        owned.append(buffer)
        return Slot("constant", arg.name, arg.kind, arg.nbytes, buffer=buffer)

    # -- calls ----------------------------------------------------------------------------
    def call(self, plan: CallPlan, inputs: dict, out: dict[str, DeviceArray] | None, to_device: bool) -> dict:
        """Run `plan` on `inputs` (numpy arrays or DeviceArrays of this runtime). Returns
        {output name: DeviceArray} without waiting when `to_device`, else numpy arrays."""
        taken: list[Slab] = []  # pooled for this call only
        results: dict[str, DeviceArray] = {}
        try:
            transformed = self._transformed(plan, inputs)
            encoder = self.device.device.create_command_encoder()
            buffers, serials = [], []
            for slot in plan.slots:
                buffer, serial = self._buffer(slot, inputs, out, transformed, taken, results, to_device, encoder)
                buffers.append(buffer)
                serials.append(serial)
            calls = self._bind(plan, buffers, tuple(serials))
            for pipeline, bind_group, groups in calls:
                self.device._encode_pass(encoder, pipeline, bind_group, groups)
            if to_device:
                self.device.device.queue.submit([encoder.finish()])
                return results
            return self.device.submit_reads(plan.reads(buffers), encoder).collect()
        except GpuError:
            raise
        except (ValueError, TypeError):
            raise
        except Exception as exc:  # noqa: BLE001 - any wgpu failure names the step
            raise GpuError("dispatch", str(exc), plan.spec.name, plan.schedule) from exc
        finally:
            self._give(taken)

    def _give(self, taken: list[Slab]) -> None:
        """Back to the pool once the call is submitted. An upload slab is mapped for writing
        again first (WebGPU resolves it once the copy from it is done; the call's own wait,
        or the next one, polls it through), so its next use doesn't wait for a map."""
        for slab in taken:
            if slab.use == "upload" and slab.live:
                try:
                    slab.mapping = slab.handle.map_async("WRITE")
                except Exception:  # noqa: BLE001 - mapping later, in `write`, still works
                    slab.mapping = None
            self.pool.give(slab)

    def _transformed(self, plan: CallPlan, inputs: dict) -> dict[str, np.ndarray]:
        if not plan.transformed:
            return {}
        host = {n: v.numpy() if isinstance(v, DeviceArray) else v for n, v in inputs.items()}
        launch = plan.spec.launch(plan.schedule, plan.problem, host)
        return {arg.name: arg.data for arg in launch.args if arg.name in host and arg.data is not None}

    def _buffer(self, slot: Slot, inputs, out, transformed, taken, results, to_device, encoder) -> tuple[Buffer, int]:
        if slot.role in ("constant", "scratch"):
            return slot.buffer, -id(slot)
        if slot.role == "output":
            target = out.get(slot.name) if out else None
            if target is not None:
                results[slot.name] = target
                return target.buffer("storage", self.owner, "out"), target.serial()
            slab = self.pool.take(slot.nbytes)
            if to_device:
                results[slot.name] = DeviceArray.wrap(_Storage(self.pool, slab, self.owner), slot.shape, slot.dtype)
            else:
                taken.append(slab)
            return slab.view(slot.nbytes, slot.kind), slab.serial
        value = transformed.get(slot.name) if slot.role == "transformed" else inputs[slot.name]
        if isinstance(value, DeviceArray):
            return value.buffer(slot.kind, self.owner, slot.name), value.serial()
        slab = self.pool.take(slot.nbytes, "uniform" if slot.kind == "uniform" else "storage")
        taken.append(slab)
        self.write(slab, value, encoder, taken)
        return slab.view(slot.nbytes, slot.kind), slab.serial

    def write(self, slab: Slab, value: np.ndarray, encoder, taken: list[Slab]) -> None:
        """Upload `value` into `slab`: small ones by `queue.write_buffer`, large ones into a
        pooled mapped staging buffer and a copy recorded in `encoder` (wgpu's write_buffer
        stages through a new buffer each time: 1.8 GB/s against 8.9 through a reused one on
        lavapipe; benchmarks/runtime_calls.py measures both). The staging slab joins `taken`,
        to be given back once the submission is made: mapping it again waits for that copy."""
        raw = memoryview(np.ascontiguousarray(value)).cast("B")
        if len(raw) % 4:
            raw = memoryview(bytes(raw) + bytes(4 - len(raw) % 4))
        if not len(raw):
            return
        if len(raw) < MAPPED_UPLOAD_MIN:
            self.device.device.queue.write_buffer(slab.handle, 0, raw)
            return
        stage = self.pool.take(len(raw), "upload")
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
        encoder.copy_buffer_to_buffer(stage.handle, 0, slab.handle, 0, len(raw))

    def new_array(self, shape: tuple[int, ...], dtype: np.dtype, data: np.ndarray | None = None) -> DeviceArray:
        """A DeviceArray of this runtime from the pool, holding `data` when given."""
        slab = self.pool.take(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        if data is not None:
            try:
                self.upload(slab, data)
            except Exception:
                self.pool.give(slab)
                raise
        return DeviceArray(_Storage(self.pool, slab, self.owner), shape, dtype)

    def upload(self, slab: Slab, value: np.ndarray) -> None:
        """`write` in a submission of its own (`ForgeRuntime.asarray`)."""
        taken: list[Slab] = []
        try:
            encoder = self.device.device.create_command_encoder()
            self.write(slab, value, encoder, taken)
            self.device.device.queue.submit([encoder.finish()])
        finally:
            self._give(taken)

    def _bind(self, plan: CallPlan, buffers: list[Buffer], serials: tuple) -> list:
        calls = plan.bind_sets.get(serials)
        if calls is None:
            calls = [
                (pipeline, self.device.bind(pipeline, buffers, plan.schedule, bindings), groups)
                for pipeline, (bindings, groups) in zip(plan.pipelines, plan.passes, strict=True)
            ]
            plan.bind_sets[serials] = calls
            while len(plan.bind_sets) > MAX_BIND_SETS:
                plan.bind_sets.popitem(last=False)
        else:
            plan.bind_sets.move_to_end(serials)
        return calls

    def read(self, array: DeviceArray) -> np.ndarray:
        buffer = array.buffer("storage", self.owner, "array")
        return self.device.submit_reads([("out", buffer, array.dtype, array.size, array.shape)]).collect()["out"]

    def close(self) -> None:
        for plan in self._plans.values():
            self.device.release(*plan.owned)
        self._plans.clear()
        self._recent.clear()
