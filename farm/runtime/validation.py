"""Argument checks for the runtime's kernel calls, done before anything touches the GPU.

Every message names the argument, what was expected and what was given (the actual shape
for arrays). Nothing is cast silently: a wrong dtype (or a masked array, whose mask a
kernel would ignore) is a TypeError telling the caller to convert it themselves. Shape,
emptiness, range and adapter buffer-limit problems are ValueErrors, raised before anything
is packed for the GPU (so an output too large for a u32 parameter is a ValueError too, not
numpy's OverflowError).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping

import numpy as np

from farm.catalog import KernelSpec, Launch
from farm.catalog.recurrent import MAX_L
from farm.schedule import Problem

NUMERIC = "a numeric dtype (bool, integer, float or complex: what rt.asarray takes)"


def as_array(name: str, value: object, dtypes: tuple[type, ...], ndim: tuple[int, ...]) -> np.ndarray:
    """`value` as an ndarray of one of `dtypes` with one of the ranks in `ndim`, non-empty.

    TypeError when it's not an ndarray of an accepted dtype (no silent casts); ValueError
    for a wrong rank or an empty array.
    """
    # On every call's hot path: the messages are built only when a check fails, and a plain
    # ndarray skips the subclass checks.
    if type(value) is not np.ndarray:
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{name}: expected a numpy array of {_names(dtypes)}, got {type(value).__name__}")
        if isinstance(value, np.ma.MaskedArray):
            raise TypeError(
                f"{name}: expected a plain numpy array of {_names(dtypes)}, got a masked array (the kernels would "
                "ignore its mask: pass .filled(value) or .data yourself)"
            )
    if value.dtype not in dtypes:
        expected = _names(dtypes)
        raise TypeError(f"{name}: expected dtype {expected}, got {value.dtype} (cast it yourself: no silent casts)")
    if value.ndim not in ndim:
        ranks = " or ".join(f"{r}-D" for r in ndim)
        raise ValueError(f"{name}: expected a {ranks} array, got shape {value.shape}")
    if value.size == 0:
        raise ValueError(f"{name}: expected a non-empty array, got shape {value.shape}")
    return value


def _names(dtypes: tuple[type, ...]) -> str:
    return " or ".join(np.dtype(d).name for d in dtypes)


def as_count(name: str, value: object, low: int | None = 1, high: int | None = None) -> int:
    """A Python/numpy integer in [low, high] (None: unbounded, for a caller that checks the
    range itself); TypeError for non-integers, ValueError out of range."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an integer, got bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    if low is None:
        return number
    if number < low or (high is not None and number > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name}: expected an integer in {span}, got {number}")
    return number


def check_dims(what: str, spec: KernelSpec, dims: Mapping) -> dict[str, int]:
    """`dims` as {dim: int} in `spec.dims` order: exactly the kernel's dims, each an integer
    >= 1; ValueError naming `what` and the dims missing or unknown, TypeError/ValueError
    naming the dim and its value otherwise."""
    if len(dims) != len(spec.dims) or any(d not in dims for d in spec.dims):
        missing = [d for d in spec.dims if d not in dims]
        unknown = [repr(d) for d in dims if d not in spec.dims]
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else []
        )
        raise ValueError(
            f"{what}: {spec.name} takes exactly the dims {', '.join(spec.dims)}; got "
            f"{', '.join(f'{k}={v!r}' for k, v in dims.items()) or 'none'} ({'; '.join(parts)})"
        )
    return {d: as_count(f"{what}[{d!r}]", dims[d]) for d in spec.dims}


def problem_of(spec: KernelSpec, problem: object) -> Problem:
    """`problem` (a farm.schedule.Problem or a dict of dims) as `spec`'s Problem, its dims in
    the kernel's order; TypeError/ValueError naming what is wrong (see check_dims)."""
    if isinstance(problem, Problem):
        pairs = problem.dims
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError(f"problem: names a dim twice: {problem}")
        dims = dict(pairs)
    elif isinstance(problem, Mapping):
        dims = problem
    else:
        raise TypeError(
            f"problem: expected a dict of {spec.name}'s dims ({', '.join(spec.dims)}) or a farm.schedule.Problem, "
            f"got {type(problem).__name__} {problem!r}"
        )
    return spec.problem(**check_dims("problem", spec, dims))


def numeric_dtype(name: str, dtype: object) -> np.dtype:
    """`dtype` as an np.dtype a DeviceArray may have (NUMERIC); TypeError naming it otherwise
    (None too: numpy would read it as float64)."""
    try:
        value = None if dtype is None else np.dtype(dtype)
    except (TypeError, ValueError):
        value = None
    if value is None or value.kind not in "biufc":
        shown = f"dtype {value}" if value is not None else repr(dtype)
        raise TypeError(f"{name}: expected {NUMERIC}, got {shown}")
    return value


def array_shape(shape: object) -> tuple[int, ...]:
    """An array's `shape` (an integer or a tuple or list of them, each >= 0) as a tuple of
    Python ints; TypeError/ValueError naming `shape` or the offending `shape[i]`."""
    if isinstance(shape, (tuple, list)):
        return tuple(as_count(f"shape[{i}]", d, 0) for i, d in enumerate(shape))
    if isinstance(shape, (bool, np.bool_)) or not hasattr(shape, "__index__"):
        raise TypeError(f"shape: expected an integer or a tuple of integers, got {type(shape).__name__} {shape!r}")
    return (as_count("shape", shape, 0),)


