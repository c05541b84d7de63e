"""ForgeRuntime: run the certified kernels on the caller's own arrays, with the schedule
tuned for this machine: the consumer half of the farm (farm.oracle proves kernels
correct, farm.tuning tunes them).

This is one idea in one module: the runtime's surface, every method a user calls on a
ForgeRuntime. Each built-in kernel's method validates its arguments before anything
touches the GPU (farm.runtime.validation; the checks run on every call, so they are
written to cost little when they pass: dtypes compared as np.dtype objects, messages built
only on failure), builds the kernel's dims and inputs, and `_run` runs the call's plan
(farm.runtime.calls): the same `spec.launch()` wiring the oracle certifies.

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

import functools
import logging
import math
import threading
from pathlib import Path

import numpy as np

from farm import catalog
from farm.catalog.topk import TopK
from farm.gpu import Device, choose_adapter
from farm.runtime import declared, signature
from farm.runtime.arrays import DeviceArray, check_host_array
from farm.runtime.calls import Caller
from farm.runtime.plans import check_host_out, check_out
from farm.runtime.pool import BufferPool
from farm.runtime.requests import WinnerCache
from farm.runtime.validation import (
    array_shape,
    as_array,
    as_count,
    check_input_limits,
    check_output_size,
    check_recurrent_shape,
    expect_shape,
    fft_shape,
    numeric_dtype,
    p64_words,
    positive_bytes,
    problem_of,
)
from farm.runtime.winners import Candidate, check_schedules_path, lookup_schedule
from farm.schedule import Problem, Schedule

log = logging.getLogger("farm.runtime")  # the logger docs/guides/runtime.md names

_MAX_CACHED_LOOKUPS = 4096
# synchronize()'s default spin on a GPU adapter: a short kernel's sync ends sooner when a
# spare core spins than when the driver wakes a sleeping thread; longer waits block after it.
DEFAULT_SPIN_US = 250.0

F32 = (np.dtype(np.float32),)
U32 = (np.dtype(np.uint32),)
TOPK_BLOCKS = TopK.space["workgroup_size"]  # the block sizes the kernel runs
P64_RECORDS = (np.dtype(np.uint32), np.dtype(np.uint64))
FFT_SIGNAL = (np.dtype(np.complex64), np.dtype(np.float32))
FFT_RANKS = tuple(range(1, 33))


@functools.lru_cache(maxsize=1024)
def _topk_problem(n: int, k: int) -> tuple[Problem, dict[str, int]]:
    """topk's problem and dims for (n, k): it needs the problem before the call (its schedule
    decides the block size k is checked against), so a repeated call reuses it."""
    problem = catalog.get("topk").problem(n=n, k=k)
    return problem, problem.as_dict()


def _out(name: str, array: DeviceArray | None) -> dict | None:
    """A method's `out=` as `_run` takes it (None: no dict to build and filter on every call)."""
    return None if array is None else {name: array}


