"""Campaign lifecycle: the heartbeat that tells a killed driver's campaign from a
running one, the re-run that marks it interrupted, Ctrl-C, and replayed trials counted as done.

Store functions on SQLite and PostgreSQL; the campaign over a fake pool (no Ray, no GPU work:
plan() only needs the adapter's profile)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from test_store_support import profile, store_url  # noqa: F401  (store_url is a fixture)

from farm import catalog, store
from farm.dashboard import data
from farm.gpu import Timing
from farm.schedule import Problem, Status
from farm.store.models import CampaignRow, utcnow
from farm.store.repo import STALE_AFTER_S, campaign_status, interrupt_stale_campaigns, live_campaigns
from farm.trial import ErrorMetrics, TrialKey, TrialResult
from farm.tuning.campaign import HEARTBEAT_S, Campaign
from farm.tuning.heartbeat import Heartbeat
from farm.tuning.tasks import TuneConfig


@pytest.fixture
def db(store_url):  # noqa: F811
    opened = store.open_store(store_url)
    yield opened
    opened.engine.dispose()


def age(db, campaign_id: int, seconds: float, column: str = "heartbeat_at") -> None:
    """Move a campaign's heartbeat (or start) `seconds` into the past: a driver that stopped then."""
    with db.engine.begin() as conn:
        when = utcnow() - timedelta(seconds=seconds)
        conn.execute(update(CampaignRow).where(CampaignRow.id == campaign_id).values({column: when}))


# ---------------------------------------------------------------- store


def test_a_campaign_whose_heartbeat_is_stale_reads_as_interrupted(db):
    cid = store.start_campaign(db, "farm tune gemv", "random", 4, 5, 10)
    row = store.campaign(db, cid)
    assert row["status"] == "running" and row["heartbeat_at"] is not None
    assert live_campaigns(db) == [cid]

    age(db, cid, STALE_AFTER_S + 5)
    assert store.campaign(db, cid)["status"] == "interrupted"
    assert [c["status"] for c in store.campaigns(db)] == ["interrupted"]
    assert live_campaigns(db) == []

    store.update_campaign(db, cid, done=3, failures=1)  # the driver was only slow: alive again
    row = store.campaign(db, cid)
    assert (row["status"], row["done"], row["failures"]) == ("running", 3, 1)
    assert utcnow() - row["heartbeat_at"] < timedelta(seconds=STALE_AFTER_S)


def test_rows_from_before_heartbeats_fall_back_to_their_start(db):
    cid = store.start_campaign(db, "farm tune", "random", None, 5, 1)
    with db.engine.begin() as conn:
        conn.execute(update(CampaignRow).where(CampaignRow.id == cid).values(heartbeat_at=None))
    assert store.campaign(db, cid)["status"] == "running"  # started just now
    age(db, cid, STALE_AFTER_S + 1, column="started_at")
    assert store.campaign(db, cid)["status"] == "interrupted"
    now = utcnow()
    assert campaign_status({"status": "done", "started_at": now - timedelta(days=1)}, now) == "done"


def test_interrupt_stale_campaigns_marks_only_dead_running_ones_in_sql(db):
    dead = store.start_campaign(db, "farm tune gemv --db postgresql://u:secret@h/farm", "random", 4, 5, 10)
    store.update_campaign(db, dead, done=4, failures=0)
    alive = store.start_campaign(db, "farm tune gemm", "random", 4, 5, 10)
    finished = store.start_campaign(db, "farm tune fft", "random", 4, 5, 10)
    store.finish_campaign(db, finished, "done")
    for cid in (dead, finished):
        age(db, cid, STALE_AFTER_S * 3)

    (marked,) = interrupt_stale_campaigns(db)
    assert (marked["id"], marked["done"], marked["total"]) == (dead, 4, 10)
    assert "secret" not in marked["command"] and marked["heartbeat_at"] < utcnow()
    assert interrupt_stale_campaigns(db) == []  # once
    statuses = {c["id"]: c["status"] for c in store.campaigns(db)}
    assert statuses == {dead: "interrupted", alive: "running", finished: "done"}
    with db.engine.connect() as conn:  # stored so, not only shown so
        stored = dict(conn.execute(select(CampaignRow.id, CampaignRow.status)).all())
    assert stored[dead] == "interrupted" and stored[alive] == "running"
    assert store.campaign(db, dead)["finished_at"] is None  # it never finished; heartbeat_at is its last sign


