"""The campaign: kernels x problems x schedule candidates, per topology, into SQL + Parquet.

For every topology the pool's workers report, and every (kernel, problem) of the
campaign (farm.tuning.plan), the default schedule is tried first, then a strategy
(farm.tuning.search) proposes batches from the kernel's schedule space within the budget.
Trial keys already in the database are not run again: their recorded results are replayed
to the strategy, which is what makes a re-run of a killed campaign resume where it
stopped. Results are recorded as they arrive (farm.tuning.recording). Then the winner: the
best few certified trials and the default are re-measured interleaved on one worker; the
best median among them wins and is stored with its speedup over the default. `tune` runs
one campaign end to end; what it prints is farm.tuning.report's.

Lifecycle: the campaign row's heartbeat_at is written with its progress counters (replayed
trials included) on each recorder flush, after each task, and by a `Heartbeat` thread at
least every HEARTBEAT_S, so a driver that was killed shows as interrupted once its heartbeat
is older than farm.store.repo.STALE_AFTER_S; the next campaign marks such campaigns
interrupted in SQL, at its start and every SWEEP_S while it runs (so a re-run right after a
kill marks the killed one too), one stderr line each. Ctrl-C finishes a campaign as interrupted, any other
exception as failed. `tune` holds each local GPU's lock (farm.tuning.device_lock) while it runs.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from farm import catalog, store
from farm.gpu import HardwareProfile
from farm.schedule import Schedule
from farm.store import WinnerRecord
from farm.store import parquet as artifacts
from farm.store.repo import STALE_AFTER_S, interrupt_stale_campaigns
from farm.trial import TrialResult
from farm.tuning.device_lock import device_locks
from farm.tuning.job import Job
from farm.tuning.plan import Task, TuneConfig, notice_cpu, plan
from farm.tuning.pool import WorkerFailure, WorkerPool
from farm.tuning.recording import TrialRecorder, result_from_row
from farm.tuning.report import Progress, format_stage_times, format_workers
from farm.tuning.search import Budget, strategy

HEARTBEAT_S = 10.0  # the most a running campaign's row goes without a write (well under STALE_AFTER_S)
assert HEARTBEAT_S * 3 <= STALE_AFTER_S
SWEEP_S = STALE_AFTER_S / 2  # how often a running campaign looks for dead ones to mark interrupted


class Heartbeat:
    """Runs `write` (the campaign row's counters and heartbeat_at) on `beat()`, and from a daemon
    thread whenever nothing did for `every_s`; one write at a time. The thread also runs `sweep`
    every `sweep_s` (the campaign marks dead ones interrupted: a re-run right after a kill
    marks the killed campaign once its heartbeat goes stale). A failure on the thread is one
    line on stderr (the next tick retries); `beat()`'s errors are the caller's."""

    def __init__(
        self, write: Callable[[], None], every_s: float, sweep: Callable[[], None] | None = None, sweep_s: float = 0
    ):
        self.write, self.every_s, self.sweep, self.sweep_s = write, every_s, sweep, sweep_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last = self._swept = time.monotonic()
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="campaign-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def beat(self) -> None:
        with self._lock:
            self.write()
            self._last = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _next_s(self) -> float:
        due = self._last + self.every_s
        if self.sweep is not None:
            due = min(due, self._swept + self.sweep_s)
        return max(0.05, due - time.monotonic())

    def _run(self) -> None:
        while not self._stop.wait(self._next_s()):
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self._safely(self.beat, "heartbeat")
                self._last = max(self._last, now)  # a failed beat retries after every_s, not in a tight loop
            if self.sweep is not None and now - self._swept >= self.sweep_s:
                self._swept = now
                self._safely(self.sweep, "check for dead campaigns")

    def _safely(self, fn: Callable[[], None], what: str) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a missed beat must not end the campaign
            if not self._warned:
                print(f"campaign {what} failed ({exc}); retrying every {self.every_s:.0f} s", file=sys.stderr)
                self._warned = True


class Campaign:
    """One run of `farm tune`: owns the progress, the campaign row and the trial recorder."""

    def __init__(self, config: TuneConfig, pool: WorkerPool, db: store.Store, out: Path, command: str):
        self.config, self.pool, self.db, self.out, self.command = config, pool, db, out, command
        self.recorder: TrialRecorder | None = None
        self.campaign_id = 0
        self.progress: Progress | None = None
        self.heartbeat: Heartbeat | None = None

    def run(self) -> list[WinnerRecord]:
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
        if excluded:
            print(f"plan: {excluded} schedules fail their kernel's checks for their problem on this adapter; not run",
                  file=sys.stderr)  # fmt: skip
        self._interrupt_stale()
        self.campaign_id = store.start_campaign(
            self.db, self.command, self.config.strategy, self.config.budget, self.config.reps, total
        )
        self.progress = Progress(total)
        self.heartbeat = Heartbeat(self._update_campaign, HEARTBEAT_S, self._interrupt_stale, SWEEP_S).start()
        self.recorder = TrialRecorder(self.db, self.campaign_id, self.out, self.heartbeat.beat)
        try:
            winners = [w for task in tasks if (w := self._tune(task, profiles)) is not None]
        except BaseException as exc:
            self.heartbeat.stop()
            self.recorder.close()
            self._update_campaign()
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            store.finish_campaign(self.db, self.campaign_id, status)
            raise
        self.heartbeat.stop()
        self.recorder.close()  # Parquet: one file per partition, compacted (farm.store.compaction)
        self._update_campaign()
        self.progress.finish()
        store.finish_campaign(self.db, self.campaign_id, "done")
        self._summary(winners)
        return winners

    def _interrupt_stale(self) -> None:
        """Mark campaigns whose driver is gone (heartbeat older than STALE_AFTER_S) interrupted, one line each."""
        for row in interrupt_stale_campaigns(self.db):
            seen = row["heartbeat_at"] or row["started_at"]
            print(f"campaign {row['id']} ({row['command']!r} on {row['host']}, {row['done']}/{row['total']} trials) "
                  f"was last seen {seen:%Y-%m-%d %H:%M:%S} UTC: marked interrupted; its recorded trials are "
                  "resumed, not re-run", file=sys.stderr)  # fmt: skip

    def _tune(self, task: Task, profiles: dict[str, HardwareProfile]) -> WinnerRecord | None:
        spec = catalog.get(task.kernel)
        recorded = store.recorded_schedules(self.db, task.topology, task.kernel, spec.source_hash(), task.problem.key())
        evaluate = self._evaluator(task, recorded)
        evaluate([spec.default])
        rng = random.Random(f"{self.config.seed}:{task.kernel}:{task.problem.key()}")
        workers = len(self.pool.topologies()[task.topology])
        strategy(self.config.strategy)(task.space, evaluate, Budget(task.budget), rng, workers=workers)
        self.recorder.flush()
        self.heartbeat.beat()  # the counters, also when the task only replayed recorded trials
        return self._winner(task, profiles)

    def _evaluator(self, task: Task, recorded: dict[str, dict]):
        config = self.config

        def evaluate(batch: list[Schedule]) -> list[TrialResult]:
            results: dict[str, TrialResult] = {}
            fresh = []
            for schedule in batch:
                row = recorded.get(schedule.key())
                if row is None:
                    fresh.append(Job(task.kernel, task.problem, schedule, config.seed, config.warmup, config.reps))
                    continue
                results[schedule.key()] = result_from_row(row, task.problem)
                self.progress.advance(results[schedule.key()], skipped=True)
            for result in self.pool.stream(fresh, task.topology):
                results[result.key.schedule.key()] = result
                self.progress.advance(result)
                self.recorder.add(result)
            return [results[s.key()] for s in batch]

        return evaluate

    def _update_campaign(self) -> None:
        store.update_campaign(self.db, self.campaign_id, *self.progress.counts())

    def _winner(self, task: Task, profiles: dict[str, HardwareProfile]) -> WinnerRecord | None:
        spec = catalog.get(task.kernel)
        rows = store.recorded_schedules(self.db, task.topology, task.kernel, spec.source_hash(), task.problem.key())
        certified = sorted((r for r in rows.values() if r["status"] == "ok" and r["median_ns"]), key=_median)
        if not certified:
            print(f"no certified schedule for {task.kernel} {task.problem}: no winner", file=sys.stderr)
            return None
        finalists = [Schedule.from_key(r["schedule"]) for r in certified[: self.config.finalists]]
        default_row = rows.get(spec.default.key())
        default_ok = default_row is not None and default_row["status"] == "ok"
        if default_ok and spec.default not in finalists:
            finalists.append(spec.default)
        slot = self.pool.topologies()[task.topology][0]
        medians = self._remeasure(slot, task, finalists, rows)
        if not any(medians.get(s.key()) for s in finalists):
            medians = {s.key(): rows[s.key()]["median_ns"] for s in finalists}
        best = min((s for s in finalists if medians.get(s.key())), key=lambda s: medians[s.key()])
        default_ns = medians.get(spec.default.key()) if default_ok else None
        record = WinnerRecord(
            topology_hash=task.topology,
            kernel=task.kernel,
            problem_key=task.problem.key(),
            source_hash=spec.source_hash(),
            schedule_key=best.key(),
            median_ns=medians[best.key()],
            default_median_ns=default_ns,
            speedup=default_ns / medians[best.key()] if default_ns else None,
            campaign_id=self.campaign_id,
            device_name=profiles[slot].device_name,
        )
        store.save_winner(self.db, record)
        return record

    def _remeasure(self, slot: str, task: Task, finalists: list[Schedule], rows: dict) -> dict[str, float]:
        """Interleaved medians; the recorded trial medians if re-measurement fails."""
        try:
            timings = self.pool.remeasure(
                slot, task.kernel, task.problem, finalists, self.config.reps, self.config.rounds, self.config.seed
            )
            return {k: t.median_ns for k, t in timings.items() if t is not None}
        except WorkerFailure as exc:
            print(f"re-measuring {task.kernel} {task.problem} failed ({exc}); using trial medians", file=sys.stderr)
            return {s.key(): rows[s.key()]["median_ns"] for s in finalists}

    def _summary(self, winners: list[WinnerRecord]) -> None:
        row = store.campaign(self.db, self.campaign_id)
        counts = store.trial_status_counts(self.db, campaign=self.campaign_id)
        artifacts.write_campaign_summary(self.out, row, winners, counts)


def _median(row: dict) -> float:
    return float(row["median_ns"])


def tune(
    config: TuneConfig,
    db_url: str | None = None,
    ray_address: str | None = None,
    allow_cpu: bool = False,
    trial_timeout_s: float = 60.0,
    command: str = "farm tune",
    gpus: int | None = None,
) -> list[WinnerRecord]:
    """Run one campaign end to end (pool up, each local GPU's lock taken, tune, winners
    stored, pool down); `gpus` caps the workers at that many of the cluster's GPUs (default: all)."""
    db = store.open_store(db_url)
    out = config.out or store.farm_home() / "artifacts"
    with WorkerPool(ray_address, allow_cpu=allow_cpu, trial_timeout_s=trial_timeout_s, gpus=gpus) as pool:
        reports = pool.reports()
        print(format_workers(reports), file=sys.stderr)
        with device_locks(reports, command):  # waits while another local campaign times on these GPUs
            started = time.perf_counter()
            try:
                return Campaign(config, pool, db, Path(out), command).run()
            finally:
                print(format_stage_times(pool, time.perf_counter() - started), file=sys.stderr)
