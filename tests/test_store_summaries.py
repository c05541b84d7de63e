"""The trial summaries (trial_counts, trial_failures): kept in the trial insert's transaction,
always equal to what recounting the trials gives (after inserts, a resumed campaign's
repeated keys, a campaign's end with compaction), and the dashboard's answers from them
equal to those of counting the trials."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from sqlalchemy import inspect, select
from test_store_support import profile, recounted, snapshot, store_url, trial  # noqa: F401  (store_url is a fixture)

from farm import store
from farm.dashboard import data, trial_data
from farm.schedule import Problem, Status
from farm.store import repo, summaries
from farm.store.migrate import downgrade, upgrade
from farm.store.models import TrialRow
from farm.tuning.recording import TrialRecorder

MESSAGES = ("t 0x1F at 3", "t 0x1a at 4", "max_abs 0.5 > atol 1e-4", "max_abs 2 > atol 1e-3", "fp16 timed out")


def results(topos: list[str], start: int, stop: int) -> list:
    made = []
    for wg in range(start, stop):
        status = (Status.OK, Status.WRONG_RESULT, Status.TIMEOUT)[wg % 3]
        result = trial(
            topos[wg % len(topos)],
            wg,
            status,
            kernel=("gemv", "gemm")[wg % 2],
            problem=Problem.of(m=8 << (wg % 3), k=16),
        )
        if status is not Status.OK:
            result = replace(result, message=MESSAGES[wg % len(MESSAGES)])
        made.append(result)
    return made


def fill(db) -> tuple[list[str], list[int]]:
    """Two topologies, two campaigns and trials without one; every status, repeated patterns."""
    topos = [store.upsert_topology(db, profile(f"GPU {n}", device_id=n)) for n in range(2)]
    campaigns = [store.start_campaign(db, "farm tune", "random", None, 7, 40) for _ in range(2)]
    store.record_trials(db, campaigns[0], results(topos, 1, 30))
    store.record_trials(db, campaigns[1], results(topos, 20, 45))  # 20..29 repeat: skipped, not counted
    store.record_trials(db, None, results(topos, 45, 60))
    return topos, campaigns


def test_summaries_equal_the_recounted_trials_after_inserts_and_resume(store_url):  # noqa: F811
    db = store.open_store(store_url)
    topos, campaigns = fill(db)
    assert store.count_trials(db) == 59
    assert snapshot(db) == recounted(db)
    assert store.count_trials(db, campaign=campaigns[1]) == 15
    assert sum(n for (c, *_rest, n) in snapshot(db)[0] if c == 0) == 15  # no campaign: NO_CAMPAIGN
    failed = sum(n for status, n in store.trial_status_counts(db).items() if status != "ok")
    assert failed == sum(r[-1] for r in snapshot(db)[1]) > 0
    db.engine.dispose()


def test_the_failure_example_is_the_smallest_message_in_code_point_order(store_url):  # noqa: F811
    db = store.open_store(store_url)
    topo = store.upsert_topology(db, profile())
    for wg, message in ((1, "t 0x1a at 4"), (2, "t 0x1F at 3")):  # one insert each: the upsert picks
        store.record_trials(db, None, [replace(trial(topo, wg, Status.TIMEOUT), message=message)])
    (group,) = data.failure_summary(db)
    assert (group["message"], group["trials"], group["example"]) == ("t # at #", 2, "t 0x1F at 3")
    assert snapshot(db) == recounted(db)
    db.engine.dispose()


def test_a_campaign_end_with_compaction_keeps_the_summaries(store_url, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr("farm.tuning.recording.FLUSH_EVERY", 4)
    db = store.open_store(store_url)
    topos, _ = fill(db)
    recorder = TrialRecorder(db, store.start_campaign(db, "farm tune", "random", None, 7, 40), tmp_path / "out")
    for result in results(topos, 50, 80):  # 50..59 were stored already
        recorder.add(result)
    recorder.close()
    assert store.count_trials(db) == 79
    assert snapshot(db) == recounted(db)
    db.engine.dispose()


@contextmanager
def counting(monkeypatch):
    """The queries of a database without summaries (they count trials)."""
    with monkeypatch.context() as patch:
        for module in (summaries, repo, data, trial_data):
            patch.setattr(module, "has_summaries", lambda _store: False)
        yield


def dashboard_answers(db, topos: list[str], campaigns: list[int]) -> dict:
    problem = Problem.of(m=16, k=16).key()
    answers = {
        "topology_table": data.topology_table(db),
        "kernel_names": data.kernel_names(db),
        "problem_keys": data.problem_keys(db, "gemv"),
        "trials_by_topology": data.trials_by_topology(db, "gemm", problem),
        "failure_summary": data.failure_summary(db),
        "count": data.trial_count(db),
    }
    for kernel in (None, "gemv"):
        for topology in (None, topos[1]):
            for campaign in (None, *campaigns):
                filters = {"kernel": kernel, "topology": topology, "campaign": campaign}
                answers[("status_counts", kernel, topology, campaign)] = data.status_counts(db, **filters)
                answers[("failures", kernel, topology, campaign)] = data.failure_summary(db, **filters)
                for status in (None, "timeout"):
                    answers[("count", kernel, topology, campaign, status)] = data.trial_count(
                        db, status=status, **filters
                    )
    return answers


def test_dashboard_answers_from_summaries_equal_counting_the_trials(store_url, monkeypatch):  # noqa: F811
    db = store.open_store(store_url)
    topos, campaigns = fill(db)
    answers = dashboard_answers(db, topos, campaigns)
    assert answers["count"] == 59 and answers["failure_summary"]
    with counting(monkeypatch):
        assert dashboard_answers(db, topos, campaigns) == answers
    db.engine.dispose()


def test_revision_0006_backfills_the_summaries_and_drops_them(store_url):  # noqa: F811
    db = store.open_store(store_url)
    topos, campaigns = fill(db)
    expected = snapshot(db)
    db.engine.dispose()
    downgrade(store_url, "0005_winner_decision")
    db = store.open_store(store_url, read_only=True)
    assert not summaries.has_summaries(db)
    indexes = {ix["name"] for ix in inspect(db.engine).get_indexes("trials")}
    assert "ix_trials_kernel_status" in indexes and not {"ix_trials_kernel_status_id"} & indexes
    assert store.count_trials(db) == 59  # the trials stay; counted without summaries
    db.engine.dispose()
    upgrade(store_url)
    db = store.open_store(store_url)
    assert summaries.has_summaries(db) and snapshot(db) == expected
    indexes = {ix["name"] for ix in inspect(db.engine).get_indexes("trials")}
    assert {"ix_trials_kernel_status_id", "ix_trials_kernel_source_status_id"} <= indexes
    with db.engine.connect() as conn:
        assert conn.scalar(select(TrialRow.id).limit(1)) is not None
    db.engine.dispose()
