"""How trial results reach the store: recorded as they arrive, and replayed on resume.

`TrialRecorder` buffers trials and writes them in SQL FLUSH_EVERY at a time or
FLUSH_INTERVAL_S after the last write, each flush one transaction that also writes the
campaign's progress and heartbeat (farm.store.trial_writer), on the thread whose trial made
it due while the campaign's other problems go on adding theirs; the trials SQL inserted (a key
another campaign stored first is SQL's, once, and not written again) wait in one Parquet
buffer per (topology, kernel) partition, written as one file per partition at `close()`
(the campaign's end) or when a partition holds PARQUET_ROWS. `close()` then restores from
SQL what Parquet lacks and compacts the partitions (farm.store.compaction): a killed driver
loses at most its unflushed SQL buffer (a re-run runs those trials again) and its Parquet
buffer, which the next campaign writes back from SQL when it marks the killed one
interrupted (or `farm compact` does). The SQL write rides out a database restart
(farm.store.retry).
`recorded` wraps a result stream with one (the throughput and overhead benchmarks record
like `farm tune` does); `result_from_row` turns a recorded trial row back into a
TrialResult, which is how a re-run campaign resumes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from farm.gpu import Timing
from farm.schedule import Problem, Schedule, Status
from farm.store import parquet as artifacts
from farm.store.compaction import finish_artifacts
from farm.store.repo import Counts
from farm.store.retry import call_retrying
from farm.store.trial_writer import TrialWriter
from farm.trial import ErrorMetrics, TrialKey, TrialResult

# Record buffered trials after this many results, or this long since the last write,
# whichever comes first: a flush costs about the same for 16 rows as for hundreds (a
# transaction, a statement), and a killed driver loses at most this buffer of SQL rows.
FLUSH_EVERY = 512
FLUSH_INTERVAL_S = 0.2
PARQUET_ROWS = 20_000  # a partition's Parquet buffer is written as a file at this many trials


class TrialRecorder:
    """Buffers trials and records them in SQL FLUSH_EVERY at a time or FLUSH_INTERVAL_S after
    the last write, whichever comes first (`farm tune` and the benchmarks that measure its
    path), and in Parquet under `out` one file per partition at `close()` or PARQUET_ROWS.
    Parquet gets only what SQL inserted: trial keys already stored (by a concurrent
    campaign) are counted in `duplicates` and dropped, so the files hold each key at most
    once and with SQL's values. `spent` sums the seconds of each store.

    `progress` (the campaign's (done, failures, total)) is written with each flush's trials
    in one transaction, under `writing` (the campaign's Heartbeat.writing: one write of the
    campaign row at a time, and a flush counts as a beat)."""

    def __init__(
        self,
        db,
        campaign_id: int | None,
        out: Path,
        progress: Callable[[], Counts] | None = None,
        writing: Callable[[], AbstractContextManager] | None = None,
    ):
        self.db, self.campaign_id, self.out = db, campaign_id, out
        self.progress, self.writing = progress, writing or contextlib.nullcontext
        self.writer = TrialWriter(db, campaign_id)
        self._lock = threading.Lock()  # the buffer: a campaign's problems in parallel record from their threads
        self._write_lock = threading.Lock()  # one SQL write at a time (the writer's connection, the Parquet buffers)
        self.buffer: list[TrialResult] = []
        self.pending: dict[tuple[str, str], list[TrialResult]] = {}  # partition -> inserted, not yet in Parquet
        self.touched: set[tuple[str, str]] = set()
        self.flushed_at = time.monotonic()
        self.spent = {"sql_s": 0.0, "parquet_s": 0.0}
        self.duplicates = 0

    def add(self, result: TrialResult) -> None:
        """Buffer `result`; write the buffer when due, unless another thread is writing (its
        write or the next one takes these): a thread adding never waits for another's SQL."""
        with self._lock:
            self.buffer.append(result)
            due = len(self.buffer) >= FLUSH_EVERY or time.monotonic() - self.flushed_at >= FLUSH_INTERVAL_S
        if due and self._write_lock.acquire(blocking=False):
            try:
                self._write()
            finally:
                self._write_lock.release()

    def flush(self) -> None:
        """Write the buffered trials in SQL, with the campaign's progress, in one transaction
        (after any write in progress); Parquet only for partitions that reached PARQUET_ROWS.
        The trials leave the buffer only once SQL has them: a flush that raises keeps them for
        the next one."""
        with self._write_lock:
            self._write()

    def _write(self) -> None:
        with self._lock:
            self.flushed_at = time.monotonic()
            batch, self.buffer = self.buffer, []
        if not batch:
            return
        start = time.perf_counter()
        try:
            with self.writing():
                counts = self.progress() if self.progress is not None else None
                inserted = self.writer.write(batch, counts)
        except BaseException:
            with self._lock:
                self.buffer[:0] = batch
            raise
        self.duplicates += len(batch) - len(inserted)
        self.spent["sql_s"] += time.perf_counter() - start
        self._to_parquet(inserted)

    def _to_parquet(self, inserted: list[TrialResult]) -> None:
        for result in inserted:
            partition = (result.key.topology_hash, result.key.kernel)
            self.pending.setdefault(partition, []).append(result)
            self.touched.add(partition)
        full = [partition for partition, rows in self.pending.items() if len(rows) >= PARQUET_ROWS]
        self._write_parquet(full)

    def close(self) -> dict:
        """Flush, write every partition's Parquet buffer (one file each), then restore from SQL
        what Parquet lacks and compact the touched partitions (farm.store.compaction)."""
        with self._write_lock:
            try:
                self._write()
            finally:
                self.writer.close()
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
