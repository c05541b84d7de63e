"""The tuning engine: one problem searched, its finalists re-measured, its winner decided.

`tune_problem` is what `farm tune` (farm.tuning.campaign) and `farm.tune_kernel`
(farm.tuning.local) both run for each (kernel, problem) of their plan (farm.tuning.tasks.Task):

1. the default schedule, then the strategy (farm.tuning.search) over the task's space
   within its budget, the default first in the strategy's first batch (a round of its own
   would add one to every problem's chain of rounds). A schedule with a recorded trial is
   not run again: the recorded result is replayed to the strategy (a re-run resumes where
   the last one stopped). The model strategy is warm-started: every recorded trial of this
   problem seeds its models and counts against the budget, and so do the winners of this
   run's earlier problems of the same kernel (`siblings`, SIBLING_SEEDS of them, measured
   with the seeds right after the default: a neighbouring problem's winner is a better
   first guess than a random schedule); it stops early when its models see nothing better
   than the noise, and it ends with a polish of the incumbent's neighbourhood;
2. the best few certified trials (any run's), the default and the stored winner re-measured
   interleaved on one device, rounds added until close ones separate or tie;
3. farm.tuning.finalists.decide picks the winner (a tie within the noise keeps the stored
   winner, else the default, else the simplest), returned as a WinnerRecord with its decision:
   runner-up, margin and its interval, quantiles over rounds, rounds, tie.

Two things differ between a campaign and a notebook, each behind one small interface the
strategies never see. A `TrialExecutor` runs jobs and re-measures finalists: a campaign's is the
Ray worker pool's workers of one topology, `tune_kernel`'s one device in this process. A
`TrialLog` holds what was recorded before (resume, warm start, the stored winner) and takes the
new trials and the winner (farm.tuning.trial_logs): `StoreLog` over a database, `MemoryLog`
when there is none.
"""

from __future__ import annotations

import heapq
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from farm import catalog
from farm.schedule import Problem, Schedule
from farm.store import WinnerRecord
from farm.trial import TrialResult
from farm.tuning.finalists import Decision, decide
from farm.tuning.job import Job
from farm.tuning.report import failure_summary
from farm.tuning.search import POLISH_ROUNDS, Budget, strategy
from farm.tuning.tasks import Task, TuneConfig
from farm.tuning.trial_logs import TrialLog

SIBLING_SEEDS = 4  # this run's winners of a kernel's other problems tried first on the next one


class RemeasureFailed(RuntimeError):
    """The runner could not re-measure the finalists (a worker timed out or died): the
    winner is then chosen from the trials' own medians."""


class TrialExecutor(Protocol):
    """Who runs a task's trials: `workers` is how many run at once (the model search's batch
    size follows it), `device_name` is stamped on the winner."""

    workers: int
    device_name: str

    def evaluate(self, jobs: list[Job]) -> Iterable[TrialResult]:
        """One result per job, in any order (results may stream back as they finish)."""

    def remeasure_rounds(
        self,
        kernel: str,
        problem: Problem,
        schedules: list[Schedule],
        reps: int,
        rounds: int,
        seed: int,
        max_rounds: int,
        noise: float,
    ) -> dict[str, list[float] | None]:
        """{schedule key: one median per round} of an interleaved re-measurement on one device
        (farm.tuning.finalists.measure_until_resolved; None: that schedule failed), or RemeasureFailed."""

    def precompile(self, kernel: str, problem: Problem, schedules: list[Schedule], seed: int) -> object:
        """Start compiling these schedules (the search's likely next picks) and return at once."""


@dataclass
class Outcome:
    """One task tuned: the trials its search used (replayed ones and the warm start's
    included), its winner (None when nothing certified) and what it cost (`stats`, the
    campaign summary's "tasks" entry)."""

    trials: list[TrialResult]
    winner: WinnerRecord | None
    stats: dict = field(default_factory=dict)


