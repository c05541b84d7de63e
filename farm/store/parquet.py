"""Files a campaign leaves behind, next to the SQL: a Parquet dataset of every trial,
a per-campaign summary (JSON, CSV, Markdown), and the recurrent sweep as Parquet.

Trials are a hive-partitioned dataset,

    <out>/trials/topology=<hash>/kernel=<name>/part-<campaign>-<uuid>.parquet

(one new file per write, so concurrent writers never touch the same file; a campaign
writes one per partition at its end and farm.store.compaction merges a partition's files). The
partition columns `topology` and `kernel` come from the path, not the files; each
file's schema metadata carries farm.version, farm.schema_version, farm.source_hashes,
farm.topology, farm.kernel and farm.campaign_id. `read_trials` reads it back with the
partition columns typed as strings (a hash made only of digits stays a string).
"""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from farm.store.engine import mask_secrets
from farm.store.models import CASE_METRIC_COLUMNS, STEP_MAX_COLUMNS, STEP_METRIC_COLUMNS
from farm.store.records import DECISION_FIELDS, WinnerRecord
from farm.store.sweeps import CASE_DIMS, CASE_TIMINGS, case_row, step_row
from farm.trial import TrialResult

SCHEMA_VERSION = "1"
PARTITIONS = pa.schema([("topology", pa.string()), ("kernel", pa.string())])
TRIAL_SCHEMA = pa.schema(
    [
        ("campaign_id", pa.int64()),
        ("source_hash", pa.string()),
        ("problem", pa.string()),
        ("schedule", pa.string()),
        ("status", pa.string()),
        ("message", pa.string()),
        *((name, pa.float64()) for name in ("median_ns", "p20_ns", "p80_ns", "min_ns")),
        ("reps", pa.int64()),
        ("timing_method", pa.string()),
        *((name, pa.float64()) for name in ("max_abs", "mean_abs", "rmse", "max_rel")),
        ("host", pa.string()),
        ("worker_id", pa.string()),
        ("finished_at", pa.timestamp("us", tz="UTC")),
    ]
)


def farm_version() -> str:
    try:
        return metadata.version("farm")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _check_partition_value(kind: str, value: str) -> str:
    if not value or "/" in value or "=" in value or value in (".", ".."):
        raise ValueError(f"{kind} {value!r} can't name a partition directory")
    return value


# ---------------------------------------------------------------- trials


def write_trials(out: str | Path, campaign_id: int | None, results: Sequence[TrialResult | dict]) -> list[Path]:
    """Append trials (TrialResults or their `as_row()` dicts) to `<out>/trials`; returns the files written.

    One file per (topology, kernel) present in `results`; nothing is written for an empty list.
    """
    groups: dict[tuple[str, str], list[TrialResult | dict]] = {}
    for index, item in enumerate(results):
        if isinstance(item, TrialResult):
            topology, kernel = item.key.topology_hash, item.key.kernel
        elif isinstance(item, dict):
            topology, kernel = item["topology_hash"], item["kernel"]
        else:
            raise TypeError(f"results[{index}] is {type(item).__name__}, expected TrialResult or a row dict")
        group = groups.get((topology, kernel))
        if group is None:
            group = groups[(topology, kernel)] = []
            _check_partition_value("topology", topology)
            _check_partition_value("kernel", kernel)
        group.append(item)
    return [
        _write_trial_group(Path(out), campaign_id, topology, kernel, items)
        for (topology, kernel), items in groups.items()
    ]


_ROW_COLUMNS = [name for name in TRIAL_SCHEMA.names if name not in ("campaign_id", "finished_at")]  # as_row()'s


