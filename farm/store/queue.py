"""The tuning queue (table tuning_requests): what users and runtime misses asked to tune,
and the leases under which drainers (`farm serve`, farm.tuning.serve) tune it.

A request is keyed by (topology hash or "any", kernel, problem key, kernel source hash);
at most one per key is open (queued or claimed): `enqueue` of an open key returns the
open request (its priority raised to the larger of the two). `claim` hands a drainer the
best queued requests for its topologies (priority, then age) under a lease, atomically:
SELECT ... FOR UPDATE SKIP LOCKED on PostgreSQL, one conditional UPDATE ... RETURNING on
SQLite (whose writers are serialized), so two drainers never claim the same request. A
drainer renews its leases while it tunes (`renew`); a killed drainer's leases run out and
`expire_leases` puts its requests back in the queue, or fails them once they used
`max_attempts`. `fail` does the same for an attempt that raised or found no winner; the
reason stays in last_error. Every write is one short transaction (write_transaction).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import case, func, inspect, select, text, update

from farm.store.database import Store
from farm.store.models import ANY_TOPOLOGY, REQUEST_STATUSES, TuningRequestRow, utcnow
from farm.store.repo import fetch_rows
from farm.store.retry import retrying
from farm.store.transactions import dialect_insert, write_transaction

__all__ = [
    "ANY_TOPOLOGY",
    "DEFAULT_LEASE_S",
    "DEFAULT_MAX_ATTEMPTS",
    "claim",
    "complete",
    "enqueue",
    "expire_leases",
    "fail",
    "has_queue",
    "note_unserved",
    "release",
    "renew",
    "requests",
    "status_counts",
    "unserved",
]

DEFAULT_LEASE_S = 300.0  # a drainer renews every third of it while it tunes
DEFAULT_MAX_ATTEMPTS = 3
MAX_ERROR_CHARS = 2000
KEY = ("topology_hash", "kernel", "problem", "source_hash")
_OPEN = ("queued", "claimed")
OPEN_SQL = text("status IN ('queued', 'claimed')")  # the open-request index's predicate (models, 0004)
_T = TuningRequestRow


def has_queue(store: Store) -> bool:
    """False on a database migrated only up to before revision 0004 (or never)."""
    return inspect(store.engine).has_table("tuning_requests")


@write_transaction
def enqueue(
    store: Store,
    topology_hash: str,
    kernel: str,
    problem_key: str,
    source_hash: str,
    priority: int = 0,
    requested_by: str = "",
) -> tuple[int, bool]:
    """Queue a request; (id, True) for a new one, (id, False) when the same key was already
    open (queued or claimed): then its priority becomes the larger of the two."""
    for name, value in (("topology_hash", topology_hash), ("kernel", kernel), ("problem_key", problem_key)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    key = dict(zip(KEY, (topology_hash, kernel, problem_key, source_hash), strict=True))
    now = utcnow()
    row = key | {
        "priority": int(priority),
        "status": "queued",
        "requested_by": requested_by[:256],
        "attempts": 0,
        "last_error": "",
        "note": "",
        "created_at": now,
        "updated_at": now,
    }
    insert = dialect_insert(store, _T.__table__).values(row)
    insert = insert.on_conflict_do_nothing(index_elements=list(KEY), index_where=OPEN_SQL)
    with store.engine.begin() as conn:
        for _ in range(3):  # the open one may finish between the two statements: insert again
            new = conn.execute(insert.returning(_T.id)).scalar()
            if new is not None:
                return int(new), True
            where = [getattr(_T, k) == v for k, v in key.items()] + [_T.status.in_(_OPEN)]
            found = conn.execute(select(_T.id, _T.priority).where(*where)).first()
            if found is not None:
                if priority > found.priority:
                    conn.execute(update(_T).where(_T.id == found.id).values(priority=int(priority), updated_at=now))
                return int(found.id), False
    raise RuntimeError(f"could not queue {kernel} {problem_key}: its open request kept changing")


@write_transaction
def claim(
    store: Store, drainer: str, topologies: Iterable[str], lease_s: float = DEFAULT_LEASE_S, limit: int = 16
) -> list[dict]:
    """Claim up to `limit` queued requests whose topology is in `topologies` (add ANY_TOPOLOGY to
    take those too), highest priority first, then oldest, under a lease of `lease_s`; returns
    the claimed rows (attempts already counting this one). Atomic on both dialects."""
    if lease_s <= 0 or limit < 1:
        raise ValueError(f"need lease_s > 0 and limit >= 1, got lease_s={lease_s} limit={limit}")
    wanted = sorted(set(topologies))
    if not wanted:
        return []
    now = utcnow()
    values = {
        "status": "claimed",
        "claimed_by": drainer[:256],
        "lease_expires_at": now + timedelta(seconds=lease_s),
        "claimed_at": now,
        "updated_at": now,
        "attempts": _T.attempts + 1,
        "note": "",
    }
    eligible = select(_T.id).where(_T.status == "queued", _T.topology_hash.in_(wanted))
    eligible = eligible.order_by(_T.priority.desc(), _T.id).limit(limit)
    columns = list(_T.__table__.c)
    with store.engine.begin() as conn:
        if store.dialect == "postgresql":
            ids = list(conn.scalars(eligible.with_for_update(skip_locked=True)))
            if not ids:
                return []
            stmt = update(_T).where(_T.id.in_(ids))
        else:  # one statement: SQLite runs one writer at a time, and the status check re-reads the row
            stmt = update(_T).where(_T.id.in_(eligible.scalar_subquery()), _T.status == "queued")
        rows = conn.execute(stmt.values(**values).returning(*columns)).mappings().all()
    return sorted((dict(r) for r in rows), key=lambda r: (-r["priority"], r["id"]))


@write_transaction
def renew(store: Store, drainer: str, ids: Sequence[int], lease_s: float = DEFAULT_LEASE_S) -> int:
    """Extend `drainer`'s leases on `ids`; returns how many it still held (an expired and
    re-claimed one is another drainer's now)."""
    if not ids:
        return 0
    now = utcnow()
    stmt = update(_T).where(*_held(drainer, ids)).values(lease_expires_at=now + timedelta(seconds=lease_s))
    with store.engine.begin() as conn:
        return int(conn.execute(stmt.values(updated_at=now)).rowcount)


