"""What a campaign will run: its configuration, and the tasks it plans per topology.

`TuneConfig` is what `farm tune` asked for; `parse_sizes` reads its `--sizes`; `plan` turns
it into one `Task` per (kernel, problem) for a topology, each with the schedules that can
run on that adapter and its trial budget (capped at CPU_BUDGET on a CPU adapter, with
`notice_cpu` saying so).

Budgets that scale with the space: without `--budget`, `farm tune` asks for
DEFAULT_BUDGET trials with `space_share` SPACE_SHARE, and the model search's cap grows to
that share of the problem's valid schedules (`Task.budget`), while the trials past
DEFAULT_BUDGET (`Task.extend_after`) are spent only while the search still improves on its
best (farm.tuning.search.model_based): a large space whose search has not settled gets more
trials, a settled one stops where it did. `--budget N` is an explicit cap: no scaling.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from farm import catalog
from farm.catalog import KernelSpec
from farm.gpu import HardwareProfile
from farm.schedule import Problem, Schedule
from farm.tuning.problems import check_problem

CPU_BUDGET = 8  # schedules per (kernel, problem) on a CPU adapter, besides the default
DEFAULT_BUDGET = 64  # trials per (kernel, problem) for `farm tune` and `farm serve` unless --budget says otherwise
# Without --budget, `farm tune`'s model search may grow its cap to this share of the valid
# schedules (spending past DEFAULT_BUDGET only while it still improves): a space of 785
# schedules gets up to 262 trials; spaces under 192 keep 64.
SPACE_SHARE = 1 / 3


@dataclass(frozen=True)
class TuneConfig:
    """What to tune and how: a campaign's (`farm tune`, `farm serve`) or `farm.tune_kernel`'s."""

    kernels: tuple[str, ...]
    sizes: dict[str, list[Problem]] = field(default_factory=dict)
    strategy: str = "model"
    budget: int | None = None
    reps: int = 10
    warmup: int = 2
    seed: int = 0
    finalists: int = 3
    rounds: int = 3
    out: Path | None = None
    # The relative difference that counts as noise (ties between finalists within
    # it, the model search's stop), the re-measurement's cap on rounds added to separate
    # close finalists, and whether the model search may stop short of `budget` (a cap).
    noise: float = 0.01
    max_rounds: int = 15
    adaptive: bool = True
    # The model search's cap grows to this share of each problem's valid schedules, trials
    # past `budget` spent only while it still improves (0: `budget` is the cap). `rounds` is
    # the re-measurement's first rounds over every finalist: past them, only the leader and
    # the finalists not yet separated get more (farm.tuning.finalists).
    space_share: float = 0.0


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
    extend_after: int | None = None  # trials past this many only while the search improves (None: to the cap)

    @property
    def planned(self) -> int:
        """Trials of the space the search plans: `extend_after` when the cap may be reached
        only by improving, else the cap (the whole space when there is none)."""
        cap = self.budget if self.budget is not None else len(self.space)
        return min(len(self.space), cap if self.extend_after is None else min(cap, self.extend_after))

    @property
    def trials(self) -> int:
        """Trials this task plans to run: the default plus `planned` of the space."""
        return 1 + self.planned


def parse_sizes(text: str) -> dict[str, list[Problem]]:
    """`gemm:m=64,k=64,n=64;gemv:m=256,n=256` -> {kernel: [Problem, ...]} (a kernel may repeat;
    a problem given twice is kept once, in the order first given).

    ValueError when it names no problem, a dimension twice, or a problem that no adapter can
    run (`check_problem`)."""
    sizes: dict[str, list[Problem]] = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        name, sep, dims = entry.partition(":")
        if not sep or not dims:
            raise ValueError(f"--sizes entry {entry!r} is not KERNEL:dim=value,...")
        try:
            values = parse_dims(dims)
        except ValueError as exc:
            raise ValueError(f"--sizes entry {entry!r}: {exc}") from None
        spec = catalog.get(name.strip())
        try:
            problem = spec.problem(**values)  # the kernel's own rules for its dimensions
        except ValueError as exc:
            raise ValueError(f"--sizes entry {entry!r}: {exc}") from None
        check_problem(spec, problem)
        if problem not in sizes.setdefault(spec.name, []):
            sizes[spec.name].append(problem)
    if not sizes:
        raise ValueError(f"--sizes {text!r} names no problem; expected e.g. 'gemv:m=256,n=256'")
    return sizes


def sizes_among(sizes: dict[str, list[Problem]], kernels: list[str], what: str) -> None:
    """ValueError naming the --sizes kernels not among `kernels` (`what`: which kernels those are)."""
    if outside := sorted(set(sizes) - set(kernels)):
        raise ValueError(f"--sizes names {', '.join(outside)}, not among {what} ({', '.join(kernels)})")


def parse_dims(text: str) -> dict[str, int]:
    """`m=64,n=32` -> {"m": 64, "n": 32}; ValueError naming the pair that is not name=integer,
    or the dimension given twice (`m=64,m=32` would otherwise silently be m=32)."""
    values: dict[str, int] = {}
    for pair in text.split(","):
        name, sep, value = (part.strip() for part in pair.partition("="))
        try:
            number = int(value) if sep and name else None
        except ValueError:
            number = None
        if number is None:
            raise ValueError(f"dimensions must be name=integer pairs, got {pair.strip()!r}")
        if name in values:
            raise ValueError(f"dimension {name} is given twice ({name}={values[name]}, {name}={number})")
        values[name] = number
    return values


def plan(config: TuneConfig, topology: str, profile: HardwareProfile) -> list[Task]:
    """Tasks for one topology. Each space holds the schedules that pass the kernel's checks
    for its problem on this adapter (budget goes to schedules that can run; `excluded`
    counts the rest); on a CPU adapter each budget is capped at CPU_BUDGET; otherwise the
    model search's cap scales with the space (`scaled_budget`)."""
    tasks = []
    for name in config.kernels:
        spec = catalog.get(name)
        candidates = _candidates(spec, tuple((knob, tuple(values)) for knob, values in spec.space.items()))
        for problem in config.sizes.get(name) or spec.default_problems(profile):
            space = [s for s in candidates if not spec.invalid_reason(s, problem, profile)]
            budget, capped, extend_after = config.budget, None, None
            if profile.is_cpu and (budget is None or budget > CPU_BUDGET) and len(space) > CPU_BUDGET:
                capped, budget = min(len(space), budget or len(space)), CPU_BUDGET
            elif config.strategy == "model" and config.adaptive:
                budget, extend_after = scaled_budget(budget, len(space), config.space_share)
            excluded = len(candidates) - len(space)
            tasks.append(Task(topology, name, problem, space, budget, capped, excluded, extend_after))
    return tasks


