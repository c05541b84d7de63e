"""The runtime's device memory: a size-bucketed pool of wgpu buffers (the seed's slab idea).

A call whose shapes repeat takes the buffers the last such call gave back, so the hot path
creates and destroys nothing. Sizes are rounded up to a size class (powers of two up to
1 MiB, then quarter steps: at most 25% slack) and kept per class on a free list. Bound:
`capacity_bytes` caps everything the pool holds, live and idle; a request that doesn't fit
after dropping idle buffers raises ValueError naming the requested and the free bytes.
Idle buffers beyond `idle_bytes` are destroyed, least recently used first.

Reusing a buffer right after giving it back is safe without waiting: a wgpu queue runs
writes and submissions in the order they were issued, so a later call's upload into a
buffer lands after every earlier submission that read it.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from farm.gpu import Buffer, Device
from farm.runtime.validation import positive_bytes

MIN_CLASS = 256
_SERIALS = itertools.count(1)  # shared by every pool: a serial never names two buffers in one process
_SERIAL = attrgetter("serial")
DEFAULT_IDLE_BYTES = 4 << 30  # idle buffers kept for the next call, when no capacity is set
# (a gemv 16384^2 call holds 2 GiB, its input and the input's staging: a smaller bound would
# destroy and re-create them on every call)


def size_class(nbytes: int, largest: int) -> int:
    """The bucket a request of `nbytes` is served from (never above `largest`, the adapter's
    max-buffer-size; a request above every class is served at its own aligned size)."""
    nbytes = max(nbytes, 4)
    if nbytes <= MIN_CLASS:
        size = MIN_CLASS
    else:
        power = 1 << (nbytes - 1).bit_length()
        if power <= 1 << 20:
            size = power
        else:
            step = power // 8  # quarter steps of the lower power of two: 1.25, 1.5, 1.75, 2
            size = -(-nbytes // step) * step
    aligned = (nbytes + 3) & ~3
    return size if size <= largest else aligned


@dataclass(eq=False)
class Slab:
    """One pooled wgpu buffer. `serial` is unique in the process (bind groups are cached by
    it: an id() could be reused by a later buffer, a per-pool count by another pool's)."""

    handle: Any
    capacity: int
    use: str  # storage | uniform | upload
    serial: int
    free_list: list = field(default_factory=list, repr=False)  # its size class's idle slabs
    live: bool = field(default=True)
    mapping: Any = None  # upload slabs: the pending map for writing, made when last given back
    _views: dict = field(default_factory=dict, repr=False)

    def view(self, nbytes: int, kind: str) -> Buffer:
        """The first `nbytes` (4-byte aligned, at least 4) as a Buffer to bind as `kind`."""
        view = self._views.get((nbytes, kind))
        if view is None:
            view = self._views[(nbytes, kind)] = Buffer(handle=self.handle, nbytes=max((nbytes + 3) & ~3, 4), kind=kind)
        return view


def _released(handle: Any) -> bool:
    """Whether wgpu-py has released this buffer object (its finalizer ran). A DeviceArray
    caught in a reference cycle (an exception's traceback holding its frame, say) is
    collected together with its slab and buffer; the cycle's finalizers run in no fixed
    order, so the array's may give the slab back before or after the buffer's released it
    (a later call then bound a dead buffer: "must be a cdata pointer, not NoneType")."""
    return getattr(handle, "_internal", True) is None


class BufferPool:
    """Buffers of one Device, handed out by size class; thread-safe (an RLock: a DeviceArray
    collected by the garbage collector during a call gives its buffer back on that thread)."""

    def __init__(self, device: Device, capacity_bytes: int | None = None, idle_bytes: int | None = None):
        self.device = device
        self.capacity = positive_bytes("capacity_bytes", capacity_bytes)
        self.idle_limit = idle_bytes if idle_bytes is not None else (self.capacity or DEFAULT_IDLE_BYTES)
        self._largest = device.profile.limit("max-buffer-size") or (1 << 62)
        self._free: OrderedDict[int, Slab] = OrderedDict()  # serial -> idle slab, least recent first
        self._by_class: dict[tuple[str, int], list[Slab]] = {}  # (use, size class) -> idle slabs
        self._requests: dict[tuple[str, int], list[Slab]] = {}  # (use, nbytes) -> its class's list
        self._lock = threading.RLock()
        # slabs recorded in the runtime's passes not submitted yet (farm.runtime.calls defers
        # DeviceArray calls): given back meanwhile, they wait in _parked, neither reused nor
        # destroyed, until `unpin` (after the submission)
        self._pinned: set[int] = set()
        self._parked: dict[int, Slab] = {}  # by serial
        self.held = 0  # bytes of slabs handed out
        self.idle = 0  # bytes of slabs on the free lists
        self.created = 0  # slabs ever created (the hot-path test counts these)

    def take(self, nbytes: int, use: str = "storage") -> Slab:
        """A slab of at least `nbytes`, exclusively the caller's until `give`. `use`:
        storage (bound as read or read_write storage), uniform, or upload (mappable for
        writing, the source of a copy: the staging of a large upload)."""
        with self._lock:
            free = self._requests.get((use, nbytes))
            if free is None:  # a request size not seen before: find its size class's list
                if len(self._requests) > 4096:
                    self._requests.clear()
                size = size_class(nbytes, self._largest)
                free = self._requests[(use, nbytes)] = self._by_class.setdefault((use, size), [])
            while free:
                slab = free.pop()
                del self._free[slab.serial]
                self.idle -= slab.capacity
                if _released(slab.handle):  # finalized after it came back (see give): drop it
                    self._forget(slab)
                    continue
                self.held += slab.capacity
                return slab
            return self._create(size_class(nbytes, self._largest), use, free)

    def _create(self, size: int, use: str, free_list: list[Slab]) -> Slab:
        self._make_room(size)
        usage = self.device._wgpu.BufferUsage
        if use == "upload":
            flags = usage.MAP_WRITE | usage.COPY_SRC
        else:
            flags = usage.COPY_DST | usage.COPY_SRC | (usage.UNIFORM if use == "uniform" else usage.STORAGE)
        try:
            handle = self.device.device.create_buffer(size=size, usage=flags)
        except Exception as exc:  # noqa: BLE001 - out of device memory, over a limit
            raise ValueError(f"device memory: allocating {size} bytes failed: {exc}") from exc
        self.created += 1
        self.device.track(size)
        self.held += size
        return Slab(handle, size, use, next(_SERIALS), free_list)

    def pin(self, slabs: list[Slab]) -> None:
        """Mark `slabs` as used by recorded, unsubmitted passes (until `unpin`)."""
        with self._lock:
            self._pinned.update(map(_SERIAL, slabs))

    def unpin(self) -> None:
        """The recorded passes are submitted: slabs given back meanwhile go to their free lists."""
        with self._lock:
            self._pinned.clear()
            parked, self._parked = self._parked, {}
            for slab in parked.values():
                self.give(slab)

    def give(self, slab: Slab) -> None:
        """Back to its free list (idle beyond `idle_limit` is destroyed, oldest first); a
        pinned slab waits for `unpin`."""
        with self._lock:
            if not slab.live or slab.serial in self._free:
                return
            if slab.serial in self._pinned:
                self._parked[slab.serial] = slab
                return
            self.held -= slab.capacity
            if _released(slab.handle):
                self._forget(slab)
                return
            self.idle += slab.capacity
            self._free[slab.serial] = slab
            slab.free_list.append(slab)
            while self.idle > self.idle_limit and self._free:
                self._destroy_oldest()

    def trim(self) -> int:
        """Destroy every idle slab; returns the bytes freed."""
        with self._lock:
            freed = self.idle
            while self._free:
                self._destroy_oldest()
            return freed

    def _make_room(self, size: int) -> None:
        if self.capacity is None:
            return
        if self.held + size > self.capacity:
            raise ValueError(
                f"capacity_bytes={self.capacity}: a request of {size} bytes does not fit, "
                f"{self.capacity - self.held} bytes free ({self.held} held by live DeviceArrays and calls)"
            )
        while self.held + self.idle + size > self.capacity and self._free:
            self._destroy_oldest()

    def _forget(self, slab: Slab) -> None:
        """`slab` out of the pool's accounts for good (its buffer is gone already)."""
        slab.live = False
        self.device.track(-slab.capacity)

    def _destroy_oldest(self) -> None:
        _, slab = self._free.popitem(last=False)
        slab.free_list.remove(slab)
        self.idle -= slab.capacity
        slab.live = False
        slab.handle.destroy()
        self.device.track(-slab.capacity)

    def close(self) -> None:
        self.trim()
