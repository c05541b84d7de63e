"""The Trials page's queries at scale: the knob chart shows the current kernel
source only, newest first; failures group by message pattern, limited; pages by keyset."""

from __future__ import annotations

from dataclasses import replace

from test_store_support import profile, trial

from farm import catalog, store
from farm.dashboard import data
from farm.schedule import Status


def test_knob_chart_shows_only_the_current_source_newest_first(tmp_path, monkeypatch):
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    topo = store.upsert_topology(db, profile())
    current = catalog.get("gemv").source_hash()
    monkeypatch.setattr("farm.dashboard.trial_data.MAX_CHART_TRIALS", 3)
    store.record_trials(db, None, [trial(topo, wg, source_hash="old-src") for wg in range(1, 20)])
    for wg in (4, 8, 16, 32):  # one at a time: a batch goes in key order
        store.record_trials(db, None, [trial(topo, wg, source_hash=current, median_ns=1000.0 * wg)])
    rows = data.knob_timings(db, "gemv")
    assert [r["workgroup_size"] for r in rows] == [32, 16, 8]  # newest first, at most MAX_CHART_TRIALS
    assert data.knob_timings(db, "gone") == []
    store.record_trials(db, None, [trial(topo, 8, kernel="gone", source_hash="last")])
    assert [r["workgroup_size"] for r in data.knob_timings(db, "gone")] == [8]  # not in the catalog: newest hash
    db.engine.dispose()


def test_failures_group_by_message_pattern_with_an_example_and_a_limit(tmp_path):
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    topo = store.upsert_topology(db, profile())
    results = []
    for wg in range(1, 31):
        results.append(
            replace(trial(topo, wg, Status.WRONG_RESULT), message=f"max_abs {wg / 7:.4f} > atol 1e-4 at {wg}")
        )
    for wg in range(31, 36):
        results.append(replace(trial(topo, wg, Status.TIMEOUT), message=f"fp16 timed out after {wg}.5 s (0x{wg:x})"))
    store.record_trials(db, None, results)
    groups = data.failure_summary(db)
    assert [(g["category"], g["message"], g["trials"]) for g in groups] == [
        ("wrong_result", "max_abs # > atol # at #", 30),
        ("timeout", "fp16 timed out after # s (#)", 5),
    ]
    assert groups[1]["example"] == "fp16 timed out after 31.5 s (0x1f)"
    assert data.failure_summary(db, limit=1) == groups[:1]
    db.engine.dispose()


def test_deep_pages_walk_every_trial_once(tmp_path):
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    topo = store.upsert_topology(db, profile())
    store.record_trials(db, None, [trial(topo, wg) for wg in range(1, 24)])
    seen, page = [], data.trial_page(db, page_size=5)
    while True:
        seen += [r["id"] for r in page.rows]
        if page.older is None:
            break
        page = data.trial_page(db, page_size=5, before=page.older)
    assert seen == sorted(seen, reverse=True) and len(set(seen)) == 23
    db.engine.dispose()
