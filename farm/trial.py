"""A trial: one (topology, kernel, source, problem, schedule) measured and certified.

A value module one floor up from farm.schedule (floor 1: it carries farm.gpu's Timing):
the worker makes these, the store records them, the campaign and the dashboard read them
back.

Failures are data (a Status and a message), never missing rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from farm.gpu import Timing
from farm.schedule import Problem, Schedule, Status


@dataclass(frozen=True)
class ErrorMetrics:
    """How far a schedule's outputs are from the numpy reference (farm.oracle.compare)."""

    max_abs: float = 0.0
    mean_abs: float = 0.0
    rmse: float = 0.0
    max_rel: float = 0.0

    def as_dict(self) -> dict[str, float]:
        # Spelled out: dataclasses.asdict deep-copies, and every recorded trial passes here.
        return {"max_abs": self.max_abs, "mean_abs": self.mean_abs, "rmse": self.rmse, "max_rel": self.max_rel}


@dataclass(frozen=True)
class TrialKey:
    """Identity of a trial; re-running a campaign skips keys already recorded (resume)."""

    topology_hash: str
    kernel: str
    source_hash: str
    problem: Problem
    schedule: Schedule


@dataclass(frozen=True)
class TrialResult:
    key: TrialKey
    status: Status
    message: str = ""
    timing: Timing | None = None
    metrics: ErrorMetrics = field(default_factory=ErrorMetrics)
    host: str = ""
    worker_id: str = ""
    finished_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def median_ns(self) -> float | None:
        return self.timing.median_ns if self.timing else None

    def __reduce__(self):
        # Flat: every trial crosses Ray once, and unpickling nested dataclasses was a driver's
        # largest cost per trial after recording it.
        k, t, m = self.key, self.timing, self.metrics
        timing = (t.median_ns, t.p20_ns, t.p80_ns, t.min_ns, t.reps, t.method) if t is not None else None
        metrics = (m.max_abs, m.mean_abs, m.rmse, m.max_rel)
        return _result, (k.topology_hash, k.kernel, k.source_hash, k.problem, k.schedule, self.status.value,
                         self.message, timing, metrics, self.host, self.worker_id, self.finished_at)  # fmt: skip

    def as_row(self) -> dict:
        """Flat dict (SQL/Parquet/CSV friendly)."""
        t = self.timing
        return {
            "topology_hash": self.key.topology_hash,
            "kernel": self.key.kernel,
            "source_hash": self.key.source_hash,
            "problem": self.key.problem.key(),
            "schedule": self.key.schedule.key(),
            "status": self.status.value,
            "message": self.message,
            "median_ns": t.median_ns if t else None,
            "p20_ns": t.p20_ns if t else None,
            "p80_ns": t.p80_ns if t else None,
            "min_ns": t.min_ns if t else None,
            "reps": t.reps if t else None,
            "timing_method": t.method if t else None,
            **self.metrics.as_dict(),
            "host": self.host,
            "worker_id": self.worker_id,
            "finished_at": self.finished_at,
        }


def _result(topology, kernel, source, problem, schedule, status, message, timing, metrics, host, worker, finished):
    """An unpickled TrialResult (TrialResult.__reduce__)."""
    key = TrialKey(topology, kernel, source, problem, schedule)
    timing = Timing(*timing) if timing is not None else None
    return TrialResult(key, Status(status), message, timing, ErrorMetrics(*metrics), host, worker, finished)
