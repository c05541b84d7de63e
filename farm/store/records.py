"""Plain records the store hands out, independent of the ORM session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from farm.schedule import Problem, Schedule


@dataclass(frozen=True)
class WinnerRecord:
    """The best certified schedule for (topology, kernel, problem).

    `source_hash` is the kernel source it was tuned against; a reader compares it with
    `catalog.get(kernel).source_hash()` and treats a mismatch as stale (not served).
    `updated_at` is filled by the store when read back (None on records built by callers).
    """

    topology_hash: str
    kernel: str
    problem_key: str
    source_hash: str
    schedule_key: str
    median_ns: float
    default_median_ns: float | None = None
    speedup: float | None = None
    campaign_id: int | None = None
    device_name: str = ""
    updated_at: datetime | None = None

    @property
    def schedule(self) -> Schedule:
        return Schedule.from_key(self.schedule_key)

    @property
    def problem(self) -> Problem:
        return Problem.from_key(self.problem_key)

    def is_stale(self, current_source_hash: str) -> bool:
        return self.source_hash != current_source_hash