def _columns(items: list[TrialResult | dict]) -> dict[str, list]:
    """TRIAL_SCHEMA's columns of `items` but campaign_id. Column by column, straight from the
    results: a campaign end writes every trial here, and a dict per row was most of its time."""
    if not all(isinstance(item, TrialResult) for item in items):
        rows = [item.as_row() if isinstance(item, TrialResult) else item for item in items]
        columns = {name: [row.get(name) for row in rows] for name in _ROW_COLUMNS}
        columns["finished_at"] = [_timestamp(row["finished_at"]) for row in rows]
        return columns
    keys = [r.key for r in items]
    timings = [r.timing for r in items]
    metrics = [r.metrics for r in items]
    columns = {
        "source_hash": [k.source_hash for k in keys],
        "problem": [k.problem.key() for k in keys],
        "schedule": [k.schedule.key() for k in keys],
        "status": [r.status.value for r in items],
        "message": [r.message for r in items],
    }
    for name in ("median_ns", "p20_ns", "p80_ns", "min_ns", "reps"):
        columns[name] = [getattr(t, name) if t else None for t in timings]
    columns["timing_method"] = [t.method if t else None for t in timings]
    for name in ("max_abs", "mean_abs", "rmse", "max_rel"):
        columns[name] = [getattr(m, name) for m in metrics]
    columns["host"] = [r.host for r in items]
    columns["worker_id"] = [r.worker_id for r in items]
    columns["finished_at"] = [datetime.fromtimestamp(r.finished_at, UTC) for r in items]
    return columns


def _write_trial_group(
    out: Path, campaign_id: int | None, topology: str, kernel: str, items: list[TrialResult | dict]
) -> Path:
    columns = _columns(items)
    columns["campaign_id"] = [campaign_id] * len(items)
    metadata_fields = {
        "farm.version": farm_version(),
        "farm.schema_version": SCHEMA_VERSION,
        "farm.source_hashes": json.dumps(sorted(set(columns["source_hash"]))),
        "farm.topology": topology,
        "farm.kernel": kernel,
        "farm.campaign_id": "" if campaign_id is None else str(campaign_id),
    }
    table = pa.Table.from_pydict(columns, schema=TRIAL_SCHEMA.with_metadata(metadata_fields))
    directory = out / "trials" / f"topology={topology}" / f"kernel={kernel}"
    directory.mkdir(parents=True, exist_ok=True)
    campaign = "none" if campaign_id is None else str(campaign_id)
    path = directory / f"part-{campaign}-{uuid.uuid4().hex}.parquet"
    tmp = directory / f".{path.name}.tmp"  # a dot file is no part of the dataset
    pq.write_table(table, tmp)
    tmp.rename(path)  # readers never see a half-written file
    return path


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(float(value), UTC)


def trials_dataset(out: str | Path) -> ds.Dataset:
    """The trials under `<out>/trials` as a pyarrow dataset with string partition columns."""
    root = Path(out) / "trials"
    if not root.is_dir():
        raise FileNotFoundError(f"no trials dataset at {root}")
    partitioning = ds.partitioning(PARTITIONS, flavor="hive")
    return ds.dataset(root, format="parquet", partitioning=partitioning, exclude_invalid_files=True)


def read_trials(out: str | Path):
    """Every stored trial as a pandas DataFrame with `topology` and `kernel` columns."""
    return trials_dataset(out).to_table().to_pandas()


# ---------------------------------------------------------------- campaign summary

WINNER_COLUMNS = (
    "kernel",
    "problem",
    "schedule",
    "median_ns",
    "default_median_ns",
    "speedup",
    "topology_hash",
    "device_name",
    "source_hash",
)
# The decision a campaign's winner carries (WinnerRecord.DECISION_FIELDS, also SQL columns
# since revision 0005; None where a record has none).
WINNER_DECISION_COLUMNS = DECISION_FIELDS


def _winner_row(record: WinnerRecord) -> dict:
    return {
        "kernel": record.kernel,
        "problem": record.problem_key,
        "schedule": record.schedule_key,
        "median_ns": record.median_ns,
        "default_median_ns": record.default_median_ns,
        "speedup": record.speedup,
        "topology_hash": record.topology_hash,
        "device_name": record.device_name,
        "source_hash": record.source_hash,
        **{name: getattr(record, name, None) for name in WINNER_DECISION_COLUMNS},
    }


def _shown(key: str, value):
    """A campaign row's value as summary.json holds it: ISO times, the command with secrets masked."""
    if isinstance(value, datetime):
        return value.isoformat()
    return mask_secrets(value) if key == "command" and isinstance(value, str) else value


