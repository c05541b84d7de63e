"""The pool's trial loop: batches out to the workers, results back, and the failure rules.

Jobs go out in small batches, at most `max_in_flight` per worker, and come back through
`ray.wait`. A worker is a threaded actor (farm.tuning.actors.ACTOR_THREADS): its next batch
compiles and is timed while the previous one finishes its comparisons (see
farm.tuning.runner), so two batches may be under way at once and a fault can't be pinned on
the oldest one by itself. The rules:

- a batch running past `trial_timeout_s` per job: the actor is killed and replaced; a
  multi-job batch is split and re-run job by job, a single job is recorded `timeout`;
- an actor process that dies: completed batches are kept, queued ones re-sent, the
  dying batch split; a single job is retried on fresh actors up to `max_retries`
  times, then recorded `worker_lost`;
- a verdict (`timeout`, a retry counted) only falls on a single job that had the worker
  to itself: one that shared it with another batch is re-run alone first. Retried and
  split-off batches always run alone on their worker (nothing queued beside them).

Any other exception from a worker is a bug and propagates. `BatchDispatch` holds the loop;
`farm.tuning.pool.WorkerPool` inherits it and supplies the workers.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from farm import catalog
from farm.catalog.rules import KernelError
from farm.gpu import CpuAdapterRefused, HardwareProfile, NoAdapterError
from farm.schedule import Status
from farm.trial import TrialKey, TrialResult
from farm.tuning.job import Job

_POLL_S = 0.5
DEATH_SETTLE_S = 10.0  # how long a dead actor's earlier batches may take to resolve
MAX_BATCH = 8  # trials per batch sent to a worker (guided sizing shrinks it towards the end)


class WorkerFailure(RuntimeError):
    """A worker call that timed out or whose actor died outside the trial machinery."""


# What a worker raises that is the user's to fix, not the farm's: a user kernel's own mistake
# (its reference raised), and no adapter for the worker (FARM_ADAPTER, no GPU without --allow-cpu)
USERS_ERRORS = (KernelError, NoAdapterError, CpuAdapterRefused)


def raise_users_error(exc: BaseException) -> None:
    """Raise, as itself, the user's error a Ray task error carries (the CLI's one line); return otherwise."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, USERS_ERRORS):
        raise cause.with_traceback(None) from None


@dataclass
class _Slot:
    """One worker position (a GPU, or a CPU worker); its actor is replaced on failure."""

    name: str
    actor: Any = None
    generation: int = 0
    report: dict = field(default_factory=dict)
    fifo: deque = field(default_factory=deque)  # in-flight _Batch, oldest first

    @property
    def worker_id(self) -> str:
        return f"{self.name}.{self.generation}"

    @property
    def profile(self) -> HardwareProfile:
        return HardwareProfile.from_dict(self.report["profile"])


@dataclass
class _Batch:
    items: list[tuple[int, Job]]
    retries: int = 0
    ref: Any = None
    started: float = 0.0
    alone: bool = False  # a retried or split-off trial: never merged with others again


