"""ForgeRuntime: run the certified kernels on the caller's own arrays, with the schedule
tuned for this machine: the consumer half of the farm (farm.oracle proves kernels
correct, farm.tuning tunes them). Each kernel method (farm.runtime.kernels) validates its
arguments before anything touches the GPU (farm.runtime.validation), builds the kernel's
problem and inputs, and `_run` runs the call's plan (farm.runtime.calls): the same
`spec.launch()` wiring the oracle certifies.

Schedules (`tuned_schedule`) come from farm.runtime.winners: tuned → nearest → same-device →
default, stale winners skipped, each fallback one warning (logger `farm.runtime`) per kernel
and problem, never a failed call (an unreachable database means defaults). A miss may queue a
tuning request, and re-reads the winners after a TTL, in the background (farm.runtime.requests).

Any array argument may be a DeviceArray (farm.runtime.arrays); with one among the inputs
or `out=`, outputs are DeviceArrays and the call returns once submitted. Buffers come from
a pool (farm.runtime.pool). Nothing is cast silently: a wrong dtype is a TypeError; shape,
emptiness, range and buffer-limit problems are ValueErrors naming the argument, the
expected and the actual shape. NaN/Inf propagate as in numpy.
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path

import numpy as np

from farm import catalog
from farm.gpu import Device, choose_adapter
from farm.runtime import declared, signature
from farm.runtime.arrays import DeviceArray
from farm.runtime.calls import Caller
from farm.runtime.kernels import KernelMethods
from farm.runtime.plans import check_host_out, check_out
from farm.runtime.pool import BufferPool
from farm.runtime.requests import Winners
from farm.runtime.validation import (
    array_shape,
    check_input_limits,
    numeric_dtype,
    positive_bytes,
    problem_of,
)
from farm.runtime.winners import Candidate, check_schedules_path, lookup_schedule
from farm.schedule import Problem, Schedule

log = logging.getLogger("farm.runtime")  # the logger docs/guides/runtime.md names

_MAX_CACHED_LOOKUPS = 4096
# synchronize()'s default spin on a GPU adapter. H200, session 11 (runtime-calls-s11.md,
# DeviceArrays with a sync each call, spinning up to 1 ms): spinning first saved 29-116 us a
# sync on 14 of 15 rows (kernels of 14-255 us; plain wgpu-py: submit+wait 95.7 us, spinning
# 64) and cost 24 us on gemm 4096^3's 4 ms. Longer waits block after it. 250 us itself: unmeasured.
DEFAULT_SPIN_US = 250.0


class ForgeRuntime(KernelMethods):
    """A handle for running certified kernels on real data; construct once, reuse.

    `db`: SQLAlchemy URL (default `$FARM_DATABASE_URL`, else `$FARM_HOME/farm.db`);
    `adapter`: FARM_ADAPTER-style spec (index or name substring); `schedules`: a JSON
    file written by `farm export` (used instead of the database); `device`: an existing
    `farm.gpu.Device` to share (then `adapter` is ignored); `capacity_bytes`: the most
    device memory the runtime's buffer pool may hold, live DeviceArrays and idle buffers
    together (a positive integer, or None: no bound; idle buffers beyond 4 GiB are freed);
    `request_tuning`: queue misses for `farm serve` (True, False, or None:
    `$FARM_REQUEST_TUNING`; farm.runtime.requests); `spin_wait_us`: how long
    `synchronize()` polls the GPU without sleeping before it blocks (a number from 0: it
    blocks at once, to 1e6; None, the default: DEFAULT_SPIN_US on a GPU, 0 on a CPU
    adapter; a short kernel's sync ends sooner when a spare core spins, see
    farm.gpu.Device.wait_idle). A wrong type is a TypeError (ValueError for
    spin_wait_us), a value out of range a ValueError, naming the argument and the value,
    raised before any device is opened.

    Thread safety: a runtime may be shared by threads; its calls are serialized by a lock
    (one wgpu queue runs them in order anyway), so concurrent calls are safe, not parallel.
    """

    def __init__(
        self,
        db: str | None = None,
        adapter: str | None = None,
        schedules: str | Path | None = None,
        *,
        device: Device | None = None,
        capacity_bytes: int | None = None,
        request_tuning: bool | None = None,
        spin_wait_us: float | None = None,
    ):
        self.spin_wait_s = None if spin_wait_us is None else _spin_wait_s(spin_wait_us)
        capacity_bytes = positive_bytes("capacity_bytes", capacity_bytes)
        if request_tuning is not None and not isinstance(request_tuning, (bool, np.bool_)):
            raise TypeError(f"request_tuning: expected True, False or None, got {request_tuning!r}")
        if device is not None and not isinstance(device, Device):
            raise TypeError(f"device: expected a farm.gpu.Device or None, got {type(device).__name__}")
        self.device = device if device is not None else Device(choose_adapter(adapter))
        if self.spin_wait_s is None:  # spinning would take a core from a CPU adapter's own threads
            self.spin_wait_s = 0.0 if self.device.profile.is_cpu else DEFAULT_SPIN_US / 1e6
        self._lock = threading.RLock()
        self._pool = BufferPool(self.device, capacity_bytes)
        self._caller = Caller(self.device, self._pool, self)
        self.profile = self.device.profile
        self.topology_hash = self.profile.topology_hash()
        self.binding_limit = self.profile.limit("max-storage-buffer-binding-size")  # every call checks it
        self._schedules = Path(schedules) if schedules is not None else None
        self._lookups: dict[tuple[str, str], tuple[Schedule, str]] = {}
        self._warned: set[tuple[str, ...]] = set()
        self.stored = Winners(db, self._schedules, self.topology_hash, request_tuning, self._warn)
        if self._schedules is not None:
            check_schedules_path(self._schedules)  # FileNotFoundError; ValueError for a directory
            self.winners()  # a malformed file fails here, not in the first kernel call

    # -- schedules ----------------------------------------------------------------------
    def winners(self) -> list[Candidate]:
        """Every stored winner (read once per runtime, again after a miss: farm.runtime.requests)."""
        return self.stored.get()

    def tuned_schedule(self, kernel: str, problem: Problem | dict | None = None) -> tuple[Schedule, str]:
        """The schedule a call for (`kernel`, `problem`) uses and where it came from:
        "tuned" | "nearest" | "same-device" | "default".

        `problem`: the call's dims, as a dict (`{"m": 512, "k": 256, "n": 128}` for gemm) or a
        `farm.schedule.Problem`: exactly the kernel's dims (`catalog.get(kernel).dims`), each
        an integer >= 1, else TypeError/ValueError naming it; None stands for the kernel's
        first default problem on this adapter. A winner that is invalid for `problem` is
        replaced by the default (source "default"), except topk's, which only a schedule of
        the same block size replaces (same source); when none can run the problem (k above
        the block size) the winner is returned and the call raises ValueError.
        """
        spec = catalog.get(getattr(kernel, "name", kernel))
        if problem is None:
            return self._tuned(spec, spec.default_problems(self.profile)[0])
        return self._tuned(spec, problem_of(spec, problem))

    def _tuned(self, spec, problem: Problem) -> tuple[Schedule, str]:
        """`tuned_schedule` for a checked `problem` of `spec` (the kernel calls' path)."""
        key = (spec.name, problem.key())
        cached = self._lookups.get(key)
        if cached is None:
            lookup = lookup_schedule(self.winners(), spec, problem, self.profile)
            if lookup.warning:
                self._warn(key, lookup.warning)
            cached = (lookup.schedule, lookup.source)
            self.stored.missed(spec, problem, lookup.source)
            if len(self._lookups) >= _MAX_CACHED_LOOKUPS:
                self._lookups.clear()
            self._lookups[key] = cached
        return cached

    def _warn(self, key: tuple[str, ...], message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    # -- device arrays --------------------------------------------------------------------
    def asarray(self, array: np.ndarray) -> DeviceArray:
        """`array` uploaded to device memory (C order; its dtype kept: nothing is cast)."""
        if isinstance(array, DeviceArray):
            array.slab(self, "array")  # another runtime's or released: ValueError
            return array
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biufc" or array.dtype.hasobject:
            what = f"dtype {array.dtype}" if isinstance(array, np.ndarray) else type(array).__name__
            raise TypeError(f"array: expected a numeric numpy array, got {what}")
        check_input_limits("asarray", {"array": array}, self.binding_limit)
        with self._lock:
            return self._caller.new_array(array.shape, array.dtype, array)

    def empty(self, shape: int | tuple[int, ...], dtype=np.float32) -> DeviceArray:
        """An uninitialized DeviceArray (a kernel's `out=`): `shape` an integer or a tuple of
        them (>= 0), `dtype` one `asarray` takes (bool, integer, float, complex), else
        TypeError/ValueError naming the value; more bytes than a kernel may bind or than
        `capacity_bytes` is a ValueError naming them."""
        dims = array_shape(shape)
        dtype = numeric_dtype("dtype", dtype)
        nbytes = math.prod(dims) * dtype.itemsize  # Python ints: nothing overflows
        if nbytes > self.binding_limit:
            raise ValueError(
                f"empty: shape {dims} {dtype} ({nbytes} bytes) exceeds this adapter's "
                f"max-storage-buffer-binding-size of {self.binding_limit} bytes"
            )
        capacity = self._pool.capacity
        if capacity is not None and nbytes > capacity:
            raise ValueError(f"empty: shape {dims} {dtype} ({nbytes} bytes) exceeds capacity_bytes={capacity}")
        with self._lock:
            return self._caller.new_array(dims, dtype)

    def synchronize(self) -> None:
        """Wait for every call made so far (DeviceArray calls return without waiting; their
        recorded passes are submitted first)."""
        with self._lock:
            self._caller.flush()
            self.device.wait_idle(self.spin_wait_s)

    def memory(self) -> dict[str, int | None]:
        """Device bytes of the pool: held (live arrays, calls), idle (kept for reuse), capacity."""
        return {"held": self._pool.held, "idle": self._pool.idle, "capacity": self._pool.capacity}

    def trim(self) -> int:
        """Free the pool's idle buffers now; returns the bytes freed."""
        with self._lock:
            return self._pool.trim()

    def close(self) -> None:
        """Free what the runtime holds on the device (plans and idle buffers); live
        DeviceArrays give theirs back when released or collected."""
        with self._lock:
            self._caller.close()
            self._pool.trim()

    def __enter__(self) -> ForgeRuntime:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self, array: DeviceArray, out: np.ndarray | None = None) -> np.ndarray:
        with self._lock:
            return self._caller.read(array, out)

    # -- the one path to the GPU ---------------------------------------------------------
    def run(self, kernel, dims: dict | None = None, inputs: dict | None = None, *, schedule=None, out=None, **arrays):
        """Any kernel, built-in or `farm.Kernel`, by name or object.

        `run(k, x=x)`: a `farm.Kernel`'s arrays (and dims no input's axis gives) by name, checked
        against its declared shapes and dtypes (farm.runtime.signature); returns the output (a
        tuple for several). For a built-in it is the kernel's method (`run("gemv", a=a, x=x)` is
        `rt.gemv(a, x)`: the method's argument names, the tuned schedule, no `schedule=`).
        `run(k, dims, inputs)`: any kernel, `schedule=` too; `dims` exactly the kernel's, `inputs`
        by the spec's names, each checked against the shape and dtype its spec declares for `dims`
        (farm.runtime.declared); returns {output: array}. `schedule`: a Schedule, tuned when None;
        `out`: a dict {output: array}, or one array for a kernel of one output."""
        spec = catalog.get(getattr(kernel, "name", kernel))
        if schedule is not None and not isinstance(schedule, Schedule):
            raise TypeError(f"schedule: expected a farm.schedule.Schedule or None, got {type(schedule).__name__}")
        if dims is None and inputs is None:
            return signature.call(self, spec, arrays, schedule, out)
        if arrays:
            raise TypeError(
                f"{spec.name}: pass the inputs either as run({spec.name!r}, dims, inputs) or by name, not both "
                f"(got {', '.join(arrays)} by name)"
            )
        dims, inputs, outs = declared.check_call(self, spec, dims, {} if inputs is None else inputs, out)
        return self._run(spec.name, dims, inputs, schedule, outs, ("run",))

    def _run(
        self,
        kernel: str,
        dims: dict[str, int],
        inputs: dict,
        schedule: Schedule | None = None,
        out: dict[str, DeviceArray | None] | None = None,
        layout: tuple = (),
    ) -> dict:
        """Check buffer limits, then run the call's plan (farm.runtime.calls) with the tuned
        (or given) schedule: numpy out for numpy in, DeviceArrays (not waited for) when any
        input or `out` is a DeviceArray.

        A call whose kernel, dims, schedule and input names were seen before goes straight to
        its plan, without rebuilding the problem and looking up the schedule again (the same
        shapes passed the checks then). Every caller (the kernel methods, `farm.Kernel`
        signatures, `run(kernel, dims, inputs)`) checks each input's dtype and shape against
        `dims`, so those fix the inputs' layout; `layout` keeps apart callers whose shapes for
        the same dims differ (ternary_gemv's packed words: flat from the method, 2-D in `run`)."""
        out = {name: array for name, array in out.items() if array is not None} if out else None
        into = None
        if out and any(type(array) is not DeviceArray for array in out.values()):
            into, out = out, None  # numpy arrays to fill: the numpy path (check_host_out)
        to_device = bool(out) or DeviceArray in map(type, inputs.values())
        recent = (kernel, tuple(dims.values()), schedule, tuple(inputs), layout)
        with self._lock:
            if self.stored.refreshed():  # new winners read after a miss: look the schedules up again
                self._lookups = {}
                self._caller.forget_recent()  # plans chosen by the old lookups
            plan = self._caller.recent(recent)
            if plan is None:
                check_input_limits(kernel, inputs, self.binding_limit)
                spec = catalog.get(kernel)
                problem = spec.problem(**dims)
                chosen = schedule if schedule is not None else self._tuned(spec, problem)[0]
                plan = self._caller.plan(spec, chosen, problem, inputs, self.binding_limit)
                self._caller.remember(recent, plan)
            if out:
                check_out(plan, inputs, out, self)
            if into:
                check_host_out(plan, inputs, into)
            return self._caller.call(plan, inputs, out, to_device, into)


def _spin_wait_s(spin_wait_us) -> float:
    """`spin_wait_us` as seconds: a number from 0 to 1e6 (one second), else ValueError."""
    try:
        if isinstance(spin_wait_us, (str, bytes)):
            raise TypeError("a string")  # float("5") would take it
        value = float(spin_wait_us)
    except (TypeError, ValueError):
        raise ValueError(f"spin_wait_us must be a number of microseconds, got {spin_wait_us!r}") from None
    if isinstance(spin_wait_us, bool) or not 0.0 <= value <= 1e6:
        raise ValueError(f"spin_wait_us must be between 0 and 1e6 microseconds, got {spin_wait_us!r}")
    return value / 1e6
