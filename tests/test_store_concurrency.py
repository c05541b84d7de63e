"""Two campaigns in two processes writing one database at once lose no rows and duplicate none.

Both processes open a brand-new database at the same moment (so they also race on the
migrations), then write overlapping trial keys in small batches, in opposite orders.
"""

from __future__ import annotations

import multiprocessing as mp

from test_store_support import profile, recounted, snapshot, store_url, trial  # noqa: F401  (store_url is a fixture)

from farm.store import count_trials, open_store, record_trials, start_campaign, trials, upsert_topology

BATCH = 10
WRITERS = {"a": range(0, 120), "b": range(179, 59, -1)}  # keys 60..119 written by both


def write_campaign(url: str, name: str, barrier, results) -> None:
    """One campaign: open the store, record its trials batch by batch, report rows it inserted."""
    barrier.wait(timeout=60)
    store = open_store(url)
    topo = upsert_topology(store, profile())
    cid = start_campaign(store, f"farm tune ({name})", "exhaustive", None, 7, len(WRITERS[name]))
    batch = [trial(topo, wg) for wg in WRITERS[name]]
    inserted = sum(record_trials(store, cid, batch[i : i + BATCH]) for i in range(0, len(batch), BATCH))
    store.engine.dispose()
    results.put((name, inserted))


def _key_tuple(key) -> tuple[str, str, str, str, str]:
    return (key.topology_hash, key.kernel, key.source_hash, key.problem.key(), key.schedule.key())


def test_two_processes_writing_the_same_database_lose_and_duplicate_nothing(store_url):  # noqa: F811
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(WRITERS))
    results = ctx.Queue()
    procs = [ctx.Process(target=write_campaign, args=(store_url, name, barrier, results)) for name in WRITERS]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=180)
    assert [proc.exitcode for proc in procs] == [0, 0]
    inserted = dict(results.get(timeout=5) for _ in procs)

    store = open_store(store_url)
    rows = trials(store)
    keys = [(r["topology_hash"], r["kernel"], r["source_hash"], r["problem"], r["schedule"]) for r in rows]
    expected = {_key_tuple(trial(profile().topology_hash(), wg).key) for wg in range(0, 180)}
    assert len(keys) == len(set(keys)) == 180
    assert set(keys) == expected
    assert inserted["a"] + inserted["b"] == 180
    assert inserted["a"] >= 60 and inserted["b"] >= 60  # each owns 60 keys outright
    assert count_trials(store) == 180
    assert {r["campaign_id"] for r in rows} == {1, 2}
    assert snapshot(store) == recounted(store)  # each key counted once, by the writer that inserted it
    store.engine.dispose()


def test_sqlite_write_retries_while_another_connection_holds_the_lock(tmp_path, monkeypatch):
    import sqlite3
    import threading
    import time

    import farm.store.engine as engine
    import farm.store.retry as retry

    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 20)  # lock errors surface at once, retry must cope
    backoffs: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(retry.time, "sleep", lambda s: (backoffs.append(s), real_sleep(s)))
    store = open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    topo = upsert_topology(store, profile())
    holder = sqlite3.connect(tmp_path / "farm.db", timeout=0, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.4, holder.execute, args=("COMMIT",))
    release.start()
    try:
        assert record_trials(store, None, [trial(topo, 64), trial(topo, 128)]) == 2
    finally:
        release.join()
        holder.close()
    assert count_trials(store) == 2
    assert backoffs[:2] == [0.05, 0.1]  # it did hit "database is locked" and retried
    store.engine.dispose()
