"""`farm sweep recurrent`: flags, case parsing, one small sweep end to end with its
artifacts re-parsed, and the record in SQL."""

import csv
import json

import pytest

from farm import catalog
from farm.cli.main import build_parser, main
from farm.recurrent.report import STEPS_HEADER, SUMMARY_HEADER, case_row, rust_exp
from farm.recurrent.sweep import (
    SweepCase,
    SweepConfig,
    baseline_counts,
    default_cases,
    run_case,
    run_sweep,
    sweep_config_from_args,
)

# The reference sweep's summary header with raw_wgsl_* -> fused_* and core_* -> runtime_*.
REFERENCE_HEADER = (
    "case,embd,batch,heads,value_heads,time,latent,warmup,repetitions,extra_repetitions_applied,"
    "sampled_gpu_utilization_pct,baseline_ms,raw_wgsl_ms,core_fused_ms,raw_speedup_x,core_speedup_x,"
    "full_context_max_abs,full_context_mean_abs,full_context_rmse,full_context_max_rel,final_rho_max_abs,"
    "final_rho_mean_abs,final_rho_rmse,final_rho_max_rel,step_context_max_abs,step_context_rmse_max,"
    "step_rho_max_abs,step_rho_rmse_max,strict_consistency_pass,core_fused_mode"
)
RENAMES = {
    "raw_wgsl_ms": "fused_ms",
    "core_fused_ms": "runtime_ms",
    "raw_speedup_x": "fused_speedup_x",
    "core_speedup_x": "runtime_speedup_x",
    "core_fused_mode": "runtime_mode",
}
SMALL = (SweepCase("small", 1, 2, 1, 5, 8, 12), SweepCase("small_vh", 2, 3, 3, 4, 19, 36))


def _config(*argv: str) -> SweepConfig:
    return sweep_config_from_args(build_parser().parse_args(["sweep", "recurrent", *argv]))


def test_flag_defaults_match_the_issue():
    config = _config()
    assert (config.warmup, config.repetitions, config.extra_repetitions) == (2, 4, 3)
    assert (config.heavy_min_embd, config.gpu_util_threshold, config.seed) == (512, 25.0, 1337)
    assert config.allow_cpu is False and config.db is None
    assert [c.name for c in config.cases] == [
        f"sweep_b1_h8_t64_l64_e{e}" for e in (96, 128, 192, 256, 384, 512, 640, 768)
    ]
    assert {(c.batch, c.heads, c.value_heads, c.time, c.latent) for c in config.cases} == {(1, 8, 1, 64, 64)}
    assert config.markdown_path is None and config.csv_path is None


def test_warmup_and_repetitions_have_minimum_one(capsys):
    for flag in ("--warmup", "--repetitions"):  # the CLI refuses 0 rather than raising it to 1
        with pytest.raises(SystemExit) as exit_info:
            _config(flag, "0")
        assert exit_info.value.code == 2 and "expected a positive integer, got '0'" in capsys.readouterr().err
    config = SweepConfig(warmup=0, repetitions=0).normalized()  # a config built in code is clamped
    assert (config.warmup, config.repetitions) == (1, 1)


def test_output_dir_fills_only_missing_artifact_paths(tmp_path):
    config = _config("--output-dir", str(tmp_path), "--artifact-csv", str(tmp_path / "mine.csv"))
    assert config.markdown_path == str(tmp_path / "recurrent_scaling.md")
    assert config.csv_path == str(tmp_path / "mine.csv")
    assert config.json_path == str(tmp_path / "recurrent_scaling.json")
    assert config.steps_csv_path == str(tmp_path / "recurrent_scaling_steps.csv")


def test_case_flag_adds_and_replaces_by_name():
    config = _config("--case", "sweep_b1_h8_t64_l64_e96:2,4,4,8,16,32", "--case", "tiny:1,2,1,5,8,12")
    by_name = {c.name: c for c in config.cases}
    assert len(config.cases) == len(default_cases()) + 1
    assert by_name["sweep_b1_h8_t64_l64_e96"] == SweepCase("sweep_b1_h8_t64_l64_e96", 2, 4, 4, 8, 16, 32)
    assert config.cases[0].name == "sweep_b1_h8_t64_l64_e96"  # replaced in place
    assert config.cases[-1] == SweepCase("tiny", 1, 2, 1, 5, 8, 12)


