"""Winner rows: save (with the decision a campaign made), read back, and `farm bench`'s
vendor ratio on the row it benchmarked.

The conventions of farm.store.repo (the campaign and trial queries): writes are short
transactions retried on lock errors, reads return WinnerRecords.
"""

from __future__ import annotations

import functools
import math
from datetime import datetime

from sqlalchemy import bindparam, case, func, inspect, select, update

from farm.store.database import Store
from farm.store.models import WinnerRow, utcnow
from farm.store.records import DECISION_FIELDS, VENDOR_FIELDS, WinnerRecord
from farm.store.repo import fetch_rows, require_topologies
from farm.store.transactions import dialect_insert, write_transaction

WINNER_KEY = ("topology_hash", "kernel", "problem")


@write_transaction
def save_winner(store: Store, record: WinnerRecord) -> None:
    """Store the winner for (topology, kernel, problem), replacing the previous one, with its
    decision (WinnerRecord.DECISION_FIELDS; None where the record has none). The vendor
    ratio `farm bench` stored stays while the schedule and source hash stay the same (it
    measured that kernel) and is cleared when they change."""
    if not (isinstance(record.median_ns, int | float) and math.isfinite(record.median_ns) and record.median_ns > 0):
        raise ValueError(f"winner median_ns must be a finite positive number, got {record.median_ns!r}")
    values = {
        "topology_hash": record.topology_hash,
        "kernel": record.kernel,
        "problem": record.problem_key,
        "schedule": record.schedule_key,
        "source_hash": record.source_hash,
        "median_ns": float(record.median_ns),
        "default_median_ns": record.default_median_ns,
        "speedup": record.speedup,
        "campaign_id": record.campaign_id,
        "device_name": record.device_name,
        "updated_at": utcnow(),
        **{name: _finite(getattr(record, name)) for name in DECISION_FIELDS},
        **{name: getattr(record, name) for name in VENDOR_FIELDS},
    }
    with store.engine.begin() as conn:
        require_topologies(conn, {record.topology_hash})
        conn.execute(_upsert(store.dialect, tuple(values)), {f"p_{k}": v for k, v in values.items()})


@functools.cache
def _upsert(dialect: str, names: tuple[str, ...]):
    """save_winner's statement for `dialect` and these columns, built once (building it was
    most of a save's CPU); parameter p_<column> is a column's value."""
    table = WinnerRow.__table__
    params = {name: bindparam(f"p_{name}", type_=table.c[name].type) for name in names}
    insert = dialect_insert(dialect, table).values(params)
    changed = {k: insert.excluded[k] for k in names if k not in WINNER_KEY and k not in VENDOR_FIELDS}
    same_kernel = (table.c.schedule == insert.excluded.schedule) & (table.c.source_hash == insert.excluded.source_hash)
    for name in VENDOR_FIELDS:  # a new record's own vendor values win; else the stored ones, if still its kernel
        changed[name] = func.coalesce(insert.excluded[name], case((same_kernel, table.c[name]), else_=None))
    return insert.on_conflict_do_update(index_elements=WINNER_KEY, set_=changed)


def _finite(value):
    """NaN and +-inf (a runner-up that failed) are stored as NULL: PostgreSQL would keep them, SQLite not."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


@write_transaction
def save_vendor_ratio(
    store: Store,
    topology_hash: str,
    kernel: str,
    problem_key: str,
    schedule_key: str,
    ratio: float,
    method: str,
    measured_at: datetime | None = None,
) -> bool:
    """Record `farm bench`'s vendor ratio (vendor kernel-only time / tuned time) on the winner
    of (topology, kernel, problem), only if that winner is still `schedule_key` (what was
    benchmarked); True when a row was updated."""
    if not (isinstance(ratio, int | float) and math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"vendor ratio must be a finite positive number, got {ratio!r}")
    stmt = (
        update(WinnerRow)
        .where(
            WinnerRow.topology_hash == topology_hash,
            WinnerRow.kernel == kernel,
            WinnerRow.problem == problem_key,
            WinnerRow.schedule == schedule_key,
        )
        .values(vendor_ratio=float(ratio), vendor_method=method, vendor_measured_at=measured_at or utcnow())
    )
    with store.engine.begin() as conn:
        return conn.execute(stmt).rowcount > 0


def winners(store: Store, kernel: str | None = None, topology: str | None = None) -> list[WinnerRecord]:
    """Stored winners, optionally for one kernel and/or topology, ordered by kernel, problem, topology.

    A read-only store of an older revision (not migrated: readers never migrate) reads the
    columns it has; the rest come back None."""
    stmt = select(*winner_columns(store)).order_by(WinnerRow.kernel, WinnerRow.problem, WinnerRow.topology_hash)
    if kernel is not None:
        stmt = stmt.where(WinnerRow.kernel == kernel)
    if topology is not None:
        stmt = stmt.where(WinnerRow.topology_hash == topology)
    return [winner_record(row) for row in fetch_rows(store, stmt)]


def winner_columns(store: Store) -> list:
    """The winners table's columns this database has: all of them once migrated (a writable
    store is), else those the table holds (a read-only store of an older revision)."""
    table = WinnerRow.__table__
    if not store.read_only:
        return list(table.c)
    present = {column["name"] for column in inspect(store.engine).get_columns("winners")}
    return [column for column in table.c if column.name in present]


def winner_record(row: dict) -> WinnerRecord:
    return WinnerRecord(
        topology_hash=row["topology_hash"],
        kernel=row["kernel"],
        problem_key=row["problem"],
        source_hash=row["source_hash"],
        schedule_key=row["schedule"],
        median_ns=row["median_ns"],
        default_median_ns=row["default_median_ns"],
        speedup=row["speedup"],
        campaign_id=row["campaign_id"],
        device_name=row["device_name"],
        updated_at=row["updated_at"],
        **{name: row.get(name) for name in (*DECISION_FIELDS, *VENDOR_FIELDS)},
    )
