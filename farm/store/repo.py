"""Repository functions: every query the farm, runtime and dashboard run lives here.

Reads return plain dicts (one per row, column names as keys) or `WinnerRecord`s; writes
are short transactions retried on lock conflicts and lost connections (`write_transaction`),
and reads are retried on lost connections too (farm.store.retry). Timestamps are
timezone-aware UTC datetimes.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, case, func, select, update
from sqlalchemy.sql import Select

from farm.schedule import Status
from farm.store.database import Store
from farm.store.engine import mask_secrets
from farm.store.models import CAMPAIGN_STATUSES, CampaignRow, TopologyRow, TrialRow, utcnow
from farm.store.retry import retrying
from farm.store.summaries import has_summaries, record_summaries, summary_counts
from farm.store.transactions import (
    bind_processors,
    copy_insert_ignoring,
    dialect_insert,
    insert_ignoring_sql,
    write_transaction,
)
from farm.store.trial_rows import TOPOLOGY_INDEX, TRIAL_COLUMNS, summary_fields, trial_rows
from farm.trial import TrialResult

if TYPE_CHECKING:
    from farm.gpu import HardwareProfile

TRIAL_KEY = ("topology_hash", "kernel", "source_hash", "problem", "schedule")
INSERT_CHUNK = 500  # rows per SQLite INSERT statement: well under its bind limit (32766)
# A running campaign whose heartbeat (campaigns.heartbeat_at, else started_at) is older than
# this is interrupted: its driver was killed. Its driver beats at least every
# farm.tuning.campaign.HEARTBEAT_S; the bound also absorbs clock skew between machines.
STALE_AFTER_S = 60.0


# ---------------------------------------------------------------- topologies


@write_transaction
def upsert_topology(store: Store, profile: HardwareProfile) -> str:
    """Record an adapter's profile under its topology hash (first one wins); returns the hash."""
    topology_hash = profile.topology_hash()
    row = {
        "hash": topology_hash,
        "device_name": profile.device_name,
        "backend": profile.backend,
        "adapter_type": profile.adapter_type,
        "vendor_id": profile.vendor_id,
        "device_id": profile.device_id,
        "driver_description": profile.driver_description,
        "profile_json": profile.to_dict(),
        "first_seen": utcnow(),
    }
    stmt = dialect_insert(store, TopologyRow.__table__).values(row).on_conflict_do_nothing(index_elements=["hash"])
    with store.engine.begin() as conn:
        conn.execute(stmt)
    return topology_hash


def topologies(store: Store) -> list[dict]:
    """Every known topology, oldest first; `profile_json` is the HardwareProfile as a dict."""
    return fetch_rows(store, select(TopologyRow.__table__).order_by(TopologyRow.first_seen, TopologyRow.hash))


def require_topologies(conn: Connection, hashes: set[str]) -> None:
    known = set(conn.scalars(select(TopologyRow.hash).where(TopologyRow.hash.in_(sorted(hashes)))))
    missing = sorted(hashes - known)
    if missing:
        raise ValueError(f"unknown topology hash(es) {missing}: call upsert_topology(store, profile) first")


# ---------------------------------------------------------------- campaigns


