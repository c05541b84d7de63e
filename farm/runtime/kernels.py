"""The built-in kernels' ForgeRuntime methods: each checks its arguments (dtypes, ranks,
shapes, ranges, buffer limits: farm.runtime.validation, before anything touches the GPU),
builds the kernel's dims and inputs and hands them to `ForgeRuntime._run`, the one path to
the GPU (farm.runtime.forge). `KernelMethods` is a mixin of ForgeRuntime.

These checks run on every call, so they are written to cost little when they pass:
dtypes compared as np.dtype objects (an identity hit), messages built only on failure.
"""

from __future__ import annotations

import functools

import numpy as np

from farm import catalog
from farm.runtime.arrays import DeviceArray, check_host_array
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
from farm.schedule import Problem

F32 = (np.dtype(np.float32),)
U32 = (np.dtype(np.uint32),)
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


class KernelMethods:
    """gemv, gemm, topk, ternary_gemv, recurrent_attention, p64_project and fft; needs the
    ForgeRuntime's `_run`, `_tuned`, `profile` and `binding_limit`."""

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

    def topk(self, x, k: int, *, out: DeviceArray | np.ndarray | None = None):
        """Per-block top-k of float32 `x` (n,): for each block of `block_size` elements
        (block_size = the tuned schedule's workgroup_size, see `tuned_schedule("topk", ...)`),
        its k largest values descending, concatenated block by block: shape
        (ceil(n / block_size) * k,). The tail block is padded with -FLT_MAX; NaN sorts above
        +Inf and comes back as the canonical NaN (see farm.catalog.topk). 1 <= k <=
        block_size, else ValueError naming the block size in force: the block size is never
        changed to fit k (that would change the layout)."""
        x = self._arg("x", x, F32, (1,))
        k = as_count("k", k, None)  # an integer; its range is the block size's, below
        problem, dims = _topk_problem(x.shape[0], max(k, 1))
        schedule, source = self._tuned(catalog.get("topk"), problem)
        check_topk_k(k, schedule, source)
        return self._run("topk", dims, {"x": x}, schedule, out=_out("out", out))["out"]

    def ternary_gemv(self, x, packed_w, scale, m: int, k: int, *, out: DeviceArray | np.ndarray | None = None):
        """`out[o] = scale[o] * Σ_{i<k} t(w[o][i]) * x[i]` for o < m; returns float32 (m,).

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
