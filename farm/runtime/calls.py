"""The runtime's call path: each (kernel, schedule, problem, input layout) becomes a
`CallPlan` once, and every later call with the same shapes replays it.

Building a plan runs `spec.launch()` — the certified wiring — on zero-filled placeholders
of the inputs' shapes, then sorts every arg of the launch into one of:
- input: the arg's bytes are an input's bytes (passed through, maybe reshaped): the call
  binds that input's buffer (a DeviceArray's own, or a pooled one the numpy array is
  written into);
- transformed: an arg named after an input but not its bytes (gemm pads k or n to its
  vector width): recomputed by `spec.launch()` on the host for every call, reading back a
  DeviceArray input first — the one slow path, said so in docs/guides/runtime.md;
- constant: every other arg with data (params, twiddles, the absent rho's zeros). The
  catalog's contract (farm.catalog) is that such args depend on the schedule and problem
  only, so they are uploaded once and kept with the plan;
- output and scratch: pooled per call, and held from the pool by the plan, respectively
  (both count in `capacity_bytes`).
Pipelines are compiled once (the Device caches them), bind groups are cached per set of
buffers (by the pool slabs' serials: a repeated call makes no bind group and no buffer
view). A call with numpy inputs or outputs is one submission: uploads by
`queue.write_buffer`, the passes, and for numpy outputs one copy each into one reused
staging buffer, mapped once (farm.runtime.transfers). A call on DeviceArrays alone is
recorded, not submitted: its passes join one command encoder with the calls after it,
submitted every `flush_calls` calls (FLUSH_CALLS by default) or as soon as anything else
needs the GPU (a read, `synchronize`, a numpy call, an upload, a plan's release), so a
chain pays a submission (tens of microseconds of host time: benchmarks/runtime_calls.py's
submit_only) every `flush_calls` calls, not every call. Calls whose tuned kernels are long
go earlier (EARLY_SUBMIT_S): a chain of them would otherwise leave the GPU idle while the
host records eight. The slabs such passes bind are
pinned in the pool until the submission (farm.runtime.pool): released meanwhile, they are
neither reused nor destroyed.

The passes of a call whose bind groups exist go to wgpu-native's C API as raw handles
(farm.gpu.native): no wgpu-py object or descriptor per call. wgpu-py's objects are the
fallback where that API is not the one written for; both give the same bits.

A call makes the wgpu calls plain wgpu-py makes for the same work and no more, fewer for
numpy outputs (tests/test_runtime_costs.py counts them; farm.runtime.costs).

This is one idea in one module, over the line count: a call's path from its plan to the GPU
(planning, recording, submitting, reading back), whose parts share the pending encoder and
the pool's pins.
"""

from __future__ import annotations

from collections import OrderedDict
from operator import attrgetter
from time import perf_counter

import numpy as np

from farm.catalog import KernelSpec, check_launch
from farm.gpu import Buffer, Device, GpuError, native
from farm.oracle.launch import compile_launch
from farm.runtime.arrays import DeviceArray, _Storage
from farm.runtime.plans import CallPlan, Slot, grid_of, same_bytes
from farm.runtime.pool import BufferPool, Slab
from farm.runtime.transfers import give_back, read_back, reads_of, write
from farm.runtime.validation import check_output_limits
from farm.schedule import Problem, Schedule

MAX_PLANS = 256  # plans kept per runtime (each holds its constants and scratch on the device)
MAX_BIND_SETS = 64  # bind-group sets kept per plan, at least (a chain's pooled buffers pair up in many ways)
FLUSH_CALLS = 8  # recorded DeviceArray calls submitted together by default (Caller.flush_calls)
# Recorded calls go early once their known GPU time (winners' medians) reaches EARLY_SUBMIT_S
# and the GPU is within SUBMIT_LEAD_S (a submission and the GPU's start) of running dry.
EARLY_SUBMIT_S = 60e-6
SUBMIT_LEAD_S = 20e-6


_serial = attrgetter("serial")
_ONLY_DEVICE_ARRAYS = {DeviceArray}


def encode_passes(encoder, passes: list) -> None:
    """One compute pass per (pipeline handle, bind group, grid) through wgpu-py's objects:
    the slow path's (wgpu-native's C API unusable: farm.gpu.native), and what plain wgpu-py's
    floor (farm.runtime.costs) records for the same passes."""
    for pipeline, bind_group, grid in passes:
        compute_pass = encoder.begin_compute_pass()
        compute_pass.set_pipeline(pipeline)
        compute_pass.set_bind_group(0, bind_group)
        compute_pass.dispatch_workgroups(*grid)
        compute_pass.end()


