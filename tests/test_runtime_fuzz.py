"""A fuzz of every ForgeRuntime method with generated bad and edge inputs.

Each of over 2,000 cases (seeded numpy Generator: the same cases every run) is either
- bad input: it must raise ValueError/TypeError whose message names the argument at
  fault (`name: ...`, or `kernel: name of shape ...` for the buffer-limit check); or
- edge input (NaN, ±Inf, -0, subnormals, ties; Fortran order, strides, negative strides,
  unaligned and read-only arrays, zero-stride broadcasts, DeviceArrays, `out=`, numpy
  integer scalars): the result must equal numpy's, NaN and ±Inf in the same places
  (`assert_allclose(..., equal_nan=True)` checks both) and finite values within the
  kernel's tolerance; topk bit for bit. fft's non-finite inputs sit at points 0 and n/2,
  where the kernels and numpy's pocketfft agree exactly (farm.catalog.fft says why not
  elsewhere). Inputs must come back unmodified.
All on one runtime, which must still be right afterwards and hold no more device memory.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from farm import ForgeRuntime, catalog
from farm.catalog.p64_project import project_records
from farm.catalog.recurrent import reference_recurrent
from farm.catalog.ternary_gemv import pack_codes
from farm.catalog.topk import SPECIAL_BITS, topk_blocks, topk_global
from farm.runtime.arrays import DeviceArray
from farm.schedule import Problem

SEED = 165
CASES_PER_METHOD = 300  # 7 kernel methods and the array and schedule methods: over 2,000 cases
# A few seconds on lavapipe: shapes come from a few per kernel, so plans and
# pipelines are reused.

F32_SPECIALS = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-42, -1e-42], np.float32)  # subnormals last
SUBNORMALS = 2  # dropped from the specials on an adapter that flushes them to zero
SPECIALS = F32_SPECIALS  # what `values` draws from: set by the test for its adapter
BAD_DTYPES = ["float64", "float16", "int32", "int64", "uint8", "bool", "complex128", "object", ">f4"]
NOT_ARRAYS = [None, "abc", 3, 2.5, [1.0, 2.0], (1, 2), {"a": 1}, 1 + 2j]
BAD_COUNTS = [0, -1, -(2**40), 2.5, "3", None, True, np.bool_(True), np.float32(2), 1 + 0j, [3]]


@dataclass
class Case:
    method: str
    args: tuple
    label: str
    kwargs: dict = field(default_factory=dict)
    name: str | None = None  # bad input: the argument the error must name
    want: Callable[[], object] | None = None  # edge input: numpy's result
    tolerance: tuple[float, float] = (1e-5, 1e-5)
    exact: bool = False  # compare bytes (topk, asarray)


# -- values and layouts ------------------------------------------------------------------


def values(rng, shape, specials: float = 0.1, low: float | None = None) -> np.ndarray:
    """float32 normal (or uniform from `low`) values with a fraction `specials` of
    ±Inf, NaN, ±0 and subnormals (`SPECIALS`)."""
    if low is None:
        x = rng.standard_normal(shape).astype(np.float32)
    else:
        x = rng.uniform(low, 1.0, shape).astype(np.float32)
    marks = rng.random(shape) < specials
    x[marks] = rng.choice(SPECIALS, int(marks.sum()))
    return x


def recurrent_f32(q, v, rho, decay):
    """reference_recurrent's recurrence in float32, numpy's arithmetic for float32 data: a
    product of subnormals underflows to 0 here as on the GPU (then 0 · Inf is NaN), where
    the float64 reference keeps it (and gets ±Inf)."""
    b, h, t, l_dim = q.shape
    v = np.broadcast_to(v, (b, h, t, v.shape[3]))
    state = np.zeros((b, h, l_dim, v.shape[3]), np.float32) if rho is None else rho.copy()
    context = np.empty((b, h, t, v.shape[3]), np.float32)
    for step in range(t):
        q_t = q[:, :, step, :]
        context[:, :, step, :] = np.einsum("bhle,bhl->bhe", state, q_t)
        state = state + q_t[..., None] * v[:, :, step, None, :]
        if decay is not None:
            state = state * decay.reshape(1, h, 1, 1)
    return context, state


def layout(rng, array: np.ndarray) -> tuple[np.ndarray, str]:
    """`array`'s values in a random memory layout."""
    how = int(rng.integers(0, 8))
    if how == 1 and array.ndim >= 2:
        return np.asfortranarray(array), "fortran"
    if how == 2:
        wide = np.zeros((*array.shape[:-1], 2 * array.shape[-1]), array.dtype)
        wide[..., ::2] = array
        return wide[..., ::2], "strided"
    if how == 3:
        return np.flip(np.ascontiguousarray(np.flip(array, axis=-1)), axis=-1), "reversed"
    if how == 4 and array.ndim >= 2:
        return np.ascontiguousarray(array.T).T, "transposed"
    if how == 5:
        frozen = array.copy()
        frozen.setflags(write=False)
        return frozen, "read-only"
    if how == 6:
        raw = bytearray(array.nbytes + 1)
        shifted = np.frombuffer(raw, array.dtype, count=array.size, offset=1).reshape(array.shape)
        shifted[...] = array
        return shifted, "unaligned"
    return np.ascontiguousarray(array), "C"


