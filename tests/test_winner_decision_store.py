"""The winner's decision (quantiles, rounds, runner-up, margin, tie) and `farm
bench`'s vendor ratio are stored on the winner row (revision 0005), on SQLite and PostgreSQL;
older rows and older databases read as unknown ("–")."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from sqlalchemy import inspect
from test_store_support import profile, store_url  # noqa: F401  (store_url is a fixture)

from farm.cli.main import main
from farm.schedule import Schedule
from farm.store import WinnerRecord, open_store, save_vendor_ratio, save_winner, upsert_topology, winners
from farm.store.engine import create_store_engine
from farm.store.listing import NOT_RECORDED, format_winners
from farm.store.migrate import current, downgrade, head_revision, upgrade

FAST = Schedule.of(workgroup_size=128, vector_width=4).key()
NEXT = Schedule.of(workgroup_size=256, vector_width=4).key()
DECISION = dict(p20_ns=990.0, p80_ns=1020.0, rounds=7, runner_up=NEXT, runner_up_ns=1031.0, margin=0.031,
                margin_low=0.012, margin_high=0.05, tie=False)  # fmt: skip


def _winner(topo: str, schedule: str = FAST, **decision) -> WinnerRecord:
    return WinnerRecord(topo, "gemv", "m=64,n=64", "src-1", schedule, 1000.0, 2500.0, 2.5, None, "llvmpipe", **decision)


@pytest.fixture
def store(store_url):  # noqa: F811
    opened = open_store(store_url)
    yield opened
    opened.engine.dispose()


def test_a_winner_keeps_its_decision(store):
    topo = upsert_topology(store, profile())
    save_winner(store, _winner(topo, **DECISION))
    (w,) = winners(store)
    assert {k: getattr(w, k) for k in DECISION} == DECISION
    assert (w.vendor_ratio, w.vendor_method, w.vendor_measured_at) == (None, None, None)


def test_a_tie_and_a_failed_runner_up_are_stored_as_such(store):
    topo = upsert_topology(store, profile())
    save_winner(store, _winner(topo, tie=True, margin=math.inf, runner_up=NEXT, rounds=15))
    (w,) = winners(store)
    assert w.tie is True and w.margin is None and w.rounds == 15  # inf is not a margin: NULL on both dialects


def test_the_vendor_ratio_goes_on_the_benchmarked_schedule_and_survives_its_re_tuning(store):
    topo = upsert_topology(store, profile())
    save_winner(store, _winner(topo, **DECISION))
    when = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)
    assert save_vendor_ratio(store, topo, "gemv", "m=64,n=64", FAST, 0.85, "cuda-graph replay", when)
    assert not save_vendor_ratio(store, topo, "gemv", "m=64,n=64", NEXT, 2.0, "cuda-graph replay")  # not the winner
    assert not save_vendor_ratio(store, topo, "gemv", "m=8,n=8", FAST, 2.0, "cuda-graph replay")  # no such winner
    (w,) = winners(store)
    assert (w.vendor_ratio, w.vendor_method, w.vendor_measured_at) == (0.85, "cuda-graph replay", when)
    save_winner(store, _winner(topo, **DECISION | {"rounds": 5}))  # a campaign keeps the same schedule
    (w,) = winners(store)
    assert (w.rounds, w.vendor_ratio, w.vendor_measured_at) == (5, 0.85, when)
    save_winner(store, _winner(topo, NEXT, **DECISION))  # another schedule won: the ratio measured FAST
    (w,) = winners(store)
    assert (w.schedule_key, w.vendor_ratio, w.vendor_method, w.vendor_measured_at) == (NEXT, None, None, None)
    with pytest.raises(ValueError, match="vendor ratio must be a finite positive number"):
        save_vendor_ratio(store, topo, "gemv", "m=64,n=64", NEXT, math.nan, "x")


def test_farm_winners_shows_margin_tie_runner_up_and_vendor_ratio_and_dashes_for_older_rows(store):
    topo = upsert_topology(store, profile())
    save_winner(store, _winner(topo, **DECISION))
    old = WinnerRecord(topo, "gemm", "m=8,k=8,n=8", "src-1", FAST, 500.0)  # no decision: as rows before 0005
    save_winner(store, old)
    save_vendor_ratio(store, topo, "gemv", "m=64,n=64", FAST, 1.25, "cuda-graph replay")
    lines = format_winners(winners(store), lambda kernel: "src-1", wide=True).splitlines()
    header = lines[0].split()
    assert header[6:10] == ["margin", "tie", "runner_up", "vs_vendor"]
    gemm, gemv = (dict(zip(header, line.split()[: len(header) - 2], strict=False)) for line in lines[2:])
    assert (gemv["margin"], gemv["tie"], gemv["runner_up"], gemv["vs_vendor"]) == ("+3.1%", "no", "workgroup_size=256",
                                                                                   "1.25x")  # fmt: skip
    assert [gemm[k] for k in ("margin", "tie", "runner_up", "vs_vendor")] == [NOT_RECORDED] * 4


def test_the_dashboard_winner_table_shows_the_decision(store):
    from farm.dashboard import data

    topo = upsert_topology(store, profile())
    save_winner(store, _winner(topo, **DECISION | {"tie": True, "margin": 0.004, "margin_low": -0.002}))
    save_winner(store, WinnerRecord(topo, "gemm", "m=8,k=8,n=8", "src-1", FAST, 500.0))
    save_vendor_ratio(store, topo, "gemv", "m=64,n=64", FAST, 0.9, "profiler kernel time",
                      datetime(2026, 12, 6, tzinfo=UTC))  # fmt: skip
    rows = {r["kernel"]: r for r in data.winner_table(store)}
    assert rows["gemv"]["margin"] == "+0.4% [-0.2, +5.0]" and rows["gemv"]["tie"] == "yes"
    assert rows["gemv"]["runner_up"] == "workgroup_size=256" and rows["gemv"]["rounds"] == "7"
    assert rows["gemv"]["vs_vendor"] == "0.90x (profiler kernel time, 2026-12-06)"
    assert {rows["gemm"][k] for k in ("margin", "tie", "runner_up", "rounds", "vs_vendor")} == {NOT_RECORDED}


def test_revision_0005_round_trip_keeps_the_winners(store_url):  # noqa: F811
    upgrade(store_url, "0004_tuning_requests")
    engine = create_store_engine(store_url)
    try:
        from farm.store.models import TopologyRow, WinnerRow

        topo = profile().topology_hash()
        with engine.begin() as conn:  # a row a farm of revision 0004 wrote
            conn.execute(TopologyRow.__table__.insert().values(
                hash=topo, device_name="llvmpipe", backend="Vulkan", adapter_type="CPU", vendor_id=1, device_id=0,
                driver_description="Mesa", profile_json={}, first_seen=datetime(2026, 1, 1, tzinfo=UTC)))  # fmt: skip
            conn.execute(WinnerRow.__table__.insert().values(
                topology_hash=topo, kernel="gemv", problem="m=64,n=64", schedule=FAST, source_hash="src-1",
                median_ns=1000.0, device_name="llvmpipe", updated_at=datetime(2026, 1, 1, tzinfo=UTC)))  # fmt: skip
        # A reader of the newer farm on the older database (read-only: never migrates) sees unknowns.
        db = open_store(store_url, read_only=True)
        (w,) = winners(db)
        assert (w.schedule_key, w.median_ns, w.margin, w.tie, w.vendor_ratio) == (FAST, 1000.0, None, None, None)
        db.engine.dispose()
        upgrade(store_url)
        assert current(store_url) == head_revision()
        columns = {c["name"] for c in inspect(engine).get_columns("winners")}
        assert {"margin", "runner_up", "tie", "rounds", "p20_ns", "vendor_ratio", "vendor_measured_at"} <= columns
        db = open_store(store_url)
        (w,) = winners(db)
        assert (w.margin, w.rounds, w.vendor_ratio) == (None, None, None)  # the older row: unknown, shown as "–"
        save_winner(db, _winner(topo, **DECISION))
        db.engine.dispose()
        downgrade(store_url, "0004_tuning_requests")
        columns = {c["name"] for c in inspect(engine).get_columns("winners")}
        assert not {"margin", "runner_up", "tie", "vendor_ratio"} & columns
        with engine.connect() as conn:
            kept = conn.execute(
                WinnerRow.__table__.select().with_only_columns(WinnerRow.schedule, WinnerRow.median_ns)
            ).all()
        assert [tuple(r) for r in kept] == [(FAST, 1000.0)]
        upgrade(store_url)
        db = open_store(store_url)
        assert winners(db)[0].margin is None
        db.engine.dispose()
    finally:
        engine.dispose()


def test_cli_winners_reads_a_database_of_the_previous_revision(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0004_tuning_requests")
    assert main(["winners", "--db", url]) == 0
    assert "no winners stored yet" in capsys.readouterr().out
