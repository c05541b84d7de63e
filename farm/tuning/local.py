"""`farm.tune_kernel`: tune one kernel in this process, on the local adapter, without Ray.

For notebooks and scripts: the same trial core as a Ray worker (farm.tuning.runner's
TrialRunner: every candidate certified against the reference, then timed), the same
strategies (farm.tuning.search) and the same winner rule as a campaign (the best few
certified schedules and the default re-measured interleaved; the best median wins).
Nothing is stored unless `db=` names a database (then trials, winners and a campaign row
are, as `farm tune` would, and `ForgeRuntime` serves the winners).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from farm import catalog, store
from farm.catalog import KernelSpec
from farm.gpu import Device, choose_adapter
from farm.schedule import Problem, Schedule, Status
from farm.store import WinnerRecord
from farm.trial import TrialResult
from farm.tuning import search as strategies
from farm.tuning.job import Job
from farm.tuning.problems import check_problem
from farm.tuning.runner import TrialRunner
from farm.tuning.search import Budget
from farm.tuning.tasks import parse_dims


@dataclass
class Winner:
    problem: Problem
    schedule: Schedule
    median_ns: float
    default_median_ns: float | None
    speedup: float | None
    knobs: dict = field(default_factory=dict)  # the schedule's knob values as declared


@dataclass
class Tuned:
    """What `tune_kernel` found: every trial, and the re-measured winner per problem."""

    kernel: str
    trials: list[TrialResult]
    winners: dict[str, Winner]  # problem key -> winner

    @property
    def winner(self) -> Winner:
        """The winner of the first problem (the usual single-size case)."""
        if not self.winners:
            raise ValueError(f"{self.kernel}: no schedule was certified, so there is no winner; see .trials")
        return next(iter(self.winners.values()))


def tune_kernel(
    kernel: KernelSpec | str,
    sizes: list | str | dict | Problem | None = None,
    *,
    strategy: str = "exhaustive",
    budget: int | None = None,
    reps: int = 10,
    warmup: int = 2,
    seed: int = 0,
    finalists: int = 3,
    rounds: int = 5,
    db: str | None = None,
    adapter: str | None = None,
    device: Device | None = None,
) -> Tuned:
    """Tune `kernel` (a farm.Kernel or any catalog name) for each of `sizes` (default: the
    kernel's own sizes) with `strategy` (exhaustive | random | model) and at most `budget`
    schedules per problem besides the default (None: all). Returns Tuned(trials, winners).

    `sizes` is a list of sizes, each a dict {dim: value}, a Problem or a 'dim=value,...'
    string; a single size may also be passed alone (a dict, a Problem or a string; a string
    may hold several sizes separated by ';', as `farm tune --sizes` does). A size that names
    the wrong dimensions, a dimension twice, a value that is not an integer or below 1, or
    needs buffers larger than the adapter binds is a ValueError naming the kernel and the
    size, before anything runs."""
    spec = catalog.get(getattr(kernel, "name", kernel))
    # before the device opens; a size given twice is tuned once (as farm tune --sizes does)
    problems = list(dict.fromkeys(_problem(spec, s) for s in _size_list(spec, sizes))) if sizes else None
    device = device if device is not None else Device(choose_adapter(adapter))
    profile = device.profile
    for problem in problems or ():
        _check(spec, problem, problem.key(), profile)
    problems = problems or spec.default_problems(profile)
    search = strategies.strategy(strategy)
    bench = TrialRunner(device, "local", compile_ahead=True)
    trials: list[TrialResult] = []
    winners: dict[str, Winner] = {}
    try:
        for problem in problems:
            spec.reference(problem, spec.default, spec.generate(problem, seed))  # a broken reference fails here
            results: dict[str, TrialResult] = {}

            def evaluate(batch: list[Schedule], problem=problem, results=results) -> list[TrialResult]:
                fresh = [s for s in batch if s.key() not in results]
                jobs = [Job(spec.name, problem, s, seed, warmup, reps) for s in fresh]
                for result in bench.evaluate(jobs):
                    results[result.key.schedule.key()] = result
                return [results[s.key()] for s in batch]

            evaluate([spec.default])
            space = [s for s in spec.schedules() if s != spec.default and not spec.invalid_reason(s, problem, profile)]
            search(space, evaluate, Budget(budget), random.Random(f"{seed}:{spec.name}:{problem.key()}"))
            trials += results.values()
            winner = _winner(bench, spec, problem, results, reps, rounds, seed, finalists)
            if winner is not None:
                winners[problem.key()] = winner
        if not winners:
            _no_winner(spec, trials)
        if db is not None:
            _store(db, profile, spec, trials, winners, strategy, budget, reps)
    finally:
        bench.close()
    return Tuned(spec.name, trials, winners)


def _size_list(spec: KernelSpec, sizes) -> list:
    """`sizes` as a list of sizes: one dict, Problem or string alone is one size (a string: ';'-separated sizes)."""
    if isinstance(sizes, str):
        return [part for part in (p.strip() for p in sizes.split(";")) if part]
    if isinstance(sizes, (dict, Problem)):
        return [sizes]
    try:
        return list(sizes)
    except TypeError:
        raise ValueError(
            f"tune_kernel({spec.name!r}): sizes must be a list of sizes (dicts, Problems or 'dim=value,...' "
            f"strings), got {sizes!r}"
        ) from None


def _problem(spec: KernelSpec, size) -> Problem:
    """The Problem for one size (farm tune --sizes' parsing and checks), or a ValueError naming kernel and size."""
    shown = size.key() if isinstance(size, Problem) else size
    try:
        if isinstance(size, Problem):
            values = size.as_dict()
        elif isinstance(size, str):
            values = parse_dims(size)
        elif isinstance(size, dict):
            values = {str(k): _integer(k, v) for k, v in size.items()}
        else:
            raise ValueError("expected a dict {dim: value}, a Problem or a 'dim=value,...' string")
    except ValueError as exc:
        raise ValueError(f"{_what(spec, shown)}: {exc}; {spec.name} expects {_expected(spec)}") from None
    try:
        problem = spec.problem(**values)  # the kernel's own checks: its dimensions, fft's lengths
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{_what(spec, shown)}: {exc}") from None
    _check(spec, problem, shown, None)
    return problem


def _check(spec: KernelSpec, problem: Problem, shown, profile) -> None:
    """check_problem (a dimension below 1, buffers over the binding limit of `profile` or any adapter)."""
    try:
        check_problem(spec, problem, profile)
    except ValueError as exc:
        reason = str(exc).removeprefix(f"{spec.name} {problem}: ")
        raise ValueError(f"{_what(spec, shown)}: {reason}") from None


def _integer(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"dimension {name} must be an integer, got {value!r}")
    return int(value)


def _what(spec: KernelSpec, shown) -> str:
    return f"tune_kernel({spec.name!r}): size {shown!r}"


def _expected(spec: KernelSpec) -> str:
    return ",".join(f"{d}=<integer >= 1>" for d in spec.dims)


def _winner(bench, spec, problem, results, reps, rounds, seed, finalists) -> Winner | None:
    certified = sorted((r for r in results.values() if r.status == Status.OK and r.timing), key=_median)
    if not certified:
        return None
    chosen = [r.key.schedule for r in certified[:finalists]]
    default_ok = results.get(spec.default.key()) is not None and results[spec.default.key()].status == Status.OK
    if default_ok and spec.default not in chosen:
        chosen.append(spec.default)
    timings = bench.remeasure(spec.name, problem, chosen, reps, rounds, seed)
    medians = {k: t.median_ns for k, t in timings.items() if t is not None}
    if not medians:
        medians = {s.key(): results[s.key()].timing.median_ns for s in chosen}
    best = min((s for s in chosen if s.key() in medians), key=lambda s: medians[s.key()])
    default_ns = medians.get(spec.default.key()) if default_ok else None
    knobs = spec.knobs(best) if hasattr(spec, "knobs") else best.as_dict()
    speedup = default_ns / medians[best.key()] if default_ns else None
    return Winner(problem, best, medians[best.key()], default_ns, speedup, knobs)


def _median(result: TrialResult) -> float:
    return float(result.timing.median_ns)


def _no_winner(spec: KernelSpec, trials: list[TrialResult]) -> None:
    failed = [t for t in trials if t.status != Status.OK]
    first = failed[0] if failed else None
    why = f"; first failure ({first.status}, {first.key.schedule}): {first.message}" if first else ""
    raise ValueError(f"kernel {spec.name!r}: no schedule was certified, so there is no winner{why}")


def _store(db, profile, spec, trials, winners, strategy_name, budget, reps) -> None:
    target = store.open_store(db)
    try:
        topology = store.upsert_topology(target, profile)
        campaign = store.start_campaign(
            target, f"farm.tune_kernel({spec.name!r})", strategy_name, budget, reps, len(trials)
        )
        store.record_trials(target, campaign, trials)
        for winner in winners.values():
            store.save_winner(target, WinnerRecord(
                topology_hash=topology, kernel=spec.name, problem_key=winner.problem.key(),
                source_hash=spec.source_hash(), schedule_key=winner.schedule.key(), median_ns=winner.median_ns,
                default_median_ns=winner.default_median_ns, speedup=winner.speedup, campaign_id=campaign,
                device_name=profile.device_name,
            ))  # fmt: skip
        store.update_campaign(target, campaign, len(trials), sum(t.status != Status.OK for t in trials))
        store.finish_campaign(target, campaign, "done")
    finally:
        target.engine.dispose()
