"""The Trials page's queries (as `farm.dashboard.data.*`): keyset pages of trials, the
time-vs-knob chart of the current kernel source, and failures grouped by message pattern.

Sized for millions of trials: a page is a keyset read (newest first, no OFFSET), the chart
reads at most MAX_CHART_TRIALS rows of one source hash, and the failure summary reads the
failure groups kept as trials are recorded (farm.store.summaries: messages with their
values stripped), at most FAILURE_GROUPS of them.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from sqlalchemy import func, select

from farm import catalog
from farm.dashboard.display import schedule_text, short, us
from farm.schedule import Status
from farm.store.database import Store
from farm.store.models import TrialRow
from farm.store.paging import trials_keyset
from farm.store.repo import count_trials, fetch_rows
from farm.store.summaries import failure_groups, has_summaries, normalize_message

MAX_CHART_TRIALS = 5000
FAILURE_GROUPS = 50
# On a database without summaries (a read-only store of an older revision) the failure
# summary reads the newest this many failures matching its filters: a bounded cost.
FAILURE_SCAN = 20_000
_FAILED = tuple(s.value for s in Status if s is not Status.OK)  # IN (...): the status indexes apply


class TrialPage(NamedTuple):
    """One page of trials, newest first; `older`/`newer` are the cursors of the next pages (None: none)."""

    rows: list[dict]
    older: int | None
    newer: int | None


def trial_page(
    store: Store,
    page_size: int = 100,
    before: int | None = None,
    after: int | None = None,
    kernel: str | None = None,
    topology: str | None = None,
    status: str | None = None,
    campaign: int | None = None,
) -> TrialPage:
    """A page of trials matching the filters, newest first: the newest, those older than the
    id `before`, or those newer than the id `after`. Pass `older` as `before` (or `newer` as
    `after`) for the next page; the count is trial_count's, asked once per render."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got page_size={page_size}")
    filters = {"kernel": kernel, "topology": topology, "status": status, "campaign": campaign}
    rows = trials_keyset(store, page_size + 1, before=before, after=after, **filters)
    more = len(rows) > page_size
    if after is not None:
        rows = rows[-page_size:] if more else rows
        older = rows[-1]["id"] if rows else None
        newer = rows[0]["id"] if more and rows else None
    else:
        rows = rows[:page_size]
        older = rows[-1]["id"] if more else None
        newer = rows[0]["id"] if before is not None and rows else None
    return TrialPage([_shown(row) for row in rows], older, newer)


def _shown(row: dict) -> dict:
    return {
        "id": row["id"],
        "kernel": row["kernel"],
        "problem": row["problem"],
        "schedule": schedule_text(row["schedule"]),
        "status": row["status"],
        "median_us": us(row["median_ns"]),
        "p20_us": us(row["p20_ns"]),
        "p80_us": us(row["p80_ns"]),
        "max_abs": row["max_abs"],
        "max_rel": row["max_rel"],
        "message": row["message"],
        "topology": short(row["topology_hash"]),
        "campaign": row["campaign_id"],
        "worker": row["worker_id"],
    }


def trial_count(
    store: Store,
    kernel: str | None = None,
    topology: str | None = None,
    status: str | None = None,
    campaign: int | None = None,
) -> int:
    """How many trials match the filters (for the page header)."""
    return count_trials(store, kernel=kernel, topology=topology, status=status, campaign=campaign)


def chart_source_hash(store: Store, kernel: str) -> str | None:
    """The source hash the knob chart shows: the catalog's current one, else (a kernel no
    longer in the catalog) the newest trial's."""
    if kernel in catalog.names():
        return catalog.get(kernel).source_hash()
    stmt = select(TrialRow.source_hash).where(TrialRow.kernel == kernel).order_by(TrialRow.id.desc()).limit(1)
    with store.engine.connect() as conn:
        return conn.scalar(stmt)


def knob_timings(store: Store, kernel: str, problem: str | None = None, topology: str | None = None) -> list[dict]:
    """Certified (ok) trials of `kernel`'s current source (chart_source_hash), newest first, at
    most MAX_CHART_TRIALS, as `{problem, median_us, <knob>: value...}` for time-vs-knob charts."""
    source = chart_source_hash(store, kernel)
    stmt = select(TrialRow.problem, TrialRow.schedule, TrialRow.median_ns).where(
        TrialRow.kernel == kernel,
        TrialRow.source_hash == source,
        TrialRow.status == Status.OK.value,
        TrialRow.median_ns.is_not(None),
    )
    if problem is not None:
        stmt = stmt.where(TrialRow.problem == problem)
    if topology is not None:
        stmt = stmt.where(TrialRow.topology_hash == topology)
    rows = fetch_rows(store, stmt.order_by(TrialRow.id.desc()).limit(MAX_CHART_TRIALS))
    return [
        {"problem": row["problem"], "median_us": us(row["median_ns"])} | json.loads(row["schedule"]) for row in rows
    ]


def knob_names(rows: list[dict]) -> list[str]:
    """The schedule knobs present in `knob_timings` rows, sorted."""
    return sorted({key for row in rows for key in row} - {"problem", "median_us"})


def failure_summary(
    store: Store,
    kernel: str | None = None,
    topology: str | None = None,
    campaign: int | None = None,
    limit: int = FAILURE_GROUPS,
    scan: int | None = FAILURE_SCAN,
) -> list[dict]:
    """Failed trials grouped by category (status) and normalized message (normalize_message),
    most frequent first, at most `limit` groups, each with its count and one example message
    (the smallest). Read from the failure summary (exact counts, farm.store.summaries); on a
    database without one, from the newest `scan` failures matching the filters
    (FAILURE_SCAN; None: all of them)."""
    if has_summaries(store):
        groups = failure_groups(store, kernel=kernel, topology=topology, campaign=campaign)
        return sorted(groups, key=lambda g: (-g["trials"], g["category"], g["message"]))[:limit]
    stmt = select(TrialRow.status, TrialRow.message).where(TrialRow.status.in_(_FAILED))
    if kernel is not None:
        stmt = stmt.where(TrialRow.kernel == kernel)
    if topology is not None:
        stmt = stmt.where(TrialRow.topology_hash == topology)
    if campaign is not None:
        stmt = stmt.where(TrialRow.campaign_id == campaign)
    if scan is not None:
        stmt = stmt.order_by(TrialRow.id.desc()).limit(scan)
    newest = stmt.subquery()
    stmt = select(newest.c.status, newest.c.message, func.count()).group_by(newest.c.status, newest.c.message)
    groups: dict[tuple[str, str], dict] = {}
    for status, message, n in _rows(store, stmt):
        key = (status, normalize_message(message))
        group = groups.setdefault(key, {"category": status, "message": key[1], "trials": 0, "example": message})
        group["trials"] += int(n)
        group["example"] = min(group["example"], message)  # the same example whatever the row order
    ranked = sorted(groups.values(), key=lambda g: (-g["trials"], g["category"], g["message"]))
    return ranked[:limit]


def _rows(store: Store, stmt) -> list[tuple]:
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(stmt)]
