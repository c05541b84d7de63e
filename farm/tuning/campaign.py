"""The campaign: kernels x problems x schedule candidates, per topology, into SQL + Parquet.

For every topology the pool's workers report, the campaign plans one task per (kernel,
problem) (farm.tuning.tasks) and runs each through the tuning engine (farm.tuning.engine:
search, re-measurement of the finalists, the winner and its decision), with the pool's
workers of that topology as the engine's trial runner and the database as its trial log.
Trials already in the database are replayed, not run again, which is what makes a re-run of
a killed campaign resume where it stopped. Results are recorded as they arrive
(farm.tuning.recording). While a task runs, the workers generate the inputs and references
of the next PREFETCH_AHEAD tasks in the background (beside other problems, each task's home
as it starts: `_tune_parallel`), and drop a task's once its winner is stored. Each task's
trials, caps and seconds of search and re-measurement go to the campaign summary ("tasks",
"totals") and one stderr line. `tune` runs one campaign end to end; what it prints is
farm.tuning.report's.

Lifecycle: the campaign row's heartbeat_at is written with its progress counters (replayed
trials included) in each recorder flush's transaction, after each task, and by a `Heartbeat` thread at
least every HEARTBEAT_S, so a driver that was killed shows as interrupted once its heartbeat
is older than farm.store.repo.STALE_AFTER_S. The driver also holds a lock that dies with it
(farm.tuning.driver_lock), so a campaign of this machine whose driver was killed is known
dead at once. The next campaign marks dead campaigns interrupted in SQL, at its start (a
re-run right after a kill marks the killed one before it resumes its trials) and every
SWEEP_S while it runs, one stderr line each, and writes their trials that Parquet lacks
(the killed driver's unwritten buffer) back from SQL
(farm.store.compaction.restore_campaigns). Ctrl-C finishes a campaign as interrupted, any
other exception as failed. `tune` holds each local GPU's lock (farm.tuning.device_lock)
while it runs.

This is one idea in one module, over the line count: one campaign's run, whose tasks, their
places on the homes, their inputs ahead and the campaign row's lifecycle share the row, the
recorder and the homes.
"""

from __future__ import annotations

import functools
import gc
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from farm import store
from farm.gpu import HardwareProfile
from farm.store import WinnerRecord
from farm.store import parquet as artifacts
from farm.store.compaction import restore_campaigns
from farm.store.repo import STALE_AFTER_S, interrupt_stale_campaigns
from farm.trial import TrialResult
from farm.tuning import driver_lock
from farm.tuning.device_lock import device_locks
from farm.tuning.engine import tune_problem
from farm.tuning.heartbeat import Heartbeat
from farm.tuning.pool_executor import PoolExecutor
from farm.tuning.recording import TrialRecorder
from farm.tuning.report import Progress, format_stage_times, format_task_totals, format_workers, problem_line
from farm.tuning.tasks import Task, TuneConfig, notice_cpu, plan
from farm.tuning.trial_logs import StoreLog
from farm.tuning.workers import TrialQueue, WorkerPool

# Tasks ahead whose inputs and reference the workers generate in the background: one ahead
# left a GPU idle before a problem whose inputs take longer than the previous problem's
# trials; two ahead give each generation two problems' time.
PREFETCH_AHEAD = 2
HEARTBEAT_S = 10.0  # the most a running campaign's row goes without a write (well under STALE_AFTER_S)
assert HEARTBEAT_S * 3 <= STALE_AFTER_S
SWEEP_S = STALE_AFTER_S / 2  # how often a running campaign looks for dead ones to mark interrupted
# Workers one problem's search keeps busy (its home): a topology with at least twice this many
# tunes problems on len(workers) // PROBLEM_WORKERS homes at once (one GPU, or a few, tune one
# at a time, as before: the same seeds give the same searches and winners).
PROBLEM_WORKERS = 8
# Tasks sharing a home at once: while one waits for its round's slowest trial, re-measures its
# finalists on one worker or refits its models, the other's trials keep the home's GPUs busy.
TASKS_PER_HOME = 2
# Home shares a running task is lent, at most, once no task is left to start: the campaign ends
# with its last tasks' rounds (2 x PROBLEM_WORKERS trials), which would otherwise queue on their
# busy home while freed workers idle.
SPARE_LENT = 2


