"""The tuning engine's trial executor for a campaign (farm.tuning.engine.TrialExecutor): the
Ray pool's workers of one topology, beside other problems through the campaign's TrialQueue."""

from __future__ import annotations

from farm.gpu import HardwareProfile
from farm.schedule import Problem, Schedule
from farm.tuning.engine import RemeasureFailed
from farm.tuning.job import Job
from farm.tuning.workers import TrialQueue, WorkerFailure, WorkerPool


class PoolExecutor:
    """The engine's trial executor for a campaign: the pool's workers of one topology run the
    trials, the first of them re-measures the finalists. Beside other problems (`trials`, the
    campaign's TrialQueue, and `home`, the task's share of the workers): its trials go to its
    home first, the search sizes its batches for the home, compile hints go only there (a hint
    per worker per round would cost the driver the fleet's size at each round), and the
    home's least busy worker re-measures, taking no trials meanwhile."""

    def __init__(
        self,
        pool: WorkerPool,
        topology: str,
        profiles: dict[str, HardwareProfile],
        trials: TrialQueue | None = None,
        home: list[str] | None = None,
    ):
        self.pool, self.topology, self.trials = pool, topology, trials
        slots = pool.topologies()[topology]
        self.home = list(home) if home else None
        self.slot, self.workers = (self.home or slots)[0], len(self.home or slots)
        self.device_name = profiles[self.slot].device_name

    def evaluate(self, jobs: list[Job]):
        if self.trials is not None:
            return self.trials.stream(jobs, self.home)
        return self.pool.stream(jobs, self.topology)

    def precompile(self, kernel: str, problem: Problem, schedules: list[Schedule], seed: int) -> None:
        ahead = getattr(self.pool, "precompile", None)  # a pool without it (the tests' fakes) compiles at the trial
        if ahead is not None:
            only = () if self.home is None else (self.home,)  # alone on the workers: every one of them
            ahead(kernel, problem, schedules, seed, self.topology, *only)

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
        """The pool's re-measurement on one worker: this topology's first, or beside other
        problems the home's least busy, which takes no trials meanwhile (TrialQueue.reserved)."""
        args = (kernel, problem, schedules, reps, rounds, seed, max_rounds, noise)
        try:
            if self.trials is None:
                return self.pool.remeasure_rounds(self.slot, *args)
            with self.trials.reserved(self.home) as slot:
                return self.pool.remeasure_rounds(slot, *args)
        except WorkerFailure as exc:
            raise RemeasureFailed(str(exc)) from exc
