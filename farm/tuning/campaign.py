"""The campaign: kernels x problems x schedule candidates, per topology, into SQL + Parquet.

For every topology the pool's workers report, and every (kernel, problem) of the
campaign, the default schedule is tried first, then a strategy (farm.tuning.search) proposes
batches from the kernel's schedule space within the budget. Trial keys already in the
database are not run again: their recorded results are replayed to the strategy, which
is what makes a re-run of a killed campaign resume where it stopped. Results are
recorded as they arrive. Then the winner: the best few certified trials and the default
are re-measured interleaved on one worker; the best median among them wins and is
stored with its speedup over the default.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from farm import catalog, store
from farm.gpu import HardwareProfile, Timing
from farm.schedule import Problem, Schedule, Status
from farm.store import WinnerRecord
from farm.store import parquet as artifacts
from farm.trial import ErrorMetrics, TrialKey, TrialResult
from farm.tuning.cluster import WorkerFailure, WorkerPool
from farm.tuning.search import Budget, strategy
from farm.tuning.worker import Job, format_stage_report

CPU_BUDGET = 8  # schedules per (kernel, problem) on a CPU adapter, besides the default
FLUSH_EVERY = 16  # record buffered trials after this many results ...
FLUSH_INTERVAL_S = 1.0  # ... or this long since the last write, whichever comes first


@dataclass(frozen=True)
class TuneConfig:
    kernels: tuple[str, ...]
    sizes: dict[str, list[Problem]] = field(default_factory=dict)
    strategy: str = "model"
    budget: int | None = None
    reps: int = 10
    warmup: int = 2
    seed: int = 0
    finalists: int = 3
    rounds: int = 5
    out: Path | None = None


@dataclass
class Task:
    """One (topology, kernel, problem) to tune: its candidate space and trial budget."""

    topology: str
    kernel: str
    problem: Problem
    space: list[Schedule]
    budget: int | None
    capped_from: int | None = None
    excluded: int = 0  # schedules of the kernel's space that fail its checks for this problem

    @property
    def trials(self) -> int:
        """Trials this task runs: the default plus at most `budget` of the space."""
        return 1 + min(len(self.space), self.budget if self.budget is not None else len(self.space))


def parse_sizes(text: str) -> dict[str, list[Problem]]:
    """`gemm:m=64,k=64,n=64;gemv:m=256,n=256` -> {kernel: [Problem, ...]} (a kernel may repeat)."""
    sizes: dict[str, list[Problem]] = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        name, sep, dims = entry.partition(":")
        if not sep or not dims:
            raise ValueError(f"--sizes entry {entry!r} is not KERNEL:dim=value,...")
        try:
            values = {k.strip(): int(v) for k, v in (pair.split("=", 1) for pair in dims.split(","))}
        except ValueError:
            raise ValueError(f"--sizes entry {entry!r}: dimensions must be name=integer pairs") from None
        sizes.setdefault(name.strip(), []).append(catalog.get(name.strip()).problem(**values))
    return sizes


class TrialRecorder:
    """Buffers trials and records them, in SQL and then in Parquet under `out`, FLUSH_EVERY
    at a time or FLUSH_INTERVAL_S after the last write, whichever comes first (`farm tune`
    and the benchmarks that measure its path). `spent` sums the seconds of each store;
    `on_flush` runs after each write (the campaign's progress row)."""

    def __init__(self, db, campaign_id: int | None, out: Path, on_flush=None):
        self.db, self.campaign_id, self.out, self.on_flush = db, campaign_id, out, on_flush
        self.buffer: list[TrialResult] = []
        self.flushed_at = time.monotonic()
        self.spent = {"sql_s": 0.0, "parquet_s": 0.0}

    def add(self, result: TrialResult) -> None:
        self.buffer.append(result)
        if len(self.buffer) >= FLUSH_EVERY or time.monotonic() - self.flushed_at >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        self.flushed_at = time.monotonic()
        if not self.buffer:
            return
        batch, self.buffer = self.buffer, []
        start = time.perf_counter()
        store.record_trials(self.db, self.campaign_id, batch)
        middle = time.perf_counter()
        artifacts.write_trials(self.out, self.campaign_id, batch)
        self.spent["sql_s"] += middle - start
        self.spent["parquet_s"] += time.perf_counter() - middle
        if self.on_flush is not None:
            self.on_flush()


def recorded(
    results: Iterable[TrialResult], db, campaign_id: int | None, out: Path, spent: dict[str, float] | None = None
) -> Iterator[TrialResult]:
    """Yield `results` as they arrive, recording them as `farm tune` does (TrialRecorder);
    `spent` accumulates "sql_s" and "parquet_s"."""
    recorder = TrialRecorder(db, campaign_id, out)
    for result in results:
        yield result
        recorder.add(result)
    recorder.flush()
    if spent is not None:
        for key, seconds in recorder.spent.items():
            spent[key] = spent.get(key, 0.0) + seconds


def plan(config: TuneConfig, topology: str, profile: HardwareProfile) -> list[Task]:
    """Tasks for one topology. Each space holds the schedules that pass the kernel's checks
    for its problem on this adapter (budget goes to schedules that can run; `excluded`
    counts the rest); on a CPU adapter each budget is capped at CPU_BUDGET."""
    tasks = []
    for name in config.kernels:
        spec = catalog.get(name)
        candidates = [s for s in spec.schedules() if s != spec.default]
        for problem in config.sizes.get(name) or spec.default_problems(profile):
            space = [s for s in candidates if not spec.invalid_reason(s, problem, profile)]
            budget, capped = config.budget, None
            if profile.is_cpu and (budget is None or budget > CPU_BUDGET) and len(space) > CPU_BUDGET:
                capped, budget = min(len(space), budget or len(space)), CPU_BUDGET
            tasks.append(Task(topology, name, problem, space, budget, capped, len(candidates) - len(space)))
    return tasks


class Progress:
    """done/total, failures, skipped (resumed) and ETA on one stderr line; plain lines when not a TTY."""

    def __init__(self, total: int, stream: TextIO | None = None, every_s: float = 5.0):
        self.total, self.done, self.failures, self.skipped = total, 0, 0, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self.start = time.monotonic()
        self._last = -math.inf  # the first result always prints

    def advance(self, result: TrialResult, skipped: bool = False) -> None:
        self.done += 1
        self.skipped += skipped
        self.failures += not result.ok
        now = time.monotonic()
        if self.tty or now - self._last >= self.every_s or self.done == self.total:
            self._last = now
            self.stream.write(("\r" if self.tty else "") + self.line() + ("" if self.tty else "\n"))
            self.stream.flush()

    def line(self) -> str:
        ran = self.done - self.skipped
        elapsed = time.monotonic() - self.start
        left = self.total - self.done
        eta = f"{left * elapsed / ran:.0f}s" if ran else "?"
        filled = int(30 * self.done / max(self.total, 1))
        return (
            f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} trials, "
            f"{self.failures} failed, {self.skipped} resumed, ETA {eta}"
        )

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def result_from_row(row: dict, problem: Problem) -> TrialResult:
    """A recorded trial row back as a TrialResult (for replay on resume)."""
    timing = None
    if row.get("median_ns") is not None:
        timing = Timing(
            row["median_ns"], row["p20_ns"], row["p80_ns"], row["min_ns"], row["reps"] or 0, row["timing_method"] or ""
        )
    metrics = ErrorMetrics(*(row.get(k) or 0.0 for k in ("max_abs", "mean_abs", "rmse", "max_rel")))
    key = TrialKey(row["topology_hash"], row["kernel"], row["source_hash"], problem, Schedule.from_key(row["schedule"]))
    return TrialResult(
        key,
        Status(row["status"]),
        row.get("message") or "",
        timing,
        metrics,
        row.get("host") or "",
        row.get("worker_id") or "",
    )


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
            _notice_cpu(profile, [t for t in tasks if t.topology == topology])
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


