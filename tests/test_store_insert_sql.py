"""insert_trials' driver SQL (multi-row VALUES on SQLite, a binary COPY through a
temporary table on PostgreSQL) stores what TrialResult.as_row() says, NaN as NULL, and returns
exactly the results SQL inserted, across chunk boundaries; the failure summary reads only
the newest `scan` failures."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

from test_store_support import profile, store_url, trial  # noqa: F401  (store_url is a fixture)

from farm import store
from farm.dashboard import data
from farm.schedule import Status
from farm.store import repo
from farm.store.migrate import downgrade
from farm.trial import ErrorMetrics


def test_stored_rows_are_as_row_with_nan_as_null_across_chunks(store_url, monkeypatch):  # noqa: F811
    monkeypatch.setattr(repo, "INSERT_CHUNK", 3)
    db = store.open_store(store_url)
    topo = store.upsert_topology(db, profile())
    cid = store.start_campaign(db, "farm tune", "random", None, 5, 10)
    results = [trial(topo, wg, median_ns=1000.0 + wg) for wg in range(1, 6)]
    results.append(replace(trial(topo, 6, Status.WRONG_RESULT), message="max_abs 0.5 > atol 1e-4", host="h"))
    results.append(replace(trial(topo, 7), metrics=ErrorMetrics(math.nan, 1e-7, 2e-7, math.inf), worker_id="w"))
    results.append(replace(trial(topo, 8), finished_at=1_700_000_000.25))
    stored = {row["schedule"]: row for row in store.trials(db)}
    assert stored == {}
    assert repo.insert_trials(db, cid, results) == results
    stored = {row["schedule"]: row for row in store.trials(db)}
    assert len(stored) == len(results)
    for result in results:
        expected = result.as_row()
        expected["finished_at"] = datetime.fromtimestamp(expected["finished_at"], UTC)
        expected = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in expected.items()}
        row = stored[result.key.schedule.key()]
        assert row["campaign_id"] == cid
        assert {k: row[k] for k in expected} == expected
    db.engine.dispose()


def test_returns_only_new_keys_first_of_repeats_in_order_across_chunks(store_url, monkeypatch):  # noqa: F811
    monkeypatch.setattr(repo, "INSERT_CHUNK", 2)
    db = store.open_store(store_url)
    topo = store.upsert_topology(db, profile())
    assert store.record_trials(db, None, [trial(topo, wg) for wg in (2, 4)]) == 2
    batch = [trial(topo, wg, median_ns=float(wg)) for wg in (5, 4, 3, 2, 1)] + [trial(topo, 3, median_ns=99.0)]
    assert repo.insert_trials(db, None, batch) == [batch[0], batch[2], batch[4]]
    assert repo.insert_trials(db, None, batch) == []
    assert store.count_trials(db) == 5
    db.engine.dispose()


def test_failure_summary_reads_the_newest_scan_failures_without_summaries(tmp_path):
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    db = store.open_store(url)
    topo = store.upsert_topology(db, profile())
    for wg in range(1, 7):  # one at a time: ids follow wg
        status = Status.TIMEOUT if wg <= 3 else Status.WRONG_RESULT
        store.record_trials(db, None, [replace(trial(topo, wg, status), message=f"failed at {wg}")])
    store.record_trials(db, None, [trial(topo, 7)])
    db.engine.dispose()
    downgrade(url, "0005_winner_decision")  # a database of a revision before the summaries
    db = store.open_store(url, read_only=True)
    everything = [(g["category"], g["trials"]) for g in data.failure_summary(db, scan=None)]
    assert everything == [("timeout", 3), ("wrong_result", 3)]
    assert data.failure_summary(db) == data.failure_summary(db, scan=None)  # under FAILURE_SCAN: exact
    newest = data.failure_summary(db, scan=4)
    assert [(g["category"], g["trials"], g["example"]) for g in newest] == [
        ("wrong_result", 3, "failed at 4"),
        ("timeout", 1, "failed at 3"),
    ]
    db.engine.dispose()
