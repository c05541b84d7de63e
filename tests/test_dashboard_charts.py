"""The dashboard's headline numbers and chart data (farm.dashboard.charts_data), over the
database test_dashboard_data fills: winner states, geomeans, convergence, effective budgets."""

from __future__ import annotations

import dataclasses
import math

import pytest
import test_dashboard_data as filled

from farm import catalog, store
from farm.dashboard import charts, charts_data, data
from farm.schedule import Schedule
from farm.store import WinnerRecord, listing

SOURCE = catalog.get("gemv").source_hash()
SEARCHED = "m=32,n=32"


def replace_problem(result):
    key = dataclasses.replace(result.key, problem=catalog.get("gemv").problem(m=32, n=32))
    return dataclasses.replace(result, key=key)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('charts') / 'farm.db'}"
    filled.fill(url)
    writable = store.open_store(url)
    # a user kernel's winner: the dashboard has no file defining it
    store.save_winner(
        writable,
        WinnerRecord(
            filled.H200.topology_hash(), "my_kernel", "n=64", "f" * 16, Schedule.of(workgroup_size=64).key(), 900.0,
            2700.0, 3.0, None, "NVIDIA H200",
        ),
    )  # fmt: skip
    store.save_vendor_ratio(
        writable, filled.H200.topology_hash(), "gemv", filled.PROBLEM.key(),
        Schedule.of(workgroup_size=128, threads_per_row=4).key(), 1.25, "timestamp-query",
    )  # fmt: skip
    # a search whose trials finished in another order than their keys sort (ids follow keys in a batch)
    results = [
        dataclasses.replace(
            filled._trial(filled.H200, SOURCE, Schedule.of(workgroup_size=wg), median_ns=ns), finished_at=1e9 + i
        )
        for i, (wg, ns) in enumerate(((256, 5000.0), (32, 7000.0), (128, 2000.0), (64, 4000.0)))
    ]
    store.record_trials(writable, None, [replace_problem(r) for r in results])
    writable.engine.dispose()
    opened = data.open_readonly(url)
    yield opened
    opened.engine.dispose()


def test_an_unknown_kernel_is_not_stale():
    assert listing.winner_state("abc", "abc") == listing.CURRENT == "current"
    assert listing.winner_state("old", "abc") == listing.STALE == "stale"
    assert listing.winner_state("abc", None) == listing.UNKNOWN == "unknown kernel"


def test_short_schedules_name_only_the_knobs_that_differ():
    default = {"workgroup_size": 64, "vector_width": 1}
    assert listing.changed_knobs({"workgroup_size": 256, "vector_width": 1}, default) == "workgroup_size=256"
    assert listing.changed_knobs(default, default) == "default"
    key = '{"vector_width": 4, "workgroup_size": 256}'
    assert charts_data.short_schedule(key, default) == "vector_width=4, workgroup_size=256"


def test_winner_rows_keep_numbers_numeric_and_tell_the_three_states(db):
    rows = {(r["kernel"], r["device"]): r for r in charts_data.winner_rows(db)}
    fresh, stale = rows["gemv", "NVIDIA H200"], rows["gemv", "llvmpipe (LLVM 15)"]
    user = rows["my_kernel", "NVIDIA H200"]
    assert (fresh["state"], stale["state"], user["state"]) == ("current", "stale", "unknown kernel")
    assert (fresh["median_us"], fresh["default_us"], fresh["speedup"], fresh["vendor_ratio"]) == (3.0, 6.0, 2.0, 1.25)
    # the short schedule: what differs from gemv's default; the whole one in the details
    default = catalog.get("gemv").default.as_dict()
    assert fresh["schedule"] == ", ".join(
        f"{k}={v}" for k, v in sorted({"workgroup_size": 128, "threads_per_row": 4}.items()) if default.get(k) != v
    )
    assert fresh["schedule_full"] == "items_per_invocation=1, threads_per_row=4, vector_width=1, workgroup_size=128"
    assert user["schedule"] == user["schedule_full"] == "items_per_invocation=1, vector_width=1, workgroup_size=64"
    assert fresh["margin_pct"] is None and fresh["tie"] == "\u2013"  # a row without a decision
    assert [r["kernel"] for r in charts_data.winner_rows(db, kernel="my_kernel")] == ["my_kernel"]