class ForgeRuntime:
    """A handle for running certified kernels on real data; construct once, reuse.

    `db`: SQLAlchemy URL (default `$FARM_DATABASE_URL`, else `$FARM_HOME/farm.db`);
    `adapter`: FARM_ADAPTER-style spec (index or name substring); `schedules`: a JSON
    file written by `farm export` (used instead of the database); `device`: an existing
    `farm.gpu.Device` to share (then `adapter` is ignored); `capacity_bytes`: the most
    device memory the runtime's buffer pool may hold, live DeviceArrays and idle buffers
    together (a positive integer, or None: no bound; idle buffers beyond 4 GiB are freed);
    `request_tuning`: queue misses for `farm serve` (True, False, or None:
    `$FARM_REQUEST_TUNING`; farm.runtime.requests); `spin_wait_us`: how long
    `synchronize()`, and a read (a numpy call, `DeviceArray.numpy()`), polls the GPU
    without sleeping before it blocks (a number from 0: it blocks at once, to 1e6; None,
    the default: DEFAULT_SPIN_US on a GPU, 0 on a CPU adapter; a short kernel's sync ends
    sooner when a spare core spins, see farm.gpu.Device.wait_idle). A wrong type is a TypeError (ValueError for
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
        self._lookups: dict[tuple[str, str], tuple[Schedule, str, float]] = {}
        self._warned: set[tuple[str, ...]] = set()
        self.winner_cache = WinnerCache(db, self._schedules, self.topology_hash, request_tuning, self._warn)
        if self._schedules is not None:
            check_schedules_path(self._schedules)  # FileNotFoundError; ValueError for a directory
            self.winners()  # a malformed file fails here, not in the first kernel call

    # -- schedules ----------------------------------------------------------------------
    def winners(self) -> list[Candidate]:
        """Every stored winner (read once per runtime, again after a miss: farm.runtime.requests)."""
        return self.winner_cache.get()

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
            return self._tuned(spec, spec.default_problems(self.profile)[0])[:2]
        return self._tuned(spec, problem_of(spec, problem))[:2]

    def _tuned(self, spec, problem: Problem) -> tuple[Schedule, str, float]:
        """`tuned_schedule` for a checked `problem` of `spec` (the kernel calls' path), and
        the tuned winner's kernel seconds (0 when not known: another problem's winner, the
        default), which sizes the runtime's early submissions (farm.runtime.calls)."""
        key = (spec.name, problem.key())
        cached = self._lookups.get(key)
        if cached is None:
            lookup = lookup_schedule(self.winners(), spec, problem, self.profile)
            if lookup.warning:
                self._warn(key, lookup.warning)
            cached = (lookup.schedule, lookup.source, (lookup.median_ns or 0.0) / 1e9)
            self.winner_cache.missed(spec, problem, lookup.source)
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
        if isinstance(array, np.ma.MaskedArray):  # refused as the kernels refuse it: the mask would be dropped
            raise TypeError("array: expected a plain numpy array, got a masked array (its mask would be dropped: "
                            "pass .filled(value) or .data yourself)")  # fmt: skip
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
            self._caller.idle()

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

    # -- the built-in kernels ------------------------------------------------------------
    def _arg(self, name: str, value: object, dtypes: tuple, ndim: tuple[int, ...]):
        """`as_array` for numpy arrays; the same checks for DeviceArrays of this runtime."""
        if isinstance(value, DeviceArray):
            return value.checked(name, self, dtypes, ndim)
        return as_array(name, value, dtypes, ndim)

    def gemv(self, a, x, *, out: DeviceArray | np.ndarray | None = None):
        """y = a · x for float32 `a` (m, n) and `x` (n,); returns float32 (m,)."""
        a = self._arg("a", a, F32, (2,))
        x = self._arg("x", x, F32, (1,))
        m, n = a.shape
        expect_shape("x", x, (n,), "a has {n} columns", n=n)
        return self._run("gemv", {"m": m, "n": n}, {"a": a, "x": x}, out=_out("y", out))["y"]

    def topk(self, x, k: int, *, block: int | None = None, out: DeviceArray | np.ndarray | None = None):
        """The k largest values of float32 `x` (n,), descending: shape (k,), whatever the tuning.

        NaN sorts above +Inf and comes back as the canonical NaN; -0.0 sorts just below +0.0
        (the kernel's total order, see farm.catalog.topk). 1 <= k <= n, and k at most half the
        largest workgroup this adapter runs (512 on most) when x spans more than one block.
        The tuned per-block kernel runs in stages over its own candidates (each block's k
        largest), all on the GPU: from numpy, one upload and one download.

        `block=B`: the per-block top-k instead: for each block of B elements (a power of two,
        32..1024, k <= B) its k largest values descending, concatenated block by block: shape
        (ceil(n / B) * k,), the tail block padded with -FLT_MAX. The caller fixes the block,
        so the layout; the tuned schedule supplies the rest (its other knobs are kept where
        they run at B, else the default's are used). Out-of-range arguments: ValueError
        naming them."""
        source_x = x
        x = self._arg("x", x, F32, (1,))
        n = x.shape[0]
        if block is not None:
            block = as_count("block", block, None)
            if block not in TOPK_BLOCKS:
                raise ValueError(f"block: expected one of {TOPK_BLOCKS}, got {block}")
            k = as_count("k", k, 1, block)
            problem, dims = _topk_problem(n, k)
            key = ("topk block", problem.key(), block)
            schedule = self._lookups.get(key)
            if schedule is None:
                tuned = self._tuned(catalog.get("topk"), problem)[0]
                schedule = self._lookups[key] = self._topk_schedule(problem, block, 0, tuned)
            return self._run("topk", dims, {"x": x}, schedule, out=_out("out", out))["out"]
        if not isinstance(x, DeviceArray):
            check_input_limits("topk", {"x": x}, self.binding_limit)  # before the stages' scratch
        widest = self._widest_topk_block
        k = as_count("k", k, 1, min(n, widest if n <= widest else widest // 2))
        stages = self._topk_stages(n, k, widest)
        if len(stages) > 1 and isinstance(out, np.ndarray) and not isinstance(source_x, DeviceArray):
            check_host_array(out, (k,), np.dtype(np.float32), "a numpy array")  # before any work
        current, scratch = x, []
        with self._lock:  # the stages' scratch must not interleave with another thread's calls
            for dims, schedule, size in stages[:-1]:
                step = self.empty(size)
                self._run("topk", dims, {"x": current}, schedule, out={"out": step})
                scratch.append(step)
                current = step
            dims, schedule, _ = stages[-1]
            host = bool(scratch) and not isinstance(source_x, DeviceArray) and not isinstance(out, DeviceArray)
            result = self._run("topk", dims, {"x": current}, schedule, out=None if host else _out("out", out))["out"]
            if host:  # numpy in, numpy out: the candidates stayed on the GPU, the answer comes back
                result, device_result = result.numpy(out=out), result
                device_result.release()
            for step in scratch:
                step.release()  # recorded calls pin their slabs until they ran
        return result

    @functools.cached_property
    def _widest_topk_block(self) -> int:
        """The largest topk block this adapter runs (its workgroup size limits)."""
        limit = min(self.profile.limit("max-compute-invocations-per-workgroup"),
                    self.profile.limit("max-compute-workgroup-size-x"))  # fmt: skip
        return max(b for b in TOPK_BLOCKS if b <= limit)

    def _topk_schedule(self, problem: Problem, block: int, pad: int, base: Schedule) -> Schedule:
        """The schedule running topk `problem` at block size `block` (knob `pad` set): `base`'s
        (the tuned winner's) other knobs where they run at `block`, else the default's."""
        extra = {"pad": pad} if pad else {}
        spec = catalog.get("topk")
        schedule = Schedule.of(**{**base.as_dict(), "workgroup_size": block, **extra})
        if spec.invalid_reason(schedule, problem, self.profile):
            schedule = Schedule.of(workgroup_size=block, **extra)
        reason = spec.invalid_reason(schedule, problem, self.profile)
        if reason:
            raise ValueError(f"block: {block} can't run topk n={problem['n']} k={problem['k']} here: {reason}")
        return schedule

    def _topk_stages(self, n: int, k: int, widest: int) -> list[tuple[dict[str, int], Schedule, int]]:
        """The global top-k's stages: (dims, schedule, output size) of per-block passes, each
        over the previous one's candidates, padded with -Inf so padding never displaces a
        value. The first pass is the tuned one for (n, k) (at a block of at least 2k, so it
        halves the candidates); the later ones, over candidates no campaign tunes, take the
        widest block with the same knobs; the last is one block. Cached per (n, k)."""
        key = ("topk stages", n, k)
        stages = self._lookups.get(key)
        if stages is not None:
            return stages
        problem, _ = _topk_problem(n, k)
        base = self._tuned(catalog.get("topk"), problem)[0]
        stages, size = [], n
        while True:
            problem, dims = _topk_problem(size, k)
            if size <= widest:  # one block holds every candidate: its k largest are the answer
                block = min(b for b in TOPK_BLOCKS if b >= size)
                stages.append((dims, self._topk_schedule(problem, block, 1, base), k))
                break
            block = base.workgroup_size if size == n else widest
            if not 2 * k <= block <= widest:
                block = min(b for b in TOPK_BLOCKS if b >= 2 * k)
            stages.append((dims, self._topk_schedule(problem, block, 1, base), -(-size // block) * k))
            size = -(-size // block) * k
        self._lookups[key] = stages
        return stages

    def ternary_gemv(self, x, packed_w, scale, m: int, k: int, *, out: DeviceArray | np.ndarray | None = None):
        """`out[o] = scale[o] * Σ_{i<k} t(w[o][i]) * x[i]` for o < m; returns float32 (m,).

        `packed_w`: uint32 2-bit codes, 16 per word, low bits first (0→0, 1→+1, 2→−1,
        3→0), m rows of ceil(k/16) words, as (m, ceil(k/16)) or flat (m*ceil(k/16),)
        (`farm.catalog.ternary_gemv.pack_codes` builds it). `x`: float32 (k,);
        `scale`: float32 (m,).

        Accuracy: f32 summation, except where the tuned schedule is an integer
        dot-product kernel (`stage_x=3` or `stage_x=4`): there x is
        held in block floating point, each value rounded to at most 2^-23 of the largest
        |x| among the 2048 values of its tile, and sums are exact within a tile. Exact for small-integer
        x; for x spanning many orders of magnitude within a tile, the small values lose
        precision that an f32 sum would keep. NaN/Inf in x propagate either way."""
        m = as_count("m", m)
        k = as_count("k", k)
        x = self._arg("x", x, F32, (1,))
        packed_w = self._arg("packed_w", packed_w, U32, (1, 2))
        scale = self._arg("scale", scale, F32, (1,))
        words = -(-k // 16)
        expect_shape("x", x, (k,), "k={k}", k=k)
        expect_shape("scale", scale, (m,), "m={m}", m=m)
        want = (m, words) if packed_w.ndim == 2 else (m * words,)
        expect_shape("packed_w", packed_w, want, "m={m} rows of ceil(k/16)={words} words", m=m, words=words)
        check_input_limits("ternary_gemv", {"x": x, "packed_w": packed_w, "scale": scale}, self.binding_limit)
        inputs = {"x": x, "w_packed": packed_w.reshape(-1), "scale": scale}
        return self._run("ternary_gemv", {"m": m, "k": k}, inputs, out=_out("out", out))["out"]

    def recurrent_attention(
        self,
        query,
        value,
        rho=None,
        decay=None,
        *,
        out: tuple[DeviceArray, DeviceArray] | tuple[np.ndarray, np.ndarray] | None = None,
    ):
        """Fused recurrent linear attention over all T steps; returns (context [B,H,T,E], rho [B,H,L,E]).

        For t in order: context[b,h,t] = Σ_l rho[b,h,l] · query[b,h,t,l] (state before the
        update), then rho = (rho + query[b,h,t,:,None] · value[b,vh,t]) · decay[h].
        `query` float32 [B,H,T,L]; `value` float32 [B,VH,T,E] with VH = 1 (shared by all
        heads) or H; `rho` float32 [B,H,L,E] (zeros when None); `decay` float32 [H] (no
        decay when None). L <= 2048 (farm.catalog.recurrent.MAX_L: the state of a column
        lives in registers), else ValueError; split L (state rows are independent, add the
        chunks' contexts)."""
        query = self._arg("query", query, F32, (4,))
        value = self._arg("value", value, F32, (4,))
        b, h, t, l_dim = query.shape
        vh, e = value.shape[1], value.shape[3]
        if vh not in (1, h):
            raise ValueError(
                f"value: expected shape ({b}, 1 or {h}, {t}, E) for query {query.shape}, got {value.shape}"
            )
        expect_shape("value", value, (b, vh, t, e), "[B,VH,T,E] with B={b}, T={t} from query", b=b, t=t)
        check_recurrent_shape(b, h, t, l_dim, e, self.binding_limit)
        inputs = {"query": query, "value": value}
        if rho is not None:
            inputs["rho"] = self._arg("rho", rho, F32, (4,))
            expect_shape("rho", inputs["rho"], (b, h, l_dim, e), "[B,H,L,E] from query and value")
        if decay is not None:
            inputs["decay"] = self._arg("decay", decay, F32, (1,))
            expect_shape("decay", inputs["decay"], (h,), "[H] with H={h}", h=h)
        dims = {"B": b, "H": h, "VH": vh, "T": t, "L": l_dim, "E": e}
        outs = None
        if out is not None:
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise TypeError(
                    "out: expected a pair (context, rho) of DeviceArrays or numpy arrays of shapes "
                    f"{(b, h, t, e)} and {(b, h, l_dim, e)}, got {_described(out)}"
                )
            outs = {"context": out[0], "rho": out[1]}
        result = self._run("recurrent", dims, inputs, out=outs)
        return result["context"], result["rho"]

    def gemm(self, a, b, *, out: DeviceArray | np.ndarray | None = None):
        """c = a · b for float32 `a` (m, k) and `b` (k, n); returns float32 (m, n)."""
        a = self._arg("a", a, F32, (2,))
        b = self._arg("b", b, F32, (2,))
        m, k = a.shape
        if b.shape[0] != k:
            raise ValueError(f"b: expected shape ({k}, n) since a has {k} columns, got {b.shape}")
        n = b.shape[1]
        if m * n * 4 > self.binding_limit:  # the message only when it fails: gemm chains call this per call
            check_output_size("a, b", "c", (m, n), 4, self.binding_limit, f"a has {m} rows, b {n} columns")
        return self._run("gemm", {"m": m, "k": k, "n": n}, {"a": a, "b": b}, out=_out("c", out))["c"]

    def p64_project(self, records, weights, *, out: DeviceArray | np.ndarray | None = None):
        """`out[r] = Σ_{w<16} weights[w] * f32(word[r][w])` over n P64 records; returns float32 (n,).

        `records`: uint32 (n, 16), uint64 (n, 8) (each u64 field is two little-endian u32
        words, low word first), or bytes-like of n*64 bytes (little-endian u32 words).
        `weights`: float32 (16,)."""
        if isinstance(records, (bytes, bytearray, memoryview)):
            raw = bytes(records)
            if not raw or len(raw) % 64:
                raise ValueError(f"records: expected n*64 bytes with n >= 1, got {len(raw)} bytes")
            words = np.frombuffer(raw, dtype="<u4").reshape(-1, 16)
        else:
            array = self._arg("records", records, P64_RECORDS, (2,))
            per_record = 16 if array.dtype == np.uint32 else 8
            why = "{per_record} {dtype} words per record"
            expect_shape("records", array, (array.shape[0], per_record), why, per_record=per_record, dtype=array.dtype)
            check_input_limits("p64_project", {"records": array}, self.binding_limit)
            if per_record == 16:
                words = array
            elif isinstance(array, DeviceArray):  # device bytes are little-endian u64 already
                words = array.view(np.uint32).reshape(-1, 16)
            else:
                words = p64_words(array)  # any layout: Fortran order, strided
        weights = self._arg("weights", weights, F32, (1,))
        expect_shape("weights", weights, (16,), "one weight per record word")
        inputs = {"records": words, "weights": weights}
        return self._run("p64_project", {"n": words.shape[0]}, inputs, out=_out("out", out))["out"]

    def fft(self, signal, *, out: DeviceArray | np.ndarray | None = None):
        """Forward DFT over the last axis, batched over the leading ones (matches numpy.fft.fft).

        `signal`: complex64 (..., n), returned as complex64 (..., n); or interleaved
        float32 (..., 2n) (real, imaginary pairs), returned in the same form. n must be
        a power of two, 2 <= n <= min(1024, max-compute-invocations-per-workgroup).

        NaN/Inf: an output point is non-finite exactly where numpy's is, and numpy's ±Inf
        parts come back as that ±Inf or NaN. NaN and ±Inf are in exactly numpy's parts when
        a transform's non-finite values sit at points 0 and n/2; elsewhere the butterfly
        order decides, and numpy's pocketfft has another (see farm.catalog.fft)."""
        signal = self._arg("signal", signal, FFT_SIGNAL, FFT_RANKS)
        max_n = min(1024, self.profile.limit("max-compute-invocations-per-workgroup"))
        complex_input = signal.dtype == FFT_SIGNAL[0]
        n, batch = fft_shape(signal.shape, complex_input, max_n)
        check_input_limits("fft", {"signal": signal}, self.binding_limit)
        points = _as(signal if isinstance(signal, DeviceArray) else np.ascontiguousarray(signal), (batch, n, 2), F32[0])
        target = None
        if isinstance(out, DeviceArray):
            if out.shape != signal.shape or out.dtype != signal.dtype:
                raise ValueError(
                    f"out: expected a DeviceArray of shape {signal.shape} and dtype {signal.dtype}, "
                    f"got {out.shape} {out.dtype}"
                )
            target = _as(out, (batch, n, 2), F32[0])
        elif out is not None:
            check_host_array(out, signal.shape, signal.dtype, "a numpy array or a DeviceArray")
            target = _as(out, (batch, n, 2), F32[0])
        y = self._run("fft", {"n": n, "batch": batch}, {"x": points}, out=_out("y", target))["y"]
        if out is not None:
            return out
        return _as(y, signal.shape, signal.dtype)

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
            if self.winner_cache.refreshed():  # new winners read after a miss: look the schedules up again
                self._lookups = {}
                self._caller.forget_recent()  # plans chosen by the old lookups
            plan = self._caller.recent(recent)
            if plan is None:
                check_input_limits(kernel, inputs, self.binding_limit)
                spec = catalog.get(kernel)
                problem = spec.problem(**dims)
                chosen, _, gpu_s = (schedule, "", 0.0) if schedule is not None else self._tuned(spec, problem)
                plan = self._caller.plan(spec, chosen, problem, inputs, self.binding_limit)
                plan.gpu_s = max(plan.gpu_s, gpu_s)  # a plan first made for an explicit schedule learns it too
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


def _described(value: object) -> str:
    """What an argument is, for a message: its type, and its shape and dtype or length."""
    if isinstance(value, (np.ndarray, DeviceArray)):
        return f"{type(value).__name__} of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


def _as(array, shape: tuple[int, ...], dtype: np.dtype):
    """A C-contiguous `array`'s bytes as `shape` of `dtype` (the same number of bytes), sharing them."""
    if isinstance(array, DeviceArray):
        return array.same_bytes(shape, dtype)
    return array.view(dtype).reshape(shape)
