"""`farm.tune_kernel`: tune one kernel in this process, on the local adapter, without Ray.

For notebooks and scripts: the same engine as `farm tune` (farm.tuning.engine), run
in-process. The same plan (farm.tuning.tasks: each problem's candidate space and budget, a
CPU adapter's cap), the same search and warm start (farm.tuning.search), the same re-measured
finalists and winner rule (farm.tuning.finalists), the same winner with its decision (a
farm.store.WinnerRecord); only the trial runner differs: one device in this process (the
trial core a Ray worker runs, farm.tuning.runner.TrialRunner) instead of the worker pool.
Without `db=` nothing is stored and nothing is resumed; with it, trials and winners are
stored as `farm tune` stores them (a campaign row too), the trials stored before for the
same adapter, kernel source and problem are replayed and warm-start the model search, a
stored winner breaks a tie, and `ForgeRuntime` serves the winners.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from farm import catalog, store
from farm.catalog import KernelSpec
from farm.gpu import Device, choose_adapter
from farm.schedule import Problem, Status
from farm.store import WinnerRecord
from farm.trial import TrialResult
from farm.tuning.engine import tune_problem
from farm.tuning.problems import check_problem
from farm.tuning.runner import TrialRunner
from farm.tuning.tasks import Task, TuneConfig, notice_cpu, parse_dims, plan
from farm.tuning.trial_logs import MemoryLog, StoreLog, TrialLog


@dataclass
class Tuned:
    """What `tune_kernel` found: every trial its searches used, and the winner per problem
    (a WinnerRecord, as `farm winners` lists it: `.schedule`, `.median_ns`, `.speedup`,
    `.knobs`, and the decision: `.runner_up`, `.margin` with `.margin_low`/`.margin_high`,
    `.tie`, `.rounds`, `.p20_ns`/`.p80_ns`)."""

    kernel: str
    trials: list[TrialResult]
    winners: dict[str, WinnerRecord]  # problem key -> winner

    @property
    def winner(self) -> WinnerRecord:
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
    rounds: int = 3,
    db: str | None = None,
    adapter: str | None = None,
    device: Device | None = None,
    noise: float = 0.01,
    max_rounds: int = 15,
) -> Tuned:
    """Tune `kernel` (a farm.Kernel or any catalog name) for each of `sizes` (default: the
    kernel's own sizes) as `farm tune` does, in this process: `strategy` (exhaustive | random
    | model) within at most `budget` schedules per problem besides the default (None: all;
    on a CPU adapter at most farm.tuning.tasks.CPU_BUDGET, as `farm tune --allow-cpu`), each
    trial `warmup` untimed and `reps` timed runs; then the best `finalists` certified
    schedules, the default and any stored winner re-measured interleaved (`rounds` rounds,
    more up to `max_rounds` until close ones separate), and the winner chosen as a campaign
    chooses it: a tie within `noise` goes to the stored winner, else the default, else the
    simplest schedule. Returns Tuned(trials, winners); ValueError (with the first failure)
    when no schedule certified for any size.

    `sizes` is a list of sizes, each a dict {dim: value}, a Problem or a 'dim=value,...'
    string; a single size may also be passed alone (a dict, a Problem or a string; a string
    may hold several sizes separated by ';', as `farm tune --sizes` does). A size that names
    the wrong dimensions, a dimension twice, a value that is not an integer or below 1, or
    needs buffers larger than the adapter binds is a ValueError naming the kernel and the
    size, before anything runs. `db` (a SQLAlchemy URL): see the module docstring."""
    spec = catalog.get(getattr(kernel, "name", kernel))
    # before the device opens; a size given twice is tuned once (as farm tune --sizes does)
    problems = list(dict.fromkeys(_problem(spec, s) for s in _size_list(spec, sizes))) if sizes else None
    device = device if device is not None else Device(choose_adapter(adapter))
    profile = device.profile
    for problem in problems or ():
        _check(spec, problem, problem.key(), profile)
    config = TuneConfig(
        kernels=(spec.name,), sizes={spec.name: problems} if problems else {}, strategy=strategy, budget=budget,
        reps=reps, warmup=warmup, seed=seed, finalists=finalists, rounds=rounds, noise=noise,
        max_rounds=max(rounds, max_rounds),
    )  # fmt: skip
    tasks = plan(config, profile.topology_hash(), profile)
    notice_cpu(profile, tasks)
    trials: list[TrialResult] = []
    winners: dict[str, WinnerRecord] = {}
    with _trial_log(db, profile, spec, config, tasks) as log:
        runner = TrialRunner(device, "local", compile_ahead=True)
        try:
            siblings: list[str] = []
            for task in tasks:
                spec.reference(task.problem, spec.default, spec.generate(task.problem, seed))  # a broken one fails here
                outcome = tune_problem(task, config, runner, log, siblings)
                trials += outcome.trials
                if outcome.winner is not None:
                    winners[task.problem.key()] = outcome.winner
                    siblings.append(outcome.winner.schedule_key)
        finally:
            runner.close()
    if not winners:
        _no_winner(spec, trials)
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


def _no_winner(spec: KernelSpec, trials: list[TrialResult]) -> None:
    failed = [t for t in trials if t.status != Status.OK]
    first = failed[0] if failed else None
    why = f"; first failure ({first.status}, {first.key.schedule}): {first.message}" if first else ""
    raise ValueError(f"kernel {spec.name!r}: no schedule was certified, so there is no winner{why}")


@contextmanager
def _trial_log(db: str | None, profile, spec: KernelSpec, config: TuneConfig, tasks: list[Task]) -> Iterator[TrialLog]:
    """The engine's trial log for `tune_kernel`: memory without `db`; with it the database
    (trials in SQL as each search ends, no Parquet files) under a campaign row that ends
    done, failed or interrupted (Ctrl-C) with its counters, as `farm tune`'s does."""
    if db is None:
        yield MemoryLog()
        return
    target = store.open_store(db)
    try:
        store.upsert_topology(target, profile)
        total = sum(t.trials for t in tasks)
        command = f"farm.tune_kernel({spec.name!r})"
        c = config
        log = StoreLog(target, store.start_campaign(target, command, c.strategy, c.budget, c.reps, total))
        status = "failed"
        try:
            yield log
            status = "done"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            total = log.done if status == "done" else total  # done: what the searches ran or replayed
            store.update_campaign(target, log.campaign_id, log.done, log.failures, total)
            store.finish_campaign(target, log.campaign_id, status)
    finally:
        target.engine.dispose()