class BatchDispatch(ABC):
    """Runs jobs over worker slots by the module's rules. The pool sets the settings and
    `_ray` (the ray module) and supplies `_replace(slot)`: kill the slot's actor, start a
    fresh one."""

    _ray: Any
    trial_timeout_s: float
    max_in_flight: int
    max_retries: int

    @abstractmethod
    def _replace(self, slot: _Slot) -> None:
        """Kill `slot`'s actor and start a fresh one in its place."""

    def _run(self, jobs: list[Job], slots: list[_Slot], batch_size: int | None) -> Iterator[tuple[int, TrialResult]]:
        """Batches of `batch_size`, or guided: each batch takes its share of what is left,
        ceil(left / (workers x in-flight)) clamped to 1..MAX_BATCH, so workers get large
        batches while plenty is left and single trials at the end, where a fixed size left
        some GPUs idle behind the last full batches."""
        indexed = list(enumerate(jobs))
        size = batch_size or 1
        pending = deque(_Batch(indexed[i : i + size]) for i in range(0, len(indexed), size))
        owner: dict[Any, _Slot] = {}
        guided = batch_size is None
        while pending or owner:
            self._fill(slots, pending, owner, guided)
            ready, _ = self._ray.wait(list(owner), num_returns=1, timeout=_POLL_S)
            for ref in ready:
                if ref in owner:
                    yield from self._collect(owner[ref], ref, pending, owner)
            for slot in slots:
                if slot.fifo and self._overdue(slot.fifo[0]):
                    yield from self._on_timeout(slot, pending, owner)

    def _fill(self, slots: list[_Slot], pending: deque, owner: dict, guided: bool = False) -> None:
        for slot in slots:
            while pending and len(slot.fifo) < self.max_in_flight and not _kept_apart(slot, pending[0]):
                batch = self._take(pending, len(slots)) if guided else pending.popleft()
                batch.ref = slot.actor.evaluate.remote([job for _, job in batch.items])
                batch.started = time.monotonic()
                slot.fifo.append(batch)
                owner[batch.ref] = slot

    def _take(self, pending: deque, workers: int) -> _Batch:
        """The next batch: single fresh trials at the head of `pending` merged up to the
        guided size; a retried or split-off trial goes alone."""
        first = pending.popleft()
        if first.alone or first.retries:
            return first
        left = len(first.items) + sum(len(b.items) for b in pending)
        # With one worker too: results stream back (progress, resume after a kill) in halves.
        want = max(1, min(MAX_BATCH, -(-left // (workers * self.max_in_flight))))
        items = list(first.items)
        while pending and len(items) < want and not pending[0].alone and not pending[0].retries:
            items += pending.popleft().items
        return _Batch(items)

    def _overdue(self, batch: _Batch) -> bool:
        return time.monotonic() - batch.started > self.trial_timeout_s * len(batch.items)

    def _collect(self, slot: _Slot, ref, pending: deque, owner: dict) -> Iterator[tuple[int, TrialResult]]:
        ray = self._ray
        try:
            results = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            yield from self._on_death(slot, pending, owner)
            return
        except ray.exceptions.RayTaskError as exc:
            raise_users_error(exc)
            raise WorkerFailure(f"worker {slot.worker_id} raised: {exc}") from exc
        batch = next(b for b in slot.fifo if b.ref == ref)
        was_head = batch is slot.fifo[0]
        slot.fifo.remove(batch)
        del owner[ref]
        if was_head and slot.fifo:
            # the next batch's time starts when this one ends; a later batch finishing
            # first (a threaded worker) leaves the head's clock running
            slot.fifo[0].started = time.monotonic()
        yield from zip((i for i, _ in batch.items), results, strict=True)

    def _on_timeout(self, slot: _Slot, pending: deque, owner: dict) -> Iterator[tuple[int, TrialResult]]:
        culprit = slot.fifo[0]
        limit = self.trial_timeout_s * len(culprit.items)
        shared = len(slot.fifo) > 1  # a batch beside it may hold the GPU: no verdict yet
        self._requeue_behind(slot, culprit, pending, owner)
        if len(culprit.items) > 1:
            pending.extendleft(_Batch([item], alone=True) for item in reversed(culprit.items))
        elif shared:
            pending.appendleft(_Batch(culprit.items, culprit.retries, alone=True))
        else:
            index, job = culprit.items[0]
            yield index, self._failure(slot, job, Status.TIMEOUT, f"trial exceeded {limit:.1f} s; worker replaced")
        self._replace(slot)

    def _on_death(self, slot: _Slot, pending: deque, owner: dict) -> Iterator[tuple[int, TrialResult]]:
        """Keep batches that finished before the death; the first unfinished one is the culprit."""
        ray = self._ray
        while slot.fifo:
            batch = slot.fifo[0]
            try:
                # Not timeout=0: a batch that finished just before the death may not have
                # its result here yet, and would be blamed for the crash. With the actor
                # dead every ref resolves promptly, to its results or to the death.
                results = ray.get(batch.ref, timeout=DEATH_SETTLE_S)
            except Exception:  # noqa: BLE001 - this batch died with the actor
                break
            slot.fifo.popleft()
            del owner[batch.ref]
            yield from zip((i for i, _ in batch.items), results, strict=True)
        if not slot.fifo:
            self._replace(slot)
            return
        culprit = slot.fifo[0]
        shared = len(slot.fifo) > 1  # the batch beside it may have killed the worker
        self._requeue_behind(slot, culprit, pending, owner)
        lost_id = slot.worker_id
        self._replace(slot)
        if len(culprit.items) > 1:
            pending.extendleft(_Batch([item], alone=True) for item in reversed(culprit.items))
        elif shared:
            pending.appendleft(_Batch(culprit.items, culprit.retries, alone=True))
        elif culprit.retries < self.max_retries:
            pending.appendleft(_Batch(culprit.items, retries=culprit.retries + 1, alone=True))
        else:
            index, job = culprit.items[0]
            message = f"worker {lost_id} died on this trial {culprit.retries + 1} times"
            yield index, self._failure(slot, job, Status.WORKER_LOST, message)

    def _requeue_behind(self, slot: _Slot, culprit: _Batch, pending: deque, owner: dict) -> None:
        """Batches queued behind `culprit` never started: send them again unchanged."""
        behind = [b for b in slot.fifo if b is not culprit]
        for batch in [culprit, *behind]:
            owner.pop(batch.ref, None)
        pending.extendleft(_Batch(b.items, b.retries, alone=True) for b in reversed(behind))
        slot.fifo.clear()

    def _failure(self, slot: _Slot, job: Job, status: Status, message: str) -> TrialResult:
        spec = catalog.get(job.kernel)
        key = TrialKey(slot.report["topology_hash"], job.kernel, spec.source_hash(), job.problem, job.schedule)
        return TrialResult(key, status, message, host=slot.report.get("host", ""), worker_id=slot.worker_id)


def _kept_apart(slot: _Slot, head: _Batch) -> bool:
    """Whether `head` must wait for `slot` to empty: a retried or split-off batch runs alone
    on its worker, and nothing joins one, so a fault during it is its own."""
    return bool(slot.fifo) and (head.alone or any(batch.alone for batch in slot.fifo))
