"""ForgeRuntime and the tuning queue (farm.runtime.requests): a miss queues a request once per
(kernel, problem), never blocks or fails the call (an unreachable database is one warning,
then no more tries), and winners tuned meanwhile serve after the TTL without a restart."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from farm import ForgeRuntime, catalog
from farm.store import WinnerRecord, open_store, save_winner, upsert_topology
from farm.store import queue as q


@pytest.fixture
def url(tmp_path, farm_home):
    return f"sqlite:///{tmp_path}/farm.db"


def _gemv(rt: ForgeRuntime, m: int, n: int) -> None:
    a, x = np.ones((m, n), np.float32), np.ones(n, np.float32)
    np.testing.assert_allclose(rt.gemv(a, x), np.full(m, n, np.float32))


def test_a_miss_queues_one_request_per_kernel_and_problem(url, device):
    open_store(url).engine.dispose()  # migrated, empty
    rt = ForgeRuntime(url, device=device, request_tuning=True)
    for _ in range(3):
        _gemv(rt, 40, 24)
    _gemv(rt, 48, 24)
    assert rt.winner_cache.background.wait(30)
    rows = q.requests(open_store(url))
    assert sorted(r["problem"] for r in rows) == ["m=40,n=24", "m=48,n=24"]
    row = rows[0]
    assert row["topology_hash"] == device.profile.topology_hash() and row["kernel"] == "gemv"
    assert row["source_hash"] == catalog.get("gemv").source_hash() and row["status"] == "queued"
    assert row["requested_by"].startswith("runtime pid ")
    # another runtime's miss of the same problem finds the open request
    other = ForgeRuntime(url, device=device, request_tuning=True)
    _gemv(other, 40, 24)
    assert other.winner_cache.background.wait(30)
    assert len(q.requests(open_store(url))) == 2


def test_request_tuning_is_off_unless_asked(url, device, monkeypatch):
    open_store(url).engine.dispose()
    _gemv(ForgeRuntime(url, device=device), 40, 24)
    monkeypatch.setenv("FARM_REQUEST_TUNING", "1")
    rt = ForgeRuntime(url, device=device)
    assert rt.winner_cache.request_tuning
    _gemv(rt, 56, 24)
    assert rt.winner_cache.background.wait(30)
    assert [r["problem"] for r in q.requests(open_store(url))] == ["m=56,n=24"]


def test_an_unreachable_database_warns_once_and_never_fails_the_call(device, farm_home, caplog):
    db = "postgresql+psycopg://farm@127.0.0.1:9/farm?connect_timeout=1"  # nothing listens on port 9
    rt = ForgeRuntime(db, device=device, request_tuning=True)
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="farm.runtime"):
        for m in (40, 48, 56):
            _gemv(rt, m, 24)
        assert time.perf_counter() - started < 5.0  # the calls never waited for the database
        assert rt.winner_cache.background.wait(30)
        _gemv(rt, 64, 24)
        assert rt.winner_cache.background.wait(30)
    queued = [r.getMessage() for r in caplog.records if "tuning requests" in r.getMessage()]
    assert len(queued) == 1 and "this runtime queues no more" in queued[0], queued
    # Stopped trying after the first failure: m=64, missed after it, is never requested. Misses
    # made while the first request was still in flight (m=48, m=56 on a busy machine) may be
    # recorded, but _enqueue skips them once the runtime knows the database is broken: one warning.
    assert ("gemv", "m=40,n=24") in rt.winner_cache.requested and ("gemv", "m=64,n=24") not in rt.winner_cache.requested


def test_a_winner_tuned_meanwhile_serves_after_the_ttl(url, device, monkeypatch):
    monkeypatch.setenv("FARM_WINNERS_TTL_S", "0")
    db = open_store(url)
    rt = ForgeRuntime(url, device=device)
    spec = catalog.get("gemv")
    problem = spec.problem(m=40, n=24)
    _gemv(rt, 40, 24)
    assert rt.tuned_schedule("gemv", problem)[1] == "default"
    valid = [s for s in spec.schedules() if not spec.invalid_reason(s, problem, rt.profile)]
    schedule = next(s for s in valid if s != spec.default)
    upsert_topology(db, device.profile)
    save_winner(db, WinnerRecord(rt.topology_hash, "gemv", problem.key(), spec.source_hash(), schedule.key(), 1000.0,
                                 2000.0, 2.0, None, device.profile.device_name))  # fmt: skip
    _gemv(rt, 40, 24)  # due: the re-read starts in the background
    assert rt.winner_cache.background.wait(30)
    _gemv(rt, 40, 24)  # the new winners replace the old, the lookup runs again
    assert rt.tuned_schedule("gemv", problem) == (schedule, "tuned")
    assert rt._caller.recent  # the call path's plan cache still works
    db.engine.dispose()


def test_a_tuned_lookup_is_not_a_miss(url, device, monkeypatch):
    monkeypatch.setenv("FARM_WINNERS_TTL_S", "0")
    rt = ForgeRuntime(url, device=device, request_tuning=True)
    spec = catalog.get("gemv")
    rt.winner_cache.missed(spec, spec.problem(m=8, n=8), "tuned")
    assert rt.winner_cache.requested == set() and not rt.winner_cache.refreshed()
