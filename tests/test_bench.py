"""`farm bench` on lavapipe: default, tuned and the tuned kernel per call, each row saying
how it was timed; the ratios compare kernel-only with kernel-only and per call with per call.
Only the farm's own rows decide the exit status; a failing vendor row says why it failed."""

import json
import os

import numpy as np
import pytest

from farm import catalog
from farm.cli import bench
from farm.cli.bench import PER_CALL, run_bench
from farm.cli.bench_report import BenchRow, bench_passed, ratios
from farm.cli.main import main
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
    monkeypatch.setattr("farm.cli.bench._vendor", lambda fp32="ieee": None)  # no torch here
    monkeypatch.setattr(device, "clock_ratio", lambda: 1.07)  # lavapipe has no canary: as a GPU's reading
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
    assert "| method | clock |" in (tmp_path / "out" / "bench.md").read_text()
    clocks = {r["variant"]: r["clock"] for r in payload["rows"] if r["kernel"] == "gemv"}
    assert clocks == {"default": 1.07, "tuned": 1.07, "tuned call": None}  # kernel-only rows carry the canary
    assert "| timestamp | 1.07 |" in (tmp_path / "out" / "bench.md").read_text()
    # an adapter without timestamp queries: the kernel-only rows and the copy row say "host", not "timestamp"
    monkeypatch.setattr(device, "timestamps", False)
    rows = run_bench(["gemv"], None, db, allow_cpu=True, reps=3)
    methods = {(r.kernel, r.variant): r.method for r in rows}
    assert methods == {("gemv", "default"): "host", ("gemv", "tuned"): "host", ("gemv", "tuned call"): PER_CALL,
                       ("copy", "copy"): "host"}  # fmt: skip


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
    assert summary["tuned_vs_vendor_speed_method"] == "timestamp vs cuda-graph replay"
    assert summary["tuned_vs_vendor_per_call_method"] == f"{PER_CALL} vs {PER_CALL}"
    assert summary["tuned_vs_default_method"] == "timestamp vs timestamp"
    rows[0] = row("tuned", 2.0, "host")  # ours by host wall (no timestamps): not kernel-only, no speed against it
    (summary,) = ratios(rows, ceiling=1.0)
    assert summary["tuned_vs_vendor_speed"] is None
    assert summary["tuned_vs_vendor_speed_method"] == "host vs cuda-graph replay"
    from farm.cli.bench import store_vendor_ratios

    tuned = {("gemm", "m=1"): Schedule.of(workgroup_size=64)}
    assert store_vendor_ratios("sqlite:///nowhere/never.db", "t", rows, tuned) == 0  # nothing stored, no DB opened


def test_bench_stores_the_speed_against_the_vendor_on_the_winner_it_benchmarked(device, tmp_path, monkeypatch):
    from farm.store import winners

    def fake_vendor(spec, problem, inputs, schedule, reps):
        return [BenchRow(spec.name, problem.key(), "vendor", "torch", 2.0, 0, 0, True, "", "cuda-graph replay")]

    monkeypatch.setattr("farm.cli.bench.Device", lambda: device)
    monkeypatch.setattr("farm.cli.bench._vendor", lambda fp32="ieee": fake_vendor)
    tuned = Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1, threads_per_row=4)
    db, store = _winner_stored(device, tmp_path, tuned, rounds=5)
    rows = run_bench(["gemv"], None, db, allow_cpu=True, reps=3)
    mine = next(r for r in rows if r.variant == "tuned")
    (w,) = winners(store)
    assert w.vendor_ratio == pytest.approx(2.0 / mine.median_ms) and w.vendor_method == "cuda-graph replay"
    assert w.vendor_measured_at is not None and w.rounds == 5  # the campaign's decision is kept
    store.engine.dispose()


def _rows(vendor_certified: bool, tuned_certified: bool = True) -> list[BenchRow]:
    def row(variant, certified, note="", method="timestamp"):
        return BenchRow("recurrent", "B=1", variant, "s", 1.0, 0, 0, certified, note, method)

    return [
        row("default", True),
        row("tuned", tuned_certified),
        row("tuned call", True, method=PER_CALL),
        row("vendor", vendor_certified, "context max_rel 3.1e-03 > 1e-04", "cuda-graph replay"),
        row("vendor call", vendor_certified, "context max_rel 3.1e-03 > 1e-04", PER_CALL),
        BenchRow("copy", "bytes=1", "copy", "vec4 wg256", 0.0, 0.0, 1.0, True, "", "timestamp"),
    ]


