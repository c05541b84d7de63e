"""How the dashboard shows values: short topology hashes, microseconds, schedules as text."""

from __future__ import annotations

import json

SHORT_HASH = 12


def short(topology_hash: str | None) -> str:
    return (topology_hash or "")[:SHORT_HASH]


def us(ns: float | None) -> float | None:
    return None if ns is None else ns / 1000.0


def schedule_text(schedule_key: str) -> str:
    """`{"vector_width":1,"workgroup_size":64}` → `vector_width=1, workgroup_size=64` (sorted knobs)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(json.loads(schedule_key).items()))
