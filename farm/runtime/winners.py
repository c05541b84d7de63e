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
replaced by the default, except for kernels whose result depends on the schedule (topk:
its block size is the workgroup_size): there only a schedule with the same result layout
replaces it, and when none can run the problem (topk: k above the block size) the winner
stands and the call raises ValueError, instead of silently changing the layout. Every
fallback comes with a warning text; logging it (once per kernel and problem) and caching
are the caller's business (farm.runtime.ForgeRuntime). An unreachable or empty database
gives no candidates and a reason, never an error; a malformed schedules file is a
ValueError naming the file and the entry (`read_schedules_file`).
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from farm import paths
from farm.catalog import KernelSpec
from farm.gpu import HardwareProfile
from farm.schedule import Problem, Schedule


@dataclass(frozen=True)
class Candidate:
    """A stored winner as the lookup sees it (a subset of farm.store.WinnerRecord)."""

    topology_hash: str
    kernel: str
    problem_key: str
    source_hash: str
    schedule_key: str
    device_name: str = ""
    median_ns: float | None = None  # its kernel time as tuned (GPU timestamps), None when not stored

    @classmethod
    def of(cls, record: object) -> Candidate:
        """From a WinnerRecord, or a dict with the same fields (an exported JSON row)."""
        get = record.get if isinstance(record, dict) else lambda name, default="": getattr(record, name, default)
        median = get("median_ns", None)
        return cls(
            topology_hash=str(get("topology_hash", "")),
            kernel=str(get("kernel", "")),
            problem_key=str(get("problem_key", "")),
            source_hash=str(get("source_hash", "")),
            schedule_key=str(get("schedule_key", "")),
            device_name=str(get("device_name", "") or ""),
            median_ns=float(median) if isinstance(median, (int, float)) and median > 0 else None,
        )


@dataclass(frozen=True)
class Lookup:
    """The schedule a call uses, where it came from ("tuned", "nearest", "same-device" or
    "default"), and the warning to log for it ("" when the exact tuned winner serves)."""

    schedule: Schedule
    source: str
    warning: str = ""
    median_ns: float | None = None  # the tuned winner's kernel time (source "tuned" only)


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
    if reason and spec.schedule_dependent_reference:
        return same_result_fallback(spec, problem, profile, schedule, source, reason)
    if reason:
        default = default_schedule(spec, problem, profile)
        return Lookup(
            default,
            "default",
            f"{spec.name} {problem}: {source} schedule {schedule} is invalid here ({reason}); "
            f"using the default {default}",
        )
    if source == "tuned":
        return Lookup(schedule, source, median_ns=winner.median_ns)
    return Lookup(
        schedule,
        source,
        f"{spec.name} {problem}: no winner tuned for this problem on this adapter; "
        f"using the {source} winner tuned for {winner.problem_key}: {schedule}",
    )


def same_result_fallback(
    spec: KernelSpec, problem: Problem, profile: HardwareProfile, winner: Schedule, source: str, reason: str
) -> Lookup:
    """For a kernel whose result depends on the schedule, the replacement for a `winner`
    that can't run `problem`: the first schedule (the default, then the space) with the
    winner's `reference_key` (topk: its block size) that can, keeping `source`, since the
    result is the one the winner defines. When there is none (topk: k above the block
    size), the winner itself, so that the call fails naming the block size in force: a
    fallback to another block size would silently change the output's layout."""
    key = spec.reference_key(winner)
    for candidate in (spec.default, *spec.schedules()):
        if spec.reference_key(candidate) == key and not spec.invalid_reason(candidate, problem, profile):
            return Lookup(
                candidate,
                source,
                f"{spec.name} {problem}: {source} schedule {winner} is invalid here ({reason}); "
                f"using {candidate}, which gives the same result ({key})",
            )
    return Lookup(
        winner,
        source,
        f"{spec.name} {problem}: {source} schedule {winner} can't run this problem ({reason}) and no "
        f"schedule with its {key} can; the call fails rather than change the result's layout",
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
    records = read_schedules_file(path)
    return records, "" if records else f"schedules file {path} holds no winners"


# -- the schedules file (`farm export`, format farm-schedules/1) -------------------------

SCHEDULES_FORMAT = "farm-schedules/1"  # = farm.store.export.SCHEDULES_FORMAT (a test pins it)
ENTRY_FIELDS = ("kernel", "problem", "schedule", "source_hash", "median_ns")
MAX_KNOB = 2**31 - 1  # knob values are WGSL u32/i32 constants
MAX_DIM = 2**63 - 1
# A schedules file is read whole: `farm export` writes about 300 bytes a winner, so 64 MiB is
# far beyond any real one and keeps a wrong path (/dev/zero, a disk image) from filling memory.
MAX_SCHEDULES_BYTES = 64 * 2**20
_PROBLEM_KEY = re.compile(r"[A-Za-z_]\w*=[0-9]{1,19}(,[A-Za-z_]\w*=[0-9]{1,19})*", re.ASCII)


def _repr_for_messages() -> reprlib.Repr:
    """A short repr for values quoted in errors (a file may hold megabytes in one field)."""
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlong, short.maxlist, short.maxdict = 2, 48, 48, 24, 4, 4
    return short


_show = _repr_for_messages().repr


def check_schedules_path(path: str | Path) -> Path:
    """`path` as a Path when it is a regular file of at most MAX_SCHEDULES_BYTES: FileNotFoundError
    when there is nothing there, ValueError for a directory, a device, a FIFO (reading one would
    block or never end) or a symlink loop (farm.paths)."""
    path = Path(path)
    if paths.existing(path, "schedules: file") is None:
        raise FileNotFoundError(f"schedules: file {path} does not exist")
    try:
        return paths.regular_file(path, "schedules:", MAX_SCHEDULES_BYTES)
    except paths.UnusablePath as exc:
        raise paths.UnusablePath(f"{exc}; expected a {SCHEDULES_FORMAT} JSON file (farm export)") from None


def read_schedules_file(path: str | Path) -> list[Candidate]:
    """The winners of a `farm export` file, strictly checked: a ValueError naming the file
    (and the entry, `winners[i]`, when one is at fault) for anything but UTF-8 JSON in the
    farm-schedules/1 layout, including binary files, nesting too deep to parse, NaN or
    Infinity, numbers out of range, and knob values that are not JSON integers (256.5,
    "256", true are refused, not coerced). FileNotFoundError when the file is missing."""
    path = check_schedules_path(path)
    raw = paths.read_bytes(path, "schedules:", MAX_SCHEDULES_BYTES)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not a {SCHEDULES_FORMAT} file: byte {exc.start} ({raw[exc.start : exc.start + 1]!r}) is not "
            "UTF-8 text"
        ) from None
    document = _parse_json(text, f"{path}: not JSON")
    if not isinstance(document, dict) or document.get("format") != SCHEDULES_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: expected format {SCHEDULES_FORMAT!r}, found {_show(found)}")
    topology_hash, entries = document.get("topology_hash"), document.get("winners")
    if not isinstance(topology_hash, str) or not isinstance(entries, list):
        raise ValueError(f"{path}: needs a string 'topology_hash' and a list 'winners'")
    device_name = document.get("device_name") or ""
    if not isinstance(device_name, str):
        raise ValueError(f"{path}: device_name must be a string, got {_show(device_name)}")
    return [_entry(f"{path}: winners[{i}]", e, topology_hash, device_name) for i, e in enumerate(entries)]