@functools.lru_cache(maxsize=64)
def _candidates(spec: KernelSpec, space: tuple) -> tuple[Schedule, ...]:
    """`spec`'s schedules but its default, built once per space: `farm serve` plans each
    request it claims as homes free, and building recurrent's 2,196 schedules anew each time
    cost more than checking them (a schedule built once also keeps its memoized values)."""
    return tuple(s for s in spec.schedules() if s != spec.default)


def scaled_budget(budget: int | None, space: int, share: float) -> tuple[int | None, int | None]:
    """(cap, extend_after) for a space of `space` schedules: the cap grows from `budget` to
    ceil(share x space) when that is larger, the trials past `budget` spent only while the
    search improves; `budget` unchanged (and no extension) when it is None (the whole
    space), `share` is 0 or the share is no larger."""
    if budget is None or share <= 0:
        return budget, None
    grown = min(space, math.ceil(share * space))
    return (grown, budget) if grown > budget else (budget, None)


def notice_cpu(profile: HardwareProfile, tasks: list[Task]) -> None:
    """The notices for a CPU adapter: its timings say nothing about GPUs, and which budgets were capped."""
    if not profile.is_cpu:
        return
    print(f"notice: tuning on CPU adapter {profile.summary}; its timings say nothing about GPUs", file=sys.stderr)
    for task in tasks:
        if task.capped_from is not None:
            print(
                f"notice: {task.kernel} {task.problem}: budget capped at {task.budget} of {task.capped_from} schedules",
                file=sys.stderr,
            )