def tune_problem(
    task: Task,
    config: TuneConfig,
    runner: TrialExecutor,
    log: TrialLog,
    siblings: Sequence[str] = (),
    first_trial_done: Callable[[], None] | None = None,
) -> Outcome:
    """Search `task`, re-measure its finalists and decide its winner (see the module docstring).
    `siblings`: the schedule keys that won this run's earlier problems of the kernel, oldest
    first. `first_trial_done` runs once the first trial is back (the default schedule's, the
    first of the search's first batch; a campaign then asks its workers for the next
    problems' inputs)."""
    started = time.perf_counter()
    spec = catalog.get(task.kernel)
    recorded = log.recorded(task)
    used: dict[str, TrialResult] = {}
    evaluate = _evaluator(task, config, runner, log, recorded, used, first_trial_done)
    default_run = False

    def search_evaluate(batch: list[Schedule]) -> list[TrialResult]:
        # The default goes first in the search's first batch: one round of a problem's
        # critical path, not two (on a fleet each round waits for its slowest trial).
        nonlocal default_run
        if default_run:
            return evaluate(batch)
        default_run = True
        lead = [] if spec.default in batch else [spec.default]
        return evaluate([*lead, *batch])[len(lead) :]

    rng = random.Random(f"{config.seed}:{task.kernel}:{task.problem.key()}")
    budget = Budget(task.budget)
    warm = warm_start(task, config, runner, log, recorded)
    if warm:
        for result in warm["prior"]:
            used.setdefault(result.key.schedule.key(), result)
        warm["lead"] = sibling_schedules(task, siblings, recorded)  # measured with the seeds
    strategy(config.strategy)(task.space, search_evaluate, budget, rng, workers=runner.workers, **warm)
    if not default_run:  # the search ran nothing (no budget, or an empty space)
        search_evaluate([])
    log.searched(task, budget.spent)
    stats = {"kernel": task.kernel, "problem": task.problem.key(), "space": len(task.space), "cap": task.budget,
             "planned": task.planned, "trials": budget.spent}  # fmt: skip
    stats["search_s"] = time.perf_counter() - started
    winner = choose_winner(task, config, runner, log, stats)
    log.forget(task)
    return Outcome(list(used.values()), winner, stats)


def _evaluator(
    task: Task,
    config: TuneConfig,
    runner: TrialExecutor,
    log: TrialLog,
    recorded: dict[str, TrialResult],
    used: dict[str, TrialResult],
    first_trial_done: Callable[[], None] | None = None,
):
    """The strategies' `evaluate`: recorded trials replayed, the rest run by `runner` and
    logged; `first_trial_done` runs once, as the first result of the first batch is back."""
    pending = first_trial_done

    def first_back() -> None:
        nonlocal pending
        if pending is not None:
            done, pending = pending, None
            done()

    def evaluate(batch: list[Schedule]) -> list[TrialResult]:
        results: dict[str, TrialResult] = {}
        fresh = []
        for schedule in batch:
            known = recorded.get(schedule.key())
            if known is None:
                fresh.append(Job(task.kernel, task.problem, schedule, config.seed, config.warmup, config.reps))
                continue
            results[schedule.key()] = known
            log.replayed(known)
        for result in runner.evaluate(fresh):
            results[result.key.schedule.key()] = result
            log.add(result)
            first_back()
        first_back()  # every trial of the first batch was replayed
        ordered = [results[s.key()] for s in batch]
        for result in ordered:
            used.setdefault(result.key.schedule.key(), result)
        return ordered

    return evaluate


def sibling_schedules(task: Task, siblings: Sequence[str], recorded: dict[str, TrialResult]) -> list[Schedule]:
    """The schedules that won this kernel's earlier problems in this run (the SIBLING_SEEDS
    latest, distinct), where this problem can run them and has no recorded trial of them: a
    neighbouring problem's winner is a better first guess than a random schedule (a search
    of one problem may miss, within its budget, the schedule that won its neighbour and is
    faster here too), and every run of the same plan tries it. The model search measures
    them with its seeds (its `lead`)."""
    space = {s.key() for s in task.space}
    default = catalog.get(task.kernel).default.key()  # measured anyway
    keys: list[str] = []
    for key in reversed(siblings):
        if key in space and key not in recorded and key != default and key not in keys:
            keys.append(key)
    return [Schedule.from_key(k) for k in keys[:SIBLING_SEEDS]]


