"""Two campaigns recording overlapping trials: Parquet gets only what SQL inserted, so the
files hold every SQL key once, with SQL's values, and no key SQL skipped (a campaign writing
its whole batch whatever ON CONFLICT kept would leave keys twice, with different medians)."""

from __future__ import annotations

import multiprocessing as mp

from test_store_support import profile, store_url, trial  # noqa: F401  (store_url is a fixture)

from farm import store
from farm.store import parquet as artifacts
from farm.store.repo import TRIAL_KEY, insert_trials
from farm.tuning.recording import TrialRecorder

# Campaign "a" times workgroup sizes 0..59, "b" 30..89 (30 keys both), each with its own medians.
WRITERS = {"a": (range(0, 60), 1000.0), "b": (range(89, 29, -1), 2000.0)}


def results_of(name: str, topo: str):
    sizes, median = WRITERS[name]
    return [trial(topo, wg, median_ns=median + wg) for wg in sizes]


def assert_parquet_is_sql(db, out) -> None:
    sql = {tuple(r[k] for k in TRIAL_KEY): r for r in store.trials(db)}
    frame = artifacts.read_trials(out)
    keys = list(zip(*(frame[c] for c in ("topology", "kernel", "source_hash", "problem", "schedule")), strict=True))
    assert len(keys) == len(set(keys)), "a trial key twice in Parquet"
    assert set(keys) == set(sql) and len(frame) == len(sql) == 90
    for key, median, campaign in zip(keys, frame["median_ns"], frame["campaign_id"], strict=True):
        assert (median, campaign) == (sql[key]["median_ns"], sql[key]["campaign_id"])


def test_insert_trials_returns_only_what_sql_inserted(store_url):  # noqa: F811
    db = store.open_store(store_url)
    topo = store.upsert_topology(db, profile())
    first = [trial(topo, wg) for wg in (8, 16)]
    assert insert_trials(db, None, first) == first
    batch = [trial(topo, 32), trial(topo, 16, median_ns=5.0), trial(topo, 64), trial(topo, 32, median_ns=7.0)]
    assert insert_trials(db, None, batch) == [batch[0], batch[2]]  # 16 was stored; the second 32 repeats the first
    assert store.record_trials(db, None, batch) == 0
    db.engine.dispose()


def test_two_campaigns_recording_overlapping_trials_leave_parquet_equal_to_sql(store_url, tmp_path):  # noqa: F811
    db = store.open_store(store_url)
    topo = store.upsert_topology(db, profile())
    out = tmp_path / "artifacts"
    recorders = {
        name: TrialRecorder(db, store.start_campaign(db, f"farm tune ({name})", "random", None, 7, 60), out)
        for name in WRITERS
    }
    streams = {name: results_of(name, topo) for name in WRITERS}
    for index in range(60):  # the two campaigns' results arrive interleaved
        for name, recorder in recorders.items():
            recorder.add(streams[name][index])
    for recorder in recorders.values():
        recorder.close()
    assert_parquet_is_sql(db, out)
    assert sum(r.duplicates for r in recorders.values()) == 30
    db.engine.dispose()


def record_campaign(url: str, out: str, name: str, barrier) -> None:
    db = store.open_store(url)
    topo = store.upsert_topology(db, profile())
    recorder = TrialRecorder(db, store.start_campaign(db, f"farm tune ({name})", "random", None, 7, 60), out)
    barrier.wait(timeout=60)
    for result in results_of(name, topo):
        recorder.add(result)
    recorder.close()
    db.engine.dispose()


def test_two_concurrent_campaign_processes_leave_parquet_equal_to_sql(store_url, tmp_path):  # noqa: F811
    store.open_store(store_url).engine.dispose()  # migrated once; the race on records is the point here
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(WRITERS))
    out = str(tmp_path / "artifacts")
    procs = [ctx.Process(target=record_campaign, args=(store_url, out, name, barrier)) for name in WRITERS]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=180)
    assert [proc.exitcode for proc in procs] == [0, 0]
    db = store.open_store(store_url)
    assert_parquet_is_sql(db, out)
    db.engine.dispose()
