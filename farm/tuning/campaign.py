"""The campaign: kernels x problems x schedule candidates, per topology, into SQL + Parquet.

For every topology the pool's workers report, and every (kernel, problem) of the
campaign (farm.tuning.tasks), the default schedule is tried first, then a strategy
(farm.tuning.search) proposes batches from the kernel's schedule space within the budget.
Trial keys already in the database are not run again: their recorded results are replayed
to the strategy, which is what makes a re-run of a killed campaign resume where it
stopped; the model strategy also gets them all as its warm start (any campaign's trials of
this topology, kernel, source and problem seed its models and count against the budget, a
cap it may stop short of: config.adaptive, and that may grow with the space, spent past the
plan only while the search improves: farm.tuning.tasks), and so do the winners of this
campaign's earlier problems of the same kernel (SIBLING_SEEDS of them, tried right after the
default: a neighbouring problem's winner is a better first guess than a random schedule).
Results are recorded as they arrive
(farm.tuning.recording). Then the winner: the best few certified trials, the default and
the stored winner are re-measured interleaved on one worker, rounds added to separate
close ones, and farm.tuning.finalists decides (a tie within config.noise keeps the stored
winner, else the default, else the simplest); it is stored with its speedup over the
default, its runner-up, margin, quantiles and tie (the decision columns of the winner row).
Each task's trials, caps and seconds of search and re-measurement go to the campaign
summary ("tasks", "totals") and one stderr line. `tune` runs one campaign end to end; what
it prints is farm.tuning.report's.

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
import statistics
import sys
import time
from pathlib import Path

from farm import catalog, store
from farm.gpu import HardwareProfile
from farm.schedule import Schedule
from farm.store import WinnerRecord
from farm.store import parquet as artifacts
from farm.store.repo import STALE_AFTER_S, interrupt_stale_campaigns
from farm.trial import TrialResult
from farm.tuning.device_lock import device_locks
from farm.tuning.finalists import decide
from farm.tuning.heartbeat import Heartbeat
from farm.tuning.job import Job
from farm.tuning.recording import TrialRecorder, result_from_row
from farm.tuning.report import Progress, failure_summary, format_stage_times, format_task_totals, format_workers
from farm.tuning.search import POLISH_ROUNDS, Budget, strategy
from farm.tuning.tasks import Task, TuneConfig, notice_cpu, plan
from farm.tuning.workers import WorkerFailure, WorkerPool

SIBLING_SEEDS = 4  # this campaign's winners of a kernel's other problems tried first on the next one
# Problems ahead whose inputs and reference the workers generate in the background. One ahead
# left the H200 idle 5-11 s before each ternary_gemv problem (its inputs take ~6 s, the
# problem before it 2-5 s of trials): two ahead give each generation two problems' time,
# asked for before the current problem's first trial where its own were asked for earlier
# (topk k=32's waited on k=8's ~2.5 s first trial), else after it (Campaign._tune).
PREFETCH_AHEAD = 2
HEARTBEAT_S = 10.0  # the most a running campaign's row goes without a write (well under STALE_AFTER_S)
assert HEARTBEAT_S * 3 <= STALE_AFTER_S
SWEEP_S = STALE_AFTER_S / 2  # how often a running campaign looks for dead ones to mark interrupted


class Campaign:
    """One run of `farm tune`: owns the progress, the campaign row and the trial recorder."""

    def __init__(self, config: TuneConfig, pool: WorkerPool, db: store.Store, out: Path, command: str):
        self.config, self.pool, self.db, self.out, self.command = config, pool, db, out, command
        self.recorder: TrialRecorder | None = None
        self.campaign_id = 0
        self.progress: Progress | None = None
        self.heartbeat: Heartbeat | None = None
        self.tasks: list[dict] = []  # per (kernel, problem): trials, caps, search and re-measurement cost
        self.siblings: dict[tuple[str, str], list[str]] = {}  # (topology, kernel): this campaign's winner keys
        # the tasks whose inputs the workers were asked for and have not dropped yet, by _task_key
        self._prefetched: dict[tuple[str, str, str], Task] = {}

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
            winners, task = [], None
            for index, task in enumerate(tasks):
                ahead = tasks[index + 1 : index + 1 + PREFETCH_AHEAD]
                if (winner := self._tune(task, profiles, ahead)) is not None:
                    winners.append(winner)
        except BaseException as exc:
            self._drop_held(task)
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
        print(format_task_totals(self.tasks), file=sys.stderr)
        return winners

    def _interrupt_stale(self) -> None:
        """Mark campaigns whose driver is gone (heartbeat older than STALE_AFTER_S) interrupted, one line each."""
        for row in interrupt_stale_campaigns(self.db):
            seen = row["heartbeat_at"] or row["started_at"]
            print(f"campaign {row['id']} ({row['command']!r} on {row['host']}, {row['done']}/{row['total']} trials) "
                  f"was last seen {seen:%Y-%m-%d %H:%M:%S} UTC: marked interrupted; its recorded trials are "
                  "resumed, not re-run", file=sys.stderr)  # fmt: skip

    def _tune(
        self, task: Task, profiles: dict[str, HardwareProfile], ahead: list[Task] | None = None
    ) -> WinnerRecord | None:
        """Search `task`, then decide and store its winner. The workers are asked for the
        inputs and references of the tasks `ahead` not asked for before, in order, in the
        background: before `task`'s first trial when its own were asked for earlier (they
        are queued first), else once its first trial is back (the first task: on the H200
        its reference queued behind the next problem's, and its first trial took 8.9 s
        instead of 4.6); once its winner is stored, they drop `task`'s."""
        started = time.perf_counter()
        spec = catalog.get(task.kernel)
        recorded = store.recorded_schedules(self.db, task.topology, task.kernel, spec.source_hash(), task.problem.key())
        evaluate = self._evaluator(task, recorded)
        early = _task_key(task) in self._prefetched  # its own inputs and reference are queued ahead of `ahead`'s
        if early:
            self._prefetch(ahead)
        evaluate([spec.default])
        if not early:
            self._prefetch(ahead)
        rng = random.Random(f"{self.config.seed}:{task.kernel}:{task.problem.key()}")
        workers = len(self.pool.topologies()[task.topology])
        budget = Budget(task.budget)
        warm = self._warm(task, recorded)
        if warm:  # the model strategy: this campaign's winners of the kernel's other problems seed it too
            warm["prior"] = self._sibling_trials(task, recorded, evaluate) + warm["prior"]
        strategy(self.config.strategy)(task.space, evaluate, budget, rng, workers=workers, **warm)
        if self.progress is not None:
            self.progress.total += budget.spent - task.planned  # stopped short of its plan, or went past it
        self.recorder.flush()
        self.heartbeat.beat()  # the counters, also when the task only replayed recorded trials
        stats = {"kernel": task.kernel, "problem": task.problem.key(), "space": len(task.space), "cap": task.budget,
                 "planned": task.planned, "trials": budget.spent}  # fmt: skip
        stats["search_s"] = time.perf_counter() - started
        self.tasks.append(stats)
        winner = self._winner(task, profiles, stats)
        self._workers("forget", task)
        self._prefetched.pop(_task_key(task), None)
        if winner is not None:
            self.siblings.setdefault((task.topology, task.kernel), []).append(winner.schedule_key)
        return winner

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
        without them, as the tests' fakes, generates at each problem's first trial)."""
        call = getattr(self.pool, what, None)
        if call is not None:
            call(task.kernel, task.problem, self.config.seed, task.topology)

    def _sibling_trials(self, task: Task, recorded: dict[str, dict], evaluate) -> list[TrialResult]:
        """Trials of the schedules that won this kernel's earlier problems in this campaign (the
        SIBLING_SEEDS latest, distinct), where this problem can run them and has no stored trial
        of them: a neighbouring problem's winner is a better first guess than a random schedule
        (on the H200 the search of recurrent E=768 missed, within its budget, the schedule that
        won E=640 and was 32% faster on E=768 too), and both campaigns of a pair try it."""
        space = {s.key() for s in task.space}
        default = catalog.get(task.kernel).default.key()  # already evaluated first
        keys = []
        for key in reversed(self.siblings.get((task.topology, task.kernel), [])):
            if key in space and key not in recorded and key != default and key not in keys:
                keys.append(key)
        keys = keys[:SIBLING_SEEDS]
        return evaluate([Schedule.from_key(k) for k in keys]) if keys else []

    def _warm(self, task: Task, recorded: dict[str, dict]) -> dict:
        """The model strategy's extra arguments: the trials stored for this problem by any
        campaign seed its models (counted into done as resumed, and against the budget), and
        its adaptive stop (config.noise) unless config.adaptive is off, and its final polish."""
        if self.config.strategy != "model":
            return {}
        space = {s.key() for s in task.space}
        prior = [result_from_row(row, task.problem) for key, row in recorded.items() if key in space]
        prior = prior[: min(len(task.space), task.budget or len(task.space))]
        for result in prior if self.progress is not None else ():
            self.progress.advance(result, skipped=True)
        noise = self.config.noise if self.config.adaptive else None
        ahead = getattr(self.pool, "precompile", None)  # the search's next picks, compiled ahead
        hint = (lambda s: ahead(task.kernel, task.problem, s, self.config.seed, task.topology)) if ahead else None
        warm = {"prior": prior, "noise": noise, "extend_after": task.extend_after, "hint": hint}
        return warm | {"polish": POLISH_ROUNDS}  # the incumbent's neighbourhood measured before it stops

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
        store.update_campaign(self.db, self.campaign_id, *self.progress.counts(), total=self.progress.total)

    def _winner(self, task: Task, profiles: dict[str, HardwareProfile], stats: dict) -> WinnerRecord | None:
        """The best few certified trials of this problem (any campaign's), the default and the
        stored winner, re-measured interleaved with rounds added to separate close ones, and
        chosen by farm.tuning.finalists.decide (a tie within config.noise keeps the stored
        winner, else the default, else the simplest); stored, and returned as a WinnerRecord."""
        spec = catalog.get(task.kernel)
        rows = store.recorded_schedules(self.db, task.topology, task.kernel, spec.source_hash(), task.problem.key())
        certified = sorted((r for r in rows.values() if r["status"] == "ok" and r["median_ns"]), key=_median)
        if not certified:
            why = failure_summary(rows)
            print(f"no certified schedule for {task.kernel} {task.problem}: no winner{why}", file=sys.stderr)
            return None
        finalists = [Schedule.from_key(r["schedule"]) for r in certified[: self.config.finalists]]
        ok = {r["schedule"] for r in certified}
        stored = self._stored_winner(task, spec.source_hash())
        for extra in (spec.default.key(), stored):
            if extra in ok and Schedule.from_key(extra) not in finalists:
                finalists.append(Schedule.from_key(extra))
        slot = self.pool.topologies()[task.topology][0]
        started = time.perf_counter()
        samples = self._remeasure_rounds(slot, task, finalists, rows)
        stats["remeasure_s"] = time.perf_counter() - started
        stats["finalists"] = len(finalists)
        stats["rounds"] = max((len(v) for v in samples.values() if v), default=0)
        stats["timings"] = sum(len(v) for v in samples.values() if v)  # finalist-rounds timed: the cost
        if not any(samples.values()):
            samples = {s.key(): [rows[s.key()]["median_ns"]] for s in finalists}
        decision = decide(samples, self.config.noise, stored, spec.default)
        best = decision.timings[decision.winner]
        default = decision.timings.get(spec.default.key())
        runner_up = decision.timings.get(decision.runner_up) if decision.runner_up else None
        record = WinnerRecord(
            topology_hash=task.topology,
            kernel=task.kernel,
            problem_key=task.problem.key(),
            source_hash=spec.source_hash(),
            schedule_key=decision.winner,
            median_ns=best.median_ns,
            default_median_ns=default.median_ns if default else None,
            speedup=default.median_ns / best.median_ns if default else None,
            campaign_id=self.campaign_id,
            device_name=profiles[slot].device_name,
            p20_ns=best.p20_ns,
            p80_ns=best.p80_ns,
            rounds=decision.rounds,
            runner_up=decision.runner_up,
            runner_up_ns=runner_up.median_ns if runner_up else None,
            margin=decision.margin,
            margin_low=decision.margin_low,
            margin_high=decision.margin_high,
            tie=decision.tie,
        )
        store.save_winner(self.db, record)
        return record

    def _stored_winner(self, task: Task, source_hash: str) -> str | None:
        """The schedule key of the winner stored for this problem and source, if any."""
        for w in store.winners(self.db, kernel=task.kernel, topology=task.topology):
            if w.problem_key == task.problem.key() and w.source_hash == source_hash:
                return w.schedule_key
        return None

    def _remeasure(self, slot: str, task: Task, finalists: list[Schedule], rows: dict) -> dict[str, float]:
        """Interleaved medians; the recorded trial medians if re-measurement fails."""
        samples = self._remeasure_rounds(slot, task, finalists, rows)
        return {k: statistics.median(v) for k, v in samples.items() if v}

    def _remeasure_rounds(
        self, slot: str, task: Task, finalists: list[Schedule], rows: dict
    ) -> dict[str, list[float] | None]:
        """Per-round medians (None: failed); the recorded trial medians, as one round, if
        re-measurement fails. A pool with only `remeasure` (one Timing each) gives one round."""
        c = self.config
        try:
            if not hasattr(self.pool, "remeasure_rounds"):
                timings = self.pool.remeasure(slot, task.kernel, task.problem, finalists, c.reps, c.rounds, c.seed)
                return {k: [t.median_ns] if t is not None else None for k, t in timings.items()}
            return self.pool.remeasure_rounds(
                slot, task.kernel, task.problem, finalists, c.reps, c.rounds, c.seed, c.max_rounds, c.noise
            )
        except WorkerFailure as exc:
            print(f"re-measuring {task.kernel} {task.problem} failed ({exc}); using trial medians", file=sys.stderr)
            return {s.key(): [rows[s.key()]["median_ns"]] for s in finalists}

    def _summary(self, winners: list[WinnerRecord]) -> None:
        row = store.campaign(self.db, self.campaign_id)
        counts = store.trial_status_counts(self.db, campaign=self.campaign_id)
        artifacts.write_campaign_summary(self.out, row, winners, counts, self.tasks)


def _task_key(task: Task) -> tuple[str, str, str]:
    return (task.topology, task.kernel, task.problem.key())


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
    begun = time.perf_counter()
    db = store.open_store(db_url)
    out = config.out or store.farm_home() / "artifacts"
    with WorkerPool(ray_address, allow_cpu=allow_cpu, trial_timeout_s=trial_timeout_s, gpus=gpus) as pool:
        reports = pool.reports()
        print(format_workers(reports), file=sys.stderr)
        up_s = time.perf_counter() - begun  # on the H200 ~15 s of a campaign's process wall sat outside it
        print(f"startup: database, Ray and {len(reports)} worker(s) up in {up_s:.1f} s", file=sys.stderr)
        with device_locks(reports, command):  # waits while another local campaign times on these GPUs
            started = time.perf_counter()
            try:
                return Campaign(config, pool, db, Path(out), command).run()
            finally:
                print(format_stage_times(pool, time.perf_counter() - started), file=sys.stderr)
