"""What a tuning worker is asked to do and where its time goes: `Job` (one trial to run),
`JobBatch` (jobs as they cross to a worker), `StageTimes` (seconds per stage, summed over
a worker's batch threads) and `format_stage_report` (one such report as "stage ms/trial" pairs)."""

from __future__ import annotations

import pickle
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

from farm.schedule import Problem, Schedule


class StageTimes:
    """Seconds spent per stage, summed over the threads running batches, and trials: where
    a worker's time goes (`farm.tuning.workers.WorkerPool.stage_times`, benchmarks/throughput.py).

    Stages under the GPU lock (compile_wait, prepare, run, time, map, certify_wait, and
    launch but for a batch's first COMPILE_AHEAD launches, built before it takes the lock)
    are time the GPU is held; "gpu_wait" (a batch waiting for another batch's trials) and
    "certify_drain" (a batch waiting for its last comparisons, after the lock) overlap the
    other batch's trials, and only cost GPU time when no batch is queued behind; "prefetch"
    (the next problem's inputs and reference, generated while this one's trials run) is off
    the GPU's path too."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.trials = 0
        self._lock = threading.Lock()

    @contextmanager
    def timed(self, stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + elapsed

    def count_trial(self) -> None:
        with self._lock:
            self.trials += 1

    def as_dict(self) -> dict:
        with self._lock:
            return {"trials": self.trials, "seconds": dict(self.seconds)}


def format_stage_report(report: dict) -> str:
    """A `TrialRunner.stage_times()` report as "stage ms/trial" pairs, stages sorted."""
    trials = max(1, report.get("trials", 0))
    return ", ".join(f"{k} {1e3 * v / trials:.0f}" for k, v in sorted(report.get("seconds", {}).items()))


@dataclass(frozen=True)
class Job:
    """One trial to run: certify `schedule` on `problem` with seed-derived inputs, then time it."""

    kernel: str
    problem: Problem
    schedule: Schedule
    seed: int = 0
    warmup: int = 2
    reps: int = 10

    def __post_init__(self) -> None:
        if self.reps < 1:
            raise ValueError(f"job reps must be >= 1, got {self.reps}")
        if self.warmup < 0:
            raise ValueError(f"job warmup must be >= 0, got {self.warmup}")

    def __reduce__(self):
        # Flat, as TrialResult's: a dataclass's default reduce goes through copyreg in Python.
        return Job, (self.kernel, self.problem, self.schedule, self.seed, self.warmup, self.reps)


class JobBatch(list):
    """A batch of jobs as one Ray argument: it arrives as a plain list of Jobs. Pickled by the
    C pickler in one call, where Ray's cloudpickle visits every object in Python (2-4x the
    driver's time per batch, measured)."""

    def __reduce__(self):
        return pickle.loads, (pickle.dumps(list(self), protocol=pickle.HIGHEST_PROTOCOL),)
