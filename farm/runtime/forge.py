"""ForgeRuntime: run the certified kernels on the caller's own arrays, with the schedule
tuned for this machine: the consumer half of the farm (farm.oracle proves kernels
correct, farm.tuning tunes them). Each method validates its arguments before anything
touches the GPU (farm.runtime.validation), builds the kernel's problem and inputs and runs
the call's plan (farm.runtime.calls): the same `spec.launch()` wiring the oracle certifies.

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
import threading
from pathlib import Path

import numpy as np

from farm import catalog
from farm.gpu import Device, choose_adapter
from farm.runtime import signature
from farm.runtime.arrays import DeviceArray
from farm.runtime.calls import Caller, check_out
from farm.runtime.pool import BufferPool
from farm.runtime.requests import Winners
from farm.runtime.validation import (
    as_array,
    as_count,
    check_input_limits,
    check_output_size,
    check_recurrent_shape,
    check_topk_k,
    expect_shape,
    fft_shape,
    p64_words,
)
from farm.runtime.winners import Candidate, check_schedules_path, lookup_schedule
from farm.schedule import Problem, Schedule

log = logging.getLogger("farm.runtime")  # the name README promises

_MAX_CACHED_LOOKUPS = 4096


class ForgeRuntime:
    """A handle for running certified kernels on real data; construct once, reuse.

    `db`: SQLAlchemy URL (default `$FARM_DATABASE_URL`, else `$FARM_HOME/farm.db`);
    `adapter`: FARM_ADAPTER-style spec (index or name substring); `schedules`: a JSON
    file written by `farm export` (used instead of the database); `device`: an existing
    `farm.gpu.Device` to share (then `adapter` is ignored); `capacity_bytes`: the most
    device memory the runtime's buffer pool may hold, live DeviceArrays and idle buffers
    together (None: no bound; idle buffers beyond 1 GiB are freed); `request_tuning`: queue
    misses for `farm serve` (None: `$FARM_REQUEST_TUNING`; farm.runtime.requests).

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
    ):
        self.device = device if device is not None else Device(choose_adapter(adapter))
        self._lock = threading.RLock()
        self._pool = BufferPool(self.device, capacity_bytes)
        self._caller = Caller(self.device, self._pool, self)
        self.profile = self.device.profile
        self.topology_hash = self.profile.topology_hash()
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

    def tuned_schedule(self, kernel: str, problem: Problem | None = None) -> tuple[Schedule, str]:
        """The schedule a call for (`kernel`, `problem`) uses and where it came from:
        "tuned" | "nearest" | "same-device" | "default".

        `problem=None` stands for the kernel's first default problem on this adapter. A
        winner that is invalid for `problem` is replaced by the default (source "default"),
        except topk's, which only a schedule of the same block size replaces (same source);
        when none can run the problem (k above the block size) the winner is returned and
        the call raises ValueError.
        """
        spec = catalog.get(getattr(kernel, "name", kernel))
        problem = problem if problem is not None else spec.default_problems(self.profile)[0]
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
            array.buffer("read", self, "array")  # another runtime's or released: ValueError
            return array
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biufc" or array.dtype.hasobject:
            what = f"dtype {array.dtype}" if isinstance(array, np.ndarray) else type(array).__name__
            raise TypeError(f"array: expected a numeric numpy array, got {what}")
        check_input_limits("asarray", {"array": array}, self._binding_limit())
        with self._lock:
            return self._caller.new_array(array.shape, array.dtype, array)

    def empty(self, shape: int | tuple[int, ...], dtype=np.float32) -> DeviceArray:
        """An uninitialized DeviceArray (a kernel's `out=`)."""
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        dims = tuple(as_count(f"shape[{i}]", d, 0) for i, d in enumerate(shape))
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
        if nbytes > self._binding_limit():
            raise ValueError(
                f"empty: shape {dims} {dtype} ({nbytes} bytes) exceeds this adapter's "
                f"max-storage-buffer-binding-size of {self._binding_limit()} bytes"
            )
        with self._lock:
            return self._caller.new_array(dims, dtype)

    def synchronize(self) -> None:
        """Wait for every call submitted so far (DeviceArray calls return without waiting)."""
        with self._lock:
            self.device.wait_idle()

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

    def _read(self, array: DeviceArray) -> np.ndarray:
        with self._lock:
            return self._caller.read(array)

    # -- the one path to the GPU ---------------------------------------------------------
    def run(self, kernel, dims: dict | None = None, inputs: dict | None = None, *, schedule=None, out=None, **arrays):
        """Any kernel, built-in or `farm.Kernel`, by name or object. `run(k, x=x)`: arrays (and dims
        no input's axis gives) by name, checked against the declared shapes and dtypes (farm.runtime.
        signature); returns the output (a tuple for several). `run(k, dims, inputs)`: {output: array},
        only limits and the spec's checks. `schedule`: tuned when None; `out`: DeviceArray or dict."""
        name = getattr(kernel, "name", kernel)
        if dims is None and inputs is None:
            return signature.call(self, catalog.get(name), arrays, schedule, out)
        return self._run(name, dims or {}, inputs or {}, schedule, out)

    def _run(
        self,
        kernel: str,
        dims: dict[str, int],
        inputs: dict,
        schedule: Schedule | None = None,
        out: dict[str, DeviceArray | None] | None = None,
    ) -> dict:
        """Check buffer limits, then run the call's plan (farm.runtime.calls) with the tuned
        (or given) schedule: numpy out for numpy in, DeviceArrays (not waited for) when any
        input or `out` is a DeviceArray."""
        out = {name: array for name, array in (out or {}).items() if array is not None}
        to_device = bool(out) or any(isinstance(v, DeviceArray) for v in inputs.values())
        # The call's shapes seen before: its plan, without rebuilding the problem and
        # looking up the schedule again (the same shapes passed these checks then).
        recent = (kernel, tuple(dims.values()), schedule, tuple((n, v.dtype, v.shape) for n, v in inputs.items()))
        with self._lock:
            if self.stored.refreshed():  # new winners read after a miss: look the schedules up again
                self._lookups = {}
                self._caller.forget_recent()  # plans chosen by the old lookups
            plan = self._caller.recent(recent)
            if plan is None:
                check_input_limits(kernel, inputs, self._binding_limit())
                spec = catalog.get(kernel)
                problem = spec.problem(**dims)
                chosen = schedule if schedule is not None else self.tuned_schedule(kernel, problem)[0]
                plan = self._caller.plan(spec, chosen, problem, inputs, self._binding_limit())
                self._caller.remember(recent, plan)
            if out:
                check_out(plan, inputs, out, self)
            return self._caller.call(plan, inputs, out, to_device)

    def _arg(self, name: str, value: object, dtypes: tuple[type, ...], ndim: tuple[int, ...]):
        """`as_array` for numpy arrays; the same checks for DeviceArrays of this runtime."""
        if isinstance(value, DeviceArray):
            return value.checked(name, self, dtypes, ndim)
        return as_array(name, value, dtypes, ndim)

    def _binding_limit(self) -> int:
        return self.profile.limit("max-storage-buffer-binding-size")

    # -- kernels ------------------------------------------------------------------------
    def gemv(self, a, x, *, out: DeviceArray | None = None):
        """y = a · x for float32 `a` (m, n) and `x` (n,); returns float32 (m,)."""
        a = self._arg("a", a, (np.float32,), (2,))
        x = self._arg("x", x, (np.float32,), (1,))
        m, n = a.shape
        expect_shape("x", x, (n,), f"a has {n} columns")
        return self._run("gemv", {"m": m, "n": n}, {"a": a, "x": x}, out={"y": out})["y"]

    def topk(self, x, k: int, *, out: DeviceArray | None = None):
        """Per-block top-k of float32 `x` (n,): for each block of `block_size` elements
        (block_size = the tuned schedule's workgroup_size, see `tuned_schedule("topk", ...)`),
        its k largest values descending, concatenated block by block: shape
        (ceil(n / block_size) * k,). The tail block is padded with -FLT_MAX; NaN sorts above
        +Inf and comes back as the canonical NaN (see farm.catalog.topk). 1 <= k <=
        block_size, else ValueError naming the block size in force: the block size is never
        changed to fit k (that would change the layout)."""
        x = self._arg("x", x, (np.float32,), (1,))
        spec = catalog.get("topk")
        k = as_count("k", k, None)  # an integer; its range is the block size's, below
        problem = spec.problem(n=x.shape[0], k=max(k, 1))
        schedule, source = self.tuned_schedule("topk", problem)
        check_topk_k(k, schedule, source)
        return self._run("topk", problem.as_dict(), {"x": x}, schedule, out={"out": out})["out"]

    def ternary_gemv(self, x, packed_w, scale, m: int, k: int, *, out: DeviceArray | None = None):
        """out[o] = scale[o] * Σ_{i<k} t(w[o][i]) * x[i] for o < m; returns float32 (m,).

        `packed_w`: uint32 2-bit codes, 16 per word, low bits first (0→0, 1→+1, 2→−1,
        3→0), m rows of ceil(k/16) words, as (m, ceil(k/16)) or flat (m*ceil(k/16),)
        (`farm.catalog.ternary_gemv.pack_codes` builds it). `x`: float32 (k,);
        `scale`: float32 (m,).

        Accuracy: f32 summation, except where the tuned schedule is an integer
        dot-product kernel (`stage_x=3`, or `stage_x=4`, the H200's winner): there x is
        held in block floating point, each value rounded to at most 2^-23 of the largest
        |x| among the 2048 values of its tile, and sums are exact within a tile. Exact for small-integer
        x; for x spanning many orders of magnitude within a tile, the small values lose
        precision that an f32 sum would keep. NaN/Inf in x propagate either way."""
        m = as_count("m", m)
        k = as_count("k", k)
        x = self._arg("x", x, (np.float32,), (1,))
        packed_w = self._arg("packed_w", packed_w, (np.uint32,), (1, 2))
        scale = self._arg("scale", scale, (np.float32,), (1,))
        words = -(-k // 16)
        expect_shape("x", x, (k,), f"k={k}")
        expect_shape("scale", scale, (m,), f"m={m}")
        want = (m, words) if packed_w.ndim == 2 else (m * words,)
        expect_shape("packed_w", packed_w, want, f"m={m} rows of ceil(k/16)={words} words")
        check_input_limits("ternary_gemv", {"x": x, "packed_w": packed_w, "scale": scale}, self._binding_limit())
        inputs = {"x": x, "w_packed": packed_w.reshape(-1), "scale": scale}
        return self._run("ternary_gemv", {"m": m, "k": k}, inputs, out={"out": out})["out"]

    def recurrent_attention(
        self,
        query,
        value,
        rho=None,
        decay=None,
        *,
        out: tuple[DeviceArray, DeviceArray] | None = None,
    ):
        """Fused recurrent linear attention over all T steps; returns (context [B,H,T,E], rho [B,H,L,E]).

        For t in order: context[b,h,t] = Σ_l rho[b,h,l] · query[b,h,t,l] (state before the
        update), then rho = (rho + query[b,h,t,:,None] · value[b,vh,t]) · decay[h].
        `query` float32 [B,H,T,L]; `value` float32 [B,VH,T,E] with VH = 1 (shared by all
        heads) or H; `rho` float32 [B,H,L,E] (zeros when None); `decay` float32 [H] (no
        decay when None). L <= 2048 (farm.catalog.recurrent.MAX_L: the state of a column
        lives in registers), else ValueError; split L (state rows are independent, add the
        chunks' contexts)."""
        query = self._arg("query", query, (np.float32,), (4,))
        value = self._arg("value", value, (np.float32,), (4,))
        b, h, t, l_dim = query.shape
        vh, e = value.shape[1], value.shape[3]
        if vh not in (1, h):
            raise ValueError(
                f"value: expected shape ({b}, 1 or {h}, {t}, E) for query {query.shape}, got {value.shape}"
            )
        expect_shape("value", value, (b, vh, t, e), f"[B,VH,T,E] with B={b}, T={t} from query")
        check_recurrent_shape(b, h, t, l_dim, e, self._binding_limit())
        inputs = {"query": query, "value": value}
        if rho is not None:
            inputs["rho"] = self._arg("rho", rho, (np.float32,), (4,))
            expect_shape("rho", inputs["rho"], (b, h, l_dim, e), "[B,H,L,E] from query and value")
        if decay is not None:
            inputs["decay"] = self._arg("decay", decay, (np.float32,), (1,))
            expect_shape("decay", inputs["decay"], (h,), f"[H] with H={h}")
        dims = {"B": b, "H": h, "VH": vh, "T": t, "L": l_dim, "E": e}
        context, rho_out = out if out is not None else (None, None)
        result = self._run("recurrent", dims, inputs, out={"context": context, "rho": rho_out})
        return result["context"], result["rho"]

    def gemm(self, a, b, *, out: DeviceArray | None = None):
        """c = a · b for float32 `a` (m, k) and `b` (k, n); returns float32 (m, n)."""
        a = self._arg("a", a, (np.float32,), (2,))
        b = self._arg("b", b, (np.float32,), (2,))
        m, k = a.shape
        if b.shape[0] != k:
            raise ValueError(f"b: expected shape ({k}, n) since a has {k} columns, got {b.shape}")
        n = b.shape[1]
        check_output_size("a, b", "c", (m, n), 4, self._binding_limit(), f"a has {m} rows, b {n} columns")
        return self._run("gemm", {"m": m, "k": k, "n": n}, {"a": a, "b": b}, out={"c": out})["c"]

    def p64_project(self, records, weights, *, out: DeviceArray | None = None):
        """out[r] = Σ_{w<16} weights[w] * f32(word[r][w]) over n P64 records; returns float32 (n,).

        `records`: uint32 (n, 16), uint64 (n, 8) (each u64 field is two little-endian u32
        words, low word first), or bytes-like of n*64 bytes (little-endian u32 words).
        `weights`: float32 (16,)."""
        if isinstance(records, (bytes, bytearray, memoryview)):
            raw = bytes(records)
            if not raw or len(raw) % 64:
                raise ValueError(f"records: expected n*64 bytes with n >= 1, got {len(raw)} bytes")
            words = np.frombuffer(raw, dtype="<u4").reshape(-1, 16)
        else:
            array = self._arg("records", records, (np.uint32, np.uint64), (2,))
            per_record = 16 if array.dtype == np.uint32 else 8
            expect_shape("records", array, (array.shape[0], per_record), f"{per_record} {array.dtype} words per record")
            check_input_limits("p64_project", {"records": array}, self._binding_limit())
            if per_record == 16:
                words = array
            elif isinstance(array, DeviceArray):  # device bytes are little-endian u64 already
                words = array.view(np.uint32).reshape(-1, 16)
            else:
                words = p64_words(array)  # any layout: Fortran order, strided
        weights = self._arg("weights", weights, (np.float32,), (1,))
        expect_shape("weights", weights, (16,), "one weight per record word")
        inputs = {"records": words, "weights": weights}
        return self._run("p64_project", {"n": words.shape[0]}, inputs, out={"out": out})["out"]

    def fft(self, signal, *, out: DeviceArray | None = None):
        """Forward DFT over the last axis, batched over the leading ones (matches numpy.fft.fft).

        `signal`: complex64 (..., n), returned as complex64 (..., n); or interleaved
        float32 (..., 2n) (real, imaginary pairs), returned in the same form. n must be
        a power of two, 2 <= n <= min(1024, max-compute-invocations-per-workgroup).

        NaN/Inf: an output point is non-finite exactly where numpy's is, and numpy's ±Inf
        parts come back as that ±Inf or NaN. NaN and ±Inf are in exactly numpy's parts when
        a transform's non-finite values sit at points 0 and n/2; elsewhere the butterfly
        order decides, and numpy's pocketfft has another (see farm.catalog.fft)."""
        signal = self._arg("signal", signal, (np.complex64, np.float32), tuple(range(1, 33)))
        max_n = min(1024, self.profile.limit("max-compute-invocations-per-workgroup"))
        n, batch = fft_shape(signal.shape, signal.dtype == np.complex64, max_n)
        complex_input = signal.dtype == np.complex64
        check_input_limits("fft", {"signal": signal}, self._binding_limit())
        on_device = isinstance(signal, DeviceArray)
        points = (signal if on_device else np.ascontiguousarray(signal)).view(np.float32)
        target = None
        if out is not None:
            if not isinstance(out, DeviceArray) or out.shape != signal.shape or out.dtype != signal.dtype:
                what = f"{out.shape} {out.dtype}" if isinstance(out, DeviceArray) else type(out).__name__
                raise ValueError(
                    f"out: expected a DeviceArray of shape {signal.shape} and dtype {signal.dtype}, got {what}"
                )
            target = out.view(np.float32).reshape(batch, n, 2)
        y = self._run("fft", {"n": n, "batch": batch}, {"x": points.reshape(batch, n, 2)}, out={"y": target})["y"]
        if out is not None:
            return out
        if complex_input:
            return y.reshape(-1).view(np.complex64).reshape(signal.shape)
        return y.reshape(signal.shape)
