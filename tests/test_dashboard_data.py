"""The dashboard's data module (no Streamlit): values over a database filled through farm.store,
on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from farm import catalog, store
from farm.dashboard import data
from farm.gpu import HardwareProfile, Timing
from farm.schedule import Problem, Schedule, Status
from farm.store import WinnerRecord
from farm.trial import ErrorMetrics, TrialKey, TrialResult

LIMITS = (("max-compute-invocations-per-workgroup", 1024), ("max-storage-buffer-binding-size", 1 << 30))
H200 = HardwareProfile("Vulkan", "DiscreteGPU", 0x10DE, 0x2335, "NVIDIA H200", "570.1", LIMITS, ("timestamp-query",))
LAVAPIPE = HardwareProfile("Vulkan", "CPU", 0x10005, 0, "llvmpipe (LLVM 15)", "Mesa 22.3", LIMITS, ())
PROBLEM = Problem.of(m=64, n=64)


def _trial(profile, source_hash, schedule, status=Status.OK, median_ns=None, message="") -> TrialResult:
    timing = (
        Timing(median_ns, median_ns * 0.9, median_ns * 1.1, median_ns * 0.8, 20, "timestamp") if median_ns else None
    )
    key = TrialKey(profile.topology_hash(), "gemv", source_hash, PROBLEM, schedule)
    return TrialResult(key, status, message, timing, ErrorMetrics(1e-6, 1e-7, 2e-7, 1e-5), "host1", "gpu-0")


def fill(url: str) -> None:
    """Two topologies; a finished campaign with ok/failed gemv trials; a running one; winners
    (one fresh on the H200, one stale on lavapipe); a recurrent sweep with two cases."""
    st = store.open_store(url)
    current = catalog.get("gemv").source_hash()
    for profile in (H200, LAVAPIPE):
        store.upsert_topology(st, profile)
    done = store.start_campaign(st, "farm tune gemv", "random", 8, 20, total=6)
    results = [
        _trial(H200, current, Schedule.of(workgroup_size=wg, threads_per_row=4), median_ns=ns)
        for wg, ns in ((32, 9000.0), (64, 6000.0), (128, 3000.0))
    ]
    results += [
        _trial(H200, current, Schedule.of(workgroup_size=256), Status.WRONG_RESULT, message="max_abs 0.5 > atol 1e-4"),
        _trial(H200, current, Schedule.of(workgroup_size=512), Status.INVALID_SCHEDULE, message="workgroup too big"),
        _trial(H200, current, Schedule.of(workgroup_size=1024), Status.INVALID_SCHEDULE, message="workgroup too big"),
    ]
    store.record_trials(st, done, results)
    store.update_campaign(st, done, done=6, failures=3)
    store.finish_campaign(st, done, "done")
    running = store.start_campaign(st, "farm tune --all", "exhaustive", None, 20, total=10)
    store.update_campaign(st, running, done=4, failures=0)
    best = Schedule.of(workgroup_size=128, threads_per_row=4).key()
    store.save_winner(
        st,
        WinnerRecord(
            H200.topology_hash(), "gemv", PROBLEM.key(), current, best, 3000.0, 6000.0, 2.0, done, "NVIDIA H200"
        ),
    )
    store.save_winner(
        st,
        WinnerRecord(
            LAVAPIPE.topology_hash(),
            "gemv",
            PROBLEM.key(),
            "0" * 16,
            best,
            12000.0,
            24000.0,
            2.0,
            done,
            "llvmpipe (LLVM 15)",
        ),
    )
    store.record_sweep(st, H200.topology_hash(), _sweep_report())
    st.engine.dispose()


def _sweep_report() -> dict:
    cases = [
        {
            "name": f"sweep_b1_h8_t4_l8_e{e}",
            "B": 1,
            "H": 8,
            "VH": 1,
            "T": 4,
            "L": 8,
            "E": e,
            "baseline_ms": 2.0,
            "fused_ms": 2.0 / speedup,
            "speedup": speedup,
            "context_max_abs": 1e-6,
            "context_rmse": 1e-7,
            "rho_max_abs": 2e-6,
            "rho_rmse": 2e-7,
            "strict_pass": passed,
            "gpu_util": "n/a",
        }
        for e, speedup, passed in ((256, 8.0, True), (96, 4.0, False))
    ]
    steps = [
        {
            "case": c["name"],
            "step": s,
            "context_max_abs": 1e-7 * (s + 1),
            "context_rmse": 1e-8,
            "rho_max_abs": 1e-7,
            "rho_rmse": 1e-8,
        }
        for c in cases
        for s in range(4)
    ]
    return {"adapter": "NVIDIA H200 (DiscreteGPU) via Vulkan", "config": {"seed": 1337}, "cases": cases, "steps": steps}


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db(request, tmp_path_factory):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'farm.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    fill(url)
    opened = data.open_readonly(url)
    yield opened
    opened.engine.dispose()


def test_missing_database_says_how_to_start(tmp_path):
    with pytest.raises(data.NoData, match="farm tune"):
        data.open_readonly(f"sqlite:///{tmp_path / 'none.db'}")


def test_empty_database_says_how_to_start(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    store.open_store(url).engine.dispose()  # migrated, nothing recorded
    with pytest.raises(data.NoData, match=r"is empty\. .*farm tune"):
        data.require_data(data.open_readonly(url))


def test_dashboard_store_refuses_writes(db):
    with pytest.raises(DBAPIError) as caught, db.engine.begin() as conn:
        conn.execute(text("DELETE FROM winners"))
    assert "read" in str(caught.value).lower()
    assert len(data.winner_table(db)) == 2


def test_topology_table_names_devices_and_counts(db):
    rows = {row["device"]: row for row in data.topology_table(db)}
    assert set(rows) == {"NVIDIA H200", "llvmpipe (LLVM 15)"}
    assert rows["NVIDIA H200"]["trials"] == 6 and rows["NVIDIA H200"]["winners"] == 1
    assert rows["llvmpipe (LLVM 15)"]["trials"] == 0 and rows["llvmpipe (LLVM 15)"]["type"] == "CPU"
    assert rows["NVIDIA H200"]["topology"] == H200.topology_hash()[:12]


def test_campaign_table_reports_status_and_progress(db):
    running, done = data.campaign_table(db)  # newest first
    assert (running["status"], running["progress"], running["total"]) == ("running", 0.4, 10)
    assert (done["status"], done["progress"], done["failures"]) == ("done", 1.0, 3)
    assert data.running_campaigns(db) == [running["id"]]
    assert running["last_seen"] >= running["started_at"] and done["last_seen"] >= done["started_at"]


def test_status_counts_list_every_status(db):
    counts = {row["status"]: row["trials"] for row in data.status_counts(db)}
    assert counts == {s.value: 0 for s in Status} | {"ok": 3, "wrong_result": 1, "invalid_schedule": 2}


def test_winner_table_flags_stale_source_and_filters(db):
    rows = {row["device"]: row for row in data.winner_table(db)}
    fresh, stale = rows["NVIDIA H200"], rows["llvmpipe (LLVM 15)"]
    assert (fresh["stale"], stale["stale"]) == (False, True)
    assert fresh["schedule"] == "items_per_invocation=1, threads_per_row=4, vector_width=1, workgroup_size=128"
    assert (fresh["median_us"], fresh["default_median_us"], fresh["speedup"]) == (3.0, 6.0, 2.0)
    assert [r["device"] for r in data.winner_table(db, topology=LAVAPIPE.topology_hash())] == ["llvmpipe (LLVM 15)"]
    assert data.winner_table(db, kernel="gemm") == []


def test_filters_are_values_not_sql(db):
    hostile = "gemv' OR '1'='1"
    assert data.winner_table(db, kernel=hostile) == []
    assert data.trial_page(db, kernel=hostile) == ([], None, None)
    assert data.failure_summary(db, kernel=hostile) == []


def test_trial_page_pages_by_keyset_newest_first(db):
    first = data.trial_page(db, page_size=4, kernel="gemv")
    second = data.trial_page(db, page_size=4, before=first.older, kernel="gemv")
    assert [len(first.rows), len(second.rows)] == [4, 2] and first.newer is None and second.older is None
    ids = [r["id"] for r in first.rows + second.rows]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 6
    back = data.trial_page(db, page_size=4, after=second.newer, kernel="gemv")
    assert back == first  # the newer page from the older one is the newest page again
    assert data.trial_count(db, kernel="gemv") == 6 and data.trial_count(db, status="ok") == 3
    failed = data.trial_page(db, status="invalid_schedule")
    assert len(failed.rows) == 2 and {r["message"] for r in failed.rows} == {"workgroup too big"}


def test_trial_page_rejects_bad_paging_and_status(db):
    with pytest.raises(ValueError, match="page_size=0"):
        data.trial_page(db, page_size=0)
    with pytest.raises(ValueError, match="finished"):
        data.trial_page(db, status="finished")


def test_knob_timings_expand_schedules_of_certified_trials(db):
    rows = data.knob_timings(db, "gemv", problem=PROBLEM.key())
    assert sorted((r["workgroup_size"], r["median_us"]) for r in rows) == [(32, 9.0), (64, 6.0), (128, 3.0)]
    assert data.knob_names(rows) == ["items_per_invocation", "threads_per_row", "vector_width", "workgroup_size"]
    assert data.knob_timings(db, "gemv", problem="m=1,n=1") == []


def test_failure_summary_groups_by_category_and_message(db):
    assert data.failure_summary(db, kernel="gemv") == [
        {"category": "invalid_schedule", "message": "workgroup too big", "trials": 2, "example": "workgroup too big"},
        {
            "category": "wrong_result",
            "message": "max_abs # > atol #",
            "trials": 1,
            "example": "max_abs 0.5 > atol 1e-4",
        },
    ]


def test_filter_choices(db):
    assert data.kernel_names(db) == ["gemv"]
    assert data.problem_keys(db, "gemv") == ["m=64,n=64"]
    assert data.topology_choices(db)[H200.topology_hash()] == f"NVIDIA H200 ({H200.topology_hash()[:12]})"


def test_sweep_tables_follow_the_markdown_artifact(db):
    (run,) = data.sweep_table(db)
    assert (run["device"], run["cases"], run["strict_passed"]) == ("NVIDIA H200", 2, 1)
    cases = data.sweep_case_table(db, run["run"])
    assert [list(row) for row in cases] == [[title for title, _ in data.SWEEP_COLUMNS]] * 2
    assert (cases[0]["case"], cases[0]["embd"], cases[0]["fused_speedup_x"]) == ("sweep_b1_h8_t4_l8_e256", 256, 8.0)
    assert (cases[0]["strict_pass"], cases[1]["strict_pass"]) == ("pass", "fail")
    assert cases[0]["gpu_util_pct"] is None and cases[0]["runtime_mode"] == "runtime_path_missing"
    assert [(r["E"], r["speedup"]) for r in data.sweep_speedups(db, run["run"])] == [(96, 4.0), (256, 8.0)]
    assert [r["strict_pass"] for r in data.sweep_strict_table(db, run["run"])] == [True, False]
    steps = data.sweep_step_errors(db, run["run"], "sweep_b1_h8_t4_l8_e96")
    assert [r["step"] for r in steps] == [0, 1, 2, 3]
    assert steps[3]["context_max_abs"] == pytest.approx(4e-7)


def test_topology_comparison_ranks_gpus_for_one_problem(db):
    assert data.compared_problems(db) == [("gemv", "m=64,n=64")]
    fastest, slower = data.topology_comparison(db, "gemv", "m=64,n=64")
    assert (fastest["device"], fastest["vs_fastest"]) == ("NVIDIA H200", 1.0)
    assert (slower["device"], slower["vs_fastest"], slower["median_us"]) == ("llvmpipe (LLVM 15)", 4.0, 12.0)
    assert data.trials_by_topology(db, "gemv", "m=64,n=64") == [
        {"topology": H200.topology_hash()[:12], "trials": 6, "ok": 3}
    ]