def test_a_campaigns_done_never_passes_its_total(db):
    cid = store.start_campaign(db, "farm tune", "random", None, 5, 70)
    store.update_campaign(db, cid, done=73, failures=0, total=70)  # a search past its plan, not yet corrected
    assert (store.campaign(db, cid)["done"], store.campaign(db, cid)["total"]) == (73, 73)
    store.update_campaign(db, cid, done=75, failures=1)
    assert (store.campaign(db, cid)["done"], store.campaign(db, cid)["total"]) == (75, 75)
    store.update_campaign(db, cid, done=76, failures=1, total=80)
    assert (store.campaign(db, cid)["done"], store.campaign(db, cid)["total"]) == (76, 80)


def test_a_campaign_finished_as_interrupted_stays_so(db):
    cid = store.start_campaign(db, "farm tune", "random", None, 5, 4)
    store.finish_campaign(db, cid, "interrupted")  # Ctrl-C
    store.update_campaign(db, cid, done=2, failures=0)  # a late write does not revive it
    row = store.campaign(db, cid)
    assert (row["status"], row["done"]) == ("interrupted", 2) and row["finished_at"] is not None


def test_the_dashboard_stops_refreshing_for_a_dead_campaign(db, store_url):  # noqa: F811
    cid = store.start_campaign(db, "farm tune", "random", None, 5, 4)
    reader = data.open_readonly(store_url)
    try:
        assert data.running_campaigns(reader) == [cid]
        age(db, cid, STALE_AFTER_S + 1)
        assert data.running_campaigns(reader) == []
        (row,) = data.campaign_table(reader)
        assert row["status"] == "interrupted" and row["last_seen"] < utcnow() - timedelta(seconds=STALE_AFTER_S)
    finally:
        reader.engine.dispose()


# ---------------------------------------------------------------- heartbeat thread


def test_heartbeat_writes_while_nothing_else_does_and_stops():
    writes: list[float] = []
    beat = Heartbeat(lambda: writes.append(time.monotonic()), every_s=0.05).start()
    time.sleep(0.4)
    beat.stop()
    count = len(writes)
    assert count >= 3
    time.sleep(0.15)
    assert len(writes) == count  # stopped
    assert HEARTBEAT_S * 3 <= STALE_AFTER_S


def test_heartbeat_thread_skips_a_beat_that_was_just_written_and_survives_errors(capsys):
    calls = []

    def write():
        calls.append(threading.current_thread().name)
        if len(calls) > 1:
            raise OSError("database gone")

    beat = Heartbeat(write, every_s=0.1)
    beat.start()
    beat.beat()  # the main thread's write resets the clock
    time.sleep(0.45)
    beat.stop()
    assert calls[0] == threading.current_thread().name
    assert 2 <= len(calls) <= 6  # the thread kept trying, about every_s, not in a tight loop
    assert capsys.readouterr().err.count("campaign heartbeat failed (database gone)") == 1


def test_heartbeat_thread_sweeps_on_its_own_clock_even_while_the_main_thread_beats():
    sweeps = []
    beat = Heartbeat(lambda: None, every_s=10.0, sweep=lambda: sweeps.append(1), sweep_s=0.1).start()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        beat.beat()
        time.sleep(0.02)
    beat.stop()
    assert 3 <= len(sweeps) <= 6


# ---------------------------------------------------------------- the campaign


class FakePool:
    """One CPU worker whose trials all pass with a median from the schedule; counts what ran."""

    def __init__(self, device_profile, fail_after: int | None = None):
        self._profile = device_profile
        self.ran = 0
        self.fail_after = fail_after

    def profiles(self):
        return {"w0": self._profile}

    def topologies(self):
        return {self._profile.topology_hash(): ["w0"]}

    def stream(self, jobs, topology=None, batch_size=None):
        for job in jobs:
            if self.fail_after is not None and self.ran >= self.fail_after:
                raise KeyboardInterrupt
            self.ran += 1
            spec = catalog.get(job.kernel)
            key = TrialKey(topology, job.kernel, spec.source_hash(), job.problem, job.schedule)
            ns = 1000.0 + len(job.schedule.key())
            yield TrialResult(key, Status.OK, "", Timing(ns, ns, ns, ns, job.reps, "host"), ErrorMetrics(), "h", "w0")

    def remeasure_rounds(self, slot, kernel, problem, schedules, reps, rounds, seed=0, max_rounds=None, noise=0.01):
        return {s.key(): [1000.0] for s in schedules}  # one round, every finalist tied


