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
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from farm import catalog, store
from farm.gpu import HardwareProfile
from farm.schedule import Schedule
from farm.store import WinnerRecord
from farm.store import parquet as artifacts
from farm.trial import TrialResult
from farm.tuning.job import Job
from farm.tuning.plan import Task, TuneConfig, notice_cpu, plan
from farm.tuning.pool import WorkerFailure, WorkerPool
from farm.tuning.recording import TrialRecorder, result_from_row
from farm.tuning.report import Progress, format_stage_times, format_workers
from farm.tuning.search import Budget, strategy


class Campaign:
    """One run of `farm tune`: owns the progress, the campaign row and the trial recorder."""

    def __init__(self, config: TuneConfig, pool: WorkerPool, db: store.Store, out: Path, command: str):
        self.config, self.pool, self.db, self.out, self.command = config, pool, db, out, command
        self.recorder: TrialRecorder | None = None
        self.campaign_id = 0
        self.progress: Progress | None = None

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
        self.campaign_id = store.start_campaign(
            self.db, self.command, self.config.strategy, self.config.budget, self.config.reps, total
        )
        self.progress = Progress(total)
        self.recorder = TrialRecorder(self.db, self.campaign_id, self.out, self._update_campaign)
        try:
            winners = [w for task in tasks if (w := self._tune(task, profiles)) is not None]
        except BaseException:
            self.recorder.flush()
            store.finish_campaign(self.db, self.campaign_id, "failed")
            raise
        self.progress.finish()
        store.finish_campaign(self.db, self.campaign_id, "done")
        self._summary(winners)
        return winners

    def _tune(self, task: Task, profiles: dict[str, HardwareProfile]) -> WinnerRecord | None:
        spec = catalog.get(task.kernel)
        recorded = store.recorded_schedules(self.db, task.topology, task.kernel, spec.source_hash(), task.problem.key())
        evaluate = self._evaluator(task, recorded)
        evaluate([spec.default])
        rng = random.Random(f"{self.config.seed}:{task.kernel}:{task.problem.key()}")
        workers = len(self.pool.topologies()[task.topology])
        strategy(self.config.strategy)(task.space, evaluate, Budget(task.budget), rng, workers=workers)
        self.recorder.flush()
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
        store.update_campaign(self.db, self.campaign_id, self.progress.done, self.progress.failures)

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
    """Run one campaign end to end (pool up, tune, winners stored, pool down); `gpus`
    caps the workers at that many of the cluster's GPUs (default: all)."""
    db = store.open_store(db_url)
    out = config.out or store.farm_home() / "artifacts"
    with WorkerPool(ray_address, allow_cpu=allow_cpu, trial_timeout_s=trial_timeout_s, gpus=gpus) as pool:
        print(format_workers(pool.reports()), file=sys.stderr)
        started = time.perf_counter()
        try:
            return Campaign(config, pool, db, Path(out), command).run()
        finally:
            print(format_stage_times(pool, time.perf_counter() - started), file=sys.stderr)
