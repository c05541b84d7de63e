"""DeviceArray: an array that lives in GPU memory between runtime calls.

`rt.asarray(x)` uploads, `rt.empty(shape, dtype)` allocates; kernel methods given a
DeviceArray return DeviceArrays without waiting for the GPU, so a chain of calls costs one
wait, at the end (`.numpy()`). The wgpu queue runs in order: reading an array waits for
exactly the work submitted before, which includes whatever writes it.

`reshape` and `view` (numpy's meaning, C order) give arrays that share the buffer; the
buffer goes back to the runtime's pool when `release()` is called on any of them, or when
the last of them is garbage-collected. Using a released array, or one from another
runtime, raises ValueError.
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING

import numpy as np

from farm.runtime.validation import numeric_dtype

if TYPE_CHECKING:
    from farm.runtime.pool import Slab


class _Storage:
    """The slab behind a DeviceArray and its views; gives it back to the pool once."""

    __slots__ = ("pool", "slab", "owner")

    def __init__(self, pool, slab: Slab, owner: object):
        self.pool, self.slab, self.owner = pool, slab, owner

    def release(self) -> None:
        slab, self.slab = self.slab, None
        if slab is not None:
            self.pool.give(slab)

    def __del__(self) -> None:
        try:
            if self.slab is not None:
                self.pool.give(self.slab)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the device may be gone already
            pass


class DeviceArray:
    """A C-ordered array in device memory, owned by one ForgeRuntime."""

    __slots__ = ("_storage", "shape", "dtype")

    def __init__(self, storage: _Storage, shape: tuple[int, ...], dtype: np.dtype):
        self._storage = storage
        self.shape = tuple(map(int, shape))
        self.dtype = np.dtype(dtype)

    @classmethod
    def pooled(cls, pool, slab: Slab, owner: object, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray:
        """A call's output in `slab` of `pool`: `shape` a tuple of ints and `dtype` an
        np.dtype already (a plan's), so nothing is converted on the call path."""
        array = cls.__new__(cls)
        array._storage, array.shape, array.dtype = _Storage(pool, slab, owner), shape, dtype
        return array

    # -- what it is -------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def released(self) -> bool:
        return self._storage.slab is None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self) -> str:
        state = ", released" if self.released else ""
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}{state})"

    # -- back to the host ---------------------------------------------------------------
    def numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """A host copy, after the work submitted so far (which includes what writes it); into
        `out` when given (a C-contiguous, writeable numpy array of this shape and dtype,
        returned: a reused array skips a fresh one's page faults), else a new array."""
        if out is not None:
            check_host_array(out, self.shape, self.dtype, "a numpy array")
        return self._storage.owner._read(self, out)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    # -- the same bytes, another shape ----------------------------------------------------
    def reshape(self, *shape) -> DeviceArray:
        """numpy's reshape (C order, one -1 allowed), sharing the buffer."""
        self._check_live("reshape")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return DeviceArray(self._storage, _resolve_shape(shape, self.size, self.shape), self.dtype)

    def view(self, dtype) -> DeviceArray:
        """numpy's view for C-contiguous arrays: the last axis rescaled by the itemsizes; `dtype`
        one `rt.asarray` takes (bool, integer, float, complex), else TypeError."""
        self._check_live("view")
        dtype = numeric_dtype("view: dtype", dtype)
        if dtype.itemsize == self.dtype.itemsize:
            return DeviceArray(self._storage, self.shape, dtype)
        last = self.shape[-1] if self.shape else 1
        if (last * self.dtype.itemsize) % dtype.itemsize:
            raise ValueError(
                f"view: a last axis of {last} {self.dtype} is not a whole number of {dtype} "
                f"(shape {self.shape})"
            )
        return DeviceArray(self._storage, (*self.shape[:-1], last * self.dtype.itemsize // dtype.itemsize), dtype)

    def same_bytes(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray:
        """This array's bytes as `shape` of `dtype` (ints and an np.dtype, of the same number
        of bytes: the runtime's own reshapes, e.g. fft's complex64 signal as float32 pairs,
        made without view's and reshape's checks)."""
        array = DeviceArray.__new__(DeviceArray)
        array._storage, array.shape, array.dtype = self._storage, shape, dtype
        return array

    # -- lifetime -------------------------------------------------------------------
    def release(self) -> None:
        """Give the buffer back now (this array and every view of it become unusable)."""
        self._storage.release()

    def __enter__(self) -> DeviceArray:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # -- for the runtime ----------------------------------------------------------------
    def slab(self, owner: object, name: str) -> Slab:
        """The pool slab holding the data; ValueError if released or from another runtime."""
        storage = self._storage
        if storage.owner is not owner:
            raise ValueError(f"{name}: DeviceArray {self.shape} {self.dtype} belongs to another ForgeRuntime")
        if storage.slab is None:
            raise ValueError(f"{name}: DeviceArray {self.shape} {self.dtype} was released")
        return storage.slab

    def checked(self, name: str, owner: object, dtypes: tuple[type, ...], ndim: tuple[int, ...]) -> DeviceArray:
        """The runtime's argument checks (farm.runtime.validation.as_array's, same messages)
        for a DeviceArray: this runtime's and live, an accepted dtype and rank, non-empty.
        On the hot path: the messages are built only when a check fails."""
        if self._storage.owner is not owner or self._storage.slab is None:
            self.slab(owner, name)  # raises the ValueError that says which
        if self.dtype not in dtypes:
            expected = " or ".join(np.dtype(d).name for d in dtypes)
            raise TypeError(f"{name}: expected dtype {expected}, got {self.dtype} (cast it yourself: no silent casts)")
        if len(self.shape) not in ndim:
            ranks = " or ".join(f"{r}-D" for r in ndim)
            raise ValueError(f"{name}: expected a {ranks} array, got shape {self.shape}")
        if 0 in self.shape:
            raise ValueError(f"{name}: expected a non-empty array, got shape {self.shape}")
        return self

    def same_buffer(self, other: DeviceArray) -> bool:
        return self._storage is other._storage

    def _check_live(self, name: str) -> None:
        if self._storage.slab is None:
            raise ValueError(f"{name}: DeviceArray {self.shape} {self.dtype} was released")


def _resolve_shape(shape: tuple, size: int, old: tuple[int, ...]) -> tuple[int, ...]:
    dims = [_dim(i, d) for i, d in enumerate(shape)]
    if dims and min(dims) < 0:
        if dims.count(-1) > 1 or min(dims) < -1:
            raise ValueError(f"reshape: bad shape {tuple(dims)}")
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:
            raise ValueError(f"reshape: cannot reshape {old} ({size} elements) into {tuple(dims)}")
        dims[dims.index(-1)] = size // known
    if math.prod(dims) != size:
        raise ValueError(f"reshape: cannot reshape {old} ({size} elements) into {tuple(dims)}")
    return tuple(dims)


def check_host_array(out, shape: tuple[int, ...], dtype: np.dtype, expected: str) -> None:
    """TypeError/ValueError unless `out` is a numpy array that can take a result of `shape`
    and `dtype` in place: that shape and dtype, C-contiguous, writeable (`expected` names
    what else the caller would have taken, for the TypeError)."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out: expected {expected}, got {type(out).__name__}")
    if isinstance(out, (np.matrix, np.ma.MaskedArray)):  # a matrix can't hold other ranks; a mask would go stale
        raise TypeError(f"out: expected a plain numpy array, got {type(out).__module__}.{type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out: expected a numpy array of shape {shape} and dtype {dtype}, got {out.shape} {out.dtype}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out: the numpy array must be C-contiguous and writeable")


def _dim(index: int, value: object) -> int:
    """reshape's `shape[index]` as an int: TypeError naming it for a non-integer (None, 2.5, "2")."""
    if isinstance(value, (bool, np.bool_)) or not hasattr(value, "__index__"):
        raise TypeError(f"reshape: shape[{index}]: expected an integer, got {type(value).__name__} {value!r}")
    return operator.index(value)
