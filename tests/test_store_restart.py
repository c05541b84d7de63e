"""The store through a database restart: which errors are transient (farm.store.retry), a
read and a campaign's trial write that wait for PostgreSQL to come back, a busy SQLite
database waited out, and two drainers serving the queue while PostgreSQL is restarted under
them (nothing lost, nothing claimed twice, attempts counting only tuning failures, both
drainers still serving)."""

from __future__ import annotations

import io
import sqlite3
import threading
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from test_serve import CONFIG, MixedPool

from farm import catalog, store
from farm.store import open_store
from farm.store import queue as q
from farm.store.retry import call_retrying, is_disconnect, is_transient, retry_window_s
from farm.tuning.serve import Drainer


def test_the_retry_window_comes_from_the_environment_and_bad_values_are_named(monkeypatch):
    monkeypatch.delenv("FARM_DB_RETRY_S", raising=False)
    assert retry_window_s() == 60.0
    monkeypatch.setenv("FARM_DB_RETRY_S", "2.5")
    assert retry_window_s() == 2.5
    for bad in ("-1", "soon", "nan", "inf"):
        monkeypatch.setenv("FARM_DB_RETRY_S", bad)
        with pytest.raises(ValueError, match=f"FARM_DB_RETRY_S must be a number of seconds >= 0, got '{bad}'"):
            retry_window_s()
        with pytest.raises(ValueError, match="FARM_DB_RETRY_S"):  # refused before anything is opened
            open_store("sqlite://")


def test_a_busy_sqlite_database_is_waited_out_and_a_constraint_is_not_retried(tmp_path, monkeypatch):
    monkeypatch.setattr("farm.store.engine.SQLITE_BUSY_TIMEOUT_MS", 50)
    db = open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    holder = sqlite3.connect(tmp_path / "farm.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the database
    threading.Timer(0.5, holder.rollback).start()
    rid, new = q.enqueue(db, "t" * 64, "gemv", "m=8,n=8", "src")  # waits past the busy timeout, then goes in
    assert new and [r["id"] for r in q.requests(db)] == [rid]
    calls = []

    def duplicate():
        calls.append(1)
        with db.engine.begin() as conn:
            conn.execute(text(f"INSERT INTO tuning_requests (id, topology_hash, kernel, problem, source_hash, "
                              f"priority, status, requested_by, attempts, last_error, note, created_at, updated_at) "
                              f"SELECT {rid}, topology_hash, kernel, problem, source_hash, priority, status, "
                              "requested_by, attempts, last_error, note, created_at, updated_at "
                              "FROM tuning_requests"))  # fmt: skip

    with pytest.raises(IntegrityError) as caught:
        call_retrying(duplicate)
    assert calls == [1] and not is_transient(caught.value)
    holder.close()
    db.engine.dispose()


@pytest.mark.postgres
def test_a_lost_postgresql_is_transient_and_a_read_waits_for_its_restart(pg_own_server, monkeypatch, capsys):
    db = open_store(pg_own_server.url("farm"))
    with pytest.raises(DBAPIError) as caught, db.engine.connect() as conn:
        conn.execute(text("SELECT 1/0"))
    assert not is_transient(caught.value)  # a bad statement is permanent

    pg_own_server.restart()  # the pooled connection is cut off: the next use fails and is retried
    monkeypatch.setenv("FARM_DB_RETRY_S", "0")
    with pytest.raises(OperationalError) as caught:
        _stop_and_read(pg_own_server, db)
    assert is_disconnect(caught.value) and is_transient(caught.value)

    monkeypatch.setenv("FARM_DB_RETRY_S", "60")
    restarted = threading.Timer(1.0, pg_own_server._start)
    restarted.start()
    assert q.status_counts(db)["queued"] == 0  # waited for the server, then answered
    restarted.join()
    err = capsys.readouterr().err
    assert "farm: database unreachable (" in err and "retrying for up to 60 s ($FARM_DB_RETRY_S)" in err
    assert "farm: database reachable again after" in err
    db.engine.dispose()


def test_a_trial_write_cut_off_by_a_restart_is_retried_whole_and_bad_data_is_not(pg_own_server, monkeypatch):
    """A campaign's writer holds its connection (no ping at checkout), so the restart is first
    seen inside the COPY: raised as SQLAlchemy raises its own errors, it is retried."""
    from dataclasses import replace

    from test_store_support import profile, trial

    from farm.store.trial_writer import TrialWriter

    db = open_store(pg_own_server.url("farm"))
    topo = store.upsert_topology(db, profile())
    writer = TrialWriter(db, None)
    assert len(writer.write([trial(topo, 1)])) == 1  # the held connection, its COPY table made
    monkeypatch.setenv("FARM_DB_RETRY_S", "60")
    pg_own_server._run("pg_ctl", "-D", str(pg_own_server.data), "-m", "fast", "-w", "stop")
    restarted = threading.Timer(1.0, pg_own_server._start)
    restarted.start()
    assert len(writer.write([trial(topo, wg) for wg in (2, 3, 4)])) == 3  # waited, then wrote
    restarted.join()
    with pytest.raises(DBAPIError) as caught:  # longer than the column: refused at once, nothing written
        writer.write([trial(topo, 5), replace(trial(topo, 6), worker_id="w" * 300)])
    assert not is_transient(caught.value) and "value too long" in str(caught.value)
    writer.close()
    assert store.count_trials(db) == 4
    db.engine.dispose()


def _stop_and_read(server, db):
    server._run("pg_ctl", "-D", str(server.data), "-m", "fast", "-w", "stop")
    return q.status_counts(db)


class CountingDrainer(Drainer):
    """A drainer that notes every group it claimed: (drainer, request ids, when)."""

    claims: list[tuple[str, list[int], float]]

    def _drain_group(self, topology, rows, tally):
        self.claims.append((self.name, [r["id"] for r in rows], time.monotonic()))
        time.sleep(0.05)  # a little tuning time, so the restart lands mid-group
        super()._drain_group(topology, rows, tally)


@pytest.mark.postgres
def test_two_drainers_serve_through_a_postgresql_restart_losing_and_repeating_nothing(
    pg_own_server, device, tmp_path
):
    url = pg_own_server.url("farm")
    db = open_store(url)
    here = device.profile.topology_hash()
    source = catalog.get("gemv").source_hash()
    ids = [q.enqueue(db, here, "gemv", f"m={8 * (i + 2)},n=24", source)[0] for i in range(24)]
    claims: list[tuple[str, list[int], float]] = []
    stop, errors, drainers = threading.Event(), [], []
    for name in ("d1", "d2"):
        drainer = CountingDrainer(MixedPool(device.profile), open_store(url), CONFIG, tmp_path / "artifacts",
                                  name=name, batch=2, stream=io.StringIO())  # fmt: skip
        drainer.claims = claims
        drainers.append(drainer)

    def serve(drainer):
        try:
            drainer.serve(poll_s=0.1, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(d,)) for d in drainers]
    for thread in threads:
        thread.start()
    try:
        _wait(lambda: q.status_counts(db)["done"] >= 4, "drainers at work")
        pg_own_server.restart(down_s=1.0)
        back = time.monotonic()
        _wait(lambda: q.status_counts(db)["done"] == len(ids), "every request done")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    logs = "\n".join(f"{d.name}:\n{d.stream.getvalue()}" for d in drainers)  # what each drainer said, on failure
    assert errors == [] and not any(t.is_alive() for t in threads), logs
    claimed = [i for _, group, _ in claims for i in group]
    assert sorted(claimed) == ids, logs  # each request claimed once: none lost, none twice
    assert {name for name, _, at in claims if at > back} == {"d1", "d2"}  # both still serving after the restart
    rows = q.requests(db)
    assert {(r["status"], r["attempts"]) for r in rows} == {("done", 1)}  # the restart cost no attempt
    campaigns = store.campaigns(db)  # the drainers' campaigns wrote through it too
    assert len(campaigns) == len(claims) and {c["status"] for c in campaigns} == {"done"}
    assert all(c["done"] <= c["total"] for c in campaigns)
    for drainer in drainers:
        drainer.db.engine.dispose()
    db.engine.dispose()