@write_transaction
def start_campaign(store: Store, command: str, strategy: str, budget: int | None, reps: int, total: int) -> int:
    """Create a running campaign and return its id. `command` is stored with any password in it masked."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if budget is not None and budget < 1:
        raise ValueError(f"budget must be >= 1 or None, got {budget}")
    row = CampaignRow.__table__.insert().values(
        started_at=utcnow(),
        status="running",
        command=mask_secrets(command),
        strategy=strategy,
        budget=budget,
        reps=reps,
        host=socket.gethostname(),
        total=total,
        done=0,
        failures=0,
        heartbeat_at=utcnow(),
    )
    with store.engine.begin() as conn:
        return int(conn.execute(row).inserted_primary_key[0])


@write_transaction
def update_campaign(store: Store, campaign_id: int, done: int, failures: int, total: int | None = None) -> None:
    """Set a campaign's progress counters (absolute values, not increments) and its heartbeat;
    `total` too when given (a search that stopped short of its cap, or spent past its plan).
    The stored total is never below `done` (a search past its plan counts before the plan is
    corrected, and a driver may die in between).

    A campaign marked interrupted while its driver was in fact alive (suspended past
    STALE_AFTER_S, or a clock skewed by more) is running again from its next update."""
    with store.engine.begin() as conn:
        _write_progress(conn, campaign_id, (done, failures, total))


# A campaign's progress as recorded with its trials: (done, failures, total or None to keep it).
Counts = tuple[int, int, int | None]


def _write_progress(conn: Connection, campaign_id: int, counts: Counts) -> None:
    """update_campaign's UPDATE on `conn` (also what a trial batch writes in its transaction)."""
    done, failures, total = counts
    if done < 0 or failures < 0 or failures > done:
        raise ValueError(f"need 0 <= failures <= done, got done={done} failures={failures}")
    if total is not None and total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    params = {"p_id": campaign_id, "p_done": done, "p_failures": failures, "p_now": utcnow()}
    if total is not None:
        params["p_total"] = max(total, done)
    if conn.execute(_PROGRESS[total is None], params).rowcount != 1:
        raise ValueError(f"no campaign with id {campaign_id!r}")


def _progress_update(keep_total: bool):
    """_write_progress's statement, built once: an ORM update built per flush was a twentieth
    of a fast driver's CPU. A campaign interrupted by mistake (see update_campaign) runs again."""
    c = CampaignRow.__table__.c
    revived = (c.status == "interrupted") & c.finished_at.is_(None)
    done = bindparam("p_done", type_=c.done.type)
    total = case((c.total < done, done), else_=c.total) if keep_total else bindparam("p_total", type_=c.total.type)
    return (
        update(CampaignRow.__table__)
        .where(c.id == bindparam("p_id", type_=c.id.type))
        .values(
            done=done,
            failures=bindparam("p_failures", type_=c.failures.type),
            heartbeat_at=bindparam("p_now", type_=c.heartbeat_at.type),
            status=case((revived, "running"), else_=c.status),
            total=total,
        )
    )


_PROGRESS = {keep: _progress_update(keep) for keep in (False, True)}


@write_transaction
def finish_campaign(store: Store, campaign_id: int, status: str) -> None:
    """Mark a campaign `done`, `failed` or `interrupted` (Ctrl-C) and stamp finished_at."""
    if status not in CAMPAIGN_STATUSES or status == "running":
        raise ValueError(f"finish status must be 'done', 'failed' or 'interrupted', got {status!r}")
    now = utcnow()
    _update_campaign(store, campaign_id, status=status, finished_at=now, heartbeat_at=now)


@write_transaction
def interrupt_stale_campaigns(store: Store, now: datetime | None = None, dead: Iterable[int] = ()) -> list[dict]:
    """Mark every running campaign whose heartbeat is older than STALE_AFTER_S, or whose id is
    in `dead` (its driver is known to be gone), `interrupted` (what they recorded stays and a
    re-run resumes it); returns those rows (id, command, host, started_at, heartbeat_at, done,
    total), oldest first. finished_at stays NULL: they never finished, and heartbeat_at is
    when they were last seen."""
    cutoff = (now or utcnow()) - timedelta(seconds=STALE_AFTER_S)
    stale = func.coalesce(CampaignRow.heartbeat_at, CampaignRow.started_at) < cutoff
    dead = sorted(set(dead))
    if dead:
        stale = stale | CampaignRow.id.in_(dead)
    stale = (CampaignRow.status == "running") & stale
    columns = (CampaignRow.id, CampaignRow.command, CampaignRow.host, CampaignRow.started_at, CampaignRow.heartbeat_at)
    stmt = update(CampaignRow).where(stale).values(status="interrupted")
    with store.engine.begin() as conn:
        rows = conn.execute(stmt.returning(*columns, CampaignRow.done, CampaignRow.total)).mappings().all()
    return sorted((dict(row) for row in rows), key=lambda row: row["id"])


