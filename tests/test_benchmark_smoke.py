"""Smoke runs on the CPU adapter of benchmarks/trial_interference.py, of
benchmarks/runtime_calls.py's cut-down mode (--only, --skip-costs, --skip-chains), of
benchmarks/wgsl_overheads.py, of benchmarks/recurrent_chunked.py --ablate, of
benchmarks/clock_probe.py, of benchmarks/sweep_vs_bench.py, of benchmarks/coop_gemm.py and of
benchmarks/trusted_modules.py, of benchmarks/fft_twiddles.py, of benchmarks/search_replay.py, of
benchmarks/trial_repeat.py, of benchmarks/copy_widths.py, of benchmarks/fft_slots.py, of
benchmarks/gemm_guards.py and of benchmarks/ternary_hooks.py: each runs, writes its JSON and
reports every row it measured (the numbers mean something on GPUs only)."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str | Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(BENCHMARKS.parent)}
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def test_trial_interference_reports_every_condition_against_its_quiet_rounds(tmp_path):
    run = _run("trial_interference.py", "--allow-cpu", "--rounds", "1", "--schedules", "4", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "trial-interference.json").read_text())["rows"]
    conditions = [row["condition"] for row in rows]
    assert conditions[0] == "quiet"
    assert {"prefetch", "numpy", "python", "python+lead10", "stall20", "quiet again"} <= set(conditions)
    assert rows[0]["median_ratio"] == 1.0 and all(row["median_ratio"] > 0 for row in rows)
    assert all(row["method"] == "timestamp" and row["schedules"] >= 1 for row in rows)
    assert all(row["clock_retimes"] == 0 for row in rows)  # no clock check on a CPU adapter


def test_trial_interference_refuses_a_cpu_adapter_unless_told(tmp_path):
    run = _run("trial_interference.py", "--out", str(tmp_path), timeout=120)
    assert run.returncode == 2 and "CPU adapter" in run.stderr


def test_runtime_calls_cut_down_to_one_case_writes_its_row(tmp_path):
    run = _run("runtime_calls.py", "--quick", "--allow-cpu", "--settle-s", "0", "--only", "gemm 64^3",
               "--skip-costs", "--skip-chains", "--out", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "runtime-calls.json").read_text())
    (row,) = result["kernels"]
    assert row["case"] == "gemm 64^3" and "device_python_us" not in row and "chains" not in result
    # (a spinning sync's wait is tested in test_runtime_device; lavapipe's timestamps can
    # read longer than the wall time of a call, so kernel_ms is no lower bound here)
    assert row["device_spin_ms"] > 0 and row["kernel_ms"] > 0 and row["kernel_method"] == "timestamp"
    assert result["wgpu_floors"]["submit_spin_us"] > 0
    assert "| gemm 64^3 |" in (tmp_path / "runtime-calls.md").read_text()


def test_wgsl_overheads_times_every_case_and_records_the_adapter_features(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from wgsl_overheads import cases
    finally:
        sys.path.remove(str(BENCHMARKS))
    run = _run("wgsl_overheads.py", "--allow-cpu", "--groups", "8", "--reps", "2", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "wgsl-overheads.json").read_text())
    rows = {row["case"]: row for row in result["rows"]}
    assert set(rows) == set(cases()) and len(rows) == len(result["rows"])
    assert {"private_array_loop", "dynamic_component_unrolled", "loads_loop_16", "loads_unrolled_16"} <= set(rows)
    assert all(row["dispatch_us"] > 0 and row["method"] == "timestamp" for row in rows.values())
    features = result["features"]
    assert isinstance(features, list) and features and all(isinstance(f, str) for f in features)
    assert result["cooperative_matrix"] == ("cooperative-matrix" in features)
    assert "cooperative-matrix" in run.stdout


def test_recurrent_chunked_ablation_times_every_variant_of_both_passes(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from recurrent_chunked import ABLATIONS
    finally:
        sys.path.remove(str(BENCHMARKS))
    run = _run("recurrent_chunked.py", "--case", "1,2,2,16,8,16", "--no-fla", "--ablate", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    (path,) = tmp_path.glob("*-recurrent-chunked.json")
    (row,) = json.loads(path.read_text())["rows"]
    shared = '"attention_pass":1' in row["best_chunked"]  # then the attention pass comes first
    assert row["best_chunked_us"] > 0 and len(row["best_chunked_passes_us"]) == 3 + shared
    assert row["kernel_method"] == "timestamp"  # the method travels with the numbers
    ablation = row["ablation_us"]
    assert {name: set(times) for name, times in ablation.items()} == {n: set(v) for n, v in ABLATIONS.items()}
    assert all(us > 0 for times in ablation.values() for us in times.values())


def test_clock_probe_reports_every_phase(tmp_path):
    run = _run("clock_probe.py", "--allow-cpu", "--phase-s", "0.2", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "clock-probe.json").read_text())
    rows = {row["phase"]: row for row in result["rows"]}
    assert list(rows) == ["idle", "trials", "continuous", "trials_after"]
    assert all(row["canary_us_median"] > 0 for row in rows.values())
    assert all(rows[p]["timings"] >= 1 and rows[p]["kernel_us_median"] > 0 for p in ("trials", "continuous"))
    assert all(rows[p]["kernel_method"] == "timestamp" for p in ("trials", "continuous", "trials_after"))
    assert result["nvidia_smi"] is False and rows["trials"]["clocks"] == {"samples": 0}  # no NVIDIA tooling here


def test_sweep_vs_bench_times_one_winner_every_way_with_the_state_after_each(tmp_path):
    db = f"sqlite:///{tmp_path / 'absent.db'}"  # no winner: the default schedule, every way
    run = _run("sweep_vs_bench.py", "--allow-cpu", "--db", db, "--embd", "96", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    (row,) = json.loads((tmp_path / "sweep-vs-bench.json").read_text())["rows"]
    ways = ("bench", "bench_4reps", "sweep_inputs", "sweep_alone", "sweep", "sweep_again", "forced")
    assert row["embd"] == 96 and row["source"] == "default" and row["method"] == "timestamp"
    assert all(row[w] > 0 and row[f"{w}_state"].endswith("?/? ") for w in ways)  # canary us, no nvidia-smi here
    assert "| 96 |" in run.stdout


def test_coop_gemm_refuses_an_adapter_without_cooperative_matrices_and_says_why(tmp_path):
    run = _run("coop_gemm.py", "--out", str(tmp_path), timeout=120)
    assert run.returncode == 0, run.stderr
    (path,) = tmp_path.glob("*-coop-gemm.json")
    result = json.loads(path.read_text())
    assert result["cooperative-matrix"] is False  # lavapipe: none (on a GPU with them this smoke test is moot)
    assert result["status"] == "unsupported" and "lacks cooperative-matrix" in result["reason"]
    assert result["rows"] == [] and result["wgpu"]["wgpu_native"] and "lacks cooperative-matrix" in run.stdout


def test_coop_gemm_kernels_certify_with_the_cooperative_ops_emulated(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from coop_gemm_kernels import VARIANTS
    finally:
        sys.path.remove(str(BENCHMARKS))
    # every variant, whatever lavapipe's compile takes: ~100 s with a cold Mesa shader cache (a
    # clean CI machine), past coop_gemm's default 90 s budget, against ~5 s warm
    run = _run("coop_gemm.py", "--emulate", "--sizes", "128", "--reps", "1", "--no-vendor", "--out", str(tmp_path),
               "--budget-s", "400", timeout=480)  # fmt: skip
    assert run.returncode == 0, run.stderr
    (path,) = tmp_path.glob("*-coop-gemm.json")
    result = json.loads(path.read_text())
    rows = {row["variant"]: row for row in result["rows"]}
    assert result["status"] == "emulated" and list(rows) == [v.name for v in VARIANTS]
    assert all(row["status"] == "certified" and row["worst_ratio"] <= 1 and row["median_us"] > 0
               for row in rows.values())  # fmt: skip
    assert all(row["emulated"] == (name != "simt_f16") for name, row in rows.items())
    assert rows["plain_f16acc"]["max_err"] > rows["plain"]["max_err"]  # f16 sums round, under their own tolerance
    assert "| 128 | wg64_2x2_t2x2 (emulated) | f32 | certified |" in run.stdout
    assert all(row["method"] in ("timestamp", "host") for row in rows.values())  # every number says how it was timed
    assert "| method | TFLOP/s |" in run.stdout


def test_trusted_modules_times_each_kernel_checked_and_trusted(tmp_path):
    sizes = "gemv:m=64,n=64;fft:n=64,batch=4"
    run = _run("trusted_modules.py", "--allow-cpu", "--sizes", sizes, "--kernels", "gemv", "fft", "--reps", "2",
               "--rounds", "2", "--out", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "trusted-modules.json").read_text())["rows"]
    assert [(r["kernel"], r["problem"]) for r in rows] == [("gemv", "m=64,n=64"), ("fft", "n=64,batch=4")]
    for row in rows:
        assert row["checked_certified"] and row["trusted_certified"] and not row["tuned"]
        assert len(row["checked_rounds_us"]) == len(row["trusted_rounds_us"]) == 2
        assert row["trusted_over_checked"] == row["trusted_us"] / row["checked_us"] > 0


def test_fft_twiddles_times_each_schedule_with_both_tables_and_checks_them_equal(tmp_path):
    run = _run("fft_twiddles.py", "--allow-cpu", "--reps", "2", "--rounds", "2", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "fft-twiddles.json").read_text())
    assert result["problem"] == "n=256,batch=64" and len(result["rows"]) == 5
    for row in result["rows"]:
        assert row["half_certified"] and row["staged_certified"] and row["products_certified"] and row["bit_for_bit"]
        assert len(row["half_rounds_us"]) == len(row["staged_rounds_us"]) == len(row["products_rounds_us"]) == 2
        assert row["staged_over_half"] == row["staged_us"] / row["half_us"] > 0
        assert row["products_over_staged"] == row["products_us"] / row["staged_us"] > 0
        assert 0 <= row["products_max_rel"] < 1e-5


def test_search_replay_replays_a_stored_landscape_and_exports_it_unchanged(tmp_path):
    landscape = sorted((BENCHMARKS / "results" / "landscapes").glob("*part43*2048*.json.gz"))[0]
    run = _run("search_replay.py", "--db", str(landscape), "--seeds", "3", "--label", "t", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(next(tmp_path.glob("*-t-search-replay.json")).read_text())["rows"]
    assert row["problem"] == "m=2048,k=2048,n=2048" and row["seeds"] == 3 and len(row["gaps"]) == 3
    trials = json.loads(gzip.decompress(landscape.read_bytes()))["trials"]  # [schedule, status, median_ns, ...]
    assert row["best_ns"] == min(t[2] for t in trials if t[1] == "ok") > 4e5  # the landscape's best, on the H200
    assert all(gap >= 0 for gap in row["gaps"]) and 64 <= row["mean_trials"] <= 426
    again = _run("search_replay.py", "--db", str(landscape), "--label", "t", "--export", str(tmp_path / "x"))
    assert again.returncode == 0, again.stderr
    (copy,) = (tmp_path / "x").glob("*.json.gz")
    assert copy.read_bytes() == landscape.read_bytes()  # json.gz in, the same json.gz out


def test_trial_repeat_re_times_the_schedules_two_landscapes_disagree_on(tmp_path):
    fields = ["schedule", "status", "median_ns", "p20_ns", "p80_ns", "min_ns", "reps", "method"]
    keys = ['{"items_per_invocation":1,"vector_width":1,"workgroup_size":64}',
            '{"items_per_invocation":1,"vector_width":2,"workgroup_size":64}',
            '{"items_per_invocation":2,"vector_width":2,"workgroup_size":128}']  # fmt: skip
    for name, times in (("a", (100e3, 300e3, 500e3)), ("b", (101e3, 100e3, 505e3))):  # the second disagrees 3x
        trials = [[k, "ok", t, t, t, t, 10, "timestamp"] for k, t in zip(keys, times, strict=True)]
        data = {"kernel": "fft", "problem": "n=256,batch=16", "topology": "t", "source": "s", "fields": fields,
                "trials": trials}  # fmt: skip
        (tmp_path / f"{name}.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    dbs = ["--db", str(tmp_path / "a.json.gz"), "--db", str(tmp_path / "b.json.gz")]
    run = _run("trial_repeat.py", "--allow-cpu", *dbs, "--best", "1", "--rounds", "2", "--reps", "2", "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "trial-repeat.json").read_text())
    assert result["problem"] == "n=256,batch=16"
    rows = result["rows"]
    assert all(row["stored_method"] == "timestamp" and row["method"] == "timestamp, interleaved" for row in rows)
    assert [row["schedule"] for row in rows] == keys[:2]  # the fastest, then the one read 3x apart
    assert [(row["first_us"], row["second_us"]) for row in rows] == [(100.0, 101.0), (300.0, 100.0)]
    assert all(row["certified"] and len(row["rounds_us"]) == 2 and row["repeat_us"] > 0 for row in rows)


def test_copy_widths_checks_and_times_every_variant(tmp_path):
    run = _run("copy_widths.py", "--allow-cpu", "--rounds", "1", "--reps", "2", "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "copy-widths.json").read_text())
    assert result["bytes"] == 1 << 20
    rows = {row["variant"]: row for row in result["rows"]}
    assert all(row["method"] == "timestamp, interleaved" for row in rows.values())  # the method beside every number
    assert {"copy vec4", "copy vec2", "fft io vec2", "fft io vec2 + exchange", "fft io vec4"} <= set(rows)
    assert all(row["checked"] and row["gb_s"] > 0 for row in rows.values())  # each copied its input exactly
    assert rows["copy vec4"]["of_copy_vec4"] == 1.0


def test_fft_slots_certifies_and_times_each_layout_both_ways(tmp_path):
    run = _run("fft_slots.py", "--allow-cpu", "--rounds", "1", "--reps", "2", "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "fft-slots.json").read_text())
    assert result["problem"] == "n=256,batch=64" and len(result["rows"]) == 4
    for row in result["rows"]:
        assert row["method"] == "timestamp, interleaved" and row["bit_for_bit"]  # folding changes no output
        assert all(row[f"{arm}_certified"] and row[f"{arm}_us"] > 0 for arm in ("unfolded", "folded", "pad folded"))
        assert row["folded_over_unfolded"] == row["folded_us"] / row["unfolded_us"]


def test_gemm_guards_certifies_and_times_both_kernels(tmp_path):
    run = _run("gemm_guards.py", "--allow-cpu", "--rounds", "1", "--reps", "2", "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "gemm-guards.json").read_text())["rows"]
    assert [row["problem"] for row in rows] == ["m=64,k=64,n=64"] * 2
    for row in rows:
        assert row["method"] == "timestamp, interleaved" and row["bit_for_bit"]  # trimming changes no output
        assert row["every bound_certified"] and row["trimmed_certified"] and row["trimmed_us"] > 0
        assert row["trimmed_over_every_bound"] == row["trimmed_us"] / row["every bound_us"]


def test_ternary_hooks_certifies_and_times_every_arm(tmp_path):
    run = _run("ternary_hooks.py", "--allow-cpu", "--rounds", "1", "--reps", "2", "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "ternary-hooks.json").read_text())["rows"]
    assert [row["problem"] for row in rows] == ["m=256,k=1024", "m=64,k=4096"]
    assert [json.loads(row["schedule"])["splits"] for row in rows] == [1, 8]
    for row in rows:
        assert row["method"] == "timestamp, interleaved" and row["bit_for_bit"]  # the switches change no output
        for arm in ("s20_catalog", "catalog", "ahead_prefetch"):
            assert row[f"{arm}_certified"] and row[f"{arm}_us"] > 0
        assert row["catalog_over_s20_catalog"] == row["catalog_us"] / row["s20_catalog_us"]


def test_ternary_hooks_times_the_arms_named(tmp_path):
    run = _run("ternary_hooks.py", "--allow-cpu", "--rounds", "1", "--reps", "2", "--arms", "catalog,chain",
               "--out", tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    for row in json.loads((tmp_path / "ternary-hooks.json").read_text())["rows"]:
        assert row["bit_for_bit"] and row["chain_over_catalog"] == row["chain_us"] / row["catalog_us"]
        assert "s20_catalog_us" not in row


def test_ternary_hooks_refuses_an_unknown_arm(tmp_path):
    run = _run("ternary_hooks.py", "--allow-cpu", "--arms", "catalog,fast", "--out", tmp_path)
    assert run.returncode == 2 and "--arms: 'catalog,fast': needs 2 or more distinct names of plain" in run.stderr
    assert not (tmp_path / "ternary-hooks.json").exists()


def test_ternary_parts_times_the_catalog_kernel_and_its_rewritten_loops(tmp_path):
    run = _run("ternary_parts.py", "--allow-cpu", "--rounds", "1", "--reps", "2", "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "ternary-parts.json").read_text())["rows"]
    assert [row["problem"] for row in rows] == ["m=256,k=1024", "m=64,k=4096"]
    for row in rows:
        assert row["method"] == "timestamp, interleaved" and row["catalog_certified"] and row["base"] == "catalog"
        for part in ("catalog", "compute_only", "no_dot", "compute_no_dot"):
            assert row[f"{part}_us"] > 0
        assert row["clocks"] is None or set(row["clocks"]) == {"clocks.sm", "clocks.mem", "power.draw"}


def test_ternary_parts_times_the_variants_named_on_the_base_named(tmp_path):
    run = _run("ternary_parts.py", "--allow-cpu", "--rounds", "1", "--reps", "2", "--base", "s20_catalog",
               "--variants", "catalog,no_dot", "--out", tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    for row in json.loads((tmp_path / "ternary-parts.json").read_text())["rows"]:
        assert row["base"] == "s20_catalog" and row["catalog_certified"]
        assert row["catalog_us"] > 0 and row["no_dot_us"] > 0
        assert "compute_only_us" not in row and "compute_no_dot_us" not in row


def test_ternary_parts_refuses_variants_without_the_catalog_first(tmp_path):
    run = _run("ternary_parts.py", "--allow-cpu", "--variants", "no_dot,catalog", "--out", tmp_path)
    assert run.returncode == 2
    assert "--variants: 'no_dot,catalog': needs 1 or more distinct names of catalog, compute_only" in run.stderr
    assert "catalog first" in run.stderr and not (tmp_path / "ternary-parts.json").exists()


def test_the_benchmarks_kernel_subclasses_run_trusted_like_the_catalog():
    """A KernelSpec subclass defined outside farm.catalog runs checked unless it says
    otherwise: an A/B arm that forgot it timed index clamps (ternary_parts.py's catalog read
    136 us against the trusted kernel's 119 on the H200 until session 22)."""
    import importlib
    import inspect

    from farm.catalog import KernelSpec

    sys.path.insert(0, str(BENCHMARKS))
    try:  # every benchmark script, so that one added later is held to it too
        modules = [importlib.import_module(path.stem) for path in sorted(BENCHMARKS.glob("*.py"))]
    finally:
        sys.path.remove(str(BENCHMARKS))
    specs = [cls for module in modules for _, cls in inspect.getmembers(module, inspect.isclass)
             if issubclass(cls, KernelSpec) and cls.__module__ == module.__name__]  # fmt: skip
    assert {cls.__name__ for cls in specs} >= {"_Layout", "_EveryBound", "_Hooks", "_Part"}
    assert [cls.__name__ for cls in specs if cls.runtime_checks] == []