CONFIG = TuneConfig(kernels=("gemv",), sizes={"gemv": [Problem.of(m=40, n=24)]}, budget=3, reps=2, rounds=1)


def test_a_rerun_that_only_replays_counts_its_trials_as_done(device, db, tmp_path):
    first = Campaign(CONFIG, FakePool(device.profile), db, tmp_path / "artifacts", "farm tune gemv")
    first.run()
    pool = FakePool(device.profile)
    again = Campaign(CONFIG, pool, db, tmp_path / "artifacts", "farm tune gemv")
    winners = again.run()
    assert pool.ran == 0 and winners  # everything replayed, a winner still chosen
    row = store.campaign(db, again.campaign_id)
    assert (row["status"], row["done"], row["total"], row["failures"]) == ("done", 4, 4, 0)
    assert (again.progress.done, again.progress.skipped) == (4, 4)
    assert store.campaign(db, first.campaign_id)["done"] == 4


def test_a_rerun_marks_the_killed_campaign_interrupted(device, db, tmp_path, capsys):
    killed = store.start_campaign(db, "farm tune gemv", "random", 3, 2, 4)
    age(db, killed, STALE_AFTER_S + 30)
    rerun = Campaign(CONFIG, FakePool(device.profile), db, tmp_path / "artifacts", "farm tune gemv")
    rerun.run()
    err = capsys.readouterr().err
    assert f"campaign {killed} ('farm tune gemv' on " in err and "marked interrupted" in err
    assert store.campaign(db, killed)["status"] == "interrupted"
    assert store.campaign(db, rerun.campaign_id)["status"] == "done"


def test_ctrl_c_finishes_the_campaign_interrupted_with_its_counters(device, db, tmp_path):
    pool = FakePool(device.profile, fail_after=2)
    stopped = Campaign(CONFIG, pool, db, tmp_path / "artifacts", "farm tune gemv")
    with pytest.raises(KeyboardInterrupt):
        stopped.run()
    row = store.campaign(db, stopped.campaign_id)
    assert (row["status"], row["done"]) == ("interrupted", 2) and row["finished_at"] is not None
    assert store.count_trials(db, campaign=stopped.campaign_id) == 2
    assert not stopped.heartbeat._thread.is_alive()


def test_a_long_stream_keeps_the_heartbeat_fresh_without_a_write_per_trial(device, db, tmp_path, monkeypatch):
    monkeypatch.setattr("farm.tuning.campaign.HEARTBEAT_S", 0.1)
    monkeypatch.setattr("farm.tuning.recording.FLUSH_INTERVAL_S", 3600.0)  # no flush while streaming
    monkeypatch.setattr("farm.tuning.recording.FLUSH_EVERY", 10_000)
    seen = []

    class SlowPool(FakePool):
        def stream(self, jobs, topology=None, batch_size=None):
            for result in super().stream(jobs, topology, batch_size):
                time.sleep(0.15)
                seen.append(store.campaign(db, campaign.campaign_id)["heartbeat_at"])
                yield result

    campaign = Campaign(CONFIG, SlowPool(device.profile), db, tmp_path / "artifacts", "farm tune gemv")
    campaign.run()
    assert len(set(seen)) >= 3  # the thread beat while no trial was written


def test_a_rerun_right_after_a_kill_marks_the_killed_one_once_its_heartbeat_goes_stale(
    device, db, tmp_path, monkeypatch, capsys
):
    killed = store.start_campaign(db, "farm tune gemv", "random", 3, 2, 4)  # heartbeat fresh: just killed
    monkeypatch.setattr("farm.tuning.campaign.SWEEP_S", 0.1)

    class SlowPool(FakePool):
        def stream(self, jobs, topology=None, batch_size=None):
            for result in super().stream(jobs, topology, batch_size):
                age(db, killed, STALE_AFTER_S + 1)  # time passes: the killed driver's heartbeat goes stale
                time.sleep(0.15)
                yield result

    rerun = Campaign(CONFIG, SlowPool(device.profile), db, tmp_path / "artifacts", "farm tune gemv")
    rerun.run()
    with db.engine.connect() as conn:
        status = conn.scalar(select(CampaignRow.status).where(CampaignRow.id == killed))
    assert status == "interrupted"  # in SQL, by the re-run's heartbeat thread
    assert capsys.readouterr().err.count(f"campaign {killed} (") == 1