def campaign_status(row: dict, now: datetime | None = None) -> str:
    """A campaign row's status as shown: `interrupted` for a running one whose heartbeat
    (or, on rows from before heartbeats, start) is older than STALE_AFTER_S."""
    if row["status"] != "running":
        return row["status"]
    seen = row.get("heartbeat_at") or row["started_at"]
    return "interrupted" if (now or utcnow()) - seen > timedelta(seconds=STALE_AFTER_S) else "running"


def live_campaigns(store: Store) -> list[int]:
    """Ids of the campaigns running now (status running, heartbeat within STALE_AFTER_S)."""
    columns = (CampaignRow.id, CampaignRow.status, CampaignRow.started_at, CampaignRow.heartbeat_at)
    rows = fetch_rows(store, select(*columns).where(CampaignRow.status == "running").order_by(CampaignRow.id))
    now = utcnow()
    return [int(row["id"]) for row in rows if campaign_status(row, now) == "running"]


def _update_campaign(store: Store, campaign_id: int, **values: Any) -> None:
    stmt = update(CampaignRow).where(CampaignRow.id == campaign_id).values(**values)
    with store.engine.begin() as conn:
        if conn.execute(stmt).rowcount != 1:
            raise ValueError(f"no campaign with id {campaign_id!r}")


def campaigns(store: Store, limit: int | None = None) -> list[dict]:
    """Campaigns, newest first; `status` as shown (campaign_status: a dead driver's is interrupted)."""
    rows = fetch_rows(store, _paged(select(CampaignRow.__table__).order_by(CampaignRow.id.desc()), limit, 0))
    now = utcnow()
    return [row | {"status": campaign_status(row, now)} for row in rows]


def campaign(store: Store, campaign_id: int) -> dict:
    """One campaign as a dict (`status` as campaigns() shows it); ValueError when the id is unknown."""
    rows = fetch_rows(store, select(CampaignRow.__table__).where(CampaignRow.id == campaign_id))
    if not rows:
        raise ValueError(f"no campaign with id {campaign_id!r}")
    return rows[0] | {"status": campaign_status(rows[0])}


# ---------------------------------------------------------------- trials


def record_trials(store: Store, campaign_id: int | None, results: Sequence[TrialResult]) -> int:
    """Insert trials, skipping trial keys already stored; returns how many rows were new (see insert_trials)."""
    return len(insert_trials(store, campaign_id, results))


@write_transaction
def insert_trials(store: Store, campaign_id: int | None, results: Sequence[TrialResult]) -> list[TrialResult]:
    """Insert trials, skipping trial keys already stored; returns the results SQL inserted
    (in `results`' order; of repeated keys in `results`, the first), which is what a
    campaign writes to Parquet too, so the files never hold a row SQL skipped.

    Idempotent (INSERT .. ON CONFLICT DO NOTHING .. RETURNING the trial key), so concurrent
    campaigns writing the same keys lose nothing and duplicate nothing. One transaction:
    the topologies checked, then `write_trial_batch`. A campaign's recorder writes through
    a `farm.store.trial_writer.TrialWriter` instead (its connection held, its topologies
    checked once).
    """
    with store.engine.begin() as conn:
        return write_trial_batch(conn, campaign_id, results, check=True)


def write_trial_batch(
    conn: Connection,
    campaign_id: int | None,
    results: Sequence[TrialResult],
    counts: Counts | None = None,
    check: bool = False,
) -> list[TrialResult]:
    """The one transaction body that records trials (`conn` is in a transaction): the rows
    inserted, and with `counts` the campaign's progress and heartbeat in the same commit.
    Whatever must change together with the trials table is written here. Returns the
    results SQL inserted (insert_trials). `check`: the topologies are looked up first (a
    clear ValueError instead of a foreign-key error).

    Rows go in key order, which keeps two PostgreSQL writers from deadlocking on each
    other's keys. Driver SQL (transactions.copy_insert_ignoring, insert_ignoring_sql):
    SQLAlchemy's per-row parameter processing would be most of the insert time."""
    dialect = conn.dialect
    rows = trial_rows(campaign_id, results, bind_processors(TrialRow.__table__, TRIAL_COLUMNS, dialect))
    ordered = [rows[key][0] for key in sorted(rows)]
    if check and ordered:
        require_topologies(conn, {row[TOPOLOGY_INDEX] for row in ordered})
    inserted: set[tuple] = set()
    if dialect.name == "postgresql":
        inserted.update(copy_insert_ignoring(conn, TrialRow.__table__, TRIAL_COLUMNS, TRIAL_KEY, ordered))
    else:
        for start in range(0, len(ordered), INSERT_CHUNK):
            chunk = ordered[start : start + INSERT_CHUNK]
            sql, params = insert_ignoring_sql(TrialRow.__table__, TRIAL_COLUMNS, TRIAL_KEY, chunk)
            inserted.update(tuple(r) for r in conn.exec_driver_sql(sql, params))  # rowcount is -1 on psycopg
    record_summaries(conn, (summary_fields(rows[key][0]) for key in sorted(inserted)))
    if counts is not None and campaign_id is not None:
        _write_progress(conn, campaign_id, counts)
    return [result for key, (_, result) in rows.items() if key in inserted]


