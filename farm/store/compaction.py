"""Keeping the trials dataset few files per partition, and in step with SQL.

A campaign's recorder writes a partition's trials as one file at its end (and one more per
PARQUET_ROWS buffered), then `finish_artifacts` runs: `restore_from_sql` writes the trials
SQL holds and Parquet lacks (a killed driver's buffered rows), and `compact_partition`
merges each touched partition's files under SEAL_ROWS rows into one, dropping repeated
trial keys among them: a campaign's end costs what recent campaigns wrote, not the size of
the partition. `farm compact` does both for every partition, merging every file.

What a crash can lose: a killed driver's Parquet buffer (its trials since its last file),
never SQL's rows. What restores it: `restore_campaigns`, run by the next campaign when it
marks the killed one interrupted (at its start, for a re-run on the same machine), the next
campaign's end or `farm compact`, once the dead campaign no longer reads as live (heartbeat older than
repo.STALE_AFTER_S): rows of live campaigns other than the caller's are left to their own
recorder, so they are never written twice. A partition is checked by row counts first
(SQL's count, read from the trial summaries, against the Parquet footers) and diffed by
key only when they differ.

Compaction takes an exclusive flock on `<partition>/.compact.lock` (dot files are not part
of the dataset), writes the merged file under a dot name, renames it into place and then
removes its inputs: a reader between the rename and the removal sees rows twice, never
fewer. A restore's diff and write hold the same lock, since two campaigns ending at once
on one machine (two `farm serve` drainers sharing FARM_HOME) would otherwise read files the
other's compaction is removing.
"""

from __future__ import annotations

import fcntl
import json
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import func, select

from farm.store.database import Store
from farm.store.models import TrialRow
from farm.store.parquet import SCHEMA_VERSION, TRIAL_SCHEMA, farm_version, write_trials
from farm.store.repo import fetch_rows, live_campaigns
from farm.store.summaries import has_summaries, summary_counts

KEY = ("source_hash", "problem", "schedule")  # the trial key within one (topology, kernel) partition
FETCH_CHUNK = 500
# A campaign's end merges only a partition's files under this many rows, so it rewrites what
# recent campaigns wrote, not the whole partition; `farm compact` merges every file.
SEAL_ROWS = 100_000


def partition_dir(out: str | Path, topology: str, kernel: str) -> Path:
    return Path(out) / "trials" / f"topology={topology}" / f"kernel={kernel}"


def partition_files(out: str | Path, topology: str, kernel: str) -> list[Path]:
    return sorted(partition_dir(out, topology, kernel).glob("part-*.parquet"))


def partitions(out: str | Path) -> list[tuple[str, str]]:
    """Every (topology, kernel) with a directory under `<out>/trials`, sorted."""
    root = Path(out) / "trials"
    found = []
    for kernel_dir in root.glob("topology=*/kernel=*"):
        if kernel_dir.is_dir():
            found.append((kernel_dir.parent.name.removeprefix("topology="), kernel_dir.name.removeprefix("kernel=")))
    return sorted(found)


def parquet_rows(out: str | Path, topology: str, kernel: str) -> int:
    """Rows in a partition's files, from their footers (no data read)."""
    return sum(pq.ParquetFile(path).metadata.num_rows for path in partition_files(out, topology, kernel))


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".compact.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(path: Path) -> pa.Table:
    return pq.read_table(path).replace_schema_metadata(None).cast(TRIAL_SCHEMA)


def dedupe(table: pa.Table) -> pa.Table:
    """`table` with each trial key once (its first row)."""
    indexed = table.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    first = indexed.group_by(list(KEY), use_threads=False).aggregate([("__row", "min")])
    return table.take(pc.sort_indices(first["__row_min"]))


def compact_partition(out: str | Path, topology: str, kernel: str, seal_rows: int | None = None) -> Path | None:
    """Merge a partition's files into one (repeated trial keys among them dropped); returns
    the new file, or None when there was at most one file and no repeated key to drop.
    With `seal_rows`, files of at least that many rows stay as they are and only the
    smaller ones are merged: the cost is bounded by seal_rows, not by the partition."""
    directory = partition_dir(out, topology, kernel)
    with _locked(directory):
        files = partition_files(out, topology, kernel)
        if seal_rows is not None:
            files = [path for path in files if pq.ParquetFile(path).metadata.num_rows < seal_rows]
        if not files:
            return None
        table = pa.concat_tables([_read(path) for path in files])
        merged = dedupe(table)
        if len(files) == 1 and merged.num_rows == table.num_rows:
            return None
        hashes = sorted(set(merged["source_hash"].to_pylist()))
        campaigns = sorted({c for c in merged["campaign_id"].to_pylist() if c is not None})
        meta = {
            "farm.version": farm_version(),
            "farm.schema_version": SCHEMA_VERSION,
            "farm.source_hashes": json.dumps(hashes),
            "farm.topology": topology,
            "farm.kernel": kernel,
            "farm.campaign_id": str(campaigns[0]) if len(campaigns) == 1 else "",
            "farm.campaign_ids": json.dumps(campaigns),
            "farm.compacted_files": str(len(files)),
        }
        path = directory / f"part-compact-{uuid.uuid4().hex}.parquet"
        tmp = directory / f".{path.name}.tmp"
        pq.write_table(merged.replace_schema_metadata(meta), tmp)
        tmp.rename(path)
        for old in files:
            old.unlink()
        return path


