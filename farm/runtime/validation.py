"""Argument checks for the runtime's kernel calls, done before anything touches the GPU.

Every message names the argument, what was expected and what was given (the actual shape
for arrays). Nothing is cast silently: a wrong dtype is a TypeError telling the caller to
cast it themselves. Shape, emptiness, range and adapter buffer-limit problems are
ValueErrors.
"""

from __future__ import annotations

import operator

import numpy as np

from farm.catalog import Launch


def as_array(name: str, value: object, dtypes: tuple[type, ...], ndim: tuple[int, ...]) -> np.ndarray:
    """`value` as an ndarray of one of `dtypes` with one of the ranks in `ndim`, non-empty.

    TypeError when it's not an ndarray of an accepted dtype (no silent casts); ValueError
    for a wrong rank or an empty array.
    """
    expected = " or ".join(np.dtype(d).name for d in dtypes)
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array of {expected}, got {type(value).__name__}")
    if value.dtype not in [np.dtype(d) for d in dtypes]:
        raise TypeError(f"{name}: expected dtype {expected}, got {value.dtype} (cast it yourself: no silent casts)")
    if value.ndim not in ndim:
        ranks = " or ".join(f"{r}-D" for r in ndim)
        raise ValueError(f"{name}: expected a {ranks} array, got shape {value.shape}")
    if value.size == 0:
        raise ValueError(f"{name}: expected a non-empty array, got shape {value.shape}")
    return value


def as_count(name: str, value: object, low: int = 1, high: int | None = None) -> int:
    """A Python/numpy integer in [low, high]; TypeError for non-integers, ValueError out of range."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an integer, got bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    if number < low or (high is not None and number > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name}: expected an integer in {span}, got {number}")
    return number


def expect_shape(name: str, array: np.ndarray, shape: tuple[int, ...], why: str) -> None:
    """ValueError unless `array` has exactly `shape`; `why` says where that shape comes from."""
    if array.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} ({why}), got {array.shape}")


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