def test_long_flag_adds_the_long_sequence_cases_opt_in():
    """T=1024 and 4096 (and B=8, VH=H) are opt-in cases of the sweep, after the defaults."""
    from farm.recurrent.cases import long_cases

    assert _config().cases == tuple(default_cases())
    config = _config("--long", "--case", "long_b1_h8_t4096_l64_e768:1,8,8,512,64,768")
    names = [c.name for c in config.cases]
    assert names == [c.name for c in default_cases() + long_cases()]
    assert {(c.time, c.value_heads, c.batch) for c in long_cases()} == {(1024, 8, 1), (1024, 8, 8), (4096, 8, 1)}
    assert config.cases[-1].time == 512  # a --case replaces a long case by name too


@pytest.mark.parametrize(
    "text, message",
    [
        ("nocolon", "expected name:B,H,VH,T,L,E"),
        ("x:1,2,3", "expected 6 dimensions"),
        ("x:1,2,1,5,8,twelve", "dimensions must be integers"),
        ("x:1,2,1,0,8,12", "every dimension must be >= 1"),
        ("x:1,4,2,5,8,12", "VH=2 must be 1 or H=4"),
    ],
)
def test_case_parse_errors_are_clear(text, message, capsys):
    with pytest.raises(ValueError, match=message):
        SweepCase.parse(text)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "recurrent", "--case", text])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_summary_header_is_the_reference_with_renamed_columns():
    assert SUMMARY_HEADER.split(",") == [RENAMES.get(c, c) for c in REFERENCE_HEADER.split(",")]


def test_rust_exponent_format():
    assert rust_exp(1e-3, 2) == "1.00e-3"
    assert rust_exp(0.0, 8) == "0.00000000e0"
    assert rust_exp(123456.0, 2) == "1.23e5"
    assert rust_exp(None, 2) == ""


def test_run_case_refuses_cpu_adapter_without_allow_cpu(device):
    if not device.profile.is_cpu:
        pytest.skip("needs a CPU adapter")
    with pytest.raises(ValueError, match="--allow-cpu"):
        run_case(device, SMALL[0], SweepConfig(cases=SMALL))


def test_small_sweep_writes_artifacts_that_parse_back(tmp_path, farm_home, capsys, monkeypatch):
    # lavapipe has no clock canary: a GPU's reading, so the record shows it is the one taken after the fused timing
    monkeypatch.setattr("farm.gpu.device.Device.clock_ratio", lambda self: 1.07)
    config = SweepConfig(allow_cpu=True, output_dir=str(tmp_path), warmup=1, repetitions=2, cases=SMALL)
    report = run_sweep(config, fan_out=False)
    captured = capsys.readouterr()
    printed = captured.out
    markdown = (tmp_path / "recurrent_scaling.md").read_text()
    assert markdown in printed
    # Each case's row on stderr as it lands (a run cut off shows what finished), and its phases.
    progress = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert [line.split(" | ")[:2] for line in progress] == [["[1/2]", "small"], ["[2/2]", "small_vh"]]
    assert all(" seconds: inputs " in line and ", stepwise " in line for line in progress)
    assert "sweep: small (B1 H2 VH1 T5 L8 E12) started" in captured.err
    phases = report["cases"][0]["phase_s"]
    assert list(phases) == ["inputs", "baseline", "fused", "runtime", "stepwise"] and min(phases.values()) >= 0
    assert [case["fused_clock"] for case in report["cases"]] == [1.07, 1.07]
    assert "strict_consistency_pass_cases: 2/2" in markdown
    assert "| small_vh | 36 |" in markdown

    with open(tmp_path / "recurrent_scaling.csv") as f:
        header = f.readline().strip()
        f.seek(0)
        rows = list(csv.DictReader(f))
    assert header == SUMMARY_HEADER
    assert [r["case"] for r in rows] == ["small", "small_vh"]
    assert rows[1]["value_heads"] == "3" and rows[1]["latent"] == "19" and rows[1]["embd"] == "36"
    assert all(r["strict_consistency_pass"] == "true" for r in rows)
    assert all(float(r["fused_ms"]) > 0 and float(r["baseline_ms"]) > 0 for r in rows)
    assert all(r["sampled_gpu_utilization_pct"] == "" or float(r["sampled_gpu_utilization_pct"]) >= 0 for r in rows)

    with open(tmp_path / "recurrent_scaling_steps.csv") as f:
        assert f.readline().strip() == STEPS_HEADER
        f.seek(0)
        steps = list(csv.DictReader(f))
    assert [(s["case"], int(s["step"])) for s in steps] == [("small", i) for i in range(5)] + [
        ("small_vh", i) for i in range(4)
    ]
    assert max(float(s["context_max_abs"]) for s in steps) <= 1e-3

    parsed = json.loads((tmp_path / "recurrent_scaling.json").read_text())
    assert parsed["cases"][0]["case"] == {
        "name": "small",
        "batch": 1,
        "heads": 2,
        "value_heads": 1,
        "time": 5,
        "latent": 8,
        "embd": 12,
    }
    assert parsed["strict_thresholds"] == {
        "context_max_abs": 1e-3,
        "context_rmse_max": 2e-4,
        "rho_max_abs": 1e-3,
        "rho_rmse_max": 2e-4,
    }
    assert set(parsed["memory_before_bytes"]) == {"reserved", "in_use"}
    assert parsed["cases"][1]["repetitions"] == 2 and parsed["cases"][1]["extra_repetitions_applied"] == 0
    assert parsed["runtime_path_distinct"] == report["runtime_path_distinct"]
    assert {c["runtime_mode"] for c in parsed["cases"]} == {"measured_distinct"}


