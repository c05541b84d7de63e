"""Ship winners to machines without database access: `farm export` writes them for one
topology as JSON; `load_schedules_file` reads that file back for `ForgeRuntime(schedules=...)`.

Format ("farm-schedules/1"):
    {"format": "farm-schedules/1", "topology_hash": str, "device_name": str,
     "winners": [{"kernel": str, "problem": "m=37,k=129", "schedule": {knob: int, ...},
                  "source_hash": str, "median_ns": float, "speedup": float | null}, ...]}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from farm.schedule import Problem, Schedule
from farm.store.database import Store
from farm.store.records import WinnerRecord
from farm.store.repo import topologies
from farm.store.winner_rows import winners

SCHEDULES_FORMAT = "farm-schedules/1"


def export_schedules(store: Store, topology_hash: str) -> dict:
    """The stored winners of one topology as a farm-schedules/1 document."""
    records = winners(store, topology=topology_hash)
    if not records:
        known = sorted(t["hash"] for t in topologies(store))
        raise ValueError(f"no winners stored for topology {topology_hash!r}; topologies in the store: {known}")
    device = next((t["device_name"] for t in topologies(store) if t["hash"] == topology_hash), "")
    return {
        "format": SCHEDULES_FORMAT,
        "topology_hash": topology_hash,
        "device_name": device or records[0].device_name,
        "winners": [
            {
                "kernel": r.kernel,
                "problem": r.problem_key,
                "schedule": r.schedule.as_dict(),
                "source_hash": r.source_hash,
                "median_ns": r.median_ns,
                "speedup": r.speedup,
            }
            for r in records
        ],
    }


def write_schedules_file(store: Store, topology_hash: str, path: str | Path) -> int:
    """Write `export_schedules` to `path` (parents created); returns how many winners it holds."""
    document = export_schedules(store, topology_hash)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return len(document["winners"])


def load_schedules_file(path: str | Path) -> list[WinnerRecord]:
    """Read a farm-schedules/1 file into WinnerRecords (ValueError naming the file and entry if malformed).

    `default_median_ns` is reconstructed as median_ns * speedup; `campaign_id` is None.
    """
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(document, dict) or document.get("format") != SCHEDULES_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: expected format {SCHEDULES_FORMAT!r}, found {found!r}")
    topology_hash = document.get("topology_hash")
    entries = document.get("winners")
    if not isinstance(topology_hash, str) or not isinstance(entries, list):
        raise ValueError(f"{path}: needs a string 'topology_hash' and a list 'winners'")
    device_name = str(document.get("device_name") or "")
    return [_winner_from_entry(path, i, entry, topology_hash, device_name) for i, entry in enumerate(entries)]


def _winner_from_entry(path: Path, index: int, entry: Any, topology_hash: str, device_name: str) -> WinnerRecord:
    where = f"{path}: winners[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is {type(entry).__name__}, expected an object")
    missing = [k for k in ("kernel", "problem", "schedule", "source_hash", "median_ns") if k not in entry]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    try:
        schedule = entry["schedule"]
        schedule = Schedule.from_key(schedule) if isinstance(schedule, str) else Schedule.of(**schedule)
        problem = Problem.from_key(str(entry["problem"]))
        median = float(entry["median_ns"])
        speedup = None if entry.get("speedup") is None else float(entry["speedup"])
    except (TypeError, ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
    if not math.isfinite(median) or median <= 0:
        raise ValueError(f"{where}: median_ns must be a finite positive number, got {entry['median_ns']!r}")
    return WinnerRecord(
        topology_hash=topology_hash,
        kernel=str(entry["kernel"]),
        problem_key=problem.key(),
        source_hash=str(entry["source_hash"]),
        schedule_key=schedule.key(),
        median_ns=median,
        default_median_ns=None if speedup is None else median * speedup,
        speedup=speedup,
        device_name=device_name,
    )
