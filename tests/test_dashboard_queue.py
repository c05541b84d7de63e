"""The dashboard's Queue page and its data (farm.dashboard.data.queue_table / queue_counts)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest
from test_store_support import profile

from farm.dashboard import data
from farm.store import open_store, start_campaign, upsert_topology
from farm.store import queue as q

APP = str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py")


def _fill(url: str) -> None:
    db = open_store(url)
    topology = upsert_topology(db, profile())
    start_campaign(db, "farm serve", "model", 4, 2, 0)
    q.enqueue(db, topology, "gemv", "m=8,n=8", "s", 2, "alice@h")
    q.enqueue(db, "any", "gemv", "m=16,n=8", "s", 0, "runtime pid 7 on h")
    q.enqueue(db, "f" * 64, "gemm", "m=4,k=4,n=4", "s", 0, "bob@h")
    q.claim(db, "node-a:42", [topology], lease_s=120, limit=1)
    q.note_unserved(db, [topology], "no worker of this topology at drainer node-a:42")
    db.engine.dispose()


def test_queue_table_shows_status_age_requester_and_lease_holder(tmp_path):
    url = f"sqlite:///{tmp_path}/farm.db"
    _fill(url)
    db = open_store(url, read_only=True)
    rows = data.queue_table(db)
    assert [(r["status"], r["kernel"], r["problem"]) for r in rows] == [
        ("claimed", "gemv", "m=8,n=8"), ("queued", "gemv", "m=16,n=8"), ("queued", "gemm", "m=4,k=4,n=4")
    ]  # fmt: skip
    claimed = rows[0]
    assert claimed["drainer"] == "node-a:42" and 100 < claimed["lease_left_s"] <= 120
    assert claimed["requested_by"] == "alice@h" and claimed["age_s"] >= 0 and len(claimed["topology"]) == 12
    assert rows[2]["why"].startswith("no worker of this topology") and rows[1]["drainer"] is None
    assert data.queue_counts(db) == {"queued": 2, "claimed": 1, "done": 0, "failed": 0}
    assert [r["id"] for r in data.queue_table(db, "claimed")] == [claimed["id"]]
    db.engine.dispose()


def test_queue_page_renders_the_counts_and_the_table(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/farm.db"
    _fill(url)
    monkeypatch.setenv("FARM_DATABASE_URL", url)
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("views/queue.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [m.value for m in at.metric] == ["2", "1", "0", "0"]
    (frame,) = [df.value for df in at.dataframe]
    assert list(frame["status"]) == ["claimed", "queued", "queued"]
    assert list(frame["drainer"])[0] == "node-a:42"