def test_small_sweep_is_recorded_in_sql_and_parquet(tmp_path, farm_home):
    import pandas as pd

    from farm import store

    url = f"sqlite:///{tmp_path / 'sweep.db'}"
    report = run_sweep(SweepConfig(allow_cpu=True, db=url, warmup=1, repetitions=1, cases=SMALL[:1]), fan_out=False)
    opened = store.open_store(url)
    (run,) = store.sweeps(opened)
    assert run["cases"] == 1 and run["strict_passed"] == 1
    assert [s["step"] for s in store.sweep_steps(opened, run["id"])] == [0, 1, 2, 3, 4]

    # Without --output-dir the Parquet goes under $FARM_HOME/artifacts, partitioned by topology.
    sweeps = farm_home / "artifacts" / "sweeps"
    cases = pd.read_parquet(sweeps / "cases")
    steps = pd.read_parquet(sweeps / "steps")
    assert list(cases["name"]) == ["small"] and bool(cases["strict_pass"].iloc[0])
    assert set(cases["topology"].astype(str)) == {report["topology_hash"]}
    assert sorted(steps["step"]) == [0, 1, 2, 3, 4]


def test_a_case_times_the_runtime_both_ways_and_steps_it_on_the_device(device, farm_home):
    config = SweepConfig(allow_cpu=True, warmup=1, repetitions=2, cases=SMALL)
    record = run_case(device, SMALL[1], config)
    assert record["runtime_ms"] > 0 and record["runtime_device_ms"] > 0
    assert record["step_consistency"]["strict_pass"]
    assert len(record["step_metrics"]) == SMALL[1].time
    assert (record["baseline_warmup"], record["baseline_repetitions"]) == (1, 2)  # under the budget: the sweep's
    assert f"| {record['repetitions']} | " in case_row(record)  # the same reps: one number
    assert f"| {record['repetitions']} (baseline 1) | " in case_row(record | {"baseline_repetitions": 1})
    assert record["memory_after_bytes"]["in_use"] == record["memory_before_bytes"]["in_use"]  # rt closed


def test_stepwise_consistency_through_the_runtime_matches_the_direct_fused_steps(device, tmp_path):
    from recurrent_cases import host_stepped

    from farm import ForgeRuntime
    from farm.recurrent.stepwise import stepwise_consistency
    from farm.recurrent.sweep import case_inputs

    inputs = case_inputs(SMALL[1], 7)
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    schedule = catalog.get("recurrent").default
    direct = host_stepped(device, schedule, inputs["query"], inputs["value"], inputs["rho"], inputs["decay"])
    chained = stepwise_consistency(device, schedule, **inputs, runtime=rt)
    assert [s.as_dict() for s in chained] == direct  # same kernel, same numbers
    assert [s.as_dict() for s in stepwise_consistency(device, schedule, **inputs)] == direct  # its own runtime
    rt.close()


def test_only_the_longest_baselines_are_held_to_the_dispatch_budget():
    """A rep of the op-by-op baseline is T·8 dispatches, each encoded by the host, so T=4096's
    reps would take most of its case's time; up to T=1024 the sweep's counts stand."""
    assert baseline_counts(8 * 64, 2, 7) == (2, 7)
    assert baseline_counts(8 * 1024, 2, 7) == (2, 7)  # 57,344 timed dispatches
    assert baseline_counts(8 * 4096, 2, 7) == (1, 3)
    assert baseline_counts(8 * 2048, 2, 7) == (1, 4)
    assert baseline_counts(8 * 16384, 2, 2) == (1, 2)  # never more reps than asked for