def maybe_device(rt, rng, array, p: float = 0.15):
    if isinstance(array, np.ndarray) and rng.random() < p:
        return rt.asarray(array), "device"
    return array, ""


def spoil(rng, rt, foreign, good: np.ndarray, ranks: tuple[int, ...], accepted: tuple[str, ...], limit: int):
    """`good` made bad one way: (value, how)."""
    how = str(rng.choice(["dtype", "rank", "empty", "type", "masked", "huge", "released", "foreign", "devdtype"]))
    if how == "dtype":
        dtype = str(rng.choice([d for d in BAD_DTYPES if np.dtype(d) not in [np.dtype(a) for a in accepted]]))
        if dtype == "object":
            return np.array(good.tolist(), dtype=object).reshape(good.shape), how
        return good.real.astype(dtype) if np.dtype(dtype).kind != "c" else good.astype(dtype), f"{how} {dtype}"
    if how == "rank":
        rank = int(rng.choice([r for r in range(0, 6) if r not in ranks]))
        return np.ones(tuple(int(d) for d in rng.integers(1, 4, rank)), good.dtype), f"rank {rank}"
    if how == "empty":
        shape = list(good.shape)
        shape[int(rng.integers(0, good.ndim))] = 0
        return np.ones(shape, good.dtype), how
    if how == "type":
        return NOT_ARRAYS[int(rng.integers(0, len(NOT_ARRAYS)))], how
    if how == "masked":
        return np.ma.masked_array(good, mask=rng.random(good.shape) < 0.5), how
    if how == "huge":
        row = int(np.prod(good.shape[1:], dtype=np.int64)) * good.dtype.itemsize
        return np.broadcast_to(np.zeros((), good.dtype), (limit // row + 1, *good.shape[1:])), how
    if how == "released":
        gone = rt.asarray(good)
        gone.release()
        return gone, how
    if how == "foreign":
        return foreign.asarray(good), how
    wrong = np.zeros(good.shape, np.int32 if good.dtype != np.int32 else np.float32)
    return rt.asarray(wrong), how


def host(result):
    if isinstance(result, tuple):
        return tuple(host(r) for r in result)
    return result.numpy() if isinstance(result, DeviceArray) else result


def names_argument(message: str, name: str) -> bool:
    """`name: ...`, `a, b: ...` or the buffer-limit check's `kernel: name of shape ...`."""
    leading = message.split(":", 1)[0]
    return name in [part.strip() for part in leading.split(",")] or f": {name} of shape" in message


# -- the methods' cases --------------------------------------------------------------------


def gemv_case(rng, rt, foreign, limit):
    m, n = [(1, 1), (3, 5), (17, 33), (64, 7)][int(rng.integers(0, 4))]
    a, x = values(rng, (m, n)), values(rng, (n,))
    kind = rng.random()
    if kind < 0.45:
        a_arg, how_a = layout(rng, a)
        x_arg, how_x = layout(rng, x) if rng.random() < 0.8 else (np.broadcast_to(x[:1], (n,)), "broadcast")
        x = np.array(x_arg)
        a_arg, dev_a = maybe_device(rt, rng, a_arg)
        x_arg, dev_x = maybe_device(rt, rng, x_arg)
        kwargs = {"out": rt.empty(m)} if rng.random() < 0.1 else {}
        tol = catalog.get("gemv").tolerance(Problem.of(m=m, n=n))
        want = lambda: (a.astype(np.float64) @ x.astype(np.float64)).astype(np.float32)  # noqa: E731
        return Case(
            "gemv", (a_arg, x_arg), f"edge {m}x{n} {how_a}{dev_a} {how_x}{dev_x}", kwargs, want=want, tolerance=tol
        )
    if kind < 0.55:
        return Case("gemv", (a, values(rng, (n + int(rng.integers(1, 4)),))), "mismatch", name="x")
    if kind < 0.6:
        return Case("gemv", (a, x), "bad out", {"out": rt.empty(m + 1)}, name="out")
    i = int(rng.integers(0, 2))
    good = [a, x][i]
    bad, how = spoil(rng, rt, foreign, good, (2,) if i == 0 else (1,), ("float32",), limit)
    args = (bad, x) if i == 0 else (a, bad)
    return Case("gemv", args, f"bad {'ax'[i]} {how}", name="ax"[i])


def gemm_case(rng, rt, foreign, limit):
    m, k, n = [(1, 1, 1), (3, 5, 2), (9, 17, 6)][int(rng.integers(0, 3))]
    a, b = values(rng, (m, k)), values(rng, (k, n))
    kind = rng.random()
    if kind < 0.45:
        a_arg, how_a = layout(rng, a)
        b_arg, how_b = layout(rng, b)
        a_arg, dev = maybe_device(rt, rng, a_arg)
        tol = catalog.get("gemm").tolerance(Problem.of(m=m, k=k, n=n))
        want = lambda: (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)  # noqa: E731
        return Case("gemm", (a_arg, b_arg), f"edge {m}x{k}x{n} {how_a}{dev} {how_b}", want=want, tolerance=tol)
    if kind < 0.55:
        return Case("gemm", (a, values(rng, (k + int(rng.integers(1, 4)), n))), "mismatch", name="b")
    i = int(rng.integers(0, 2))
    bad, how = spoil(rng, rt, foreign, [a, b][i], (2,), ("float32",), limit)
    return Case("gemm", (bad, b) if i == 0 else (a, bad), f"bad {'ab'[i]} {how}", name="ab"[i])


def topk_case(rng, rt, foreign, limit):
    n = int(rng.choice([1, 5, 64, 65, 130]))
    x = values(rng, (n,), specials=0.15)
    x[rng.random(n) < 0.1] = np.float32(1.5)  # ties
    marks = rng.random(n) < 0.05
    x.view(np.uint32)[marks] = rng.choice(SPECIAL_BITS, int(marks.sum()))  # NaN payloads, -NaN
    block = int(rng.choice([32, 64, 128]))  # the per-block form's block, the caller's choice
    kind = rng.random()
    if kind < 0.45:
        per_block = rng.random() < 0.5
        k = int(rng.choice([1, 3, 8, block if per_block else n]))
        k = min(k, n) if not per_block else k
        k_arg = [k, np.int64(k), np.uint8(k), np.int32(k)][int(rng.integers(0, 4))]
        x_arg, how = layout(rng, x)
        x_arg, dev = maybe_device(rt, rng, x_arg)
        if per_block:
            want = lambda: topk_blocks(x, k, block)  # noqa: E731
            label = f"edge n={n} k={k_arg!r} block={block} {how}{dev}"
            return Case("topk", (x_arg, k_arg), label, kwargs={"block": block}, want=want, exact=True)
        want = lambda: topk_global(x, k)  # noqa: E731
        return Case("topk", (x_arg, k_arg), f"edge n={n} k={k_arg!r} {how}{dev}", want=want, exact=True)
    if kind < 0.7:
        k = (
            BAD_COUNTS[int(rng.integers(0, len(BAD_COUNTS)))]
            if rng.random() < 0.6
            else int(rng.integers(n + 1, 5000))
        )
        return Case("topk", (x, k), f"bad k={k!r}", name="k")
    bad, how = spoil(rng, rt, foreign, x, (1,), ("float32",), limit)
    return Case("topk", (bad, 3), f"bad x {how}", name="x")


def ternary_case(rng, rt, foreign, limit):
    m, k = [(1, 1), (3, 16), (5, 40)][int(rng.integers(0, 3))]
    words = -(-k // 16)
    codes = rng.integers(0, 4, (m, k))
    packed = pack_codes(codes).reshape(m, words)
    x, scale = values(rng, (k,)), values(rng, (m,))
    spec = catalog.get("ternary_gemv")
    kind = rng.random()
    if kind < 0.45:
        w_arg, how = layout(rng, packed if rng.random() < 0.5 else packed.reshape(-1))
        x_arg, dev = maybe_device(rt, rng, layout(rng, x)[0])
        counts = [(m, k), (np.int64(m), np.uint16(k))][int(rng.integers(0, 2))]
        problem = spec.problem(m=m, k=k)

        def want():
            schedule = rt.tuned_schedule("ternary_gemv", problem)[0]
            inputs = {"x": x, "w_packed": packed.reshape(-1), "scale": scale}
            return spec.reference(problem, schedule, inputs)["out"]

        args = (x_arg, w_arg, scale, *counts)
        tol = (2e-6 * np.sqrt(k) * 8, 1e-4)  # spec.tolerance is 0 for its own small-integer data
        return Case("ternary_gemv", args, f"edge m={m} k={k} {how}{dev}", want=want, tolerance=tol)
    if kind < 0.6:
        i = int(rng.integers(0, 2))
        bad = BAD_COUNTS[int(rng.integers(0, len(BAD_COUNTS)))]
        args = (x, packed, scale, bad, k) if i == 0 else (x, packed, scale, m, bad)
        return Case("ternary_gemv", args, f"bad {'mk'[i]}={bad!r}", name="mk"[i])
    if kind < 0.7:
        which = int(rng.integers(0, 3))
        d = int(rng.integers(1, 3))
        wrong = [values(rng, (k + d,)), np.zeros((m, words + d), np.uint32), values(rng, (m + d,))][which]
        args = [x, packed, scale, m, k]
        args[which] = wrong
        return Case("ternary_gemv", tuple(args), "mismatch", name=["x", "packed_w", "scale"][which])
    which = int(rng.integers(0, 3))
    good = [x, packed, scale][which]
    accepted = ("uint32",) if which == 1 else ("float32",)
    bad, how = spoil(rng, rt, foreign, good, (1, 2) if which == 1 else (1,), accepted, limit)
    args = [x, packed, scale, m, k]
    args[which] = bad
    return Case(
        "ternary_gemv",
        tuple(args),
        f"bad {['x', 'packed_w', 'scale'][which]} {how}",
        name=["x", "packed_w", "scale"][which],
    )


def p64_case(rng, rt, foreign, limit):
    n = int(rng.choice([1, 3, 33]))
    words = rng.integers(0, 2**32, (n, 16), dtype=np.uint64).astype(np.uint32)
    words[rng.random((n, 16)) < 0.2] = 0
    weights = values(rng, (16,))
    kind = rng.random()
    if kind < 0.45:
        form = int(rng.integers(0, 5))
        if form == 0:
            records, how = layout(rng, words)
        elif form == 1:
            records, how = np.ascontiguousarray(words).view("<u8").reshape(n, 8), "uint64"
        elif form == 2:
            records, how = words.tobytes(), "bytes"
        elif form == 3:
            records, how = bytearray(words.tobytes()), "bytearray"
        else:
            records, how = memoryview(np.asfortranarray(words)), "memoryview"
        records, dev = maybe_device(rt, rng, records)
        w_arg, how_w = layout(rng, weights)
        want = lambda: project_records(words, weights)  # noqa: E731
        tol = (catalog.get("p64_project").atol, 1e-6)
        return Case("p64_project", (records, w_arg), f"edge n={n} {how}{dev} {how_w}", want=want, tolerance=tol)
    if kind < 0.6:
        size = int(rng.choice([0, 1, 63, 65, 64 * n + 4]))
        return Case("p64_project", (bytes(size), weights), f"bad bytes {size}", name="records")
    if kind < 0.7:
        wide = rng.random() < 0.5
        width = int(rng.choice([w for w in range(1, 20) if w != (8 if wide else 16)]))
        records = np.zeros((n, width), np.uint64 if wide else np.uint32)
        return Case("p64_project", (records, weights), f"bad width {width}", name="records")
    if kind < 0.85:
        bad, how = spoil(rng, rt, foreign, words, (2,), ("uint32", "uint64"), limit)
        if isinstance(bad, (bytes, bytearray)):
            bad = 3
        return Case("p64_project", (bad, weights), f"bad records {how}", name="records")
    bad, how = spoil(rng, rt, foreign, weights, (1,), ("float32",), limit)
    if how == "rank":
        bad = values(rng, (int(rng.integers(1, 16)),))
    return Case("p64_project", (words, bad), f"bad weights {how}", name="weights")


def fft_case(rng, rt, foreign, limit):
    n = int(rng.choice([2, 4, 16, 64]))
    lead = tuple(int(d) for d in rng.integers(1, 4, int(rng.integers(0, 3))))
    points = rng.standard_normal((*lead, n, 2)).astype(np.float32)
    for index in np.ndindex(*lead):
        for point in (0, n // 2):
            for part in (0, 1):
                if rng.random() < 0.25:
                    points[(*index, point, part)] = rng.choice(F32_SPECIALS[:3])
    signal = points.view(np.complex64)[..., 0]
    kind = rng.random()
    if kind < 0.45:
        interleaved = rng.random() < 0.3
        given = points.reshape(*lead, 2 * n) if interleaved else signal
        arg, how = layout(rng, given)
        arg, dev = maybe_device(rt, rng, arg)
        tol = catalog.get("fft").tolerance(Problem.of(n=n, batch=1))

        def want():
            with np.errstate(invalid="ignore", over="ignore"):
                spectrum = np.fft.fft(signal, axis=-1).astype(np.complex64)
            return spectrum.view(np.float32).reshape(given.shape) if interleaved else spectrum

        return Case(
            "fft", (arg,), f"edge n={n} lead={lead} {'2n ' if interleaved else ''}{how}{dev}", want=want, tolerance=tol
        )
    if kind < 0.65:
        bad_n = int(rng.choice([1, 3, 12, 100, 2048, 4096]))
        if rng.random() < 0.5:
            return Case("fft", (np.ones((*lead, bad_n), np.complex64),), f"bad n={bad_n}", name="signal")
        return Case("fft", (np.ones((*lead, 2 * int(rng.integers(1, 9)) + 1), np.float32),), "odd 2n", name="signal")
    good = np.ones((4, 64), np.complex64)
    bad, how = spoil(rng, rt, foreign, good, tuple(range(1, 33)), ("complex64", "float32"), limit)
    if how.startswith("rank"):
        bad = np.zeros((), np.complex64)
    return Case("fft", (bad,), f"bad signal {how}", name="signal")


RECURRENT_SHAPES = [(1, 1, 1, 1, 1), (1, 2, 3, 5, 4), (2, 3, 2, 7, 8)]  # B, H, T, L, E


def recurrent_case(rng, rt, foreign, limit):
    b, h, t, l_dim, e = RECURRENT_SHAPES[int(rng.integers(0, len(RECURRENT_SHAPES)))]
    vh = int(rng.choice([1, h]))
    low = 0.25 if rng.random() < 0.5 else None  # positive data: Infs of one sign reach the outputs
    q, v = values(rng, (b, h, t, l_dim), low=low), values(rng, (b, vh, t, e), low=low)
    rho = values(rng, (b, h, l_dim, e), low=low) if rng.random() < 0.5 else None
    decay = values(rng, (h,), low=0.5) if rng.random() < 0.5 else None
    kind = rng.random()
    if kind < 0.45:
        args = [layout(rng, q)[0], layout(rng, v)[0], rho if rho is None else layout(rng, rho)[0], decay]
        args[0], dev = maybe_device(rt, rng, args[0])
        kwargs = {}
        if rng.random() < 0.1:
            kwargs["out"] = (rt.empty((b, h, t, e)), rt.empty((b, h, l_dim, e)))
        tol = catalog.get("recurrent").tolerance(Problem.of(L=l_dim, T=t))

        def want():
            with np.errstate(invalid="ignore", over="ignore", under="ignore"):
                context, state = recurrent_f32(q, v, rho, decay)
                exact = [r.astype(np.float32) for r in reference_recurrent(q, v, rho, decay)]
            for got, more in zip((context, state), exact, strict=True):  # the f32 sums are accurate
                finite = np.isfinite(got) & np.isfinite(more)
                np.testing.assert_allclose(got[finite], more[finite], atol=tol[0], rtol=tol[1])
            return context, state

        label = f"edge {(b, h, vh, t, l_dim, e)} rho={rho is not None} decay={decay is not None}{dev}"
        return Case("recurrent_attention", tuple(args), label, kwargs, want=want, tolerance=tol)
    if kind < 0.65:
        d = int(rng.integers(1, 3))
        which = str(rng.choice(["value_heads", "value_b", "value_t", "rho", "decay"]))
        args = [q, v, rho, decay]
        if which == "value_heads":
            args[1] = values(rng, (b, int(rng.choice([w for w in range(2, 6) if w != h])), t, e))
        elif which == "value_b":
            args[1] = values(rng, (b + d, vh, t, e))
        elif which == "value_t":
            args[1] = values(rng, (b, vh, t + d, e))
        elif which == "rho":
            args[2] = values(rng, (b, h, l_dim + d, e))
        else:
            args[3] = values(rng, (h + d,))
        return Case("recurrent_attention", tuple(args), f"mismatch {which}", name=which.split("_")[0])
    which = int(rng.integers(0, 4))
    good = [q, v, values(rng, (b, h, l_dim, e)), values(rng, (h,))][which]
    bad, how = spoil(rng, rt, foreign, good, (1,) if which == 3 else (4,), ("float32",), limit)
    args = [q, v, rho, decay]
    if how == "huge" and which < 2:  # over the limit along L or E, so the other shapes still agree
        last = limit // (4 * int(np.prod(good.shape[:-1]))) + 1
        bad, args[2] = np.broadcast_to(np.zeros((), np.float32), (*good.shape[:-1], last)), None
    args[which] = "none" if bad is None else bad  # None is a valid rho or decay
    name = ["query", "value", "rho", "decay"][which]
    return Case("recurrent_attention", tuple(args), f"bad {name} {how}", name=name)


def other_case(rng, rt, foreign, limit):
    """The array and schedule methods: asarray, empty, tuned_schedule."""
    kind = int(rng.integers(0, 4))
    if kind == 0:
        bad = NOT_ARRAYS[int(rng.integers(0, len(NOT_ARRAYS)))]
        if rng.random() < 0.3:
            bad = np.array(["a", "b"])
        return Case("asarray", (bad,), f"bad {bad!r}", name="array")
    if kind == 1:
        dims = [int(d) for d in rng.integers(1, 4, int(rng.integers(1, 4)))]
        i = int(rng.integers(0, len(dims)))
        dims[i] = BAD_COUNTS[int(rng.integers(0, len(BAD_COUNTS)))]
        if dims[i] in (0,) or isinstance(dims[i], (list,)):
            dims[i] = -3
        return Case("empty", (tuple(dims),), f"bad shape {dims}", name=f"shape[{i}]")
    if kind == 2:
        x = values(rng, (int(rng.integers(1, 40)),))
        arg, how = layout(rng, x)
        return Case("asarray", (arg,), f"edge {how}", want=lambda: x, exact=True)
    return Case("tuned_schedule", ("no_such_kernel",), "bad kernel")


GENERATORS = {
    "gemv": gemv_case,
    "gemm": gemm_case,
    "topk": topk_case,
    "ternary_gemv": ternary_case,
    "p64_project": p64_case,
    "fft": fft_case,
    "recurrent_attention": recurrent_case,
    "other": other_case,
}


# -- running a case ----------------------------------------------------------------------------


def snapshot(args) -> list:
    out = []
    for arg in args:
        writable = isinstance(arg, np.ndarray) and arg.flags.writeable  # not broadcasts, read-only
        if writable and arg.dtype != object and not isinstance(arg, np.ma.MaskedArray):
            out.append(arg.copy())
        elif isinstance(arg, (bytearray, memoryview)):
            out.append(bytes(arg))
        else:
            out.append(None)
    return out


def unchanged(args, before) -> bool:
    """Every snapshotted argument still holds the same bytes."""
    for arg, copy in zip(args, before, strict=True):
        if isinstance(copy, bytes) and bytes(arg) != copy:
            return False
        if isinstance(copy, np.ndarray) and np.ascontiguousarray(arg).tobytes() != copy.tobytes():
            return False
    return True


def run_case(rt, case: Case) -> None:
    where = f"{case.method} {case.label}"
    if case.method == "tuned_schedule":
        with pytest.raises(ValueError, match="unknown kernel 'no_such_kernel'"):
            rt.tuned_schedule(*case.args)
        return
    before = snapshot(case.args)
    if case.want is None:
        with pytest.raises((ValueError, TypeError)) as info:
            getattr(rt, case.method)(*case.args, **case.kwargs)
        assert names_argument(str(info.value), case.name), f"{where}: {info.value!r} does not name {case.name}"
    else:
        got = host(getattr(rt, case.method)(*case.args, **case.kwargs))
        with np.errstate(all="ignore"):  # numpy's own Inf - Inf, 0 · Inf
            want = case.want()
        for g, w in zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]:
            assert g.shape == w.shape and g.dtype == w.dtype, f"{where}: {g.shape} {g.dtype} != {w.shape} {w.dtype}"
            if case.exact:
                np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), err_msg=where)
            else:
                g_real = g.view(np.float32) if g.dtype == np.complex64 else g
                w_real = w.view(np.float32) if w.dtype == np.complex64 else w
                atol, rtol = case.tolerance
                np.testing.assert_allclose(g_real, w_real, atol=atol, rtol=rtol, equal_nan=True, err_msg=where)
    assert unchanged(case.args, before), f"{where}: the call modified its input"


def generate(rt, foreign) -> list[Case]:
    rng = np.random.default_rng(SEED)
    limit = rt.profile.limit("max-storage-buffer-binding-size")
    cases = []
    for method, make in GENERATORS.items():
        count = CASES_PER_METHOD if method != "other" else 80
        cases += [make(rng, rt, foreign, limit) for _ in range(count)]
    return cases


GOOD_CALLS = {
    "gemv": ((np.ones((2, 3), np.float32), np.ones(3, np.float32)), [3.0, 3.0]),
    "gemm": ((np.ones((2, 3), np.float32), np.ones((3, 1), np.float32)), [[3.0], [3.0]]),
    "topk": ((np.array([3, 9, 1, 7, 5], np.float32), 3), [9.0, 7.0, 5.0]),
    "ternary_gemv": (
        (np.ones(4, np.float32), np.array([0x55, 0xAA], np.uint32), np.ones(2, np.float32), 2, 4),
        [4, -4],
    ),
    "p64_project": ((np.ones((1, 16), np.uint32), np.ones(16, np.float32)), [16.0]),
    "fft": ((np.ones(4, np.complex64),), [4, 0, 0, 0]),
}


def test_fuzz_every_method_with_bad_and_edge_inputs(device, tmp_path):
    start = time.monotonic()
    global SPECIALS
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    foreign = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    tiny = rt.gemv(np.full((1, 1), 1e-42, np.float32), np.ones(1, np.float32))[0]
    SPECIALS = F32_SPECIALS if tiny != 0 else F32_SPECIALS[:-SUBNORMALS]  # lavapipe keeps them
    held = rt.memory()["held"]
    cases = generate(rt, foreign)
    kinds = Counter((c.method, "edge" if c.want is not None else "bad") for c in cases)
    for case in cases:
        run_case(rt, case)
    assert len(cases) >= 1000
    for method in GENERATORS:
        if method != "other":
            assert kinds[(method, "edge")] >= 50 and kinds[(method, "bad")] >= 50, kinds
    total = len(cases)
    del cases  # the DeviceArrays the cases hold go back to the pool
    gc.collect()
    assert rt.memory()["held"] == held
    for method, (args, want) in GOOD_CALLS.items():
        np.testing.assert_allclose(getattr(rt, method)(*args), want, atol=1e-5)
    context, state = rt.recurrent_attention(np.ones((1, 1, 2, 1), np.float32), np.ones((1, 1, 2, 1), np.float32))
    np.testing.assert_array_equal(context, [[[[0.0], [1.0]]]])
    np.testing.assert_array_equal(state, [[[[2.0]]]])
    rt.close()
    foreign.close()
    print(f"{total} cases in {time.monotonic() - start:.1f} s: {dict(sorted(kinds.items()))}")
