"""Parquet trial dataset (pandas and duckdb), campaign summary files, recurrent sweep Parquet."""

from __future__ import annotations

import csv
import json

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest
from test_store_support import profile, trial

from farm.schedule import Schedule, Status
from farm.store import WinnerRecord
from farm.store.parquet import (
    SCHEMA_VERSION,
    farm_version,
    read_trials,
    write_campaign_summary,
    write_sweep_parquet,
    write_trials,
)

TOPO = profile().topology_hash()
OTHER = "0123456789" * 6 + "0123"  # digits only: must stay a string partition value


def _write_two_campaigns(out):
    first = [trial(TOPO, w) for w in (32, 64)] + [trial(TOPO, 999, Status.INVALID_SCHEDULE)]
    first.append(trial(TOPO, 64, kernel="gemm"))
    second = [trial(OTHER, 128).as_row()]  # as_row() dicts are accepted too
    return write_trials(out, 1, first) + write_trials(out, 2, second)


def test_trials_land_in_hive_partitions_per_topology_and_kernel(tmp_path):
    paths = _write_two_campaigns(tmp_path)
    relative = sorted(str(p.relative_to(tmp_path).parent) for p in paths)
    assert relative == [
        f"trials/topology={OTHER}/kernel=gemv",
        f"trials/topology={TOPO}/kernel=gemm",
        f"trials/topology={TOPO}/kernel=gemv",
    ]
    assert all(p.name.startswith(("part-1-", "part-2-")) and p.suffix == ".parquet" for p in paths)
    assert write_trials(tmp_path, 3, []) == []


def test_results_and_their_row_dicts_write_the_same_table(tmp_path):
    results = [trial(TOPO, 32), trial(TOPO, 999, Status.INVALID_SCHEDULE), trial(TOPO, 64, median_ns=float("nan"))]
    direct = pq.read_table(write_trials(tmp_path / "a", 4, results)[0])
    rows = pq.read_table(write_trials(tmp_path / "b", 4, [r.as_row() for r in results])[0])
    assert direct.schema == rows.schema
    assert direct.to_pandas().equals(rows.to_pandas())  # NaN equal to NaN, None to None
    assert direct.column("median_ns").to_pylist()[1] is None and direct.column("reps").to_pylist()[0] == 7


def test_trial_files_carry_schema_metadata(tmp_path):
    path = next(p for p in _write_two_campaigns(tmp_path) if "kernel=gemv" in str(p) and TOPO in str(p))
    meta = {k.decode(): v.decode() for k, v in pq.read_schema(path).metadata.items()}
    assert meta["farm.schema_version"] == SCHEMA_VERSION
    assert meta["farm.version"] == farm_version() != ""
    assert json.loads(meta["farm.source_hashes"]) == ["src-1"]
    assert (meta["farm.topology"], meta["farm.kernel"], meta["farm.campaign_id"]) == (TOPO, "gemv", "1")


def test_pandas_reads_the_dataset_with_partition_columns(tmp_path):
    _write_two_campaigns(tmp_path)
    frame = pd.read_parquet(tmp_path / "trials")
    assert len(frame) == 5
    assert {"topology", "kernel", "schedule", "status", "median_ns", "finished_at"} <= set(frame.columns)
    gemv = frame[(frame["kernel"].astype(str) == "gemv") & (frame["topology"].astype(str) == TOPO)]
    assert sorted(gemv["status"]) == ["invalid_schedule", "ok", "ok"]
    assert gemv.loc[gemv["status"] == "ok", "median_ns"].tolist() == [1000.0, 1000.0]
    typed = read_trials(tmp_path)
    assert typed["topology"].map(type).eq(str).all()
    assert set(typed["topology"]) == {TOPO, OTHER}
    assert str(typed["finished_at"].dt.tz) == "UTC"
    assert typed["finished_at"].iloc[0].timestamp() == pytest.approx(1_790_000_000.25)