def recorded_schedules(
    store: Store, topology_hash: str, kernel: str, source_hash: str, problem_key: str
) -> dict[str, dict]:
    """Trials already stored for one (topology, kernel, source, problem), by schedule key: resume skips these."""
    stmt = select(TrialRow.__table__).where(
        TrialRow.topology_hash == topology_hash,
        TrialRow.kernel == kernel,
        TrialRow.source_hash == source_hash,
        TrialRow.problem == problem_key,
    )
    return {row["schedule"]: row for row in fetch_rows(store, stmt)}


def trials(
    store: Store,
    topology: str | None = None,
    kernel: str | None = None,
    status: str | None = None,
    campaign: int | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[dict]:
    """Stored trials matching every given filter, in insertion order, one page at a time."""
    stmt = _trial_filters(select(TrialRow.__table__), topology, kernel, status, campaign).order_by(TrialRow.id)
    return fetch_rows(store, _paged(stmt, limit, offset))


@retrying
def count_trials(
    store: Store,
    topology: str | None = None,
    kernel: str | None = None,
    status: str | None = None,
    campaign: int | None = None,
) -> int:
    """How many trials `trials(...)` with the same filters would return without a limit (for paging)."""
    if has_summaries(store):
        if status is not None:
            Status(status)  # ValueError naming the bad status
        filters = {"topology": topology, "kernel": kernel, "status": status, "campaign": campaign}
        return summary_counts(store, **filters).get((), 0)
    stmt = _trial_filters(select(func.count()).select_from(TrialRow), topology, kernel, status, campaign)
    with store.engine.connect() as conn:
        return int(conn.scalar(stmt))


@retrying
def trial_status_counts(
    store: Store, topology: str | None = None, kernel: str | None = None, campaign: int | None = None
) -> dict[str, int]:
    """Trials per status (only statuses that occur), e.g. {"ok": 40, "invalid_schedule": 3}."""
    if has_summaries(store):
        counts = summary_counts(store, ("status",), topology=topology, kernel=kernel, campaign=campaign)
        return {status: n for (status,), n in counts.items()}
    stmt = _trial_filters(select(TrialRow.status, func.count()), topology, kernel, None, campaign).group_by(
        TrialRow.status
    )
    with store.engine.connect() as conn:
        return {status: int(n) for status, n in conn.execute(stmt).all()}


def _trial_filters(stmt: Select, topology: str | None, kernel: str | None, status: str | None, campaign: int | None):
    if status is not None:
        Status(status)  # ValueError naming the bad status
        stmt = stmt.where(TrialRow.status == status)
    if topology is not None:
        stmt = stmt.where(TrialRow.topology_hash == topology)
    if kernel is not None:
        stmt = stmt.where(TrialRow.kernel == kernel)
    if campaign is not None:
        stmt = stmt.where(TrialRow.campaign_id == campaign)
    return stmt


# ---------------------------------------------------------------- shared


def _paged(stmt: Select, limit: int | None, offset: int) -> Select:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt.offset(offset) if offset else stmt


@retrying
def fetch_rows(store: Store, stmt: Select) -> list[dict]:
    with store.engine.connect() as conn:
        return [dict(row) for row in conn.execute(stmt).mappings()]