@functools.cache  # once a process: froze at every campaign, `farm serve` would keep each one's garbage cycles
def _freeze_driver_heap() -> None:
    """What the driver holds as its first campaign starts (modules, Ray's client) leaves the
    collector's full passes: ~0.18 s each, a few a large campaign (docs/performance.md)."""
    gc.freeze()


class Campaign:
    """One run of `farm tune`: owns the progress, the campaign row and the trial recorder."""

    def __init__(
        self,
        config: TuneConfig,
        pool: WorkerPool,
        db: store.Store,
        out: Path,
        command: str,
        verbose: bool = False,
        more: Callable[[int], list[Task]] | None = None,
        ended: Callable[[Task, WinnerRecord | None], None] | None = None,
    ):
        """`more(count)` (with problems in parallel): up to `count` further tasks of the same
        topology, asked for whenever homes are free and the planned tasks have all started
        (`farm serve` claims more requests there); `ended(task, winner)`: each such task's
        outcome as it ends, before the campaign does."""
        self.config, self.pool, self.db, self.out, self.command = config, pool, db, out, command
        self.more, self.ended = more, ended
        self.verbose = verbose  # the plan's and the search's totals too
        self.recorder: TrialRecorder | None = None
        self.campaign_id = 0
        self.progress: Progress | None = None
        self.heartbeat: Heartbeat | None = None
        self.tasks: list[dict] = []  # per (kernel, problem): trials, caps, search and re-measurement cost
        self.siblings: dict[tuple[str, str], list[str]] = {}  # (topology, kernel): this campaign's winner keys
        # the tasks whose inputs the workers were asked for and have not dropped yet, by _task_key
        self._prefetched: dict[tuple[str, str, str], Task] = {}
        # beside other problems (_tune_parallel): each task's share of the workers, and their queue
        self._homes: dict[tuple[str, str, str], list[str]] = {}
        # the workers beside its home asked for each task's inputs: the next home, and spare shares
        # lent it (_lend_spare, under _lending: a task dropping its inputs is lent none after)
        self._neighbours: dict[tuple[str, str, str], list[str]] = {}
        self._lending = threading.Lock()
        self._dropping: set[tuple[str, str, str]] = set()
        self._queue: TrialQueue | None = None

    def run(self) -> list[WinnerRecord]:
        _freeze_driver_heap()
        topologies = self.pool.topologies()
        profiles = self.pool.profiles()
        tasks: list[Task] = []
        for topology, slots in topologies.items():
            profile = profiles[slots[0]]
            store.upsert_topology(self.db, profile)
            tasks += plan(self.config, topology, profile)
            notice_cpu(profile, [t for t in tasks if t.topology == topology])
        total = sum(t.trials for t in tasks)
        excluded = sum(t.excluded for t in tasks)
        if excluded and self.verbose:
            print(f"plan: {total} trials; {excluded} schedules of the spaces left out before running, as their "
                  "kernel's checks rule them out for their problem on this adapter", file=sys.stderr)  # fmt: skip
        self._interrupt_stale()
        self.campaign_id = store.start_campaign(
            self.db, self.command, self.config.strategy, self.config.budget, self.config.reps, total
        )
        lock = driver_lock.hold(self.db, self.campaign_id, self.out)
        self.progress = Progress(total)
        self.heartbeat = Heartbeat(self._update_campaign, HEARTBEAT_S, self._interrupt_stale, SWEEP_S).start()
        self.recorder = TrialRecorder(self.db, self.campaign_id, self.out, self._counts, self.heartbeat.writing)
        try:
            winners, task = [], None
            for topology, slots in topologies.items():
                group = [t for t in tasks if t.topology == topology]
                homes = min(len(group), len(slots) // PROBLEM_WORKERS)  # fewer problems: wider homes, wider rounds
                if homes > 1:
                    winners += self._tune_parallel(group, profiles, homes)
                    continue
                for index, task in enumerate(group):
                    ahead = group[index + 1 : index + 1 + PREFETCH_AHEAD]
                    if (winner := self._tune(task, profiles, ahead)) is not None:
                        winners.append(winner)
                task = None
        except BaseException as exc:
            self._drop_held(task)
            self.heartbeat.stop()
            try:
                self.recorder.close()
                self._update_campaign()
                status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                store.finish_campaign(self.db, self.campaign_id, status)
            finally:  # also when the store is still unreachable: a long-lived drainer must not hold it
                if lock is not None:
                    lock.release()
            raise
        self.heartbeat.stop()
        self.recorder.close()  # Parquet: one file per partition, compacted (farm.store.compaction)
        self._update_campaign()
        self.progress.finish()
        store.finish_campaign(self.db, self.campaign_id, "done")
        if lock is not None:
            lock.release()
        self._summary(winners)
        if self.verbose:
            print(format_task_totals(self.tasks), file=sys.stderr)
        return winners

    def _interrupt_stale(self) -> None:
        """Mark campaigns whose driver is gone (killed on this machine, or heartbeat older than
        STALE_AFTER_S) interrupted, one line each, and write their trials Parquet lacks from SQL."""
        rows = interrupt_stale_campaigns(self.db, dead=driver_lock.dead_campaigns(self.db, self.out))
        for row in rows:
            seen = row["heartbeat_at"] or row["started_at"]
            print(f"campaign {row['id']} ({row['command']!r} on {row['host']}, {row['done']}/{row['total']} trials) "
                  f"was last seen {seen:%Y-%m-%d %H:%M:%S} UTC: marked interrupted; its recorded trials are "
                  "resumed, not re-run", file=sys.stderr)  # fmt: skip
        restore_campaigns(self.db, self.out, [row["id"] for row in rows])

    def _tune_parallel(self, tasks: list[Task], profiles: dict[str, HardwareProfile], homes: int):
        """One topology's tasks tuned TASKS_PER_HOME to each of `homes` at once through one
        TrialQueue (the next task starts as one's search ends, in plan order), so a fleet stays
        busy across problems; winners in plan order. Each running task has a home, 1/`homes` of
        the workers, which it hands to the next once its search is over: its trials go there
        first (other workers take them only when idle), and only there go its compile hints;
        its inputs are asked for there (and, where tasks queue for places, on the next home) at
        its start, and dropped there and wherever else its trials ran. At a thousand workers a
        request to every worker for every problem cost the driver more than the trials. A task
        that raises closes the queue: the others stop, and its error is raised."""
        trials = self._queue = TrialQueue(self.pool, tasks[0].topology)
        running: dict[int, threading.Thread] = {}
        done: queue.SimpleQueue = queue.SimpleQueue()
        outcomes: dict[int, WinnerRecord | BaseException | None] = {}
        shares = _shares(self.pool.topologies()[tasks[0].topology], homes)
        free = deque(shares * TASKS_PER_HOME)  # each once first
        parallel = len(free)
        # Where tasks queue for places, each task's inputs are made ahead on the next home too (a
        # ring), whose workers take its trials at no inputs' cost when their own tasks leave them
        # idle: inputs made at a first visit cost the simulated fleet more than the visits saved;
        # and once none is left to start, freed homes are lent to the tasks still searching
        # (`_lend_spare`). Where every task has a home of its own at once (fewer problems than
        # homes, each wider), neither: the ring held every problem's inputs twice for nothing
        # and the driver walked them all in each fill (decision 015).
        queued = self.more is not None or len(tasks) > homes
        next_home = {tuple(home): shares[(n + 1) % len(shares)] for n, home in enumerate(shares)} if queued else {}

        def work(index: int, task: Task) -> None:
            try:
                runner = PoolExecutor(self.pool, task.topology, profiles, trials, self._homes[_task_key(task)])
                outcomes[index] = self._tune(task, profiles, None, runner, lambda: done.put(("search over", index)))
            except BaseException as exc:  # noqa: BLE001 - raised by the campaign's thread
                outcomes[index] = exc
            done.put(("ended", index))

        lent: dict[int, int] = {}  # running task -> spare home shares lent it (_lend_spare)
        # Running tasks still searching: each holds a share of a home. A task whose search is over
        # hands its share to the next task while it re-measures its finalists on one worker (its
        # home would otherwise run one task's rounds for that long).
        searching: set[int] = set()
        try:
            following, exhausted = self._following(tasks, free), False
            while True:
                while len(searching) < parallel and not exhausted:
                    if (item := next(following, None)) is None:
                        exhausted = True
                        break
                    index, task = item
                    self._homes[_task_key(task)] = home = free.popleft()
                    self._neighbours[_task_key(task)] = next_home.get(tuple(home), [])
                    self._prefetch([task])
                    running[index] = threading.Thread(target=work, args=item, name=f"task-{index}", daemon=True)
                    searching.add(index)
                    running[index].start()
                if not running:
                    break
                if exhausted and free and queued:
                    self._lend_spare(free, searching, tasks, lent)
                try:
                    event, finished = done.get(timeout=0.5)  # a timeout, so Ctrl-C is seen at once
                except queue.Empty:
                    continue
                if finished in searching:
                    searching.discard(finished)
                    free.append(self._homes[_task_key(tasks[finished])])
                if event == "search over":
                    continue
                running.pop(finished)
                self._neighbours.pop(_task_key(tasks[finished]), None)
                self._dropping.discard(_task_key(tasks[finished]))
                self._homes.pop(_task_key(tasks[finished]))
                if isinstance(outcomes[finished], BaseException):
                    raise outcomes[finished]
                if self.ended is not None:
                    self.ended(tasks[finished], outcomes[finished])
        except BaseException as exc:
            trials.close(exc if isinstance(exc, Exception) else None)
            for thread in running.values():
                thread.join(timeout=60)
            raise
        trials.close()
        self._queue = None
        order = {(t.kernel, t.problem.key()): n for n, t in enumerate(tasks)}
        ours = self.tasks[-len(tasks) :]  # appended as each ended: the summary lists them in plan order
        self.tasks[-len(tasks) :] = sorted(ours, key=lambda stats: order[(stats["kernel"], stats["problem"])])
        return [outcomes[n] for n in range(len(tasks)) if outcomes[n] is not None]

    def _lend_spare(self, free: deque, running: set[int], tasks: list[Task], lent: dict[int, int]) -> None:
        """Once no task is left to start, lend each home share a task frees to a searching task
        (of `running`) that lacks its workers, the latest started first (the most left to run:
        the campaign ends with it), up to SPARE_LENT a task: the workers make its inputs ahead
        and take its trials at no inputs' cost. A share no running task can use stays spare."""
        prefetch = getattr(self.pool, "prefetch", None)
        while free:
            home = free.popleft()
            with self._lending:
                wanting = [
                    i for i in running
                    if lent.get(i, 0) < SPARE_LENT and _task_key(tasks[i]) not in self._dropping
                    and not set(home) <= self._held(tasks[i])
                ]  # fmt: skip
                if not wanting:
                    continue
                index = max(wanting)
                task, key = tasks[index], _task_key(tasks[index])
                names = sorted(set(home) - self._held(task))
                lent[index] = lent.get(index, 0) + 1
                self._neighbours[key] = [*self._neighbours.get(key, ()), *names]
                if prefetch is not None:
                    prefetch(task.kernel, task.problem, self.config.seed, task.topology, slots=names)
                self._queue.lend(task.kernel, task.problem, self.config.seed, names)

    def _held(self, task: Task) -> set[str]:
        """The workers asked for `task`'s inputs: its home, the next home and shares lent it."""
        key = _task_key(task)
        return set(self._homes.get(key, ())) | set(self._neighbours.get(key, ()))

    def _following(self, tasks: list[Task], free: deque):
        """(index, task) of `tasks` in order, then of those `more` adds as homes free (appended
        to `tasks`), until it has none: a drainer's next requests start as the last ones' searches
        end, not after the slowest of them."""
        index = 0
        while True:
            while index < len(tasks):
                yield index, tasks[index]
                index += 1
            planned = {_task_key(t) for t in tasks}
            extra = [t for t in (self.more(len(free)) if self.more and free else []) if _task_key(t) not in planned]
            if not extra:
                return
            tasks.extend(extra)
            self.progress.total += sum(t.trials for t in extra)

    def _tune(
        self,
        task: Task,
        profiles: dict[str, HardwareProfile],
        ahead: list[Task] | None = None,
        runner: PoolExecutor | None = None,
        search_over: Callable[[], None] | None = None,
    ):
        """Run `task` through the engine on its topology's workers; its winner, or None. The
        workers are asked for the inputs and references of the tasks `ahead` not asked for
        before, in order, in the background: before `task`'s first trial when its own were
        asked for earlier (they are queued first), else once its first trial is back (the
        first task's reference would otherwise queue behind the next problem's); once its
        winner is stored, they drop `task`'s. `search_over` runs once its search is over, before
        its finalists are re-measured."""
        runner = runner or PoolExecutor(self.pool, task.topology, profiles)
        log = CampaignLog(self.db, self.campaign_id, self.recorder, self.progress, self.heartbeat.beat, search_over)
        early = _task_key(task) in self._prefetched  # its own inputs and reference are queued ahead of `ahead`'s
        if early:
            self._prefetch(ahead)
        siblings = self.siblings.setdefault((task.topology, task.kernel), [])
        later = None if early else (lambda: self._prefetch(ahead))
        outcome = tune_problem(task, self.config, runner, log, list(siblings), later)
        self.tasks.append(outcome.stats)
        self._workers("forget", task)
        self._prefetched.pop(_task_key(task), None)
        if outcome.winner is not None:
            siblings.append(outcome.winner.schedule_key)
            self.progress.note(problem_line(outcome.winner, outcome.stats.get("trials", 0)))
        return outcome.winner

    def _drop_held(self, current: Task | None) -> None:
        """After a failure: the workers drop the current task's inputs and the prefetched ones'
        (long-lived workers, as `farm serve`'s, would hold them otherwise). Best effort: the
        failure itself is what the caller reports."""
        held = {**self._prefetched, **({_task_key(current): current} if current is not None else {})}
        for task in held.values():
            try:
                self._workers("forget", task)
            except Exception:  # noqa: BLE001 - a dead pool must not hide the campaign's own error
                pass

    def _prefetch(self, tasks: list[Task] | None) -> None:
        """Ask for the inputs of `tasks` not asked for before. The workers are threaded actors,
        so two requests sent together (the first task's two) may start in either order: both
        are made long before they are needed; later tasks send one new request each."""
        for later in tasks or []:
            if _task_key(later) not in self._prefetched:
                self._prefetched[_task_key(later)] = later
                self._workers("prefetch", later)

    def _workers(self, what: str, task: Task) -> None:
        """Ask `task`'s workers to `prefetch` or `forget` its inputs (WorkerPool's; a pool
        without them, as the tests' fakes, generates at each problem's first trial): beside
        other problems its home and the next one where the ring has it (lent to the task's
        trials), and to forget, also the workers its trials visited."""
        call = getattr(self.pool, what, None)
        if call is None:
            return
        home = self._homes.get(_task_key(task))
        if home is None:
            call(task.kernel, task.problem, self.config.seed, task.topology)
            return
        with self._lending:
            if what == "forget":
                self._dropping.add(_task_key(task))
            neighbours = set(self._neighbours.get(_task_key(task), ()))
        slots = set(home) | neighbours
        if what == "prefetch" and self._queue is not None and neighbours:
            self._queue.lend(task.kernel, task.problem, self.config.seed, sorted(neighbours))
        if what == "forget" and self._queue is not None:
            slots |= self._queue.release(task.kernel, task.problem, self.config.seed)
        call(task.kernel, task.problem, self.config.seed, task.topology, slots=sorted(slots))

    def _update_campaign(self) -> None:
        done, failures, total = self._counts()
        store.update_campaign(self.db, self.campaign_id, done, failures, total=total)

    def _counts(self) -> tuple[int, int, int]:
        """The campaign row's counters: what each trial flush and heartbeat writes."""
        return (*self.progress.counts(), self.progress.total)

    def _summary(self, winners: list[WinnerRecord]) -> None:
        row = store.campaign(self.db, self.campaign_id)
        counts = store.trial_status_counts(self.db, campaign=self.campaign_id)
        artifacts.write_campaign_summary(self.out, row, winners, counts, self.tasks)


class CampaignLog(StoreLog):
    """The engine's trial log for a campaign: the database, with every trial counted in the
    progress line and the campaign row written once a task's search is over."""

    def __init__(self, db: store.Store, campaign_id: int, recorder: TrialRecorder, progress: Progress, beat,
                 search_over: Callable[[], None] | None = None):  # fmt: skip
        super().__init__(db, campaign_id, recorder)
        self.progress, self.beat, self.search_over = progress, beat, search_over

    def replayed(self, result: TrialResult) -> None:
        super().replayed(result)
        self.progress.advance(result, skipped=True)

    def add(self, result: TrialResult) -> None:
        self.progress.advance(result)
        super().add(result)

    def searched(self, task: Task, spent: int) -> None:
        self.progress.total += spent - task.planned  # stopped short of its plan, or went past it
        super().searched(task, spent)
        self.beat()  # the counters, also when the task only replayed recorded trials
        if self.search_over is not None:
            self.search_over()


def _task_key(task: Task) -> tuple[str, str, str]:
    return (task.topology, task.kernel, task.problem.key())


def _shares(slots: list[str], parallel: int) -> list[list[str]]:
    """`slots` in `parallel` homes of len(slots) // `parallel` workers (the rest: no home's)."""
    width = max(1, len(slots) // parallel)
    return [(slots + slots)[(n * width) % len(slots) :][:width] for n in range(parallel)]


def tune(
    config: TuneConfig,
    db_url: str | None = None,
    ray_address: str | None = None,
    allow_cpu: bool = False,
    trial_timeout_s: float = 60.0,
    command: str = "farm tune",
    gpus: int | None = None,
    verbose: bool = False,
) -> list[WinnerRecord]:
    """Run one campaign end to end (pool up, each local GPU's lock taken, tune, winners
    stored, pool down); `gpus` caps the workers at that many of the cluster's GPUs (default: all).
    `verbose` adds the workers' placement, the plan, the search's totals and the stage times."""
    begun = time.perf_counter()
    db = store.open_store(db_url)
    out = config.out or store.farm_home() / "artifacts"
    with WorkerPool(ray_address, allow_cpu=allow_cpu, trial_timeout_s=trial_timeout_s, gpus=gpus) as pool:
        reports = pool.reports()
        if verbose:
            print(format_workers(reports), file=sys.stderr)
        up_s = time.perf_counter() - begun  # start-up is a visible share of a short campaign
        print(f"startup: database, Ray and {len(reports)} worker(s) up in {up_s:.1f} s", file=sys.stderr)
        with device_locks(reports, command):  # waits while another local campaign times on these GPUs
            started = time.perf_counter()
            try:
                return Campaign(config, pool, db, Path(out), command, verbose).run()
            finally:
                if verbose:
                    print(format_stage_times(pool, time.perf_counter() - started), file=sys.stderr)
