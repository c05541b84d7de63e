"""`farm bench` on lavapipe: default, tuned and the tuned kernel per call, each row saying
how it was timed; the ratios compare kernel-only with kernel-only and per call with per call."""

import json

import pytest

from farm import catalog
from farm.cli.bench import PER_CALL, BenchRow, ratios, run_bench
from farm.schedule import Schedule
from farm.store import WinnerRecord, open_store, save_winner, upsert_topology


def _winner_stored(device, tmp_path, tuned: Schedule, **decision):
    """A database holding gemv's first default problem's winner `tuned`: (url, store)."""
    spec = catalog.get("gemv")
    problem = spec.default_problems(device.profile)[0]
    db = f"sqlite:///{tmp_path / 'farm.db'}"
    store = open_store(db)
    upsert_topology(store, device.profile)
    topology = device.profile.topology_hash()
    save_winner(store, WinnerRecord(topology, "gemv", problem.key(), spec.source_hash(), tuned.key(), 1e3, **decision))
    return db, store


def test_bench_rows_say_how_they_were_timed(device, tmp_path, monkeypatch):
    monkeypatch.setattr("farm.cli.bench.Device", lambda: device)
    monkeypatch.setattr("farm.cli.bench._vendor", lambda: None)  # no torch here
    tuned = Schedule.of(workgroup_size=128, items_per_invocation=1, vector_width=1, threads_per_row=8)
    db, store = _winner_stored(device, tmp_path, tuned)
    store.engine.dispose()
    rows = run_bench(["gemv"], tmp_path / "out", db, allow_cpu=True, reps=3)
    by_variant = {r.variant: r for r in rows if r.kernel == "gemv"}
    assert set(by_variant) == {"default", "tuned", "tuned call"}
    assert by_variant["tuned"].method == by_variant["default"].method == "timestamp"
    assert by_variant["tuned call"].method == PER_CALL
    assert by_variant["tuned call"].schedule == str(tuned)
    assert by_variant["tuned call"].median_ms > 0 and by_variant["tuned"].median_ms > 0
    payload = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert {r["method"] for r in payload["rows"]} == {"timestamp", PER_CALL}
    assert "| method |" in (tmp_path / "out" / "bench.md").read_text()


def test_ratios_pair_kernel_only_with_kernel_only_and_calls_with_calls():
    def row(variant, ms, method):
        return BenchRow("gemm", "m=1", variant, "s", ms, 0, 0, True, "", method)

    rows = [
        row("tuned", 2.0, "timestamp"),
        row("vendor", 1.0, "cuda-graph replay"),
        row("tuned call", 3.0, PER_CALL),
        row("vendor call", 2.4, PER_CALL),
        row("default", 8.0, "timestamp"),
    ]
    (summary,) = ratios(rows, ceiling=1.0)
    assert summary["tuned_vs_vendor_speed"] == 0.5
    assert summary["tuned_vs_vendor_per_call"] == pytest.approx(0.8)
    assert summary["tuned_vs_default_speedup"] == 4.0


def test_bench_stores_the_speed_against_the_vendor_on_the_winner_it_benchmarked(device, tmp_path, monkeypatch):
    from farm.store import winners

    def fake_vendor(spec, problem, inputs, schedule, reps):
        return [BenchRow(spec.name, problem.key(), "vendor", "torch", 2.0, 0, 0, True, "", "cuda-graph replay")]

    monkeypatch.setattr("farm.cli.bench.Device", lambda: device)
    monkeypatch.setattr("farm.cli.bench._vendor", lambda: fake_vendor)
    tuned = Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1, threads_per_row=4)
    db, store = _winner_stored(device, tmp_path, tuned, rounds=5)
    rows = run_bench(["gemv"], None, db, allow_cpu=True, reps=3)
    mine = next(r for r in rows if r.variant == "tuned")
    (w,) = winners(store)
    assert w.vendor_ratio == pytest.approx(2.0 / mine.median_ms) and w.vendor_method == "cuda-graph replay"
    assert w.vendor_measured_at is not None and w.rounds == 5  # the campaign's decision is kept
    store.engine.dispose()