def test_duckdb_reads_the_dataset_with_partition_columns(tmp_path):
    _write_two_campaigns(tmp_path)
    glob = str(tmp_path / "trials" / "**" / "*.parquet")
    rows = duckdb.sql(
        f"SELECT kernel, status, count(*) AS n FROM read_parquet('{glob}', hive_partitioning = true, "
        "hive_types = {'topology': VARCHAR, 'kernel': VARCHAR}) GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert rows == [("gemm", "ok", 1), ("gemv", "invalid_schedule", 1), ("gemv", "ok", 3)]
    topologies = duckdb.sql(
        f"SELECT DISTINCT topology FROM read_parquet('{glob}', hive_partitioning = true, "
        "hive_types = {'topology': VARCHAR}) ORDER BY 1"
    ).fetchall()
    assert topologies == [(OTHER,), (TOPO,)]


def test_write_trials_rejects_a_kernel_name_that_cannot_be_a_directory(tmp_path):
    with pytest.raises(ValueError, match="kernel 'a/b' can't name a partition directory"):
        write_trials(tmp_path, 1, [trial(TOPO, 64, kernel="a/b")])


def test_campaign_summary_writes_json_csv_and_markdown(tmp_path):
    winner = WinnerRecord(
        TOPO, "gemv", "m=37,k=129", "src-1", Schedule.of(workgroup_size=128).key(), 1000.0, 2500.0, 2.5
    )
    campaign = {
        "id": 7,
        "status": "done",
        "command": "farm tune gemv",
        "started_at": pd.Timestamp("2026-01-01", tz="UTC"),
    }
    paths = write_campaign_summary(tmp_path, campaign, [winner], {"ok": 10, "timeout": 1})
    assert {p.parent for p in paths.values()} == {tmp_path / "campaigns" / "7"}
    summary = json.loads(paths["summary.json"].read_text())
    assert summary["trials"] == 11 and summary["trial_counts"] == {"ok": 10, "timeout": 1}
    assert summary["campaign"]["started_at"] == "2026-01-01T00:00:00+00:00"
    assert summary["winners"][0]["speedup"] == 2.5
    (row,) = list(csv.DictReader(paths["winners.csv"].open()))
    assert (row["kernel"], row["problem"], float(row["median_ns"])) == ("gemv", "m=37,k=129", 1000.0)
    md = paths["winners.md"].read_text().splitlines()
    assert md[0].startswith("| kernel | problem | schedule |")
    assert (
        md[2]
        == "| gemv | m=37,k=129 | workgroup_size=128,items_per_invocation=1,vector_width=1 | 1.000 | 2.500 | 2.50x |  |"
    )


def test_sweep_parquet_round_trips_cases_and_steps(tmp_path):
    case = {"name": "sweep_b1_h8_t64_l64_e96", "B": 1, "H": 8, "VH": 1, "T": 64, "L": 64, "E": 96}
    case |= {"fused_ms": 0.2, "baseline_ms": 5.0, "strict_pass": True, "gpu_util": "n/a", "reps": 4}
    steps = [{"case": case["name"], "step": s, "context_max_abs": 1e-6, "rho_rmse": 2e-7} for s in range(3)]
    paths = write_sweep_parquet(tmp_path, TOPO, [case], steps)
    assert paths["cases"].parent == tmp_path / "sweeps" / "cases" / f"topology={TOPO}"
    cases = pd.read_parquet(tmp_path / "sweeps" / "cases")
    assert cases[["name", "E", "fused_ms", "strict_pass"]].values.tolist() == [[case["name"], 96, 0.2, True]]
    assert cases["gpu_util"].isna().all() and str(cases["topology"].iloc[0]) == TOPO
    frame = pd.read_parquet(paths["steps"])
    assert frame["step"].tolist() == [0, 1, 2] and frame["sweep"].nunique() == 1
    assert frame["sweep"].iloc[0] == cases["sweep"].iloc[0]
    with pytest.raises(ValueError, match="names case 'nope'"):
        write_sweep_parquet(tmp_path, TOPO, [case], [{"case": "nope", "step": 0}])