def _parse_json(text: str, what: str) -> object:
    """json.loads refusing NaN/Infinity; ValueError starting with `what` instead of
    RecursionError (deep nesting), JSONDecodeError or the int digit limit's ValueError."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError(f"{what} (nested too deeply to parse)") from None
    except ValueError as exc:
        raise ValueError(f"{what} ({exc})") from None


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _entry(where: str, entry: object, topology_hash: str, device_name: str) -> Candidate:
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is {type(entry).__name__}, expected an object")
    missing = [k for k in ENTRY_FIELDS if k not in entry]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    for name in ("kernel", "problem", "source_hash"):
        if not isinstance(entry[name], str):
            raise ValueError(f"{where}: {name} must be a string, got {_show(entry[name])}")
    _positive_number(where, "median_ns", entry["median_ns"])
    if entry.get("speedup") is not None:
        _positive_number(where, "speedup", entry["speedup"])
    return Candidate(
        topology_hash=topology_hash,
        kernel=entry["kernel"],
        problem_key=_problem_key(where, entry["problem"]),
        source_hash=entry["source_hash"],
        schedule_key=_schedule_key(where, entry["schedule"]),
        device_name=device_name,
        median_ns=float(entry["median_ns"]),
    )


def _schedule_key(where: str, schedule: object) -> str:
    """The canonical key of an entry's schedule: an object of knob -> integer in
    0..MAX_KNOB (or, in older files, that object as a JSON string)."""
    if isinstance(schedule, str):
        schedule = _parse_json(schedule, f"{where}: schedule is a string but not a JSON object")
    if not isinstance(schedule, dict) or not schedule:
        raise ValueError(f"{where}: schedule must be an object of knob: integer, got {_show(schedule)}")
    for knob, value in schedule.items():
        if type(value) is not int or not 0 <= value <= MAX_KNOB:
            raise ValueError(
                f"{where}: schedule knob {knob!r} must be an integer in 0..{MAX_KNOB}, got {_show(value)} "
                f"({type(value).__name__})"
            )
    return Schedule.of(**schedule).key()


def _problem_key(where: str, text: str) -> str:
    if not _PROBLEM_KEY.fullmatch(text):
        raise ValueError(f"{where}: problem must look like 'm=37,k=129' (name=integer, ...), got {_show(text)}")
    problem = Problem.from_key(text)
    names = [name for name, _ in problem.dims]
    if len(set(names)) != len(names) or any(value > MAX_DIM for _, value in problem.dims):
        raise ValueError(f"{where}: problem {_show(text)} repeats a dimension or exceeds {MAX_DIM}")
    return problem.key()


def _positive_number(where: str, name: str, value: object) -> None:
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            pass
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{where}: {name} must be a finite positive number, got {_show(value)}")


def _candidates_from_db(db: str | None) -> tuple[list[Candidate], str]:
    from farm.store import database_url, open_store, winners
    from farm.store.engine import mask_secrets, mask_url
    from farm.store.retry import no_retry

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
        with no_retry():  # an unreachable database means defaults now, not after the store's retry window
            records = [Candidate.of(r) for r in winners(store)]
    except Exception as exc:  # noqa: BLE001
        return [], reason(url, "unreachable", exc)
    finally:
        store.engine.dispose()
    return records, "" if records else f"database {mask_url(url)} holds no winners"
