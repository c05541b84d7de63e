"""Models and repository functions round-trip on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from test_store_support import profile, store_url, trial  # noqa: F401  (store_url is a fixture)

from farm.schedule import Problem, Schedule, Status
from farm.store import (
    ReadOnlyStoreError,
    WinnerRecord,
    campaign,
    campaigns,
    count_trials,
    database_url,
    finish_campaign,
    open_store,
    record_sweep,
    record_trials,
    recorded_schedules,
    save_winner,
    start_campaign,
    sweep_cases,
    sweep_steps,
    sweeps,
    topologies,
    trial_status_counts,
    trials,
    update_campaign,
    upsert_topology,
    winners,
)
from farm.store.migrate import current, head_revision


@pytest.fixture
def store(store_url):  # noqa: F811
    opened = open_store(store_url)
    yield opened
    opened.engine.dispose()


@pytest.fixture
def topo(store) -> str:
    return upsert_topology(store, profile())


def test_database_url_prefers_argument_then_env_then_farm_home(farm_home, monkeypatch):
    assert database_url() == f"sqlite:///{farm_home / 'farm.db'}"
    monkeypatch.setenv("FARM_DATABASE_URL", "postgresql+psycopg://u@h/db")
    assert database_url() == "postgresql+psycopg://u@h/db"
    assert database_url("sqlite:///x.db") == "sqlite:///x.db"


def test_open_store_rejects_unsupported_database():
    with pytest.raises(ValueError, match="unsupported database 'mysql'"):
        open_store("mysql://u@h/db")


def test_open_store_migrates_a_new_database_to_head(store):
    assert store.has_schema()
    assert current(store.url) == head_revision()


def test_sqlite_store_runs_in_wal_mode(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_topology_is_stored_once_with_its_profile(store):
    first = upsert_topology(store, profile())
    again = upsert_topology(store, profile())
    other = upsert_topology(store, profile("NVIDIA H200", device_id=0x2335))
    rows = topologies(store)
    assert first == again == profile().topology_hash()
    assert {r["hash"] for r in rows} == {first, other}
    stored = next(r for r in rows if r["hash"] == first)
    assert stored["device_name"] == "llvmpipe (LLVM 15)"
    assert stored["vendor_id"] == 0x10005
    assert stored["profile_json"]["limits"]["max-buffer-size"] == 1 << 28
    assert stored["first_seen"].tzinfo is not None


def test_trials_round_trip_every_column(store, topo):
    cid = start_campaign(store, "farm tune gemv", "exhaustive", None, 7, 2)
    results = [trial(topo, 64), trial(topo, 128, Status.COMPILE_ERROR)]
    assert record_trials(store, cid, results) == 2
    rows = {r["schedule"]: r for r in trials(store)}
    ok, failed = (rows[Schedule.of(workgroup_size=w).key()] for w in (64, 128))
    expected = results[0].as_row()
    for column in ("kernel", "source_hash", "problem", "status", "median_ns", "p20_ns", "p80_ns", "min_ns", "reps"):
        assert ok[column] == expected[column], column
    assert ok["max_rel"] == pytest.approx(4e-6)
    assert ok["timing_method"] == "timestamp"
    assert ok["campaign_id"] == cid and ok["host"] == "node-a" and ok["worker_id"] == "gpu-0"
    assert ok["finished_at"] == datetime.fromtimestamp(1_790_000_000.25, UTC)
    assert failed["status"] == "compile_error"
    assert failed["message"] == "compile_error at wg=128"
    assert failed["median_ns"] is None and failed["reps"] is None


def test_record_trials_skips_trial_keys_already_stored(store, topo):
    batch = [trial(topo, w) for w in (32, 64, 64, 128)]
    assert record_trials(store, None, batch) == 3
    assert record_trials(store, None, batch + [trial(topo, 256)]) == 1
    assert record_trials(store, None, []) == 0
    assert count_trials(store) == 4


def test_record_trials_treats_a_changed_kernel_source_as_a_new_trial(store, topo):
    record_trials(store, None, [trial(topo, 64, source_hash="src-1")])
    assert record_trials(store, None, [trial(topo, 64, source_hash="src-2")]) == 1
    assert count_trials(store) == 2


def test_record_trials_rejects_an_unknown_topology(store):
    with pytest.raises(ValueError, match="unknown topology hash.*upsert_topology"):
        record_trials(store, None, [trial("f" * 64, 64)])


def test_record_trials_rejects_items_that_are_not_trial_results(store, topo):
    with pytest.raises(TypeError, match=r"results\[1\] is dict"):
        record_trials(store, None, [trial(topo, 64), {"kernel": "gemv"}])


def test_recorded_schedules_returns_the_stored_rows_of_one_problem(store, topo):
    record_trials(store, None, [trial(topo, 32), trial(topo, 64, Status.WRONG_RESULT)])
    record_trials(store, None, [trial(topo, 32, problem=Problem.of(m=8, k=8))])
    found = recorded_schedules(store, topo, "gemv", "src-1", "m=37,k=129")
    assert set(found) == {Schedule.of(workgroup_size=w).key() for w in (32, 64)}
    assert found[Schedule.of(workgroup_size=64).key()]["status"] == "wrong_result"
    assert recorded_schedules(store, topo, "gemv", "src-2", "m=37,k=129") == {}


def test_trials_filter_count_and_paginate(store, topo):
    other = upsert_topology(store, profile("NVIDIA H200", device_id=1))
    first = start_campaign(store, "a", "random", 10, 3, 6)
    second = start_campaign(store, "b", "random", 10, 3, 6)
    record_trials(store, first, [trial(topo, w) for w in (16, 32, 64)] + [trial(topo, 999, Status.INVALID_SCHEDULE)])
    record_trials(store, second, [trial(other, 32, kernel="gemm"), trial(other, 64, Status.TIMEOUT, kernel="gemm")])
    assert count_trials(store) == 6
    assert count_trials(store, topology=other) == 2
    assert count_trials(store, campaign=first, status="ok") == 3
    assert trial_status_counts(store) == {"ok": 4, "invalid_schedule": 1, "timeout": 1}
    assert trial_status_counts(store, kernel="gemm") == {"ok": 1, "timeout": 1}
    page1 = trials(store, campaign=first, limit=2)
    page2 = trials(store, campaign=first, limit=2, offset=2)
    assert [r["id"] for r in page1 + page2] == [r["id"] for r in trials(store, campaign=first)]
    assert len(page1) == 2 and len(page2) == 2
    assert [r["kernel"] for r in trials(store, status="timeout")] == ["gemm"]
    with pytest.raises(ValueError, match="'finished' is not a valid Status"):
        trials(store, status="finished")
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        trials(store, offset=-1)


def test_campaign_progress_and_finish(store):
    cid = start_campaign(store, "farm tune --all", "model", 64, 5, 40)
    row = campaign(store, cid)
    assert (row["status"], row["done"], row["failures"], row["total"], row["budget"]) == ("running", 0, 0, 40, 64)
    assert row["finished_at"] is None and row["host"]
    update_campaign(store, cid, done=12, failures=2)
    finish_campaign(store, cid, "failed")
    row = campaign(store, cid)
    assert (row["status"], row["done"], row["failures"]) == ("failed", 12, 2)
    assert row["finished_at"] >= row["started_at"]
    newer = start_campaign(store, "again", "random", None, 5, 1)
    assert [c["id"] for c in campaigns(store)] == [newer, cid]


def test_campaign_functions_reject_bad_values(store):
    with pytest.raises(ValueError, match="reps must be >= 1, got 0"):
        start_campaign(store, "x", "random", None, 0, 1)
    cid = start_campaign(store, "x", "random", None, 1, 1)
    with pytest.raises(ValueError, match="finish status must be 'done', 'failed' or 'interrupted', got 'ok'"):
        finish_campaign(store, cid, "ok")
    with pytest.raises(ValueError, match="no campaign with id 999"):
        update_campaign(store, 999, 1, 0)
    with pytest.raises(ValueError, match="failures <= done"):
        update_campaign(store, cid, 1, 2)


def _winner(topo: str, wg: int, median: float, problem: str = "m=37,k=129", kernel: str = "gemv") -> WinnerRecord:
    return WinnerRecord(
        topology_hash=topo,
        kernel=kernel,
        problem_key=problem,
        source_hash="src-1",
        schedule_key=Schedule.of(workgroup_size=wg).key(),
        median_ns=median,
        default_median_ns=3000.0,
        speedup=3000.0 / median if median else None,
        campaign_id=None,
        device_name="llvmpipe",
    )


def test_save_winner_replaces_the_winner_of_the_same_topology_kernel_problem(store, topo):
    save_winner(store, _winner(topo, 64, 1500.0))
    save_winner(store, _winner(topo, 128, 1000.0))
    save_winner(store, _winner(topo, 32, 900.0, problem="m=8,k=8"))
    stored = winners(store)
    assert [(w.problem_key, w.schedule["workgroup_size"], w.median_ns) for w in stored] == [
        ("m=37,k=129", 128, 1000.0),
        ("m=8,k=8", 32, 900.0),
    ]
    assert stored[0].speedup == pytest.approx(3.0)
    assert stored[0].updated_at.tzinfo is not None
    assert stored[0].is_stale("src-2") and not stored[0].is_stale("src-1")


def test_winners_filter_by_kernel_and_topology(store, topo):
    other = upsert_topology(store, profile("NVIDIA H200", device_id=1))
    save_winner(store, _winner(topo, 64, 1000.0))
    save_winner(store, _winner(other, 256, 100.0))
    save_winner(store, _winner(other, 128, 500.0, kernel="gemm", problem="m=4,k=4,n=4"))
    assert [w.schedule["workgroup_size"] for w in winners(store, topology=other)] == [128, 256]
    assert [w.topology_hash for w in winners(store, kernel="gemv", topology=topo)] == [topo]
    assert winners(store, kernel="fft") == []


def test_save_winner_rejects_a_non_positive_median(store, topo):
    with pytest.raises(ValueError, match="median_ns must be a finite positive number, got 0.0"):
        save_winner(store, _winner(topo, 64, 0.0))


def _sweep_report() -> dict:
    cases = []
    for e in (96, 128):
        case = {"name": f"sweep_b1_h8_t64_l64_e{e}", "B": 1, "H": 8, "VH": 1, "T": 64, "L": 64, "E": e}
        case |= {"baseline_ms": 5.0, "fused_ms": 0.25, "runtime_ms": 0.3, "speedup": 20.0, "runtime_speedup": 16.7}
        case |= {"context_max_abs": 1e-5, "rho_rmse": 2e-6, "step_rho_max_abs": 3e-5, "strict_pass": e == 96}
        case |= {"reps": 4, "gpu_util": "n/a", "display_only": "ignored"}
        cases.append(case)
    steps = [
        {"case": c["name"], "step": s, "context_max_abs": 1e-6 * (s + 1), "rho_max_rel": 0.5}
        for c in cases
        for s in (0, 1)
    ]
    memory = {"in_use": 0, "reserved": 1 << 20}
    return {
        "adapter": "llvmpipe",
        "config": {"seed": 1337},
        "memory_before": memory,
        "memory_after": memory,
        "cases": cases,
        "steps": steps,
    }


def test_sweep_round_trip(store, topo):
    run_id = record_sweep(store, topo, _sweep_report())
    (run,) = sweeps(store)
    assert (run["id"], run["cases"], run["strict_passed"], run["config"]) == (run_id, 2, 1, {"seed": 1337})
    assert run["memory_after_reserved"] == 1 << 20
    cases = sweep_cases(store, run_id)
    assert [c["E"] for c in cases] == [96, 128]
    assert cases[0]["strict_pass"] is True and cases[1]["strict_pass"] is False
    assert cases[0]["speedup"] == 20.0 and cases[0]["gpu_util"] is None and cases[0]["rho_mean_abs"] is None
    steps = sweep_steps(store, run_id, case="sweep_b1_h8_t64_l64_e128")
    assert [(s["step"], s["context_max_abs"]) for s in steps] == [(0, 1e-6), (1, 2e-6)]
    assert len(sweep_steps(store, run_id)) == 4


def test_record_sweep_names_the_case_that_lacks_a_dimension(store, topo):
    report = _sweep_report()
    del report["cases"][1]["E"]
    with pytest.raises(ValueError, match=r"sweep case #1 \(sweep_b1_h8_t64_l64_e128\) lacks \['E'\]"):
        record_sweep(store, topo, report)
    assert sweeps(store) == []


def test_read_only_store_reads_but_refuses_writes(store, topo):
    record_trials(store, None, [trial(topo, 64)])
    reader = open_store(store.url, read_only=True)
    try:
        assert len(trials(reader)) == 1
        with pytest.raises(ReadOnlyStoreError, match="read-only"):
            record_trials(reader, None, [trial(topo, 32)])
        with pytest.raises(ReadOnlyStoreError):
            save_winner(reader, _winner(topo, 64, 1.0))
        with pytest.raises(DBAPIError, match="read-only|readonly"), reader.engine.begin() as conn:
            conn.execute(text("DELETE FROM trials"))
    finally:
        reader.engine.dispose()
    assert count_trials(store) == 1


def test_read_only_store_of_a_missing_sqlite_file_says_how_to_start(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `farm tune`"):
        open_store(f"sqlite:///{tmp_path / 'none.db'}", read_only=True)
    assert not (tmp_path / "none.db").exists()
