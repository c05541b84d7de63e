"""How trial results reach the store: recorded as they arrive, and replayed on resume.

`TrialRecorder` buffers trials and writes them in SQL FLUSH_EVERY at a time or
FLUSH_INTERVAL_S after the last write; the trials SQL inserted (a key another campaign
stored first is SQL's, once, and not written again) wait in one Parquet buffer per
(topology, kernel) partition, written as one file per partition at `close()` (the
campaign's end) or when a partition holds PARQUET_ROWS. `close()` then restores from SQL
what Parquet lacks and compacts the partitions (farm.store.compaction): a killed driver
loses only its Parquet buffer, which the next campaign writes back from SQL when it marks
the killed one interrupted (or `farm compact` does). The SQL write rides out a database
restart (farm.store.retry). `recorded` wraps a result stream with one (the throughput and overhead
benchmarks record like `farm tune` does); `result_from_row` turns a recorded trial row back
into a TrialResult, which is how a re-run campaign resumes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from farm.gpu import Timing
from farm.schedule import Problem, Schedule, Status
from farm.store import parquet as artifacts
from farm.store.compaction import finish_artifacts
from farm.store.repo import insert_trials
from farm.store.retry import call_retrying
from farm.trial import ErrorMetrics, TrialKey, TrialResult

FLUSH_EVERY = 16  # record buffered trials after this many results ...
FLUSH_INTERVAL_S = 1.0  # ... or this long since the last write, whichever comes first
PARQUET_ROWS = 20_000  # a partition's Parquet buffer is written as a file at this many trials


class TrialRecorder:
    """Buffers trials and records them in SQL FLUSH_EVERY at a time or FLUSH_INTERVAL_S after
    the last write, whichever comes first (`farm tune` and the benchmarks that measure its
    path), and in Parquet under `out` one file per partition at `close()` or PARQUET_ROWS.
    Parquet gets only what SQL inserted: trial keys already stored (by a concurrent
    campaign) are counted in `duplicates` and dropped, so the files hold each key at most
    once and with SQL's values. `spent` sums the seconds of each store; `on_flush` runs
    after each SQL write (the campaign's progress row)."""

    def __init__(self, db, campaign_id: int | None, out: Path, on_flush=None):
        self.db, self.campaign_id, self.out, self.on_flush = db, campaign_id, out, on_flush
        self.buffer: list[TrialResult] = []
        self.pending: dict[tuple[str, str], list[TrialResult]] = {}  # partition -> inserted, not yet in Parquet
        self.touched: set[tuple[str, str]] = set()
        self.flushed_at = time.monotonic()
        self.spent = {"sql_s": 0.0, "parquet_s": 0.0}
        self.duplicates = 0

    def add(self, result: TrialResult) -> None:
        self.buffer.append(result)
        if len(self.buffer) >= FLUSH_EVERY or time.monotonic() - self.flushed_at >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        """Write the buffered trials in SQL; Parquet only for partitions that reached PARQUET_ROWS."""
        self.flushed_at = time.monotonic()
        if not self.buffer:
            return
        batch, self.buffer = self.buffer, []
        start = time.perf_counter()
        try:  # through a database restart: the insert is idempotent (ON CONFLICT DO NOTHING)
            inserted = call_retrying(insert_trials, self.db, self.campaign_id, batch)
        except BaseException:
            self.buffer[:0] = batch  # not recorded: kept for the next flush
            raise
        self.duplicates += len(batch) - len(inserted)
        self.spent["sql_s"] += time.perf_counter() - start
        for result in inserted:
            partition = (result.key.topology_hash, result.key.kernel)
            self.pending.setdefault(partition, []).append(result)
            self.touched.add(partition)
        full = [partition for partition, rows in self.pending.items() if len(rows) >= PARQUET_ROWS]
        self._write_parquet(full)
        if self.on_flush is not None:
            self.on_flush()

    def close(self) -> dict:
        """Flush, write every partition's Parquet buffer (one file each), then restore from SQL
        what Parquet lacks and compact the touched partitions (farm.store.compaction)."""
        self.flush()
        self._write_parquet(list(self.pending))
        start = time.perf_counter()
        done = call_retrying(finish_artifacts, self.db, self.out, self.campaign_id, self.touched)
        self.spent["parquet_s"] += time.perf_counter() - start
        return done

    def _write_parquet(self, partitions: list[tuple[str, str]]) -> None:
        start = time.perf_counter()
        for partition in partitions:
            artifacts.write_trials(self.out, self.campaign_id, self.pending.pop(partition))
        self.spent["parquet_s"] += time.perf_counter() - start


def recorded(
    results: Iterable[TrialResult], db, campaign_id: int | None, out: Path, spent: dict[str, float] | None = None
) -> Iterator[TrialResult]:
    """Yield `results` as they arrive, recording them as `farm tune` does (TrialRecorder);
    `spent` accumulates "sql_s" and "parquet_s"."""
    recorder = TrialRecorder(db, campaign_id, out)
    for result in results:
        yield result
        recorder.add(result)
    recorder.close()
    if spent is not None:
        for key, seconds in recorder.spent.items():
            spent[key] = spent.get(key, 0.0) + seconds


def result_from_row(row: dict, problem: Problem) -> TrialResult:
    """A recorded trial row back as a TrialResult (for replay on resume)."""
    timing = None
    if row.get("median_ns") is not None:
        timing = Timing(
            row["median_ns"], row["p20_ns"], row["p80_ns"], row["min_ns"], row["reps"] or 0, row["timing_method"] or ""
        )
    metrics = ErrorMetrics(*(row.get(k) or 0.0 for k in ("max_abs", "mean_abs", "rmse", "max_rel")))
    key = TrialKey(row["topology_hash"], row["kernel"], row["source_hash"], problem, Schedule.from_key(row["schedule"]))
    return TrialResult(
        key,
        Status(row["status"]),
        row.get("message") or "",
        timing,
        metrics,
        row.get("host") or "",
        row.get("worker_id") or "",
    )