@write_transaction
def complete(store: Store, drainer: str, ids: Sequence[int], campaign_id: int | None = None, note: str = "") -> int:
    """Mark `drainer`'s claimed `ids` done (tuned by `campaign_id`); returns how many it still held."""
    if not ids:
        return 0
    now = utcnow()
    values = {"status": "done", "finished_at": now, "updated_at": now, "lease_expires_at": None, "note": note}
    with store.engine.begin() as conn:
        stmt = update(_T).where(*_held(drainer, ids)).values(**values, campaign_id=campaign_id, last_error="")
        return int(conn.execute(stmt).rowcount)


@write_transaction
def fail(store: Store, drainer: str, ids: Sequence[int], error: str, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> dict:
    """An attempt at `ids` failed with `error`: each goes back to the queue, or is failed once it
    has used `max_attempts`; returns {id: new status} for those `drainer` still held."""
    if not ids:
        return {}
    now = utcnow()
    error = " ".join(str(error).split())[:MAX_ERROR_CHARS] or "failed"
    spent = _T.attempts >= max_attempts
    values = {
        "status": case((spent, "failed"), else_="queued"),
        "claimed_by": case((spent, _T.claimed_by), else_=None),
        "finished_at": case((spent, now), else_=None),
        "lease_expires_at": None,
        "last_error": error,
        "updated_at": now,
    }
    with store.engine.begin() as conn:
        rows = conn.execute(update(_T).where(*_held(drainer, ids)).values(**values).returning(_T.id, _T.status))
        return {int(r.id): r.status for r in rows}


@write_transaction
def release(store: Store, drainer: str, ids: Sequence[int]) -> int:
    """Give `drainer`'s claims back untried (the drainer is stopping): queued again, the attempt uncounted."""
    if not ids:
        return 0
    values = {"status": "queued", "claimed_by": None, "lease_expires_at": None, "attempts": _T.attempts - 1}
    with store.engine.begin() as conn:
        return int(conn.execute(update(_T).where(*_held(drainer, ids)).values(**values, updated_at=utcnow())).rowcount)


@write_transaction
def expire_leases(store: Store, max_attempts: int = DEFAULT_MAX_ATTEMPTS, now: datetime | None = None) -> list[dict]:
    """Claimed requests whose lease ran out (their drainer was killed or lost): queued again with
    last_error naming the drainer, or failed when they used `max_attempts`. Returns those rows
    as they are now (id, kernel, problem, topology_hash, status, claimed_by, attempts, last_error)."""
    now = now or utcnow()
    expired = (_T.status == "claimed") & (_T.lease_expires_at < now)
    changed = []
    with store.engine.begin() as conn:
        for row in conn.execute(select(_T.id, _T.claimed_by, _T.attempts).where(expired)).all():
            spent = row.attempts >= max_attempts
            error = f"the lease of drainer {row.claimed_by} expired (killed or cut off) on attempt {row.attempts}"
            if spent:
                error += f" of {max_attempts}"
            values = {"status": "failed" if spent else "queued", "lease_expires_at": None, "last_error": error}
            values["updated_at"] = now
            if spent:
                values["finished_at"] = now
            else:
                values["claimed_by"] = None
            stmt = update(_T).where(_T.id == row.id, expired).values(**values)  # another drainer may have been first
            if conn.execute(stmt).rowcount == 1:
                changed.append(row.id)
        if not changed:
            return []
        shown = (_T.id, _T.kernel, _T.problem, _T.topology_hash, _T.status, _T.claimed_by, _T.attempts, _T.last_error)
        return [dict(r) for r in conn.execute(select(*shown).where(_T.id.in_(changed)).order_by(_T.id)).mappings()]


@write_transaction
def note_unserved(store: Store, topologies: Iterable[str], note: str) -> list[dict]:
    """Queued requests for a topology not among `topologies` (nor "any"): set their note to `note`
    (why they are still queued) and return the ones whose note changed."""
    have = sorted(set(topologies) | {ANY_TOPOLOGY})
    waiting = (_T.status == "queued") & _T.topology_hash.not_in(have) & (_T.note != note)
    with store.engine.begin() as conn:
        stmt = update(_T).where(waiting).values(note=note, updated_at=utcnow())
        rows = conn.execute(stmt.returning(_T.id, _T.kernel, _T.problem, _T.topology_hash)).mappings().all()
    return sorted((dict(r) for r in rows), key=lambda r: r["id"])


@retrying
def unserved(store: Store, topologies: Iterable[str]) -> list[int]:
    """Ids of the queued requests for a topology not among `topologies` (nor "any"), oldest first."""
    have = sorted(set(topologies) | {ANY_TOPOLOGY})
    stmt = select(_T.id).where(_T.status == "queued", _T.topology_hash.not_in(have)).order_by(_T.id)
    with store.engine.connect() as conn:
        return [int(i) for i in conn.scalars(stmt)]


def requests(store: Store, status: str | None = None, limit: int | None = None) -> list[dict]:
    """Requests as dicts: claimed, then queued (in claim order), then failed and done (newest first)."""
    stmt = select(_T.__table__)
    if status is not None:
        if status not in REQUEST_STATUSES:
            raise ValueError(f"unknown request status {status!r}; one of {', '.join(REQUEST_STATUSES)}")
        stmt = stmt.where(_T.status == status)
    rank = case({"claimed": 0, "queued": 1, "failed": 2}, value=_T.status, else_=3)
    recent = case((_T.status.in_(_OPEN), -_T.priority), else_=0)
    stmt = stmt.order_by(rank, recent, case((_T.status.in_(_OPEN), _T.id), else_=-_T.id))
    return fetch_rows(store, stmt.limit(limit) if limit is not None else stmt)


@retrying
def status_counts(store: Store) -> dict[str, int]:
    """{status: requests} for every status (zeros included), in REQUEST_STATUSES order."""
    with store.engine.connect() as conn:
        found = dict(conn.execute(select(_T.status, func.count()).group_by(_T.status)).all())
    return {status: int(found.get(status, 0)) for status in REQUEST_STATUSES}


def _held(drainer: str, ids: Sequence[int]) -> tuple:
    return (_T.id.in_(list(ids)), _T.claimed_by == drainer[:256], _T.status == "claimed")