class Caller:
    """Plans and runs calls for one ForgeRuntime (its device, pool and lock are the runtime's)."""

    def __init__(self, device: Device, pool: BufferPool, owner: object):
        self.device = device
        self.pool = pool
        self.owner = owner
        self._plans: OrderedDict[tuple, CallPlan] = OrderedDict()
        self._recent: dict[tuple, CallPlan] = {}  # the runtime's own call keys -> plan
        # Passes go to wgpu-native's C API where it is the one written for, else through
        # wgpu-py's objects (farm.gpu.native says why, once).
        self._native = native.NativeEncoder(device.device) if native.available() else None
        self._pending = None  # wgpu-py's path: the command encoder of recorded calls, not submitted yet
        self._pending_calls = 0  # recorded DeviceArray calls not submitted yet
        self.flush_calls = FLUSH_CALLS  # submitted together (benchmarks/runtime_calls.py varies it)
        self.early_submit_s = EARLY_SUBMIT_S  # see EARLY_SUBMIT_S (benchmarks/runtime_calls.py varies it)
        self._pending_s = 0.0  # the recorded calls' known GPU seconds (CallPlan.gpu_s)
        self._busy_until = 0.0  # perf_counter() when the GPU should finish what was submitted
        # how long a read (a numpy call, DeviceArray.numpy) polls without sleeping before it
        # waits for wgpu-py's poller thread; None: as long as the owner's sync does (spin_wait_s)
        self.read_spin_s: float | None = None

    def _read_spin_s(self) -> float:
        spin = self.read_spin_s
        return getattr(self.owner, "spin_wait_s", 0.0) if spin is None else spin

    @property
    def pending_calls(self) -> int:
        """Recorded DeviceArray calls not submitted yet."""
        return self._pending_calls

    def flush(self) -> None:
        """Submit the recorded DeviceArray calls (a no-op when there are none)."""
        if not self._pending_calls:
            return
        self._pending_calls = 0
        self._busy_until = max(perf_counter(), self._busy_until) + self._pending_s
        self._pending_s = 0.0
        try:
            if self._native is not None:
                self._native.submit()
            else:
                encoder, self._pending = self._pending, None
                self.device.device.queue.submit([encoder.finish()])
        except Exception as exc:  # noqa: BLE001 - any wgpu failure names the step
            raise GpuError("dispatch", f"submitting the recorded DeviceArray calls: {exc}") from exc
        finally:
            self.pool.unpin()

    def idle(self) -> None:
        """The GPU has finished everything submitted (a sync waited for it)."""
        self._busy_until = 0.0

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
        slots, owned, held = [], [], []
        try:
            for arg in launch.args:
                slots.append(self._slot(arg, placeholders, owned, held))
        except Exception:
            self._drop(owned, held)
            raise
        passes = [(step.bindings, step.numbers, grid_of(step.groups)) for step in launch.passes()]  # folded once
        plan = CallPlan(spec, schedule, problem, pipelines, passes, slots, owned, held)
        self._plans[key] = plan
        while len(self._plans) > MAX_PLANS:
            self.flush()  # recorded passes may bind the old plan's constants
            _, old = self._plans.popitem(last=False)
            self._drop(old.owned, old.held)
            self._recent.clear()  # it may name the plan just released
        return plan

    def _drop(self, owned: list[Buffer], held: list[Slab]) -> None:
        """A plan's buffers: its constants released, its scratch back to the pool."""
        self.device.release(*owned)
        for slab in held:
            self.pool.give(slab)

    def _slot(self, arg, placeholders: dict[str, np.ndarray], owned: list[Buffer], held: list[Slab]) -> Slot:
        if arg.output:
            return Slot("output", arg.name, arg.kind, arg.nbytes, np.dtype(arg.dtype), tuple(arg.shape))
        if arg.data is None:  # scratch (the chunked recurrence's chunk states: hundreds of MB)
            slab = self.pool.take(arg.nbytes, "uniform" if arg.kind == "uniform" else "storage")
            held.append(slab)
            return Slot("scratch", arg.name, arg.kind, arg.nbytes, buffer=slab.view(arg.nbytes, arg.kind))
        source = next((n for n, p in placeholders.items() if same_bytes(arg.data, p)), None)
        if source is not None:
            return Slot("input", source, arg.kind, arg.nbytes)
        if arg.name in placeholders:
            return Slot("transformed", arg.name, arg.kind, arg.nbytes)
        buffer = self.device.upload(arg.data, arg.kind)
        owned.append(buffer)
        return Slot("constant", arg.name, arg.kind, arg.nbytes, buffer=buffer)

    # -- calls ----------------------------------------------------------------------------
    def call(
        self,
        plan: CallPlan,
        inputs: dict,
        out: dict[str, DeviceArray] | None,
        to_device: bool,
        into: dict | None = None,
    ) -> dict:
        """Run `plan` on `inputs` (numpy arrays or DeviceArrays of this runtime). Returns
        {output name: DeviceArray} without waiting when `to_device`, else numpy arrays: the
        `into` ones (checked by check_host_out) for the outputs it names, filled in place.

        The slabs a call binds are its inputs' (a DeviceArray's own; a pooled one each numpy
        array is written into) and its outputs' (`out`'s, else pooled), in `plan.filled`
        order; the plan's constants and scratch are bound from its bind groups."""
        if to_device and not plan.transformed:
            arrays = [inputs[name] for name in plan.input_names]
            if set(map(type, arrays)) == _ONLY_DEVICE_ARRAYS:  # no generator: this runs per call
                return self._record(plan, arrays, out)
        self.flush()
        owner, pool = self.owner, self.pool
        taken: list[Slab] = []  # pooled for this call only
        try:
            values = self._transformed(plan, inputs) if plan.transformed else [inputs[s.name] for s in plan.inputs]
            # the C API's encoder where there is one: uploads, passes and read-back copies in it
            native_encoder = self._native
            encoder = native_encoder if native_encoder is not None else self.device.device.create_command_encoder()
            slabs = []
            for slot, value in zip(plan.inputs, values, strict=True):
                if type(value) is DeviceArray:
                    slabs.append(value.slab(owner, slot.name))
                else:
                    slabs.append(self._upload(slot, value, encoder, taken))
            results: dict[str, DeviceArray] = {}
            for slot in plan.outputs:
                target = out.get(slot.name) if out else None
                if target is not None:
                    slab = target.slab(owner, "out")
                    results[slot.name] = target
                else:
                    slab = pool.take(slot.nbytes)
                    if to_device:
                        results[slot.name] = DeviceArray.pooled(pool, slab, owner, slot.shape, slot.dtype)
                    else:
                        taken.append(slab)
                slabs.append(slab)
            calls, raw = self._bound(plan, slabs)  # bind groups made (and checked) before anything is encoded
            if native_encoder is not None:
                native_encoder.record(raw)
            else:
                encode_passes(encoder, calls)
            if to_device:
                if native_encoder is not None:
                    native_encoder.submit()
                else:
                    self.device.device.queue.submit([encoder.finish()])
                return results
            outputs = [slab.handle for slab in slabs[len(plan.inputs) :]]
            done = read_back(self.device, plan.reads, plan.read_bytes, outputs, encoder, into, self._read_spin_s())
            self.idle()  # the read waited for everything submitted before it
            return done
        except Exception as exc:
            if self._native is not None:
                self._native.drop()  # a call that failed part-way leaves nothing recorded
            if isinstance(exc, (GpuError, ValueError, TypeError)):
                raise
            # any wgpu failure names the step
            raise GpuError("dispatch", str(exc), plan.spec.name, plan.schedule) from exc
        finally:
            if taken:
                give_back(pool, taken)

    def _record(self, plan: CallPlan, arrays: list[DeviceArray], out: dict[str, DeviceArray] | None) -> dict:
        """A DeviceArray-only call (`arrays`: its inputs in `plan.inputs` order): its passes
        into the pending encoder, its slabs pinned until the submission (see the module
        docstring), every `flush_calls` calls submitted. The outputs are DeviceArrays
        returned at once. A failure leaves the encoder unusable: the calls recorded before it
        are dropped with it, and the error says how many."""
        owner, pool = self.owner, self.pool
        slabs = []
        for array in arrays:  # DeviceArray.slab's checks, inlined: this runs per call
            storage = array._storage
            if storage.owner is not owner or storage.slab is None:
                array.slab(owner, plan.inputs[len(slabs)].name)  # raises the ValueError that says which
            slabs.append(storage.slab)
        results: dict[str, DeviceArray] = {}
        for slot in plan.outputs:
            target = out.get(slot.name) if out else None
            if target is not None:
                slab = target.slab(owner, "out")
                results[slot.name] = target
            else:
                slab = pool.take(slot.nbytes)
                results[slot.name] = DeviceArray.pooled(pool, slab, owner, slot.shape, slot.dtype)
            slabs.append(slab)
        try:
            calls, raw = self._bound(plan, slabs)  # bind groups made (and checked) before anything is encoded
        except Exception:
            for name, array in results.items():
                if out is None or out.get(name) is not array:
                    array.release()
            raise
        pool.pin(slabs)
        try:
            if raw is not None and self._native is not None:
                self._native.record(raw)
            else:
                if self._pending is None:
                    self._pending = self.device.device.create_command_encoder()
                encode_passes(self._pending, calls)
        except Exception as exc:  # noqa: BLE001
            lost, self._pending, self._pending_calls, self._pending_s = self._pending_calls, None, 0, 0.0
            if self._native is not None:
                self._native.drop()
            pool.unpin()
            raise GpuError("dispatch", f"recording the call failed ({lost} earlier recorded calls not run): {exc}",
                           plan.spec.name, plan.schedule) from exc  # fmt: skip
        self._pending_calls += 1
        self._pending_s += plan.gpu_s
        if self._pending_calls >= self.flush_calls or (
            self._pending_s >= self.early_submit_s and perf_counter() + SUBMIT_LEAD_S >= self._busy_until
        ):
            self.flush()
        return results

    def _upload(self, slot: Slot, value: np.ndarray, encoder, taken: list[Slab]) -> Slab:
        """A pooled slab for this call holding the numpy input `value`."""
        slab = self.pool.take(slot.nbytes, "uniform" if slot.kind == "uniform" else "storage")
        taken.append(slab)
        write(self.device, self.pool, slab, value, encoder, taken)
        return slab

    def _bound(self, plan: CallPlan, slabs: list[Slab]) -> tuple[list, tuple | None]:
        """The passes for these slabs: (pipeline handle, bind group, grid) per pass as wgpu-py
        objects, and the same as raw handles (pipeline, bind group, x, y, z) for
        farm.gpu.native (None without it). The bind groups are made on the first call that
        binds these slabs and kept by their serials: a serial names one buffer for good (a
        destroyed slab's never comes back, a reused one binds the same buffer), and a plan's
        slots fix each binding's size and kind, so a kept bind group is valid for every call
        that passes the same live slabs in the same places."""
        last_slabs, last_calls, last_raw = plan.last
        if slabs == last_slabs:  # the buffers of the last call (Slab compares by identity)
            return last_calls, last_raw
        key = tuple(map(_serial, slabs))
        bound = plan.bind_sets.get(key)
        if bound is not None:
            plan.bind_sets.move_to_end(key)
            plan.last = (slabs, *bound)
            return bound
        buffers = [slot.buffer for slot in plan.slots]
        for index, slab in zip(plan.filled, slabs, strict=True):
            slot = plan.slots[index]
            buffers[index] = slab.view(slot.nbytes, slot.kind)
        calls = [
            (pipeline.handle, self.device.bind(pipeline, buffers, plan.schedule, bindings, numbers), grid)
            for pipeline, (bindings, numbers, grid) in zip(plan.pipelines, plan.passes, strict=True)
        ]
        raw = None
        if self._native is not None:
            raw = tuple((native.raw(pipeline), native.raw(group), *grid) for pipeline, group, grid in calls)
        plan.bind_sets[key] = bound = (calls, raw)
        while len(plan.bind_sets) > max(MAX_BIND_SETS, 8 * self.flush_calls):  # bigger batches rotate more slabs
            plan.bind_sets.popitem(last=False)
        plan.last = (slabs, calls, raw)
        return bound

    def _transformed(self, plan: CallPlan, inputs: dict) -> list:
        """The inputs' values in `plan.inputs` order, recomputing the transformed ones on the host."""
        host = {n: v.numpy() if isinstance(v, DeviceArray) else v for n, v in inputs.items()}
        launch = plan.spec.launch(plan.schedule, plan.problem, host)
        made = {arg.name: arg.data for arg in launch.args if arg.name in host and arg.data is not None}
        return [made[slot.name] if slot.role == "transformed" else inputs[slot.name] for slot in plan.inputs]

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
        """`transfers.write` in a submission of its own (`ForgeRuntime.asarray`)."""
        self.flush()
        taken: list[Slab] = []
        try:
            if self._native is not None:  # a small write needs no submission of its own: none is made
                try:
                    write(self.device, self.pool, slab, value, self._native, taken)
                    self._native.submit()
                except Exception:
                    self._native.drop()
                    raise
            else:
                encoder = self.device.device.create_command_encoder()
                write(self.device, self.pool, slab, value, encoder, taken)
                self.device.device.queue.submit([encoder.finish()])
        finally:
            give_back(self.pool, taken)

    def read(self, array: DeviceArray, out: np.ndarray | None = None) -> np.ndarray:
        """`array`'s data after the work submitted so far (what `DeviceArray.numpy()` returns),
        into `out` when given (checked by DeviceArray.numpy)."""
        slab = array.slab(self.owner, "array")
        self.flush()
        reads, nbytes = reads_of([("array", array.dtype, array.shape)])
        try:
            encoder = self._native if self._native is not None else self.device.device.create_command_encoder()
            into = {"array": out} if out is not None else None
            done = read_back(self.device, reads, nbytes, [slab.handle], encoder, into, self._read_spin_s())["array"]
            self.idle()  # the read waited for everything submitted before it
            return done
        except GpuError:
            raise
        except Exception as exc:  # noqa: BLE001 - any wgpu failure names the step
            raise GpuError("readback", str(exc)) from exc

    def close(self) -> None:
        self.flush()
        for plan in self._plans.values():
            self._drop(plan.owned, plan.held)
        self._plans.clear()
        self._recent.clear()