def test_tune_holds_the_local_gpus_lock_so_a_second_campaign_waits(device, tmp_path, monkeypatch, capsys):
    import socket

    from farm.tuning import campaign as campaign_module

    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FARM_DEVICE_LOCK", raising=False)
    release, events = threading.Event(), []

    class LocalPool(FakePool):
        def __init__(self, *args, **kwargs):
            super().__init__(device.profile)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def reports(self):
            mapping = {"adapter": "llvmpipe", "adapter_index": None}
            return {"w0": {"host": socket.gethostname(), "pid": 1, "topology_hash": "t" * 64, "mapping": mapping}}

        def stage_times(self):
            return {}

        def stream(self, jobs, topology=None, batch_size=None):
            events.append(threading.current_thread().name)
            release.wait(timeout=30)
            yield from super().stream(jobs, topology, batch_size)

    monkeypatch.setattr(campaign_module, "WorkerPool", LocalPool)
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    threads = [
        threading.Thread(target=campaign_module.tune, args=(CONFIG, url), kwargs={"command": name}, name=name)
        for name in ("first", "second")
    ]
    threads[0].start()
    while not events:
        time.sleep(0.05)
    threads[1].start()
    time.sleep(1.0)
    assert set(events) == {"first"}  # the second waits for the GPU, not on the stream
    release.set()
    for thread in threads:
        thread.join(timeout=60)
    assert events[-1] == "second"
    assert "farm: waiting for GPU llvmpipe (worker w0): another campaign on this machine" in capsys.readouterr().err


# ---------------------------------------------------------------- killed and resumed

KILLED_DRIVER = """
import json, os, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_campaign_lifecycle import CONFIG, FakePool
from farm import store
from farm.gpu import HardwareProfile
from farm.tuning import recording
from farm.tuning.campaign import Campaign

recording.FLUSH_EVERY = 1  # every trial in SQL at once; Parquet only at the end, which never comes


class KilledPool(FakePool):
    def stream(self, jobs, topology=None, batch_size=None):
        for result in super().stream(jobs, topology, batch_size):
            if self.ran > 2:
                os.kill(os.getpid(), signal.SIGKILL)
            yield result


profile = HardwareProfile.from_dict(json.loads(Path({profile!r}).read_text()))
Campaign(CONFIG, KilledPool(profile), store.open_store({url!r}), Path({out!r}), "farm tune gemv").run()
"""


def test_a_resumed_campaign_marks_the_killed_one_at_once_and_restores_its_parquet(
    device, db, store_url, tmp_path, capsys  # noqa: F811
):
    import json
    import subprocess
    import sys
    from pathlib import Path

    from farm.store.parquet import read_trials

    out = tmp_path / "artifacts"
    saved = tmp_path / "profile.json"
    saved.write_text(json.dumps(device.profile.to_dict()))
    script = KILLED_DRIVER.format(tests=str(Path(__file__).parent), profile=str(saved), url=store_url, out=str(out))
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr[-2000:]
    (first,) = store.campaigns(db)
    assert (first["status"], store.count_trials(db, campaign=first["id"])) == ("running", 2)  # heartbeat fresh

    resumed = Campaign(CONFIG, FakePool(device.profile), db, out, "farm tune gemv")
    resumed.run()
    assert f"campaign {first['id']} ('farm tune gemv' on " in capsys.readouterr().err
    with db.engine.connect() as conn:  # in SQL, by the resumer, though its heartbeat is seconds old
        status = dict(conn.execute(select(CampaignRow.id, CampaignRow.status)).all())
    assert status == {first["id"]: "interrupted", resumed.campaign_id: "done"}
    # Parquet equals SQL as soon as the resume ends: the killed driver's rows written back
    sql = {(r["schedule"], r["campaign_id"]) for r in store.trials(db)}
    frame = read_trials(out)
    assert len(frame) == len(sql) == 4 and set(zip(frame["schedule"], frame["campaign_id"], strict=True)) == sql
    assert {c for _, c in sql} == {first["id"], resumed.campaign_id}
    assert not list((out / "locks").iterdir())  # both drivers' lock files gone
