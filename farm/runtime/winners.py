"""Which stored winner serves a (topology, kernel, problem) on this machine.

Winners come from the SQL store or from a `farm export` JSON file (`load_candidates`), as
`Candidate` records. The lookup (`lookup_schedule`), in order, skipping stale winners
(whose kernel source hash differs from the current kernel's):
  1. "tuned": the winner for (this adapter's topology hash, kernel, problem);
  2. "nearest": the winner of the nearest tuned problem for the same topology
     (Euclidean distance between the log2 of the problem dimensions);
  3. "same-device": a winner for the same device name under another driver/topology
     (exact problem if present, else the nearest);
  4. "default": the kernel's documented default (workgroup_size 64).
A winner that is invalid for the problem (e.g. a vector width that doesn't divide n) is
replaced by the default. Every fallback comes with a warning text; logging it (once per
kernel and problem) and caching are the caller's business (farm.runtime.ForgeRuntime).
An unreachable or empty database gives no candidates and a reason, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from farm.catalog import KernelSpec
from farm.gpu import HardwareProfile
from farm.schedule import Problem, Schedule

SOURCES = ("tuned", "nearest", "same-device", "default")


@dataclass(frozen=True)
class Candidate:
    """A stored winner as the lookup sees it (a subset of farm.store.WinnerRecord)."""

    topology_hash: str
    kernel: str
    problem_key: str
    source_hash: str
    schedule_key: str
    device_name: str = ""

    @classmethod
    def of(cls, record: object) -> Candidate:
        """From a WinnerRecord, or a dict with the same fields (an exported JSON row)."""
        get = record.get if isinstance(record, dict) else lambda name, default="": getattr(record, name, default)
        return cls(
            topology_hash=str(get("topology_hash", "")),
            kernel=str(get("kernel", "")),
            problem_key=str(get("problem_key", "")),
            source_hash=str(get("source_hash", "")),
            schedule_key=str(get("schedule_key", "")),
            device_name=str(get("device_name", "") or ""),
        )


@dataclass(frozen=True)
class Lookup:
    """The schedule a call uses, where it came from (one of SOURCES), and the warning to log
    for it ("" when the exact tuned winner serves)."""

    schedule: Schedule
    source: str
    warning: str = ""


# -- choosing among candidates -----------------------------------------------------------


def problem_distance(a: Problem, b: Problem) -> float:
    """Euclidean distance between log2 of the dimensions; inf when the dimension names differ.

    Log space makes 128→256 as far as 4096→8192: schedules track orders of magnitude.
    """
    da, db = a.as_dict(), b.as_dict()
    if list(da) != list(db):
        return math.inf
    return math.sqrt(sum((math.log2(max(da[d], 1)) - math.log2(max(db[d], 1))) ** 2 for d in da))


def nearest(candidates: Iterable[Candidate], problem: Problem) -> Candidate | None:
    """The candidate whose problem is nearest to `problem` (ties: smallest problem key)."""
    best: tuple[float, str, Candidate] | None = None
    for cand in candidates:
        try:
            dist = problem_distance(problem, Problem.from_key(cand.problem_key))
        except ValueError:
            continue
        if math.isinf(dist):
            continue
        if best is None or (dist, cand.problem_key) < best[:2]:
            best = (dist, cand.problem_key, cand)
    return best[2] if best else None


def choose_winner(
    candidates: Iterable[Candidate], spec: KernelSpec, problem: Problem, profile: HardwareProfile
) -> tuple[Candidate | None, str]:
    """Apply the lookup order to `candidates`; returns (winner or None, source)."""
    current = spec.source_hash()
    fresh = [c for c in candidates if c.kernel == spec.name and c.source_hash == current]
    topology = profile.topology_hash()
    mine = [c for c in fresh if c.topology_hash == topology]
    for cand in mine:
        if cand.problem_key == problem.key():
            return cand, "tuned"
    near = nearest(mine, problem)
    if near is not None:
        return near, "nearest"
    same_device = [c for c in fresh if c.topology_hash != topology and c.device_name == profile.device_name]
    exact = [c for c in same_device if c.problem_key == problem.key()]
    near = exact[0] if exact else nearest(same_device, problem)
    if near is not None:
        return near, "same-device"
    return None, "default"


# -- from the chosen winner to the schedule a call uses ----------------------------------


def lookup_schedule(
    candidates: Iterable[Candidate], spec: KernelSpec, problem: Problem, profile: HardwareProfile
) -> Lookup:
    """The schedule for (`spec`, `problem`) on `profile`: the chosen winner when it is valid
    for `problem`, else the default (source "default"), with the warning for any fallback."""
    winner, source = choose_winner(candidates, spec, problem, profile)
    if winner is None:
        default = default_schedule(spec, problem, profile)
        return Lookup(
            default,
            "default",
            f"{spec.name} {problem}: no tuned winner for this adapter; using the default schedule {default}",
        )
    schedule = Schedule.from_key(winner.schedule_key)
    reason = spec.invalid_reason(schedule, problem, profile)
    if reason:
        default = default_schedule(spec, problem, profile)
        return Lookup(
            default,
            "default",
            f"{spec.name} {problem}: {source} schedule {schedule} is invalid here ({reason}); "
            f"using the default {default}",
        )
    if source == "tuned":
        return Lookup(schedule, source)
    return Lookup(
        schedule,
        source,
        f"{spec.name} {problem}: no winner tuned for this problem on this adapter; "
        f"using the {source} winner tuned for {winner.problem_key}: {schedule}",
    )


def default_schedule(spec: KernelSpec, problem: Problem, profile: HardwareProfile) -> Schedule:
    """`spec.default`, or, when that can't run `problem` (e.g. recurrent with a large L),
    the first valid schedule of the space. Not for kernels whose result depends on the
    schedule (topk's block size): there the default stands and the call reports why."""
    if spec.schedule_dependent_reference or not spec.invalid_reason(spec.default, problem, profile):
        return spec.default
    return next((s for s in spec.schedules() if not spec.invalid_reason(s, problem, profile)), spec.default)


# -- where winners come from -------------------------------------------------------------


def load_candidates(db: str | None, schedules: str | Path | None) -> tuple[list[Candidate], str]:
    """Winners from an exported JSON file (when given) or the database; (records, problem).

    Never raises for a missing, unreachable or empty database (a malformed schedules file
    does raise ValueError): the second item says what went wrong ("" when winners were
    read) so the caller can warn.
    """
    if schedules is not None:
        return _candidates_from_file(Path(schedules))
    return _candidates_from_db(db)


def _candidates_from_file(path: Path) -> tuple[list[Candidate], str]:
    """Winners from a `farm export` JSON file (farm-schedules/1; ValueError if malformed)."""
    from farm.store import load_schedules_file

    records = [Candidate.of(r) for r in load_schedules_file(path)]
    return records, "" if records else f"schedules file {path} holds no winners"


def _candidates_from_db(db: str | None) -> tuple[list[Candidate], str]:
    from farm.store import database_url, open_store, winners
    from farm.store.engine import mask_secrets, mask_url

    def reason(url: str, what: str, exc: Exception) -> str:
        detail = mask_secrets(str(exc).splitlines()[0] if str(exc) else "")
        return f"database {mask_url(url)} is {what} ({type(exc).__name__}: {detail})"

    url = db or "$FARM_DATABASE_URL / $FARM_HOME/farm.db"
    try:
        url = database_url(db)
        store = open_store(url, read_only=True)
    except Exception as exc:  # noqa: BLE001 - a missing or unreachable database means "use defaults"
        return [], reason(url, "unavailable", exc)
    try:
        records = [Candidate.of(r) for r in winners(store)]
    except Exception as exc:  # noqa: BLE001
        return [], reason(url, "unreachable", exc)
    finally:
        store.engine.dispose()
    return records, "" if records else f"database {mask_url(url)} holds no winners"
