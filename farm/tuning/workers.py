"""The Ray crossing: the `WorkerPool` a campaign drives, and the `GpuWorker` actor on each GPU.

This is one idea in one module: the pool's batch loop, its failure rules and the actor's
threads decide together what a timeout or a dead worker means, so they are read together.

`WorkerPool` starts (or joins) Ray (farm.tuning.ray_session), starts one `GpuWorker` per GPU
(`num_gpus=1`; on a cluster without GPUs, CPU-adapter workers only when `allow_cpu`:
`cpu_workers` of them, by default one per node with a CPU, spread over the nodes), and
collects each worker's report (HardwareProfile, adapter mapping) before any work. Besides
trials: interleaved re-measurement on one worker (`remeasure_rounds`), any picklable function on
the workers' devices (`map`), and per-worker stage times.

Trials go out in small batches, at most `max_in_flight` per worker, and come back as each
batch's ref resolves (a callback queues it: a wait costs what finished, not the fleet's
size). A worker is a threaded actor (ACTOR_THREADS): its next batch compiles and is timed
while the previous one finishes its comparisons (farm.tuning.runner), so two batches may be
under way at once and a fault can't be pinned on the oldest one by itself. The rules:

- a batch running past `trial_timeout_s` per job: the actor is killed and replaced in its
  slot; a multi-job batch is split and re-run job by job, a single job is recorded `timeout`;
- an actor process that dies: completed batches are kept, queued ones re-sent, the
  dying batch split; a single job is retried on fresh actors up to `max_retries`
  times, then recorded `worker_lost`;
- a verdict (`timeout`, a retry counted) only falls on a single job that had the worker
  to itself: one that shared it with another batch is re-run alone first. Retried and
  split-off batches always run alone on their worker (nothing queued beside them).
Any other exception from a worker is a bug and propagates.

On the worker side, `pick_adapter` maps a worker's Ray GPU id to a wgpu adapter (Ray only
sets CUDA_VISIBLE_DEVICES, which Vulkan ignores) and cross-checks it against `nvidia-smi`;
`_placement` checks, once the device exists, which GPU the process really holds. A
`GpuWorker` wraps one TrialRunner (farm.tuning.runner) for its whole life.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from farm import catalog
from farm.catalog.rules import KernelError
from farm.gpu import (
    CpuAdapterRefused,
    Device,
    HardwareProfile,
    NoAdapterError,
    enumerate_adapters,
    nvidia,
    refuse_cpu,
)
from farm.schedule import Problem, Schedule, Status
from farm.trial import TrialKey, TrialResult
from farm.tuning.job import Job, JobBatch
from farm.tuning.ray_session import init_ray
from farm.tuning.runner import TrialRunner

_POLL_S = 0.5
_FREED = object()  # TrialQueue's inbox: a reserved worker was given back
DEATH_SETTLE_S = 10.0  # how long a dead actor's earlier batches may take to resolve
# Trials per batch sent to a worker while plenty is left (guided sizing shrinks it towards the
# end): a Ray call and its result cost the driver about as much as a hundred trials' SQL, so a
# fleet's many fast trials go out several dozen a call; at 11 trials/s a batch is ~3 s of a GPU.
MAX_BATCH = 32
# From this many workers a guided batch that is a worker's whole share of what is left (at most
# max_in_flight trials) goes as one call: at fleet scale a search round gives each worker one or
# two trials, and one Ray call per trial was most of the driver's cost a trial.
SHARE_WORKERS = 16
NVIDIA_SMI_TIMEOUT_S = 20.0
# Method calls a GpuWorker runs at once (a threaded actor): one batch on the GPU while
# the next compiles ahead or the previous one drains its comparisons; the TrialRunner's
# GPU lock keeps their GPU work apart. Ray doesn't promise a threaded actor starts calls
# in submission order, and nothing here depends on it.
ACTOR_THREADS = 2


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
    share: bool = False  # a worker's whole share of a wide round: it takes no second batch in that fill
    answer: Any = None  # the ref's future once watched: its value, read without a second ray.get
    sample: str = ""  # "visit": a first visit alone on its worker, whose wall teaches TrialQueue's _VisitCost


class _Arrivals:
    """Batches' refs as they resolve, queued by Ray's completion callback: a wait costs what
    finished, where ray.wait over every ref in flight costs the fleet's size each call.
    `events` may be shared with other wake-ups (TrialQueue's new jobs)."""

    def __init__(self, events: queue.SimpleQueue | None = None):
        self.events = events if events is not None else queue.SimpleQueue()

    def watch(self, batch: _Batch) -> None:
        batch.answer = batch.ref.future()
        batch.answer.add_done_callback(lambda _, ref=batch.ref: self.events.put(ref))

    def wait(self, timeout: float) -> list:
        """What arrived: at least one item unless `timeout` passed first, then all others ready."""
        try:
            arrived = [self.events.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                arrived.append(self.events.get_nowait())
            except queue.Empty:
                return arrived


class _Pending(deque):
    """The batches waiting for a worker, counting the trials they hold: the guided size reads
    that count at every batch taken, and a fleet's queue holds thousands."""

    def __init__(self, batches=()):
        super().__init__(batches)
        self.trials = sum(len(b.items) for b in self)
        self.round = self.trials  # trials queued since it was last empty: the round being handed out

    def popleft(self) -> _Batch:
        batch = super().popleft()
        self.trials -= len(batch.items)
        if not self.trials:
            self.round = 0
        return batch

    def to_front(self, index: int) -> None:
        """Move the batch at `index` to the front (the counts stay: it is still queued)."""
        if index:
            batch = self[index]
            del self[index]
            deque.appendleft(self, batch)

    def _added(self, count: int) -> None:
        self.trials += count
        self.round += count

    def appendleft(self, batch: _Batch) -> None:
        super().appendleft(batch)
        self._added(len(batch.items))

    def extendleft(self, batches) -> None:
        batches = list(batches)
        super().extendleft(batches)
        self._added(sum(len(b.items) for b in batches))

    def append(self, batch: _Batch) -> None:
        super().append(batch)
        self._added(len(batch.items))


ProblemKey = tuple[str, str, int]  # (kernel, problem key, seed): one problem's inputs on a worker


def _problem_key(job: Job) -> ProblemKey:
    return job.kernel, job.problem.key(), job.seed


def _problem_of(batch: _Batch) -> ProblemKey:
    """The problem of a batch's first trial (a batch from one home holds one problem's trials,
    or, where two tasks share the home, rarely the tail of one and the head of the other)."""
    return _problem_key(batch.items[0][1])


class _VisitCost:
    """What a trial away from its problem's home costs, in trial-times: a worker that never ran
    the problem first makes its inputs and reference. Learned from batches that had their worker
    to themselves: the wall a trial takes on a worker that ran the problem before, and the wall
    a first visit takes beyond its trials. A problem not yet visited takes the ratio seen over
    all of them; with nothing seen yet a visit costs nothing, as before this was learned, and
    the first visits teach it."""

    WEIGHT = 0.25  # of a new sample in the moving averages: a few batches settle it

    def __init__(self):
        self.trial_s: dict[ProblemKey, float] = {}
        self.inputs_s: dict[ProblemKey, float] = {}
        self.ratio: float | None = None
        self._early: dict[ProblemKey, list[tuple[int, float]]] = {}  # visits seen before a trial's time

    def learn(self, key: ProblemKey, sample: str, trials: int, wall_s: float) -> None:
        if sample == "trial":
            self.trial_s[key] = _moved(self.trial_s.get(key), wall_s / trials, self.WEIGHT)
            for early in self._early.pop(key, ()):
                self.learn(key, "visit", *early)
            return
        trial_s = self.trial_s.get(key)
        if not trial_s:
            # a problem's first visits come with its first rounds, before its home has timed a trial
            self._early.setdefault(key, []).append((trials, wall_s))
            del self._early[key][:-8]
            return
        inputs_s = max(0.0, wall_s - trials * trial_s)
        self.inputs_s[key] = _moved(self.inputs_s.get(key), inputs_s, self.WEIGHT)
        self.ratio = _moved(self.ratio, inputs_s / trial_s, self.WEIGHT)

    def trials(self, key: ProblemKey) -> float:
        """The inputs' cost of a first visit to `key`, in trial-times of `key`."""
        inputs_s, trial_s = self.inputs_s.get(key), self.trial_s.get(key)
        if inputs_s is not None and trial_s:
            return inputs_s / trial_s
        return self.ratio or 0.0

    def forget(self, key: ProblemKey) -> None:
        self.trial_s.pop(key, None)
        self.inputs_s.pop(key, None)
        self._early.pop(key, None)


def _moved(average: float | None, sample: float, weight: float) -> float:
    return sample if average is None else average + weight * (sample - average)


class _Away:
    """One fill's choice for a worker with nothing of its homes queued: the other queue whose
    next batch it would finish soonest ahead of that queue's home, or none. A home with `p`
    trials (queued and in flight) a worker holding the inputs of its next problem (the home and
    the workers lent it) ends its last in about `p` trial-times; this worker ends one in its
    own backlog, plus the problem's inputs where it lacks them (counted twice, see `choose`),
    plus one. An idle worker holding the inputs takes any trial still queued: the fill asked
    the home's idle workers first, so the trial would wait behind a busy one (with many
    holders `p` falls under one, and each idle holder declining left the round two deep on
    its home). The queues are ranked once a fill (a heap, refreshed as batches leave them): a
    fleet's idle workers would otherwise each scan every queue."""

    def __init__(self, trials: TrialQueue, queues: dict):
        self.trials, self.queues = trials, queues
        self.load: dict[tuple[str, ...], int] = {}  # home -> trials in flight on its workers
        self.heap: list | None = None
        self.absent: set[tuple] = set()  # (home, problem) with no batch near the queue's front

    def placed(self, homes: list, count: int) -> None:
        """A batch of `count` trials went to a worker of these homes."""
        for home in homes:
            if home in self.load:
                self.load[home] += count

    def pressure(self, home: tuple[str, ...]) -> float:
        """Trial-times the workers holding the inputs of the queue's next problem (its home and
        the workers lent it) take to end what the home holds, queued and in flight."""
        load = self.load.get(home)
        if load is None:
            slots = self.trials.by_name
            load = self.load[home] = sum(len(b.items) for name in home for b in slots[name].fifo)
        lent = self.trials.lent_to.get(_problem_of(self.queues[home][0]), 0)
        return (self.queues[home].trials + load) / (len(home) + lent)

    def _gain(self, home: tuple[str, ...]) -> float:
        """Trial-times a worker without the inputs and with nothing in flight would save."""
        return self.pressure(home) - self.trials.cost.trials(_problem_of(self.queues[home][0])) - 1.0

    def _best_without_inputs(self) -> tuple[tuple[str, ...] | None, float]:
        if self.heap is None:
            self.heap = [(-self._gain(h), i, h) for i, h in enumerate(self.queues) if h is not None and self.queues[h]]
            heapq.heapify(self.heap)
        while self.heap:
            stale, i, home = self.heap[0]
            if not self.queues[home]:
                heapq.heappop(self.heap)
                continue
            gain = self._gain(home)
            if gain != -stale:
                heapq.heapreplace(self.heap, (-gain, i, home))
                continue
            return home, gain
        return None, 0.0

    def choose(self, slot: _Slot, held: bool = False) -> tuple[tuple[str, ...] | None, _Pending | None]:
        """The queue `slot` should take its next batch from, that batch brought to its front; or
        none. `held`: among the problems whose inputs the worker holds (it ran their trials),
        at no inputs' cost; else the best for a worker without them (a fill asks `held` first)."""
        home, gain, at = None, 0.0, 0
        if not held:
            home, gain = self._best_without_inputs()
            if home is not None:
                # The inputs count twice: the worker is away from its own homes while it makes
                # them, and their cost is an average. Counted once, visits cost the simulated
                # fleet more than they saved (decision 015, "a visit weighed").
                gain -= self.trials.cost.trials(_problem_of(self.queues[home][0]))
        else:
            for key in self.trials.visited_by.get(slot.name, ()):
                mine = self.trials.home_of.get(key)
                queue_ = self.queues.get(mine) if mine is not None else None
                if not queue_ or (mine, key) in self.absent:
                    continue
                saved = self.pressure(mine) - (1.0 if slot.fifo else 0.0)  # idle: any queued trial
                if saved <= gain:
                    continue
                index = _index_of(queue_, key)
                if index is None:
                    self.absent.add((mine, key))  # not near the front: no batch of it this fill
                else:
                    home, gain, at = mine, saved, index
        if home is None or gain <= sum(len(b.items) for b in slot.fifo):
            return None, None
        self.queues[home].to_front(at)
        return home, self.queues[home]


def _index_of(pending: _Pending, key: ProblemKey, within: int = 32) -> int | None:
    """Where the first batch of `key` waits among the first `within` of `pending` (two tasks
    share a home's queue), or None."""
    for index, batch in enumerate(itertools.islice(pending, within)):
        if _problem_of(batch) == key:
            return index
    return None


class TrialQueue:
    """The pool's batch loop on a thread of its own, fed by several searches at once (a
    campaign's problems in parallel): `stream(jobs, home)`, from any thread, yields that call's
    results as they arrive, while every call's jobs share the workers, the guided batches and
    the failure rules. An error in the loop (a user's error, a WorkerFailure) is raised in
    every caller waiting and every later one; `close()` stops the loop.

    `home` (slot names: a problem's share of the workers) is where a call's jobs go first:
    its inputs, reference and compiled pipelines are there, and its guided batches are sized
    for it. Idle workers take one batch each before any worker takes a second (a round waits
    for its slowest worker). A worker with nothing of its homes queued takes another queue's
    next batch only where it would end it sooner than that queue's home, counting the inputs
    it would make first (`_VisitCost`, learned as trials run; `_Away`); `visited` names the
    workers outside its home that ran a problem's trials or were asked to make its inputs
    ahead (`lend`), which hold its inputs too and take its trials at no inputs' cost, and
    `release` forgets them once the problem is done. A call without a home is every worker's.
    Trials the failure rules send again go first, to any worker. `reserved(home)` lends a
    home's worker to other work that holds its GPU (a finalists' re-measurement): the loop
    gives it no batch meanwhile, which would only wait behind that work."""

    def __init__(self, pool: WorkerPool, topology: str | None = None):
        self.pool, self.slots = pool, pool._slots_for(topology)
        self.by_name = {slot.name: slot for slot in self.slots}  # slots are replaced in place
        # one queue wakes the loop: a caller's jobs, a batch's ref resolved, or None to stop
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._visited: dict[ProblemKey, set[str]] = {}  # written by the loop only, read elsewhere under the lock
        self._visited_lock = threading.Lock()
        # the loop's own: a worker's visits, a problem's home, the workers that ran it, what a visit costs
        self.visited_by: dict[str, set[ProblemKey]] = {}
        self.home_of: dict[ProblemKey, tuple[str, ...] | None] = {}
        self.lent_to: dict[ProblemKey, int] = {}  # workers lent a problem (`lend`), beside its home
        self.problems_of: dict[tuple[str, ...] | None, set[ProblemKey]] = {}  # home_of turned round
        self._ran: dict[ProblemKey, set[str]] = {}
        self.cost = _VisitCost()
        self._released: queue.SimpleQueue = queue.SimpleQueue()
        self._lent: queue.SimpleQueue = queue.SimpleQueue()
        self.placed = {"home": 0, "away": 0, "first visits": 0}  # trials, and batches that made inputs
        self._reserved: dict[str, int] = {}  # slot name -> holds of `reserved`; written under the lock
        self._reserved_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="trial-queue", daemon=True)
        self._thread.start()

    def stream(self, jobs: list[Job], home: Iterable[str] | None = None) -> Iterator[TrialResult]:
        if not jobs:
            return
        out: queue.SimpleQueue = queue.SimpleQueue()
        self._inbox.put((jobs, out, tuple(home) if home else None))
        for _ in range(len(jobs)):
            while True:
                if self._error is not None:
                    raise self._error
                try:
                    item = out.get(timeout=0.5)
                except queue.Empty:
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield item
                break

    def visited(self, kernel: str, problem: Problem, seed: int = 0) -> set[str]:
        """The workers outside the problem's home (or any, for jobs without one) that ran its
        trials or were lent it (`lend`)."""
        with self._visited_lock:
            return set(self._visited.get((kernel, problem.key(), seed), ()))

    def lend(self, kernel: str, problem: Problem, seed: int, names: Iterable[str]) -> None:
        """Workers outside the problem's home that were asked to make its inputs ahead: they
        take its trials as the workers that ran it do, at no inputs' cost, and `visited` (so
        `release`) names them."""
        self._lent.put(((kernel, problem.key(), seed), tuple(names)))

    def release(self, kernel: str, problem: Problem, seed: int = 0) -> set[str]:
        """`visited`, once the problem is done: the queue forgets what it kept of it."""
        key = (kernel, problem.key(), seed)
        self._released.put(key)
        with self._visited_lock:
            return set(self._visited.get(key, ()))

    @contextlib.contextmanager
    def reserved(self, home: Iterable[str] | None = None) -> Iterator[str]:
        """A worker of `home` (or any) for work that holds its GPU, kept from new batches until
        the block ends: the one with the fewest batches in flight among those not already held
        (in `home`'s order on a tie), so two tasks sharing a home re-measure side by side and
        the work starts behind as little as can be."""
        names = list(home) if home else [slot.name for slot in self.slots]
        with self._reserved_lock:
            # the loop owns each fifo: its length read from here is a hint, and a stale one costs only a wait
            name = min(names, key=lambda n: (self._reserved.get(n, 0), len(self.by_name[n].fifo)))
            self._reserved[name] = self._reserved.get(name, 0) + 1
        try:
            yield name
        finally:
            with self._reserved_lock:
                self._reserved[name] -= 1
                if not self._reserved[name]:
                    del self._reserved[name]
            self._inbox.put(_FREED)  # wake the loop: the worker takes batches again

    def close(self, error: BaseException | None = None) -> None:
        """Stop the loop; callers still waiting get `error` (default: a WorkerFailure)."""
        if self._error is None:
            self._error = error or WorkerFailure("the campaign's trial queue was closed")
        self._stop.set()
        self._inbox.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        pool, slots = self.pool, self.slots
        room = {slot.name: slot for slot in slots}
        arrivals = _Arrivals(self._inbox)
        queues: dict[tuple[str, ...] | None, _Pending] = {}  # by home, in arrival order
        homes: dict[str, list[tuple[str, ...]]] = {}  # slot name -> the homes it belongs to
        again, owner, routes = _Pending(), {}, {}  # again: what the failure rules send again
        numbers = itertools.count()
        checked = time.monotonic()
        try:
            while not self._stop.is_set():
                self._note_lent()  # before the releases: a problem lent and released since the last look ends forgotten
                self._forget_released()
                self._fill(room, queues, homes, again, owner, arrivals)
                for event in arrivals.wait(_POLL_S):
                    if isinstance(event, tuple):  # a caller's jobs
                        jobs, out, home = event
                        if home not in queues:
                            queues[home] = _Pending()
                            for name in home or ():
                                homes.setdefault(name, []).append(home)
                        last = None
                        for job in jobs:
                            index = next(numbers)
                            routes[index] = out
                            queues[home].append(_Batch([(index, job)]))
                            if job.problem is not last:
                                key = _problem_key(job)
                                self.home_of[key] = home
                                self.problems_of.setdefault(home, set()).add(key)
                                last = job.problem
                    elif event is not None and event in owner:
                        slot = owner[event]
                        batch = next(b for b in slot.fifo if b.ref == event)
                        generation, oldest, ended = slot.generation, batch is slot.fifo[0], time.monotonic()
                        for index, result in pool._collect(slot, event, again, owner):
                            routes.pop(index).put(result)
                        if slot.generation == generation and batch not in slot.fifo:
                            self._ran_batch(slot, batch, oldest, ended)
                        room[slot.name] = slot
                if time.monotonic() - checked >= _POLL_S:
                    checked = time.monotonic()
                    for slot in slots:
                        if slot.fifo and pool._overdue(slot.fifo[0]):
                            for index, result in pool._on_timeout(slot, again, owner):
                                routes.pop(index).put(result)
                            room[slot.name] = slot
        except BaseException as exc:  # noqa: BLE001 - handed to every caller, raised there
            self._error = exc
            for out in {id(out): out for out in routes.values()}.values():
                out.put(exc)

    def _fill(self, room: dict, queues: dict, homes: dict, again: _Pending, owner: dict, arrivals: _Arrivals) -> None:
        """WorkerPool._fill with homes: each worker with room takes from what is sent again,
        then its homes' queues, then another queue where that is sooner (`_Away`); idle
        workers first, one batch each, so a round smaller than the idle workers runs one
        trial deep."""
        waiting = again.trials + sum(q.trials for q in queues.values())
        if not waiting:
            return
        pool = self.pool
        away = _Away(self, queues)
        shared: set[str] = set()  # took its round's share: no second batch in this fill
        # Idle workers first, one batch each (from their homes, then from another queue: those
        # holding its inputs first), then every worker up to max_in_flight, the same way: a
        # worker holding two trials of a round while another idles would make the round two
        # trials long, and a visitor that holds a problem's inputs costs it nothing.
        passes = ((1, "own"), (1, "held"), (1, "any"), (pool.max_in_flight, "held"), (pool.max_in_flight, "any"))
        holders = None  # workers that ran a problem with trials queued: the "held" passes' only askers
        for depth, where in passes:
            if where == "held" and holders is None:
                holders = self._holders(queues)
            for slot in [room[n] for n in holders if n in room] if where == "held" else list(room.values()):
                if slot.name in self._reserved:
                    continue
                while waiting and len(slot.fifo) < depth and slot.name not in shared:
                    home, source = self._source(slot, queues, homes, again, where, away)
                    if source is None or _kept_apart(slot, source[0]):
                        break
                    batch = pool._take(source, len(home) if home else len(self.slots))
                    waiting -= len(batch.items)
                    self._classify(slot, batch, home, source is again)
                    batch.ref = slot.actor.evaluate.remote(JobBatch(job for _, job in batch.items))
                    batch.started = time.monotonic()
                    slot.fifo.append(batch)
                    owner[batch.ref] = slot
                    arrivals.watch(batch)
                    away.placed(homes.get(slot.name, ()), len(batch.items))
                    if batch.share:
                        shared.add(slot.name)
                if len(slot.fifo) >= pool.max_in_flight:
                    del room[slot.name]
                if not waiting:
                    return

    def _source(
        self, slot: _Slot, queues: dict, homes: dict, again: _Pending, where: str = "any", away: _Away | None = None
    ) -> tuple[tuple | None, _Pending | None]:
        """Where `slot` takes its next batch: what is sent again, its homes' queues, then
        (where "held" or "any") the calls without a home, then another home's queue where
        `away` finds one worth it ("held": only a problem it holds the inputs of); (None,
        None) for none."""
        if again:
            return None, again
        for home in homes.get(slot.name, ()):
            if queues[home]:
                return home, queues[home]
        if where == "own":
            return None, None
        if queues.get(None):
            return None, queues[None]
        return (away or _Away(self, queues)).choose(slot, held=where == "held")

    def _holders(self, queues: dict) -> set[str]:
        """The workers outside its home that ran a problem which has trials queued."""
        names: set[str] = set()
        for home, pending in queues.items():
            if home is not None and pending:
                for key in self.problems_of.get(home, ()):
                    names |= self._visited.get(key, set())
        return names

    def _classify(self, slot: _Slot, batch: _Batch, home: tuple | None, again: bool) -> None:
        """Count where `batch` runs, note a visit, and mark a first visit alone on its worker:
        its wall is the inputs' cost and its trials'."""
        key = _problem_of(batch)
        if not again and home is not None and slot.name in home:
            self.placed["home"] += len(batch.items)
            return
        self.placed["away"] += len(batch.items)
        if slot.name not in self._visited.get(key, ()):
            self.placed["first visits"] += 1
            if not slot.fifo and not again:
                batch.sample = "visit"  # alone on its worker: its wall is the inputs and its trials
        for _, job in batch.items:
            self._note_visit(slot.name, _problem_key(job))

    def _ran_batch(self, slot: _Slot, batch: _Batch, oldest: bool, ended: float) -> None:
        """`batch` ended on `slot`; `oldest`: it was the worker's oldest batch, so its clock ran
        from when the one before it ended (a later batch ending first waited behind it)."""
        key = _problem_of(batch)
        ran = self._ran.setdefault(key, set())
        # a trial's time: a batch behind one of the same problem on this worker, which made the inputs
        sample = batch.sample or ("trial" if slot.name in ran else "")
        if sample and oldest and all(_problem_key(j) == key for _, j in batch.items[1:]):
            self.cost.learn(key, sample, len(batch.items), ended - batch.started)
        ran.add(slot.name)

    def _note_visit(self, name: str, key: ProblemKey) -> None:
        if name in self._visited.get(key, ()):
            return
        with self._visited_lock:
            self._visited.setdefault(key, set()).add(name)
        self.visited_by.setdefault(name, set()).add(key)

    def _note_lent(self) -> None:
        while True:
            try:
                key, names = self._lent.get_nowait()
            except queue.Empty:
                return
            for name in names:
                self._note_visit(name, key)
            self.lent_to[key] = self.lent_to.get(key, 0) + len(names)

    def _forget_released(self) -> None:
        while True:
            try:
                key = self._released.get_nowait()
            except queue.Empty:
                return
            with self._visited_lock:
                names = self._visited.pop(key, ())
            for name in names:
                self.visited_by.get(name, set()).discard(key)
            self._ran.pop(key, None)
            self.lent_to.pop(key, None)
            self.problems_of.get(self.home_of.pop(key, None), set()).discard(key)
            self.cost.forget(key)


class WorkerPool:
    """Ray workers, one per GPU, and the batch loop and failure rules (module docstring)."""

    def __init__(
        self,
        ray_address: str | None = None,
        allow_cpu: bool = False,
        trial_timeout_s: float = 60.0,
        max_in_flight: int = 2,
        max_retries: int = 2,
        cpu_workers: int | None = None,
        num_cpus: int | None = None,
        compile_ahead: bool = True,
        startup_timeout_s: float = 300.0,
        gpus: int | None = None,
        connect_timeout_s: float | None = None,
    ):
        import ray

        if (
            trial_timeout_s <= 0
            or max_in_flight < 1
            or max_retries < 0
            or (cpu_workers is not None and cpu_workers < 1)
            or (gpus is not None and gpus < 1)
        ):
            raise ValueError(
                f"bad pool settings: trial_timeout_s={trial_timeout_s}, max_in_flight={max_in_flight}, "
                f"max_retries={max_retries}, cpu_workers={cpu_workers}, gpus={gpus}"
            )
        self._ray = ray
        self.allow_cpu = allow_cpu
        self.trial_timeout_s = float(trial_timeout_s)
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.compile_ahead = compile_ahead
        self.startup_timeout_s = startup_timeout_s
        self._owns_ray = init_ray(ray_address, num_cpus, connect_timeout_s)
        resources = ray.cluster_resources()
        self.gpus = int(resources.get("GPU", 0))
        if gpus is not None and self.gpus > gpus:
            self.gpus = gpus  # use only `gpus` of the cluster's GPUs (scaling measurements)
        if self.gpus == 0 and not allow_cpu:
            self.shutdown()
            raise CpuAdapterRefused(
                f"the Ray cluster has no GPUs (resources: {_resources_text(resources)}); "
                "pass --allow-cpu to tune on a CPU adapter such as lavapipe"
            )
        count = self.gpus or cpu_workers or _cpu_nodes(ray.nodes())
        self._slots = {f"w{i}": _Slot(f"w{i}") for i in range(count)}
        self.replacements = 0
        try:
            self._start_all()
        except Exception:
            self.shutdown()
            raise

    # -- membership ------------------------------------------------------------------
    def _actor_class(self):
        # CPU workers spread over the nodes (one per node by default), as GPU workers follow the GPUs.
        options = {"num_gpus": 1, "num_cpus": 1} if self.gpus else {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
        return self._ray.remote(GpuWorker).options(
            max_restarts=0, max_task_retries=0, max_concurrency=ACTOR_THREADS, **options
        )

    def _start_all(self) -> None:
        cls = self._actor_class()
        for slot in self._slots.values():
            slot.actor = cls.remote(slot.worker_id, self.allow_cpu, self.compile_ahead)
        for slot in self._slots.values():
            self._await_report(slot)

    def _await_report(self, slot: _Slot) -> None:
        ref = slot.actor.report.remote()
        ready, _ = self._ray.wait([ref], timeout=self.startup_timeout_s)
        if not ready:
            raise WorkerFailure(f"worker {slot.worker_id} did not start within {self.startup_timeout_s:.0f} s")
        try:
            slot.report = self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            raise_users_error(exc)  # GpuWorker.startup_error: no adapter for it
            raise
        refuse_cpu(slot.profile, self.allow_cpu, f"tune with worker {slot.worker_id}")

    def _replace(self, slot: _Slot) -> None:
        """Kill `slot`'s actor (if still alive) and start a fresh one in its place."""
        try:
            self._ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - the actor may already be gone
            pass
        slot.fifo.clear()
        slot.generation += 1
        self.replacements += 1
        slot.actor = self._actor_class().remote(slot.worker_id, self.allow_cpu, self.compile_ahead)
        self._await_report(slot)

    def profiles(self) -> dict[str, HardwareProfile]:
        """{worker slot: HardwareProfile} as each worker reported it."""
        return {name: slot.profile for name, slot in self._slots.items()}

    def reports(self) -> dict[str, dict]:
        """Each worker's report: host, pid, profile, topology hash and adapter mapping."""
        return {name: dict(slot.report) for name, slot in self._slots.items()}

    def stage_times(self) -> dict[str, dict]:
        """{worker slot: its TrialRunner.stage_times()} for the live workers."""
        slots = list(self._slots.values())
        refs = [slot.actor.stage_times.remote() for slot in slots]
        return {slot.name: times for slot, times in zip(slots, self._ray.get(refs), strict=True)}

    def topologies(self) -> dict[str, list[str]]:
        """{topology hash: worker slots}: a campaign tunes each topology separately."""
        groups: dict[str, list[str]] = {}
        for name, slot in self._slots.items():
            groups.setdefault(slot.report["topology_hash"], []).append(name)
        return groups

    def worker_id(self, slot: str) -> str:
        """The current actor's id for `slot` (it changes when the actor is replaced)."""
        return self._slots[slot].worker_id

    # -- trials ----------------------------------------------------------------------
    def stream(
        self, jobs: list[Job], topology: str | None = None, batch_size: int | None = None
    ) -> Iterator[TrialResult]:
        """Run `jobs` on the workers of `topology` (all workers when None); yield results as they arrive."""
        for _, result in self._run(jobs, self._slots_for(topology), batch_size):
            yield result

    def evaluate(self, worker_id: str, jobs: list[Job], batch_size: int | None = None) -> list[TrialResult]:
        """Run `jobs` on one worker slot; results in job order."""
        if worker_id not in self._slots:
            raise ValueError(f"unknown worker {worker_id!r}; have {sorted(self._slots)}")
        results: dict[int, TrialResult] = dict(self._run(jobs, [self._slots[worker_id]], batch_size))
        return [results[i] for i in range(len(jobs))]

    def _chosen(self, topology: str | None, slots: Iterable[str] | None) -> list[_Slot]:
        """Those `slots` by name, else every slot of `topology` (`_slots_for`)."""
        return self._slots_for(topology) if slots is None else [self._slots[name] for name in slots]

    def _slots_for(self, topology: str | None) -> list[_Slot]:
        if topology is None:
            return list(self._slots.values())
        names = self.topologies().get(topology)
        if not names:
            raise ValueError(f"no worker has topology {topology!r}; have {sorted(self.topologies())}")
        return [self._slots[n] for n in names]

    # -- the batch loop and failure rules (module docstring) ---------------------------
    def _run(self, jobs: list[Job], slots: list[_Slot], batch_size: int | None) -> Iterator[tuple[int, TrialResult]]:
        """Batches of `batch_size`, or guided: each batch takes its share of what is left,
        ceil(left / (workers x in-flight)) clamped to 1..MAX_BATCH, so workers get large
        batches while plenty is left and single trials at the end, where a fixed size left
        some GPUs idle behind the last full batches. From SHARE_WORKERS workers, where each
        worker's share of what is left is at most its in-flight count, that share goes as one
        batch (one call, not one per trial) and the worker takes no second one in that fill."""
        indexed = list(enumerate(jobs))
        size = batch_size or 1
        pending = _Pending(_Batch(indexed[i : i + size]) for i in range(0, len(indexed), size))
        owner: dict[Any, _Slot] = {}
        room = {slot.name: slot for slot in slots}
        arrivals = _Arrivals()
        guided = batch_size is None
        checked = time.monotonic()
        while pending or owner:
            self._fill(room, pending, owner, guided, arrivals, len(slots))
            ready = arrivals.wait(_POLL_S)  # every batch back by now, in one pass: a fleet answers many at once
            for ref in ready:
                if ref in owner:
                    slot = owner[ref]
                    yield from self._collect(slot, ref, pending, owner)
                    room[slot.name] = slot
            if time.monotonic() - checked >= _POLL_S or not ready:  # timeouts are seconds: no scan per result
                checked = time.monotonic()
                for slot in slots:
                    if slot.fifo and self._overdue(slot.fifo[0]):
                        yield from self._on_timeout(slot, pending, owner)
                        room[slot.name] = slot

    def _fill(
        self,
        slots: list[_Slot] | dict[str, _Slot],
        pending: deque,
        owner: dict,
        guided: bool = False,
        arrivals: _Arrivals | None = None,
        workers: int | None = None,
    ) -> None:
        """Send `pending` batches to `slots` with room; `slots` may be the loop's room (the slots
        by name that may take a batch): a full one leaves it, so a fill costs what was freed."""
        if not pending:
            return
        workers = workers or len(slots)
        for slot in list(slots.values() if isinstance(slots, dict) else slots):
            if not pending:
                return
            while pending and len(slot.fifo) < self.max_in_flight and not _kept_apart(slot, pending[0]):
                batch = self._take(pending, workers) if guided else pending.popleft()
                batch.ref = slot.actor.evaluate.remote(JobBatch(job for _, job in batch.items))
                batch.started = time.monotonic()
                slot.fifo.append(batch)
                owner[batch.ref] = slot
                if arrivals is not None:
                    arrivals.watch(batch)
                if batch.share:
                    break
            if isinstance(slots, dict) and len(slot.fifo) >= self.max_in_flight:
                del slots[slot.name]

    def _take(self, pending: _Pending, workers: int) -> _Batch:
        """The next batch: single fresh trials at the head of `pending` merged up to the
        guided size; a retried or split-off trial goes alone."""
        first = pending.popleft()
        if first.alone or first.retries:
            return first
        left = len(first.items) + pending.trials
        # a wide round's share per worker, from the whole round: what is left shrinks as it is handed out
        per_worker = -(-max(left, pending.round) // workers)
        share = workers >= SHARE_WORKERS and per_worker <= self.max_in_flight
        # With one worker too: results stream back (progress, resume after a kill) in halves.
        want = per_worker if share else max(1, min(MAX_BATCH, -(-left // (workers * self.max_in_flight))))
        items = list(first.items)
        while pending and len(items) < want and not pending[0].alone and not pending[0].retries:
            items += pending.popleft().items
        return _Batch(items, share=share)

    def _overdue(self, batch: _Batch) -> bool:
        return time.monotonic() - batch.started > self.trial_timeout_s * len(batch.items)

    def _collect(self, slot: _Slot, ref, pending: deque, owner: dict) -> Iterator[tuple[int, TrialResult]]:
        ray = self._ray
        batch = next(b for b in slot.fifo if b.ref == ref)
        answer = batch.answer
        try:
            # the future's value when it has one; an error is read through ray.get, as it types it
            ok = answer is not None and answer.done() and answer.exception() is None
            results = answer.result() if ok else ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            yield from self._on_death(slot, pending, owner)
            return
        except ray.exceptions.RayTaskError as exc:
            raise_users_error(exc)
            raise WorkerFailure(f"worker {slot.worker_id} raised: {exc}") from exc
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

    # -- inputs ahead and behind ------------------------------------------------------
    def prefetch(
        self,
        kernel: str,
        problem: Problem,
        seed: int = 0,
        topology: str | None = None,
        slots: Iterable[str] | None = None,
    ) -> None:
        """Ask the workers (of `topology`, or only those `slots`) to generate `problem`'s inputs
        and reference in the background (TrialRunner.prefetch); returns at once. A worker
        replaced meanwhile, or one not asked, just generates them at its first trial."""
        for slot in self._chosen(topology, slots):
            slot.actor.prefetch.remote(kernel, problem, seed)

    def precompile(
        self,
        kernel: str,
        problem: Problem,
        schedules: list,
        seed: int = 0,
        topology: str | None = None,
        slots: list[str] | None = None,
    ) -> None:
        """Ask the workers (of `topology`, or only those `slots`) to compile these schedules'
        pipelines ahead (TrialRunner.precompile: the search's likely next picks); returns at once."""
        for slot in self._chosen(topology, slots):
            slot.actor.precompile.remote(kernel, problem, schedules, seed)

    def forget(
        self,
        kernel: str,
        problem: Problem,
        seed: int = 0,
        topology: str | None = None,
        slots: Iterable[str] | None = None,
    ) -> None:
        """Ask the workers (of `topology`, or only those `slots`) to drop `problem`'s inputs and
        buffers (TrialRunner.forget); returns at once."""
        for slot in self._chosen(topology, slots):
            slot.actor.forget.remote(kernel, problem, seed)

    def inputs_held(self, worker_id: str) -> list[tuple[str, str, int]]:
        """The (kernel, problem key, seed) whose inputs that worker holds now."""
        return self._ray.get(self._slots[worker_id].actor.inputs_held.remote())

    # -- other work ------------------------------------------------------------------
    def remeasure_rounds(
        self,
        worker_id: str,
        kernel: str,
        problem: Problem,
        schedules: list[Schedule],
        reps: int = 10,
        rounds: int = 5,
        seed: int = 0,
        max_rounds: int | None = None,
        noise: float = 0.01,
    ) -> dict[str, list[float] | None]:
        """Per-round medians of an interleaved re-measurement, with rounds added up to
        `max_rounds` for finalists not yet separated (TrialRunner.remeasure_rounds).

        Raises WorkerFailure when it runs past the trial timeout per schedule and round
        (counted over `max_rounds`; the worker is replaced) or the worker dies."""
        slot = self._slots[worker_id]
        ref = slot.actor.remeasure_rounds.remote(kernel, problem, schedules, reps, rounds, seed, max_rounds, noise)
        limit = self.trial_timeout_s * max(1, len(schedules)) * max(rounds, max_rounds or 0)
        ready, _ = self._ray.wait([ref], timeout=limit)
        if not ready:
            self._replace(slot)
            raise WorkerFailure(f"re-measuring {kernel} {problem} exceeded {limit:.0f} s")
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayActorError as exc:
            self._replace(slot)
            raise WorkerFailure(f"worker {worker_id} died re-measuring {kernel} {problem}") from exc

    def map(self, fn: Callable[[Device, Any], Any], items: Iterable[Any], topology: str | None = None) -> Iterator[Any]:
        """Run picklable `fn(device, item)` on the workers (of `topology`), at most
        `max_in_flight` per worker, yielding results as they arrive (not in item order).
        Exceptions raised by `fn` propagate."""
        slots = self._slots_for(topology)
        queue = deque(items)
        owner: dict[Any, _Slot] = {}
        load = {slot.name: 0 for slot in slots}
        while queue or owner:
            for slot in slots:
                while queue and load[slot.name] < self.max_in_flight:
                    owner[slot.actor.run.remote(fn, queue.popleft())] = slot
                    load[slot.name] += 1
            ready, _ = self._ray.wait(list(owner), num_returns=1)
            for ref in ready:
                load[owner.pop(ref).name] -= 1
                yield self._ray.get(ref)

    def shutdown(self) -> None:
        """Stop the workers; stop Ray too when this pool started it."""
        for slot in getattr(self, "_slots", {}).values():
            if slot.actor is not None:
                try:
                    self._ray.kill(slot.actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
                slot.actor = None
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns_ray = False

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def _kept_apart(slot: _Slot, head: _Batch) -> bool:
    """Whether `head` must wait for `slot` to empty: a retried or split-off batch runs alone
    on its worker, and nothing joins one, so a fault during it is its own."""
    return bool(slot.fifo) and (head.alone or any(batch.alone for batch in slot.fifo))


def _cpu_nodes(nodes: list[dict]) -> int:
    """How many live Ray nodes can hold a CPU worker (at least 1: a worker that can't be placed
    times out with the startup error rather than the pool having no slot)."""
    return max(1, sum(1 for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1))


def _resources_text(resources: dict) -> str:
    keep = {k: v for k, v in resources.items() if not k.startswith("node:") and "memory" not in k}
    return ", ".join(f"{k}={v:g}" for k, v in sorted(keep.items())) or "none"


# -- the worker side: the actor on each GPU ------------------------------------------


def pick_adapter(gpu_ids: list, allow_cpu: bool) -> tuple[Any, dict]:
    """The wgpu adapter for this worker and a record of how it was chosen.

    Ray only sets CUDA_VISIBLE_DEVICES, which Vulkan ignores, so with Ray GPU id N we take
    the N-th GPU adapter of the preferred backend in driver enumeration order (PCI order
    on NVIDIA), and cross-check its name against `nvidia-smi` when that is available.
    """
    adapters = enumerate_adapters()
    gpus = [a for a in adapters if a.info.get("adapter_type") != "CPU"]
    if gpu_ids:
        if not gpus:
            raise RuntimeError(f"Ray assigned GPU ids {gpu_ids} but wgpu sees no GPU adapter")
        backend = gpus[0].info.get("backend_type")
        same_backend = [a for a in gpus if a.info.get("backend_type") == backend]
        index = int(gpu_ids[0])
        if index >= len(same_backend):
            raise RuntimeError(f"Ray GPU id {index} but only {len(same_backend)} {backend} GPU adapters")
        adapter = same_backend[index]
        mapping = {"ray_gpu_ids": [str(g) for g in gpu_ids], "adapter_index": index, "gpu_adapters": len(same_backend)}
        mapping |= _nvidia_smi_crosscheck(index, adapter.info.get("device", ""))
        return adapter, mapping
    from farm.gpu import choose_adapter

    adapter = choose_adapter()
    refuse_cpu(HardwareProfile.from_adapter(adapter), allow_cpu, "tune")
    return adapter, {"ray_gpu_ids": [], "adapter_index": None, "gpu_adapters": len(gpus)}


def _nvidia_smi_crosscheck(index: int, adapter_name: str) -> dict:
    gpus = nvidia.query_gpus(("index", "pci.bus_id", "uuid", "name"), timeout_s=NVIDIA_SMI_TIMEOUT_S)
    row = next((g for g in gpus or [] if g["index"] == str(index)), None)
    if row is None:
        return {"nvidia_smi": None}
    name = row["name"]
    return {
        "nvidia_smi": {"index": row["index"], "pci_bus_id": row["pci.bus_id"], "uuid": row["uuid"], "name": name},
        "name_matches": name.lower().replace("nvidia ", "") in adapter_name.lower(),
    }


def _placement(mapping: dict) -> dict:
    """Which GPU this process really holds a context on (nvidia-smi's process list), once the
    device exists; `placement_ok` says whether it is the GPU Ray assigned."""
    expected = (mapping.get("nvidia_smi") or {}).get("uuid")
    if not expected:
        return {}
    apps = nvidia.compute_apps(("pid", "gpu_uuid"), timeout_s=NVIDIA_SMI_TIMEOUT_S)
    if apps is None:
        return {"placement_uuid": None}
    mine = [app["gpu_uuid"] for app in apps if app["pid"] == str(os.getpid())]
    return {"placement_uuids": mine, "placement_ok": mine == [expected] if mine else None}


class GpuWorker:
    """Holds one Device (and its pipeline + input caches) for the actor's whole life.
    Runs as a threaded actor: its methods may run concurrently (see ACTOR_THREADS)."""

    def __init__(self, worker_id: str, allow_cpu: bool = False, compile_ahead: bool = True):
        import ray

        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
        gpu_ids = list(ray.get_gpu_ids()) if ray.is_initialized() else []
        self.worker_id = worker_id
        # No adapter for this worker (FARM_ADAPTER naming none, no GPU): the user's setup, not
        # a crash. report(), the driver's first call, raises it, and the pool passes it on
        # as itself (an actor that raised in __init__ only dies, with its error as text).
        self.startup_error: Exception | None = None
        # Seconds of each start-up step: the worker line prints them, since start-up is a
        # visible share of a short campaign's wall time.
        marks = [time.perf_counter()]
        try:
            adapter, mapping = pick_adapter(gpu_ids, allow_cpu)
        except (NoAdapterError, CpuAdapterRefused) as exc:
            self.startup_error = exc
            return
        marks.append(time.perf_counter())
        self.runner = TrialRunner(Device(adapter), worker_id, compile_ahead)
        marks.append(time.perf_counter())
        placement = _placement(mapping)
        marks.append(time.perf_counter())
        names = ("adapter", "device", "placement")
        steps = {name: marks[i + 1] - marks[i] for i, name in enumerate(names)}
        self.mapping = mapping | {"adapter": adapter.summary} | placement | {"startup_s": steps}

    def report(self) -> dict:
        if self.startup_error is not None:
            raise self.startup_error
        profile = self.runner.device.profile
        return {
            "worker_id": self.worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "profile": profile.to_dict(),
            "topology_hash": profile.topology_hash(),
            "mapping": self.mapping,
        }

    def evaluate(self, jobs: list[Job]) -> list[TrialResult]:
        return self.runner.evaluate(jobs)

    def remeasure_rounds(
        self,
        kernel: str,
        problem: Problem,
        schedules: list[Schedule],
        reps: int,
        rounds: int,
        seed: int = 0,
        max_rounds: int | None = None,
        noise: float = 0.01,
    ) -> dict[str, list[float] | None]:
        return self.runner.remeasure_rounds(kernel, problem, schedules, reps, rounds, seed, max_rounds, noise)

    def prefetch(self, kernel: str, problem: Problem, seed: int = 0) -> None:
        self.runner.prefetch(kernel, problem, seed)  # returns at once; see TrialRunner.prefetch

    def forget(self, kernel: str, problem: Problem, seed: int = 0) -> None:
        self.runner.forget(kernel, problem, seed)  # returns at once; see TrialRunner.forget

    def precompile(self, kernel: str, problem: Problem, schedules: list, seed: int = 0) -> int:
        return self.runner.precompile(kernel, problem, schedules, seed)  # returns at once

    def inputs_held(self) -> list[tuple[str, str, int]]:
        return self.runner.inputs_held()

    def stage_times(self) -> dict:
        return self.runner.stage_times()

    def run(self, fn: Callable[[Device, Any], Any], item: Any) -> Any:
        with self.runner.exclusive() as device:  # never beside another call's GPU work
            return fn(device, item)