def test_bench_exit_status_is_the_farms_rows_and_ignores_an_uncertified_vendor(monkeypatch):
    assert bench_passed(_rows(vendor_certified=False))  # neither "vendor" nor "vendor call" counts
    assert not bench_passed(_rows(vendor_certified=True, tuned_certified=False))
    missing = BenchRow("recurrent", "B=2", "tuned", "-", float("nan"), 0, 0, False, "no winner stored")
    assert bench_passed([*_rows(vendor_certified=True), missing])  # nothing tuned yet is not a failure
    for rows, status in ((_rows(vendor_certified=False), 0), (_rows(True, tuned_certified=False), 1)):
        monkeypatch.setattr(bench, "run_bench", lambda *args, rows=rows: rows)
        assert main(["bench", "--kernels", "recurrent", "--allow-cpu"]) == status


class _Tensor:
    """Enough of a torch tensor for `_vendor_run`: numpy underneath."""

    def __init__(self, array):
        self.array = np.asarray(array)

    def to(self, device):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.array


class _Torch:
    device = staticmethod(lambda name: name)
    from_numpy = staticmethod(_Tensor)

    class cuda:
        synchronize = staticmethod(lambda: None)


def _vendor_rows(monkeypatch, spec, problem, inputs, outputs, fp32="ieee"):
    """`_vendor_run`'s rows for a vendor whose call returns `outputs` (no torch, no timing)."""
    fn = lambda: {name: _Tensor(value) for name, value in outputs.items()}  # noqa: E731
    monkeypatch.setattr(bench, "vendor_fn", lambda torch, name, problem, t, schedule: (fn, list(outputs), "fla"))
    monkeypatch.setattr(bench, "vendor_kernel_ns", lambda torch, fn, reps: (1000.0, "cuda-graph replay"))
    monkeypatch.setattr(bench, "median_call_ns", lambda call: (call(), 2000.0)[1])
    return bench._vendor_run(_Torch, spec, problem, inputs, spec.default, reps=3, fp32=fp32)


def test_a_failing_vendor_comparison_says_which_output_failed_and_by_how_much(monkeypatch):
    spec = catalog.get("recurrent")
    problem = spec.problem(B=1, H=2, VH=1, T=8, L=16, E=32)
    inputs = spec.generate(problem, 0)
    expected = spec.reference(problem, spec.default, inputs)
    rows = _vendor_rows(monkeypatch, spec, problem, inputs, expected)
    assert [(r.variant, r.certified, r.note) for r in rows] == [("vendor", True, ""), ("vendor call", True, "")]

    atol, rtol = spec.tolerance(problem)
    context = expected["context"].copy()
    context.flat[0] += 10 * (atol + rtol * abs(float(context.flat[0])))  # one element well past np.allclose
    diff = np.abs(context - expected["context"])
    max_abs, max_rel = float(diff.max()), float((diff / np.maximum(np.abs(expected["context"]), 1e-6)).max())
    rows = _vendor_rows(monkeypatch, spec, problem, inputs, {**expected, "context": context})
    note = f"context max_abs {bench._sci(max_abs)} > {bench._sci(atol)}, max_rel {bench._sci(max_rel)} > 1e-04"
    assert [(r.variant, r.certified, r.note) for r in rows] == [("vendor", False, note), ("vendor call", False, note)]
    assert "rho" not in note  # the output that passed isn't named


def test_the_vendor_note_gives_each_metric_over_its_tolerance():
    spec = catalog.get("recurrent")
    problem = spec.problem(B=1, H=1, VH=1, T=1, L=1, E=4)
    assert spec.tolerance(problem) == pytest.approx((2e-5, 1e-4))
    want = {"context": np.full(4, 100.0, np.float32), "rho": np.zeros(4, np.float32)}
    assert bench.vendor_verdict(spec, problem, want, want) == (True, "")
    relative = {"context": want["context"] * np.float32(1.001), "rho": want["rho"]}
    assert bench.vendor_verdict(spec, problem, relative, want) == (
        False,
        "context max_abs 1e-01 > 2e-05, max_rel 1e-03 > 1e-04",
    )
    both = {"context": relative["context"], "rho": want["rho"] + np.float32(4e-5)}  # |expected| 0: max_rel 4e-5/1e-6
    assert bench.vendor_verdict(spec, problem, both, want)[1] == (
        "context max_abs 1e-01 > 2e-05, max_rel 1e-03 > 1e-04; rho max_abs 4e-05 > 2e-05, max_rel 4e+01 > 1e-04"
    )
    shape = bench.vendor_verdict(spec, problem, {**want, "rho": np.zeros(3, np.float32)}, want)
    assert shape == (False, "rho: shape (3,) != reference (4,)")


