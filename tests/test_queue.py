"""The tuning queue's store functions (farm.store.queue) on SQLite and the real PostgreSQL:
dedupe, priority, atomic claims (threads and processes), leases that expire, retries then
failed with the reason, and the revision 0004 round trip."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest
from test_store_support import store_url  # noqa: F401  (fixture)

from farm.store import open_store
from farm.store import queue as q
from farm.store.migrate import current, downgrade, upgrade

DRAINERS = 4
REQUESTS = 40


def test_enqueue_dedupes_open_requests_and_raises_their_priority(store_url):  # noqa: F811
    db = open_store(store_url)
    first, new = q.enqueue(db, "topo", "gemv", "m=8,n=8", "src", 0, "alice@h")
    assert new
    again, new = q.enqueue(db, "topo", "gemv", "m=8,n=8", "src", 7, "bob@h")
    assert (again, new) == (first, False)
    assert [r["priority"] for r in q.requests(db)] == [7]
    lower, _ = q.enqueue(db, "topo", "gemv", "m=8,n=8", "src", 1, "carol@h")
    assert lower == first and q.requests(db)[0]["priority"] == 7  # never lowered
    # another source hash, topology or problem is another request
    assert q.enqueue(db, "topo", "gemv", "m=8,n=8", "src2")[1]
    assert q.enqueue(db, "any", "gemv", "m=8,n=8", "src")[1]
    assert q.enqueue(db, "topo", "gemv", "m=16,n=8", "src")[1]
    # once done, the same key can be queued again
    (claimed,) = q.claim(db, "d", ["topo"], limit=1)
    assert claimed["id"] == first and claimed["attempts"] == 1 and claimed["claimed_by"] == "d"
    assert q.enqueue(db, "topo", "gemv", "m=8,n=8", "src")[0] == first  # claimed is still open
    assert q.complete(db, "d", [first], None) == 1
    assert q.enqueue(db, "topo", "gemv", "m=8,n=8", "src")[1]
    assert q.status_counts(db) == {"queued": 4, "claimed": 0, "done": 1, "failed": 0}
    with pytest.raises(ValueError, match="kernel"):
        q.enqueue(db, "topo", "", "m=1", "src")
    db.engine.dispose()


def test_claims_follow_priority_then_age_and_only_the_drainers_topologies(store_url):  # noqa: F811
    db = open_store(store_url)
    low = q.enqueue(db, "a", "gemv", "m=1,n=1", "s", 0)[0]
    high = q.enqueue(db, "a", "gemv", "m=2,n=1", "s", 5)[0]
    other = q.enqueue(db, "b", "gemv", "m=3,n=1", "s", 9)[0]
    anyone = q.enqueue(db, "any", "gemv", "m=4,n=1", "s", 1)[0]
    rows = q.claim(db, "d1", ["a", "any"], limit=10)
    assert [r["id"] for r in rows] == [high, anyone, low]
    assert q.claim(db, "d1", ["a", "any"]) == []
    assert [r["id"] for r in q.requests(db, "queued")] == [other]
    noted = q.note_unserved(db, ["a"], "no worker of b here")
    assert [r["id"] for r in noted] == [other]
    assert q.note_unserved(db, ["a"], "no worker of b here") == []  # already says so
    assert q.requests(db, "queued")[0]["note"] == "no worker of b here"
    db.engine.dispose()


def _claim_all(url: str, name: str, barrier, out) -> None:
    db = open_store(url)
    barrier.wait(timeout=60)
    got = []
    while rows := q.claim(db, name, ["t"], limit=3):
        got += [r["id"] for r in rows]
    db.engine.dispose()
    out.put((name, got))


def _fill(db) -> None:
    for i in range(REQUESTS):
        q.enqueue(db, "t", "gemv", f"m={i + 1},n=4", "s")


def _check_disjoint(db, claimed: dict[str, list[int]]) -> None:
    ids = [i for got in claimed.values() for i in got]
    assert len(ids) == len(set(ids)) == REQUESTS, claimed
    owners = {r["id"]: r["claimed_by"] for r in q.requests(db)}
    assert all(owners[i] == name for name, got in claimed.items() for i in got)


def test_drainers_in_threads_never_claim_the_same_request(store_url):  # noqa: F811
    db = open_store(store_url)
    _fill(db)
    barrier = threading.Barrier(DRAINERS)

    class Out(list):
        put = list.append

    out = Out()
    threads = [threading.Thread(target=_claim_all, args=(store_url, f"d{i}", barrier, out)) for i in range(DRAINERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    _check_disjoint(db, dict(out))
    db.engine.dispose()


def test_drainers_in_processes_never_claim_the_same_request(store_url):  # noqa: F811
    db = open_store(store_url)
    _fill(db)
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(store_url, f"p{i}", barrier, out)) for i in range(2)]
    for proc in procs:
        proc.start()
    claimed = dict(out.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    _check_disjoint(db, claimed)
    db.engine.dispose()


def test_a_dead_drainers_lease_expires_and_another_claims_the_request(store_url):  # noqa: F811
    db = open_store(store_url)
    rid = q.enqueue(db, "t", "gemv", "m=8,n=8", "s")[0]
    # a lease long enough that a loaded machine still checks it before it ends
    assert [r["id"] for r in q.claim(db, "dead", ["t"], lease_s=2.0)] == [rid]
    assert q.expire_leases(db) == []  # still held
    assert q.claim(db, "alive", ["t"]) == []
    time.sleep(2.2)
    (expired,) = q.expire_leases(db, max_attempts=3)
    assert expired["status"] == "queued" and "drainer dead" in expired["last_error"]
    (row,) = q.claim(db, "alive", ["t"], lease_s=60)
    assert row["id"] == rid and row["attempts"] == 2
    assert q.complete(db, "dead", [rid]) == 0  # the dead one's late write changes nothing
    assert q.renew(db, "alive", [rid], 60) == 1 and q.renew(db, "dead", [rid], 60) == 0
    assert q.complete(db, "alive", [rid], None) == 1
    assert q.requests(db)[0]["status"] == "done"
    db.engine.dispose()


def test_failures_are_retried_then_failed_with_the_reason(store_url):  # noqa: F811
    db = open_store(store_url)
    rid = q.enqueue(db, "t", "gemv", "m=8,n=8", "s")[0]
    for attempt in (1, 2):
        (row,) = q.claim(db, "d", ["t"])
        assert row["attempts"] == attempt
        assert q.fail(db, "d", [rid], f"boom {attempt}", max_attempts=3) == {rid: "queued"}
    q.claim(db, "d", ["t"])
    assert q.fail(db, "d", [rid], "boom\n  3", max_attempts=3) == {rid: "failed"}
    (row,) = q.requests(db)
    assert row["status"] == "failed" and row["last_error"] == "boom 3" and row["attempts"] == 3
    assert row["finished_at"] is not None and row["claimed_by"] == "d"
    assert q.claim(db, "d", ["t"]) == []
    # a lease that expires on the last attempt fails the request too
    rid = q.enqueue(db, "t", "gemv", "m=9,n=8", "s")[0]
    q.claim(db, "gone", ["t"], lease_s=0.2)
    time.sleep(0.4)
    (expired,) = q.expire_leases(db, max_attempts=1)
    assert expired["status"] == "failed" and "attempt 1 of 1" in expired["last_error"]
    # release gives a claim back without spending an attempt
    rid = q.enqueue(db, "t", "gemv", "m=10,n=8", "s")[0]
    q.claim(db, "d", ["t"])
    assert q.release(db, "d", [rid]) == 1
    row = next(r for r in q.requests(db) if r["id"] == rid)
    assert (row["status"], row["attempts"], row["claimed_by"]) == ("queued", 0, None)
    db.engine.dispose()


def test_revision_0004_round_trip(store_url):  # noqa: F811
    upgrade(store_url, "0004_tuning_requests")
    assert current(store_url) == "0004_tuning_requests"
    db = open_store(store_url)
    assert q.has_queue(db)
    q.enqueue(db, "t", "gemv", "m=8,n=8", "s")
    db.engine.dispose()
    downgrade(store_url, "0003_trial_indexes")
    db = open_store(store_url, read_only=True)
    assert not q.has_queue(db) and db.has_schema()
    db.engine.dispose()
    upgrade(store_url)
    db = open_store(store_url)
    assert q.requests(db) == [] and q.enqueue(db, "t", "gemv", "m=8,n=8", "s")[1]
    db.engine.dispose()