def positive_bytes(name: str, value: object) -> int | None:
    """A constructor's byte count: None, or an integer >= 1 (bools, floats and strings refused)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not hasattr(value, "__index__"):
        raise TypeError(f"{name}: expected a positive integer or None, got {type(value).__name__} {value!r}")
    number = operator.index(value)
    if number < 1:
        raise ValueError(f"{name}: expected a positive integer or None, got {number}")
    return number


def expect_shape(name: str, array: np.ndarray, shape: tuple[int, ...], why: str, **values: object) -> None:
    """ValueError unless `array` has exactly `shape`; `why` says where that shape comes from
    (`why.format(**values)`: formatted only when the check fails, it runs on every call)."""
    if array.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} ({why.format(**values)}), got {array.shape}")


def check_input_limits(kernel: str, inputs: dict[str, np.ndarray], limit: int) -> None:
    """ValueError for an input larger than `limit` bytes (the adapter's max-storage-buffer-binding-size)."""
    for name, array in inputs.items():
        if array.nbytes > limit:
            raise ValueError(
                f"{kernel}: {name} of shape {array.shape} ({array.nbytes} bytes) exceeds this adapter's "
                f"max-storage-buffer-binding-size of {limit} bytes"
            )


def check_output_limits(kernel: str, launch: Launch, limit: int) -> None:
    """ValueError for an output of `launch` larger than `limit` bytes (max-storage-buffer-binding-size)."""
    for arg in launch.args:
        if arg.output and arg.nbytes > limit:
            raise ValueError(
                f"{kernel}: output {arg.name} of shape {arg.shape} ({arg.nbytes} bytes) exceeds this "
                f"adapter's max-storage-buffer-binding-size of {limit} bytes"
            )


def check_output_size(args: str, output: str, shape: tuple[int, ...], itemsize: int, limit: int, why: str = "") -> None:
    """ValueError naming the arguments `args` whose shapes make the output `output` of
    `shape` larger than `limit` bytes (max-storage-buffer-binding-size). Python integers:
    checked before anything is packed into u32 kernel parameters."""
    nbytes = itemsize
    for dim in shape:
        nbytes *= int(dim)
    if nbytes > limit:
        because = f" ({why})" if why else ""
        raise ValueError(
            f"{args}: the output {output} would have shape {tuple(int(d) for d in shape)}{because}, "
            f"{nbytes} bytes, over this adapter's max-storage-buffer-binding-size of {limit} bytes"
        )


def check_recurrent_shape(b: int, h: int, t: int, l_dim: int, e: int, limit: int) -> None:
    """recurrent_attention's limits beyond buffer sizes: L (query's last axis) at most
    farm.catalog.recurrent.MAX_L, the most rows a column's state can be split into
    registers for (ceil(L / 16) <= 128 floats per thread), and outputs context [B,H,T,E]
    and rho [B,H,L,E] within max-storage-buffer-binding-size (with VH = 1, value is H
    times smaller than context)."""
    if l_dim <= MAX_L and 4 * b * h * max(t, l_dim) * e <= limit:  # the usual case, on every call
        return
    if l_dim > MAX_L:
        raise ValueError(
            f"query: expected L (its last axis) <= {MAX_L}, the most the recurrent kernel keeps in registers "
            f"(ceil(L/16) <= 128 state floats per thread), got shape {(b, h, t, l_dim)}; split L into chunks "
            f"of at most {MAX_L} rows (state rows are independent: add the chunks' contexts)"
        )
    check_output_size("query, value", "context", (b, h, t, e), 4, limit, "[B,H,T,E]")
    check_output_size("query, value", "rho", (b, h, l_dim, e), 4, limit, "[B,H,L,E]")


def p64_words(records: np.ndarray) -> np.ndarray:
    """The (n, 16) little-endian uint32 words of checked uint32 (n, 16) or uint64 (n, 8)
    records: a uint64 array of any layout (Fortran order, strided, negative strides) is
    copied to C order first, a uint32 one is passed as is (the upload makes it contiguous)."""
    if records.dtype == np.uint64:
        return np.ascontiguousarray(records, dtype="<u8").view("<u4").reshape(-1, 16)
    return records


def fft_shape(shape: tuple[int, ...], complex_input: bool, max_n: int) -> tuple[int, int]:
    """(n, batch) of an fft `signal` of `shape`: complex64 (..., n) or interleaved float32
    (..., 2n), n a power of two in 2..max_n; ValueError naming `signal` otherwise."""
    last = shape[-1]
    if not complex_input and last % 2:
        raise ValueError(f"signal: expected interleaved float32 (..., 2n) with an even last axis, got shape {shape}")
    n = last if complex_input else last // 2
    if n < 2 or n > max_n or n & (n - 1):
        form = "n" if complex_input else "2n"
        raise ValueError(
            f"signal: expected a last axis of {form} with n a power of two in 2..{max_n}, got shape {shape} (n={n})"
        )
    return n, math.prod(shape) // last  # Python ints: np.prod cost 3 us of every call