def _notice_cpu(profile: HardwareProfile, tasks: list[Task]) -> None:
    if not profile.is_cpu:
        return
    print(f"notice: tuning on CPU adapter {profile.summary}; its timings say nothing about GPUs", file=sys.stderr)
    for task in tasks:
        if task.capped_from is not None:
            print(
                f"notice: {task.kernel} {task.problem}: budget capped at {task.budget} of {task.capped_from} schedules",
                file=sys.stderr,
            )


def format_winners_table(winners: list[WinnerRecord]) -> str:
    """kernel, problem, schedule, median, default-schedule time and speedup, one row each."""
    header = ("kernel", "problem", "schedule", "median_us", "default_us", "speedup")
    rows = [header]
    for w in winners:
        rows.append(
            (
                w.kernel,
                w.problem_key,
                str(Schedule.from_key(w.schedule_key)),
                f"{w.median_ns / 1e3:.2f}",
                "-" if w.default_median_ns is None else f"{w.default_median_ns / 1e3:.2f}",
                "-" if w.speedup is None or math.isnan(w.speedup) else f"{w.speedup:.2f}x",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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


def format_stage_times(pool: WorkerPool, wall_s: float) -> str:
    """Where each worker's time went (ms per trial by stage, see StageTimes), or why unknown."""
    try:
        stages = pool.stage_times()
    except Exception as exc:  # noqa: BLE001 - a dead worker must not hide the campaign's outcome
        return f"worker stage times unavailable: {exc}"
    lines = [f"campaign wall time {wall_s:.1f} s; worker ms per trial by stage:"]
    for slot, report in sorted(stages.items()):
        lines.append(f"  worker {slot}: {report.get('trials', 0)} trials; {format_stage_report(report)}")
    return "\n".join(lines)


def format_workers(reports: dict[str, dict]) -> str:
    """One line per worker: where it runs and which GPU it holds (Ray GPU id -> wgpu
    adapter index, nvidia-smi's UUID for it, and whether the process really sits there)."""
    lines = []
    for slot, report in sorted(reports.items()):
        mapping = report.get("mapping", {})
        smi = mapping.get("nvidia_smi") or {}
        gpu = (
            f"ray GPU {','.join(mapping['ray_gpu_ids'])} -> adapter {mapping['adapter_index']}"
            if mapping.get("ray_gpu_ids")
            else "no Ray GPU"
        )
        placed = {True: "placement ok", False: "PLACEMENT MISMATCH", None: "placement unchecked"}[
            mapping.get("placement_ok")
        ]
        uuid = f" {smi['uuid']}" if smi.get("uuid") else ""
        lines.append(
            f"worker {slot} on {report.get('host', '?')} pid {report.get('pid', '?')}: {mapping.get('adapter', '?')};"
            f" {gpu}{uuid}; {placed}; topology {report['topology_hash'][:16]}"
        )
    return "\n".join(lines)