def _wait(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.postgres
def test_an_outage_longer_than_the_retry_window_gives_the_claims_back_untried(
    pg_own_server, device, tmp_path, monkeypatch
):
    monkeypatch.setenv("FARM_DB_RETRY_S", "0.5")
    url = pg_own_server.url("farm")
    db = open_store(url)
    here = device.profile.topology_hash()
    source = catalog.get("gemv").source_hash()
    ids = [q.enqueue(db, here, "gemv", f"m={8 * (i + 2)},n=24", source)[0] for i in range(6)]
    stream, stop, errors = io.StringIO(), threading.Event(), []
    drainer = CountingDrainer(MixedPool(device.profile), open_store(url), CONFIG, tmp_path / "artifacts",
                              name="d1", batch=2, stream=stream)  # fmt: skip
    drainer.claims = []

    def serve():
        try:
            drainer.serve(poll_s=0.2, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        _wait(lambda: q.status_counts(db)["done"] >= 2, "the drainer at work")
        pg_own_server.restart(down_s=3.0)  # six times the retry window
        _wait(lambda: q.status_counts(db)["done"] == len(ids), "every request done")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert errors == [] and not thread.is_alive()
    assert "the database stayed unreachable" in stream.getvalue()  # it waited, then served on
    rows = q.requests(db)
    assert {(r["status"], r["attempts"]) for r in rows} == {("done", 1)}  # given back untried: no attempt spent
    drainer.db.engine.dispose()
    db.engine.dispose()
