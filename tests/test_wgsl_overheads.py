"""benchmarks/wgsl_overheads.py's smoke run on the CPU adapter: every probe compiles, is
timed, and the table and JSON hold one row per probe (the numbers mean something on GPUs)."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "wgsl_overheads.py"


def test_every_probe_runs_and_is_reported(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--allow-cpu", "--groups", "4", "--reps", "1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "wgsl-overheads.json").read_text())
    names = [row["case"] for row in result["rows"]]
    assert names[0] == "empty" and {"wgmem_48", "barriers_64", "fma_loop", "fma_unrolled"} <= set(names)
    assert all(row["dispatch_us"] > 0 and row["method"] == "timestamp" for row in result["rows"])
    assert run.stdout.count("\n| ") == len(names) + 2  # header, rule and one row each


def test_it_refuses_a_cpu_adapter_unless_told():
    run = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "refusing to time on CPU adapter" in run.stderr
