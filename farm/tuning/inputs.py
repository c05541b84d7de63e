"""A tuning worker's inputs: per (kernel, problem, seed) the generated arrays, their device
buffers and the numpy references, each made once (farm.tuning.runner's TrialRunner holds one
`InputStore`).

Inputs are generated on first use by exactly one thread (a lock per key: two batches never
generate the same inputs twice, and a batch needing other inputs doesn't wait for them), or
ahead of their first trial by `prefetch` on a background thread. An input array the spec
passes through unchanged is uploaded once and its buffer reused by every trial; output
buffers are shared by the trials too (each trial's certification copies them to staging in
its own submission). The reference is computed once per inputs and the spec's
`reference_key` (topk: once per block size, every block size in one pass through its
`reference_set`) on a thread of its own, overlapping the first trials' GPU work.
`forget` drops a problem's arrays, references and buffers.

Locks: the buffer dicts are used under the worker's GPU lock only (uploads and
allocations are GPU work), the entries and references under the store's own lock.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from farm import catalog
from farm.catalog import KernelSpec
from farm.gpu import Buffer, Device
from farm.schedule import Problem, Schedule
from farm.tuning.job import Job, StageTimes

Key = tuple[str, str, int]  # (kernel, problem key, seed)


@dataclass
class Inputs:
    """Generated inputs, their uploaded buffers (by array address) and the references."""

    arrays: dict[str, np.ndarray]
    uploaded: dict[tuple[int, tuple[int, ...], str, str], Buffer] = field(default_factory=dict)
    outputs: dict[tuple[str, int, str], Buffer] = field(default_factory=dict)
    expected: dict[str, Future] = field(default_factory=dict)  # references by the spec's reference_key
    together: dict[str, dict[str, np.ndarray]] | None = None  # the spec's reference_set, once (reference thread)


class Transient(Buffer):
    """A per-trial buffer (params, derived data): released after the trial."""

    @classmethod
    def wrap(cls, buffer: Buffer) -> Transient:
        return cls(handle=buffer.handle, nbytes=buffer.nbytes, kind=buffer.kind)


class InputStore:
    """Inputs, buffers and references per (kernel, problem, seed) for one device; see the
    module docstring. `gpu` is the worker's GPU lock."""

    def __init__(self, device: Device, gpu: threading.Lock, stages: StageTimes):
        self.device, self._gpu, self.stages = device, gpu, stages
        self._inputs: dict[Key, Inputs] = {}
        self._generating: dict[Key, threading.Lock] = {}
        self._lock = threading.Lock()  # _inputs, _generating and every entry's `expected`
        self._referee = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm-reference")
        self._prefetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm-prefetch")
        # forget waits for the GPU lock, which back-to-back batches may hold for seconds: on
        # its own thread, so the next prefetch never queues behind it
        self._forgetter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm-forget")

    def entry(self, spec: KernelSpec, job: Job) -> Inputs:
        """The inputs of (kernel, problem, seed), generated on first use by exactly one
        thread; other threads wait only when they need the same inputs."""
        key = (spec.name, job.problem.key(), job.seed)
        entry = self._inputs.get(key)
        if entry is not None:
            return entry
        with self._lock:
            generating = self._generating.setdefault(key, threading.Lock())
        with generating:
            entry = self._inputs.get(key)
            if entry is None:
                entry = Inputs(arrays=spec.generate(job.problem, job.seed))
                with self._lock:
                    self._inputs[key] = entry
        return entry

    def expected(self, spec: KernelSpec, job: Job) -> Future:
        """The reference (a Future), computed once per inputs and the spec's reference_key on
        the reference thread: a 4096^3 gemm or 2^26-element topk reference is seconds of
        numpy, which the first trials' GPU work overlaps (the checker waits for it, not the GPU)."""
        entry = self.entry(spec, job)
        key = spec.reference_key(job.schedule)
        with self._lock:
            if key not in entry.expected:
                entry.expected[key] = self._referee.submit(self._reference, spec, job, entry, key)
            return entry.expected[key]

    @staticmethod
    def _reference(spec: KernelSpec, job: Job, entry: Inputs, key: str) -> dict[str, np.ndarray]:
        """On the reference thread: a schedule-dependent spec's every key at once on its first
        reference (`reference_set`, where it has one: topk's six block sizes cost about two),
        else this key's alone."""
        if spec.schedule_dependent_reference:
            if entry.together is None:
                entry.together = spec.reference_set(job.problem, entry.arrays)
            if key in entry.together:
                return entry.together[key]
        return spec.reference(job.problem, job.schedule, entry.arrays)

    def buffer_for(self, entry: Inputs, arg) -> Buffer:
        """The device buffer for launch argument `arg` (under the GPU lock): an output's
        shared buffer, an unchanged input's uploaded one, else a Transient for this trial."""
        if arg.output:
            slot = (arg.name, arg.nbytes, arg.kind)
            if slot not in entry.outputs:
                entry.outputs[slot] = self.device.empty(arg.nbytes, arg.kind)
            return entry.outputs[slot]
        if arg.data is None:
            return Transient.wrap(self.device.empty(arg.nbytes, arg.kind))
        if any(arg.data is a or np.shares_memory(arg.data, a) for a in entry.arrays.values()):
            identity = (arg.data.__array_interface__["data"][0], arg.data.shape, arg.data.dtype.str, arg.kind)
            if identity not in entry.uploaded:
                entry.uploaded[identity] = self.device.upload(arg.data, arg.kind)
            return entry.uploaded[identity]
        return Transient.wrap(self.device.upload(arg.data, arg.kind))

    def prefetch(self, kernel: str, problem: Problem, seed: int = 0, schedule: Schedule | None = None) -> None:
        """Start generating the inputs of (kernel, problem, seed) and, once they exist, the
        reference for `schedule` (default: the kernel's default, a campaign's first trial)
        on the prefetch thread, without the GPU lock, and return at once: a campaign asks for
        its next problem's while this one's trials run, so the GPU does not wait for the CPU
        between problems. A failure is left to the trial that needs the inputs, which generates
        them again and reports it."""
        self._prefetcher.submit(self._prefetch, kernel, problem, seed, schedule)

    def _prefetch(self, kernel: str, problem: Problem, seed: int, schedule: Schedule | None) -> None:
        try:
            spec = catalog.get(kernel)
            with self.stages.timed("prefetch"):
                self.expected(spec, Job(kernel, problem, schedule or spec.default, seed, 0, 1))
        except Exception:  # noqa: BLE001 - the trial that needs them reports it
            pass

    def forget(self, kernel: str, problem: Problem, seed: int = 0) -> None:
        """Drop the arrays, references and device buffers of (kernel, problem, seed) on a
        thread of its own once no trial holds the GPU, and return at once: a campaign is done
        with a problem once its winner is stored, and a worker that kept every problem's
        buffers would hold the whole catalog's inputs on its GPU. Needing them again
        generates them again. The request goes through the prefetch thread's queue first, so
        a forget never overtakes a prefetch of the same inputs still waiting there (a campaign
        that fails drops the problems it asked for ahead), then waits for the GPU lock on a
        thread of its own."""
        self._prefetcher.submit(self._forgetter.submit, self._forget, (kernel, problem.key(), seed))

    def _forget(self, key: Key) -> None:
        with self._gpu:
            with self._lock:
                entry = self._inputs.pop(key, None)
                self._generating.pop(key, None)
            if entry is not None:
                self.device.release(*entry.uploaded.values(), *entry.outputs.values())

    def held(self) -> list[Key]:
        """The (kernel, problem key, seed) whose inputs are held now."""
        with self._lock:
            return sorted(self._inputs)

    def settled(self, timeout_s: float = 60.0) -> None:
        """Wait until the prefetches and forgets asked for so far are done."""
        for pool in (self._prefetcher, self._forgetter):
            pool.submit(lambda: None).result(timeout=timeout_s)

    def close(self) -> None:
        """Stop the threads, then free every buffer (under the GPU lock)."""
        self._referee.shutdown(wait=True)
        self._prefetcher.shutdown(wait=True)
        self._forgetter.shutdown(wait=True)
        with self._gpu:
            for entry in list(self._inputs.values()):
                self.device.release(*entry.uploaded.values(), *entry.outputs.values())
            self._inputs.clear()
            self._generating.clear()