def sql_partition_counts(store: Store) -> dict[tuple[str, str], int]:
    """Trials per (topology, kernel) in SQL: from the trial summaries (farm.store.summaries)
    where the database has them, else counted."""
    if has_summaries(store):
        return summary_counts(store, ("topology_hash", "kernel"))
    stmt = select(TrialRow.topology_hash, TrialRow.kernel, func.count()).group_by(
        TrialRow.topology_hash, TrialRow.kernel
    )
    with store.engine.connect() as conn:
        return {(t, k): int(n) for t, k, n in conn.execute(stmt).all()}


def restore_from_sql(store: Store, out: str | Path, campaign_id: int | None = None) -> dict[tuple[str, str], int]:
    """Write to Parquet the trials SQL holds and the partition's files lack, except those of
    live campaigns other than `campaign_id` (their recorders still hold them); returns the
    rows written per partition (only partitions that got any)."""
    skip = set(live_campaigns(store)) - {campaign_id}
    written = {}
    for (topology, kernel), count in sql_partition_counts(store).items():
        if count <= _rows_if_still(out, topology, kernel):
            continue
        with _locked(partition_dir(out, topology, kernel)):  # another campaign's end may be compacting it
            if count <= parquet_rows(out, topology, kernel):
                continue
            have = _parquet_keys(out, topology, kernel)
            stmt = select(TrialRow.id, TrialRow.campaign_id, *(TrialRow.__table__.c[k] for k in KEY)).where(
                TrialRow.topology_hash == topology, TrialRow.kernel == kernel
            )
            missing = [
                row["id"]
                for row in fetch_rows(store, stmt)
                if row["campaign_id"] not in skip and tuple(row[k] for k in KEY) not in have
            ]
            if missing:
                _write_rows(store, out, missing)
                written[(topology, kernel)] = len(missing)
    return written


def _rows_if_still(out: str | Path, topology: str, kernel: str) -> int:
    """parquet_rows without the partition's lock (a campaign's end reads every partition);
    -1 when a compaction removed a file between the listing and its footer."""
    try:
        return parquet_rows(out, topology, kernel)
    except FileNotFoundError:
        return -1


def _parquet_keys(out: str | Path, topology: str, kernel: str) -> set[tuple]:
    keys: set[tuple] = set()
    for path in partition_files(out, topology, kernel):
        table = pq.read_table(path, columns=list(KEY))
        keys.update(zip(*(table[k].to_pylist() for k in KEY), strict=True))
    return keys


def _write_rows(store: Store, out: str | Path, ids: list[int]) -> None:
    by_campaign: dict[int | None, list[dict]] = {}
    for start in range(0, len(ids), FETCH_CHUNK):
        stmt = select(TrialRow.__table__).where(TrialRow.id.in_(ids[start : start + FETCH_CHUNK])).order_by(TrialRow.id)
        for row in fetch_rows(store, stmt):
            by_campaign.setdefault(row["campaign_id"], []).append(row)
    for campaign, rows in by_campaign.items():
        write_trials(out, campaign, rows)


def restore_campaigns(store: Store, out: str | Path, campaign_ids: Iterable[int]) -> dict[tuple[str, str], int]:
    """Write to Parquet the trials of `campaign_ids` (campaigns whose driver died: nothing else
    writes them) that their partitions' files lack, then compact those partitions; returns the
    rows written per partition. Diff and write hold the partition's lock, so two callers at
    once write each row once."""
    ids = sorted(set(campaign_ids))
    if not ids:
        return {}
    stmt = select(TrialRow.id, TrialRow.topology_hash, TrialRow.kernel, *(TrialRow.__table__.c[k] for k in KEY))
    by_partition: dict[tuple[str, str], list[dict]] = {}
    for row in fetch_rows(store, stmt.where(TrialRow.campaign_id.in_(ids))):
        by_partition.setdefault((row["topology_hash"], row["kernel"]), []).append(row)
    written = {}
    for (topology, kernel), rows in sorted(by_partition.items()):
        with _locked(partition_dir(out, topology, kernel)):
            have = _parquet_keys(out, topology, kernel)
            missing = [row["id"] for row in rows if tuple(row[k] for k in KEY) not in have]
            if missing:
                _write_rows(store, out, missing)
        if missing:
            written[(topology, kernel)] = len(missing)
            compact_partition(out, topology, kernel)
    return written


def finish_artifacts(
    store: Store | None,
    out: str | Path,
    campaign_id: int | None = None,
    touched: Iterable[tuple[str, str]] = (),
    full: bool = False,
) -> dict:
    """What a campaign's end (and `farm compact`, with every partition and `full`) does to
    the dataset: restore from SQL what Parquet lacks, then compact `touched` and the
    restored partitions: their files under SEAL_ROWS rows only, unless `full` (all of them).
    Returns {"restored": rows written from SQL, "compacted": partitions merged}."""
    restored = restore_from_sql(store, out, campaign_id) if store is not None else {}
    compacted = 0
    for topology, kernel in sorted(set(touched) | set(restored)):
        if compact_partition(out, topology, kernel, None if full else SEAL_ROWS) is not None:
            compacted += 1
    return {"restored": sum(restored.values()), "compacted": compacted}