def test_the_vendor_note_leaves_out_a_zero_tolerance_and_says_exact():
    p64 = catalog.get("p64_project")
    (atol, rtol), problem = p64.tolerance(None), None
    assert rtol == 0.0
    want = {"out": np.ones(4, np.float32)}
    ok, note = bench.vendor_verdict(p64, problem, {"out": want["out"] + np.float32(4 * atol)}, want)
    assert not ok and note.startswith("out max_abs ") and "max_rel" not in note
    topk = catalog.get("topk")
    assert topk.exact
    got = {"indices": np.array([0, 1, 3], np.int32)}
    assert bench.vendor_verdict(topk, problem, got, {"indices": np.array([0, 1, 2], np.int32)}) == (
        False,
        "indices max_abs 1e+00 > 0 (exact)",
    )


def test_bench_sizes_benches_the_named_problems_instead_of_the_realistic_ones(tmp_path, capsys):
    """farm tune --sizes tunes a user's own problems; farm bench --sizes benches those same ones."""
    import json

    assert main(["bench", "--sizes", "gemv:m=48,n=40;gemv:m=24,n=72", "--allow-cpu", "--reps", "2",
                 "--db", f"sqlite:///{tmp_path}/f.db", "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    rows = json.loads((tmp_path / "out" / "bench.json").read_text())["rows"]
    problems = {r["problem"] for r in rows if r["kernel"] == "gemv"}
    assert problems == {"m=48,n=40", "m=24,n=72"}
    assert {r["variant"] for r in rows if r["problem"] == "m=48,n=40"} >= {"default"}


class _Backends:
    class cuda:
        class matmul:
            allow_tf32 = True

    class cudnn:
        allow_tf32 = True


def test_the_vendor_multiplies_fp32_like_ours_unless_told_tf32(monkeypatch, tmp_path):
    """ieee: TF32 off in cuBLAS and in Triton's dots (read when Triton compiles), whose binaries
    get a cache of their own; tf32: TF32 allowed and Triton's environment as the caller had it,
    also after an ieee call in the same process. Each vendor row of a matmul names it."""
    from farm.cli import vendor

    torch = type("torch", (), {"backends": _Backends})
    monkeypatch.setattr(vendor, "_ORIGINAL_ENV", {})
    monkeypatch.delenv("TRITON_F32_DEFAULT", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    vendor.set_vendor_fp32(torch, "ieee")
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert os.environ["TRITON_F32_DEFAULT"] == "ieee"
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "triton") + "-fp32-ieee"
    vendor.set_vendor_fp32(torch, "ieee")  # twice: one suffix
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "triton") + "-fp32-ieee"

    vendor.set_vendor_fp32(torch, "tf32")  # after ieee: the caller's environment again
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert "TRITON_F32_DEFAULT" not in os.environ  # Triton's own default: TF32 where a dot allows it
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "triton")
    with pytest.raises(ValueError, match="'fp16' is not one of ieee, tf32"):
        vendor.set_vendor_fp32(torch, "fp16")

    spec = catalog.get("recurrent")
    problem = spec.problem(B=1, H=2, VH=1, T=8, L=16, E=32)
    inputs = spec.generate(problem, 0)
    expected = spec.reference(problem, spec.default, inputs)
    rows = _vendor_rows(monkeypatch, spec, problem, inputs, expected)
    assert {r.schedule for r in rows} == {"fla fp32 ieee"}
    assert rows[0].method == "cuda-graph replay"
    rows = _vendor_rows(monkeypatch, spec, problem, inputs, expected, fp32="tf32")
    assert {r.schedule for r in rows} == {"fla fp32 tf32"}
    assert rows[0].method == "cuda-graph replay, TF32 allowed"  # stored with the ratio on the winner


def test_farm_bench_refuses_an_unknown_vendor_precision(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--kernels", "gemv", "--vendor-fp32", "fp16"])
    assert exit_.value.code == 2
    assert "invalid choice: 'fp16'" in capsys.readouterr().err
