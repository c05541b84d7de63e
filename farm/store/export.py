"""Ship winners to machines without database access: `farm export` writes them for one
topology as JSON; `ForgeRuntime(schedules=...)` reads that file back through
`farm.runtime.winners.read_schedules_file` (the one reader, strictly checked).

Format ("farm-schedules/1"):
    {"format": "farm-schedules/1", "topology_hash": str, "device_name": str,
     "winners": [{"kernel": str, "problem": "m=37,k=129", "schedule": {knob: int, ...},
                  "source_hash": str, "median_ns": float, "speedup": float | null}, ...]}
"""

from __future__ import annotations

import json
from pathlib import Path

from farm import paths
from farm.store.database import Store
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
    """Write `export_schedules` to `path` (parents created), whole or not at all (farm.paths);
    returns how many winners it holds."""
    document = export_schedules(store, topology_hash)
    paths.write_text_atomically(path, json.dumps(document, indent=2, sort_keys=False) + "\n", "schedules file")
    return len(document["winners"])
