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

    The decision (revision 0005; None on older rows and on records without one): the
    winner's p20/p80 over the re-measurement's rounds, how many rounds the leader ran, the
    runner-up (its schedule key and median) and the margin `runner_up / winner - 1` with
    its sign-test interval, and `tie` (the winner was chosen among finalists within the
    noise: farm.tuning.finalists). `vendor_ratio` is what `farm bench` last measured for
    this schedule: the vendor library's kernel-only time over the tuned kernel's (a speed
    ratio as bench.md's "tuned/vendor speed": > 1, the tuned kernel is faster), with how
    the vendor was timed and when; a campaign storing another schedule clears it.
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
    p20_ns: float | None = None
    p80_ns: float | None = None
    rounds: int | None = None
    runner_up: str | None = None
    runner_up_ns: float | None = None
    margin: float | None = None
    margin_low: float | None = None
    margin_high: float | None = None
    tie: bool | None = None
    vendor_ratio: float | None = None
    vendor_method: str | None = None
    vendor_measured_at: datetime | None = None

    @property
    def schedule(self) -> Schedule:
        return Schedule.from_key(self.schedule_key)

    @property
    def problem(self) -> Problem:
        return Problem.from_key(self.problem_key)

    @property
    def knobs(self) -> dict:
        """The schedule's knob values as its kernel declares them (a user kernel's strings and
        bools decoded; every knob gemm has); the schedule's own values for a kernel without
        such a mapping or not loaded in this process."""
        from farm import catalog

        try:
            spec = catalog.get(self.kernel)
        except ValueError:
            return self.schedule.as_dict()
        decode = getattr(spec, "knobs", None)
        return decode(self.schedule) if decode is not None else self.schedule.as_dict()

    def is_stale(self, current_source_hash: str) -> bool:
        return self.source_hash != current_source_hash


# The decision columns of a winner row (revision 0005), as WinnerRecord names them.
DECISION_FIELDS = (
    "p20_ns", "p80_ns", "rounds", "runner_up", "runner_up_ns", "margin", "margin_low", "margin_high", "tie",
)  # fmt: skip
VENDOR_FIELDS = ("vendor_ratio", "vendor_method", "vendor_measured_at")
