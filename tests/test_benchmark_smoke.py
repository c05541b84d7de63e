"""Smoke runs on the CPU adapter of the benchmarks that need no GPU to run: runtime_calls.py's
cut-down mode (--only, --skip-costs, --skip-chains), search_replay.py, trial_repeat.py and
queue_claims.py on a small SQLite queue, dashboard_queries.py (a small SQLite database) and
fleet.py's recording and several-drivers modes: each runs, writes its JSON and reports every
row it measured (the numbers mean something on GPUs, or a quiet machine, only)."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
LANDSCAPE = Path(__file__).parent / "data" / "landscapes" / "h200-gemm-m=2048-k=2048-n=2048.json.gz"


def _run(script: str, *args: str | Path, timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(BENCHMARKS.parent), **(env or {})}
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


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
    paths = {row["case"].split(" through ")[1].split(",")[0] for row in result["recorded"]}
    assert paths == {"c api", "wgpu-py objects"} and all(row["host_us"] > 0 for row in result["recorded"])
    summary = (tmp_path / "runtime-calls-summary.csv").read_text()
    assert "floor: empty submission + blocking wait: us" in summary and "C API: pass_with_dispatch_us" in summary
    floors = result["dispatch_floors"]["gemm 64^3"]
    assert set(floors) == {"alone_us", "dependent_one_pass_us", "independent_one_pass_us",
                           "dependent_pass_each_us", "independent_pass_each_us"} and min(floors.values()) > 0
    assert "GPU: gemm 64^3 a dispatch, dependent_one_pass_us" in summary


def test_search_replay_replays_a_stored_landscape_and_exports_it_unchanged(tmp_path):
    landscape = LANDSCAPE  # measured on an H200
    run = _run("search_replay.py", "--db", str(landscape), "--seeds", "3", "--label", "t", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(next(tmp_path.glob("*-t-search-replay.json")).read_text())["rows"]
    assert row["problem"] == "m=2048,k=2048,n=2048" and row["seeds"] == 3 and len(row["gaps"]) == 3
    trials = json.loads(gzip.decompress(landscape.read_bytes()))["trials"]  # [schedule, status, median_ns, ...]
    assert row["best_ns"] == min(t[2] for t in trials if t[1] == "ok") > 4e5  # the landscape's best
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


def test_queue_claims_drains_a_small_queue_with_two_claimers_and_checks_every_claim(tmp_path):
    run = _run("queue_claims.py", "--queued", "200", "--claimers", "2", "--no-postgres", "--json", tmp_path / "q.json")
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "q.json").read_text())["rows"]
    assert [(r["backend"], r["mode"], r["claimers"]) for r in rows] == [("sqlite", "claim", 2), ("sqlite", "round", 2)]
    assert all(r["claimed"] == 200 and r["lost"] == 0 and r["twice"] == 0 and r["attempts_max"] == 1 for r in rows)
    assert "| sqlite | round | 2 |" in run.stdout and "load average" in run.stdout


def test_dashboard_queries_times_every_query_with_and_without_summaries(tmp_path):
    out = tmp_path / "queries.json"
    run = _run("dashboard_queries.py", "--trials", "20000", "--no-postgres", "--counting", "--campaign-end", "20000",
               "--json", out)  # fmt: skip
    assert run.returncode == 0, run.stderr
    results = json.loads(out.read_text())
    assert set(results) == {"sqlite 0.02M", "sqlite 0.02M counting"}
    summarized, counted = results["sqlite 0.02M"], results["sqlite 0.02M counting"]
    assert summarized.keys() == counted.keys() >= {"failure_summary", "trial_page"}
    assert "campaign end (small files only), partition of 20,000 + 50,000" in run.stdout


def test_fleet_records_as_a_campaign_and_reports_its_rate(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run = _run("fleet.py", "record", "--rows", "600", "--no-postgres", "--db", "sqlite",
               "--json", tmp_path / "fleet.json", env={"TMPDIR": str(scratch)})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert not list(scratch.iterdir())  # its databases go with it
    (row,) = json.loads((tmp_path / "fleet.json").read_text())
    assert (row["mode"], row["db"], row["rows"]) == ("record", "sqlite", 600) and row["rows_per_s"] > 0
    assert "record | sqlite | 600 |" in run.stdout


def test_fleet_drivers_drain_one_queue_together_and_report_the_aggregate(tmp_path):
    run = _run("fleet.py", "drivers", "--drivers", "2", "--gpus", "4", "--requests", "4", "--budget", "8",
               "--batch", "1", "--trial-s", "0.002", "--db", "sqlite", "--json", tmp_path / "drivers.json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    (row,) = json.loads((tmp_path / "drivers.json").read_text())
    assert (row["mode"], row["drivers"], row["gpus"], row["requests"]) == ("drivers", 2, 4, 4)
    assert row["done"] == sum(row["claimed"]) == 4  # every request tuned, none claimed twice
    assert row["trials"] >= 4 * 8 and 0 < row["utilization"] <= 1 and row["drivers_for_11600"] >= 1
    assert 0 < row["dry_s"] <= row["wall_s"] and 0 <= row["busy_until_dry"] <= 1  # the last claim, and busy till then
    assert row["winners_geomean_us"] > 0  # the winners' quality, to compare runs that search differently
    assert "drivers | sqlite | 2 | 4 |" in run.stdout