def test_headline_is_geometric_over_winners(db):
    rows = charts_data.winner_rows(db)
    h = charts_data.headline(rows)
    assert (h["problems"], h["kernels"], h["topologies"], h["benchmarked"]) == (3, 2, 2, 1)
    assert h["geomean_speedup"] == pytest.approx(math.exp((2 * math.log(2.0) + math.log(3.0)) / 3))
    assert (h["geomean_vendor"], h["best_speedup"], h["stale"], h["unknown"]) == (1.25, 3.0, 1, 1)
    per_kernel = {r["kernel"]: r for r in charts_data.speedup_per_kernel(rows)}
    assert per_kernel["gemv"]["geomean_speedup"] == pytest.approx(2.0) and per_kernel["gemv"]["problems"] == 2
    (vendor,) = charts_data.vendor_rows(rows)
    assert (vendor["vendor_ratio"], vendor["label"]) == (1.25, "gemv · m=64,n=64")
    assert vendor["gpu"] == f"NVIDIA H200 ({filled.H200.topology_hash()[:12]})"
    # two topologies: a bar per GPU in a problem's row; one: a bar per problem
    assert charts_data.gpu_group(rows) == "gpu" and charts_data.gpu_group(rows[:1]) is None
    assert charts_data.geomean([]) is None and charts_data.headline([])["geomean_speedup"] is None


def test_convergence_is_the_best_time_so_far_in_finishing_order(db):
    h200 = filled.H200.topology_hash()
    trials = charts_data.convergence(db, h200, "gemv", SEARCHED, SOURCE)
    assert [t["trial"] for t in trials] == [1, 2, 3, 4]
    assert [t["median_us"] for t in trials] == [5.0, 7.0, 2.0, 4.0]
    assert [t["best_us"] for t in trials] == [5.0, 5.0, 2.0, 2.0]
    (fresh,) = [r for r in charts_data.winner_rows(db) if r["device"] == "NVIDIA H200" and r["kernel"] == "gemv"]
    ok_and_failed = charts_data.convergence(db, h200, "gemv", fresh["problem"], fresh["source_hash"])
    assert len(ok_and_failed) == 6 and [t["status"] for t in ok_and_failed].count("ok") == 3  # failures count too
    assert ok_and_failed[-1]["best_us"] == 3.0
    assert charts_data.convergence(db, h200, "gemv", SEARCHED, "other source") == []


def test_a_campaigns_budget_is_the_one_it_ran_with(db):
    (done,) = [c for c in data.campaign_table(db) if c["status"] == "done"]  # its trials ran on the H200
    lavapipe_only = [c for c in data.campaign_table(db) if c["status"] != "done"]  # no trials: adapter unknown
    assert charts_data.effective_budgets(db, [done]) == {done["id"]: "6 (8 asked)"}  # capped by its 6 planned trials
    assert charts_data.effective_budgets(db, [done | {"budget": None, "total": 0}]) == {done["id"]: "all"}
    assert charts_data.effective_budgets(db, lavapipe_only) == {c["id"]: "10 (all asked)" for c in lavapipe_only}


def test_a_cpu_campaign_shows_the_cap_it_ran_under(tmp_path):
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    writable = store.open_store(url)
    store.upsert_topology(writable, filled.LAVAPIPE)
    cid = store.start_campaign(writable, "farm tune --all --allow-cpu", "model", 64, 20, total=72)
    results = [filled._trial(filled.LAVAPIPE, "s", Schedule.of(workgroup_size=64), median_ns=1000.0)]
    store.record_trials(writable, cid, results)
    writable.engine.dispose()
    reader = data.open_readonly(url)
    try:
        assert charts_data.effective_budgets(reader, data.campaign_table(reader)) == {cid: "8 (64 asked)"}
    finally:
        reader.engine.dispose()


def test_knob_categories_sort_by_value_with_unset_first():
    rows = [{"workgroup_size": 256}, {"workgroup_size": 64, "vector_width": 1}, {"workgroup_size": 1024}]
    assert charts.knob_order(rows, "workgroup_size") == ["64", "256", "1024"]
    assert charts.knob_order(rows, "vector_width") == [charts.UNSET, "1"]
