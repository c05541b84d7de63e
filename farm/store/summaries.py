"""Summaries of the trials table, kept as trials are recorded, so that counting costs the
same at a million trials as at a hundred.

Two tables (farm.store.models, revision 0006): `trial_counts`, trials per (campaign,
topology, kernel, problem, status), and `trial_failures`, failed trials per (campaign,
topology, kernel, status, message pattern) with the smallest message as an example. Their
size grows with campaigns, problems and failure patterns, never with trials.

- `record_summaries(conn, rows)` adds the rows a trial insert wrote (their SUMMARY_FIELDS),
  in its transaction, so a summary is never ahead of or behind the trials it counts. Only
  rows SQL inserted may be passed: a resumed (skipped) trial key must not count twice.
  Upserts in key order, so two PostgreSQL writers don't deadlock on each other's counters.
- `rebuild_summaries(conn)` recomputes both tables from `trials` (the migration's backfill,
  a bulk load that bypassed record_summaries).
- Nothing in the farm deletes trials; whatever does must call rebuild_summaries (or
  subtract) in its transaction. Parquet compaction rewrites files only, never SQL rows.
- Readers: `has_summaries(store)` (False on a read-only store of an older revision: its
  readers fall back to counting trials), `summary_counts`, `failure_groups`.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from sqlalchemy import Connection, func, inspect, select, text

from farm.store.database import Store
from farm.store.models import NO_CAMPAIGN, TrialCountRow, TrialFailureRow

OK = "ok"  # farm.schedule.Status.OK: every other status is a failure
# Values inside failure messages: hex numbers, then decimal ones (signs, fractions, exponents).
# Digits inside a name (fp16, vec4) stay: a value does not follow a letter or an underscore.
_VALUES = re.compile(r"0x[0-9a-fA-F]+|(?<![A-Za-z_\d.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_COUNT_KEY = ("campaign_id", "topology_hash", "kernel", "problem", "status")
_FAILURE_KEY = ("campaign_id", "topology_hash", "kernel", "status", "pattern_hash")
_UPSERT_COUNTS = (
    "INSERT INTO trial_counts (campaign_id, topology_hash, kernel, problem, status, trials)"
    " VALUES (:campaign_id, :topology_hash, :kernel, :problem, :status, :trials)"
    " ON CONFLICT (campaign_id, topology_hash, kernel, problem, status)"
    " DO UPDATE SET trials = trial_counts.trials + excluded.trials"
)
_UPSERT_FAILURES = (
    "INSERT INTO trial_failures (campaign_id, topology_hash, kernel, status, pattern_hash, pattern, example, trials)"
    " VALUES (:campaign_id, :topology_hash, :kernel, :status, :pattern_hash, :pattern, :example, :trials)"
    " ON CONFLICT (campaign_id, topology_hash, kernel, status, pattern_hash)"
    " DO UPDATE SET trials = trial_failures.trials + excluded.trials, example = {smaller}"
)
# The smaller example in code point order (Python's min), whatever the database's collation.
_SMALLER = {
    "sqlite": "min(trial_failures.example, excluded.example)",
    "postgresql": 'LEAST(trial_failures.example COLLATE "C", excluded.example COLLATE "C")',
}
REBUILD_CHUNK = 5000


def normalize_message(message: str | None) -> str:
    """A failure message with its values stripped: `max_abs 0.5 > atol 1e-4` → `max_abs # > atol #`."""
    return _VALUES.sub("#", message or "").strip()


def pattern_hash(pattern: str) -> str:
    return hashlib.sha1(pattern.encode()).hexdigest()


# What record_summaries reads of each trial row, in this order.
SUMMARY_FIELDS = ("campaign_id", "topology_hash", "kernel", "problem", "status", "message")


def record_summaries(conn: Connection, rows: Iterable[Sequence]) -> None:
    """Add trial rows just inserted on `conn` (each its SUMMARY_FIELDS' values, in that order)
    to trial_counts and trial_failures."""
    counts: Counter = Counter()
    failures: dict[tuple, list] = {}
    for campaign, topology, kernel, problem, status, message in rows:
        campaign = NO_CAMPAIGN if campaign is None else campaign
        status = str(getattr(status, "value", status))
        counts[(campaign, topology, kernel, problem, status)] += 1
        if status != OK:
            _add_failure(failures, (campaign, topology, kernel, status), message or "", 1)
    _upsert(conn, counts, failures)


def _add_failure(failures: dict[tuple, list], head: tuple, message: str, n: int) -> None:
    pattern = normalize_message(message)
    group = failures.setdefault((*head, pattern_hash(pattern)), [0, pattern, message])
    group[0] += n
    group[2] = min(group[2], message)


def _upsert(conn: Connection, counts: Counter, failures: dict[tuple, list]) -> None:
    if counts:
        params = [dict(zip(_COUNT_KEY, key, strict=True), trials=n) for key, n in sorted(counts.items())]
        conn.execute(text(_UPSERT_COUNTS), params)
    if failures:
        params = [
            dict(zip(_FAILURE_KEY, key, strict=True), trials=n, pattern=pattern, example=example)
            for key, (n, pattern, example) in sorted(failures.items())
        ]
        conn.execute(text(_UPSERT_FAILURES.format(smaller=_SMALLER[conn.dialect.name])), params)


def rebuild_summaries(conn: Connection) -> None:
    """Recompute trial_counts and trial_failures from the trials table (on `conn`, in its transaction)."""
    conn.execute(text("DELETE FROM trial_counts"))
    conn.execute(text("DELETE FROM trial_failures"))
    campaign = f"coalesce(campaign_id, {NO_CAMPAIGN})"
    conn.execute(
        text(
            f"INSERT INTO trial_counts (campaign_id, topology_hash, kernel, problem, status, trials)"
            f" SELECT {campaign}, topology_hash, kernel, problem, status, count(*) FROM trials"
            f" GROUP BY {campaign}, topology_hash, kernel, problem, status"
        )
    )
    failures: dict[tuple, list] = {}
    grouped = conn.execute(
        text(
            f"SELECT {campaign}, topology_hash, kernel, status, message, count(*) FROM trials WHERE status <> :ok"
            f" GROUP BY {campaign}, topology_hash, kernel, status, message"
        ),
        {"ok": OK},
    )
    for campaign_id, topology, kernel, status, message, n in grouped:
        _add_failure(failures, (campaign_id, topology, kernel, status), message or "", int(n))
    items = sorted(failures.items())
    for start in range(0, len(items), REBUILD_CHUNK):
        _upsert(conn, Counter(), dict(items[start : start + REBUILD_CHUNK]))


# ---------------------------------------------------------------- readers


def has_summaries(store: Store) -> bool:
    """False on a database of a revision before 0006 (a read-only store never migrates)."""
    return inspect(store.engine).has_table("trial_counts")


def _filtered(stmt, table, topology, kernel, problem, status, campaign):
    for column, value in (("topology_hash", topology), ("kernel", kernel), ("problem", problem), ("status", status)):
        if value is not None:
            stmt = stmt.where(table.c[column] == value)
    if campaign is not None:
        stmt = stmt.where(table.c.campaign_id == campaign)
    return stmt


def summary_counts(
    store: Store,
    group_by: Sequence[str] = (),
    topology: str | None = None,
    kernel: str | None = None,
    problem: str | None = None,
    status: str | None = None,
    campaign: int | None = None,
) -> dict[tuple, int]:
    """Trials matching the filters, from trial_counts: {values of `group_by` columns: n}
    (only groups with trials; {(): n} without group_by)."""
    table = TrialCountRow.__table__
    columns = [table.c[name] for name in group_by]
    stmt = select(*columns, func.sum(table.c.trials)).group_by(*columns)
    stmt = _filtered(stmt, table, topology, kernel, problem, status, campaign)
    with store.engine.connect() as conn:
        rows = conn.execute(stmt).all()
    return {tuple(row[:-1]): int(row[-1]) for row in rows if row[-1]}


def failure_groups(
    store: Store, kernel: str | None = None, topology: str | None = None, campaign: int | None = None
) -> list[dict]:
    """Failed trials matching the filters by (status, pattern): `{category, message, trials,
    example}` (example: the smallest message), unordered."""
    table = TrialFailureRow.__table__
    example = table.c.example
    if store.dialect == "postgresql":
        example = example.collate("C")  # min in code point order, as record_summaries keeps it
    stmt = select(table.c.status, table.c.pattern, func.sum(table.c.trials), func.min(example))
    stmt = _filtered(stmt, table, topology, kernel, None, None, campaign)
    stmt = stmt.group_by(table.c.status, table.c.pattern_hash, table.c.pattern)
    with store.engine.connect() as conn:
        rows = conn.execute(stmt).all()
    return [{"category": s, "message": p, "trials": int(n), "example": e} for s, p, n, e in rows]