def write_campaign_summary(
    out: str | Path,
    campaign: dict,
    winners: Sequence[WinnerRecord],
    status_counts: dict[str, int],
    tasks: Sequence[dict] | None = None,
) -> dict[str, Path]:
    """Write `<out>/campaigns/<id>/summary.json`, `winners.csv` and `winners.md`; returns them by name.

    `campaign` is a row from `farm.store.campaign(store, id)`; `status_counts` from
    `farm.store.trial_status_counts(store, campaign=id)`; `tasks` (JSON-ready dicts, one per
    kernel and problem: trials, caps, search and re-measurement seconds and rounds) go into
    summary.json as "tasks", with their sums as "totals".
    """
    if "id" not in campaign:
        raise ValueError(f"campaign row needs an 'id', got keys {sorted(campaign)}")
    directory = Path(out) / "campaigns" / str(campaign["id"])
    directory.mkdir(parents=True, exist_ok=True)
    rows = [_winner_row(r) for r in winners]
    summary = {
        "format": "farm-campaign-summary/1",
        "farm_version": farm_version(),
        "campaign": {k: _shown(k, v) for k, v in campaign.items()},
        "trial_counts": dict(sorted(status_counts.items())),
        "trials": sum(status_counts.values()),
        "winners": rows,
    }
    if tasks is not None:
        summary["tasks"] = list(tasks)
        numbers = {k for t in tasks for k, v in t.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        summary["totals"] = {k: sum(t.get(k) or 0 for t in tasks) for k in sorted(numbers)}
    paths = {name: directory / name for name in ("summary.json", "winners.csv", "winners.md")}
    paths["summary.json"].write_text(json.dumps(summary, indent=2) + "\n")
    with open(paths["winners.csv"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=WINNER_COLUMNS + WINNER_DECISION_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    paths["winners.md"].write_text(winners_markdown(winners))
    return paths


def winners_markdown(winners: Sequence[WinnerRecord]) -> str:
    """A Markdown table: kernel, problem, schedule, median, default, speedup, device."""
    lines = [
        "| kernel | problem | schedule | median (us) | default (us) | speedup | device |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in winners:
        default = "-" if r.default_median_ns is None else f"{r.default_median_ns / 1000:.3f}"
        speedup = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        lines.append(
            f"| {r.kernel} | {r.problem_key} | {r.schedule} | {r.median_ns / 1000:.3f} | {default} | {speedup}"
            f" | {r.device_name} |"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- recurrent sweep

_CASE_FLOATS = (*CASE_TIMINGS, *CASE_METRIC_COLUMNS, *STEP_MAX_COLUMNS, "gpu_util")
SWEEP_CASE_SCHEMA = pa.schema(
    [
        ("sweep", pa.string()),
        ("name", pa.string()),
        *((dim, pa.int64()) for dim in CASE_DIMS),
        *((name, pa.float64()) for name in _CASE_FLOATS),
        ("strict_pass", pa.bool_()),
        ("reps", pa.int64()),
    ]
)
SWEEP_STEP_SCHEMA = pa.schema(
    [("sweep", pa.string()), ("case", pa.string()), ("step", pa.int64())]
    + [(name, pa.float64()) for name in STEP_METRIC_COLUMNS]
)


def write_sweep_parquet(
    out: str | Path, topology: str, cases: Sequence[dict], steps: Sequence[dict]
) -> dict[str, Path]:
    """Write a sweep's cases and steps (the dicts `farm.store.record_sweep` takes) as Parquet.

    Files: `<out>/sweeps/cases/topology=<hash>/part-<uuid>.parquet` and the same under
    `sweeps/steps/`; returns {"cases": path, "steps": path}. One run id ties them together.
    """
    _check_partition_value("topology", topology)
    case_rows = [case_row(i, case) for i, case in enumerate(cases)]
    names = {row["name"] for row in case_rows}
    step_rows = [step_row(i, step, names) for i, step in enumerate(steps)]
    run = uuid.uuid4().hex
    tables = {
        "cases": pa.Table.from_pylist([row | {"sweep": run} for row in case_rows], schema=SWEEP_CASE_SCHEMA),
        "steps": pa.Table.from_pylist([row | {"sweep": run} for row in step_rows], schema=SWEEP_STEP_SCHEMA),
    }
    paths = {}
    for name, table in tables.items():
        meta = {"farm.version": farm_version(), "farm.schema_version": SCHEMA_VERSION, "farm.topology": topology}
        directory = Path(out) / "sweeps" / name / f"topology={topology}"
        directory.mkdir(parents=True, exist_ok=True)
        paths[name] = directory / f"part-{run}.parquet"
        pq.write_table(table.replace_schema_metadata(meta), paths[name])
    return paths