def warm_start(
    task: Task, config: TuneConfig, runner: TrialExecutor, log: TrialLog, recorded: dict[str, TrialResult]
) -> dict:
    """The model strategy's extra arguments: the recorded trials of this problem seed its
    models (counted as replayed, and against the budget), its adaptive stop (config.noise)
    unless config.adaptive is off, compile hints for the runner, and its final polish.
    Empty for the other strategies."""
    if config.strategy != "model":
        return {}
    space = {s.key() for s in task.space}
    prior = [result for key, result in recorded.items() if key in space]
    prior = prior[: min(len(task.space), task.budget or len(task.space))]
    for result in prior:
        log.replayed(result)
    noise = config.noise if config.adaptive else None

    def hint(schedules: list[Schedule]) -> None:
        runner.precompile(task.kernel, task.problem, schedules, config.seed)

    warm = {"prior": prior, "noise": noise, "extend_after": task.extend_after, "hint": hint}
    return warm | {"polish": POLISH_ROUNDS}  # the incumbent's neighbourhood measured before it stops


def choose_winner(
    task: Task, config: TuneConfig, runner: TrialExecutor, log: TrialLog, stats: dict
) -> WinnerRecord | None:
    """The best `config.finalists` certified trials of this problem (any run's), the default
    and the stored winner, re-measured interleaved with rounds added to separate close ones,
    decided by farm.tuning.finalists.decide, saved in `log` and returned; None (and one stderr
    line with the commonest failure) when no trial certified. The re-measurement's cost goes
    to `stats`."""
    spec = catalog.get(task.kernel)
    known = log.recorded(task)  # after the search: this run's trials too
    ok = {key for key, r in known.items() if r.ok and r.median_ns}
    if not ok:
        rows = {key: {"status": str(r.status), "message": r.message} for key, r in known.items()}
        print(f"no certified schedule for {task.kernel} {task.problem}: no winner{failure_summary(rows)}",
              file=sys.stderr)  # fmt: skip
        return None
    # equal medians in schedule-key order: the same finalists whichever order the trials were read or run in
    best = heapq.nsmallest(config.finalists, ok, key=lambda key: (float(known[key].median_ns), key))
    finalists = [known[key].key.schedule for key in best]
    stored = log.stored_winner(task)
    for extra in (spec.default.key(), stored):
        if extra in ok and Schedule.from_key(extra) not in finalists:
            finalists.append(Schedule.from_key(extra))
    started = time.perf_counter()
    samples = _remeasure(task, config, runner, finalists, known)
    stats["remeasure_s"] = time.perf_counter() - started
    stats["finalists"] = len(finalists)
    stats["rounds"] = max((len(v) for v in samples.values() if v), default=0)
    stats["timings"] = sum(len(v) for v in samples.values() if v)  # finalist-rounds timed: the cost
    if not any(samples.values()):
        samples = {s.key(): [float(known[s.key()].median_ns)] for s in finalists}
    decision = decide(samples, config.noise, stored, spec.default)
    winner = winner_record(task, spec.source_hash(), spec.default.key(), decision, runner.device_name,
                           log.campaign_id)  # fmt: skip
    log.save_winner(winner)
    return winner


def _remeasure(
    task: Task, config: TuneConfig, runner: TrialExecutor, finalists: list[Schedule], known: dict[str, TrialResult]
) -> dict[str, list[float] | None]:
    """Per-round medians of the finalists; their trial medians, as one round, when the runner fails."""
    c = config
    try:
        return runner.remeasure_rounds(
            task.kernel, task.problem, finalists, c.reps, c.rounds, c.seed, max(c.rounds, c.max_rounds), c.noise
        )
    except RemeasureFailed as exc:
        print(f"re-measuring {task.kernel} {task.problem} failed ({exc}); using trial medians", file=sys.stderr)
        return {s.key(): [float(known[s.key()].median_ns)] for s in finalists}


def winner_record(
    task: Task, source_hash: str, default: str, decision: Decision, device_name: str, campaign_id: int | None
) -> WinnerRecord:
    """The winner row of a decision: its median and quantiles over the rounds, its speedup over
    the default schedule (when that was re-measured), the runner-up, margin and tie."""
    best = decision.timings[decision.winner]
    base = decision.timings.get(default)
    runner_up = decision.timings.get(decision.runner_up) if decision.runner_up else None
    return WinnerRecord(
        topology_hash=task.topology,
        kernel=task.kernel,
        problem_key=task.problem.key(),
        source_hash=source_hash,
        schedule_key=decision.winner,
        median_ns=best.median_ns,
        default_median_ns=base.median_ns if base else None,
        speedup=base.median_ns / best.median_ns if base else None,
        campaign_id=campaign_id,
        device_name=device_name,
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
