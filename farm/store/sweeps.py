"""The recurrent-attention sweep in SQL: one run, its cases, and their per-step consistency.

`record_sweep` takes the sweep's report dict:

    {"adapter": str, "config": dict,
     "memory_before": {"in_use": int, "reserved": int}, "memory_after": {...},
     "cases": [{"name", "B", "H", "VH", "T", "L", "E",                      # required
                "baseline_ms", "fused_ms", "runtime_ms", "speedup", "runtime_speedup",
                "context_max_abs" .. "rho_max_rel",          # full-sequence errors vs baseline
                "step_context_max_abs" .. "step_rho_max_rel", # stepwise-consistency maxima
                "strict_pass", "reps", "gpu_util"}, ...],
     "steps": [{"case", "step", "context_max_abs" .. "rho_max_rel"}, ...]}

Optional case/step fields may be missing or None; keys that are not columns are
ignored (the report may carry display-only fields); `gpu_util` that is not a number
("n/a") is stored as NULL.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Integer, cast, func, select

from farm.store.database import Store
from farm.store.models import (
    CASE_METRIC_COLUMNS,
    STEP_MAX_COLUMNS,
    STEP_METRIC_COLUMNS,
    SweepCaseRow,
    SweepRunRow,
    SweepStepRow,
)
from farm.store.repo import fetch_rows, require_topologies
from farm.store.transactions import write_transaction

CASE_DIMS = ("B", "H", "VH", "T", "L", "E")
CASE_TIMINGS = ("baseline_ms", "fused_ms", "runtime_ms", "speedup", "runtime_speedup")


@write_transaction
def record_sweep(store: Store, topology_hash: str, report: dict) -> int:
    """Store one sweep run with its cases and steps; returns the run id."""
    cases = [case_row(i, case) for i, case in enumerate(report.get("cases", []))]
    names = [case["name"] for case in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"sweep report has duplicate case names: {names}")
    steps = [step_row(i, step, set(names)) for i, step in enumerate(report.get("steps", []))]
    before, after = report.get("memory_before") or {}, report.get("memory_after") or {}
    run = SweepRunRow.__table__.insert().values(
        topology_hash=topology_hash,
        adapter=str(report.get("adapter", "")),
        config=report.get("config") or {},
        memory_before_in_use=before.get("in_use"),
        memory_before_reserved=before.get("reserved"),
        memory_after_in_use=after.get("in_use"),
        memory_after_reserved=after.get("reserved"),
    )
    with store.engine.begin() as conn:
        require_topologies(conn, {topology_hash})
        run_id = int(conn.execute(run).inserted_primary_key[0])
        if cases:
            conn.execute(SweepCaseRow.__table__.insert(), [case | {"run_id": run_id} for case in cases])
        if steps:
            conn.execute(SweepStepRow.__table__.insert(), [step | {"run_id": run_id} for step in steps])
    return run_id


def case_row(index: int, case: dict) -> dict:
    """One reported case as a sweep_cases row (ValueError naming the case when it lacks a field)."""
    missing = [k for k in ("name", *CASE_DIMS, "strict_pass") if case.get(k) is None]
    if missing:
        raise ValueError(f"sweep case #{index} ({case.get('name', '?')}) lacks {missing}")
    row: dict[str, Any] = {"name": str(case["name"]), "strict_pass": bool(case["strict_pass"])}
    row |= {k: _positive_int(case, k) for k in CASE_DIMS}
    row |= {k: _number(case.get(k)) for k in (*CASE_TIMINGS, *CASE_METRIC_COLUMNS, *STEP_MAX_COLUMNS, "gpu_util")}
    row["reps"] = None if case.get("reps") is None else int(case["reps"])
    return row


def step_row(index: int, step: dict, cases: set[str]) -> dict:
    """One reported step as a sweep_steps row; its case must be one of `cases`."""
    if step.get("case") not in cases:
        raise ValueError(f"sweep step #{index} names case {step.get('case')!r}, not one of {sorted(cases)}")
    if not isinstance(step.get("step"), int) or step["step"] < 0:
        raise ValueError(f"sweep step #{index} needs a step index >= 0, got {step.get('step')!r}")
    return {"case": step["case"], "step": step["step"]} | {k: _number(step.get(k)) for k in STEP_METRIC_COLUMNS}


def _positive_int(case: dict, key: str) -> int:
    value = case[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"sweep case {case['name']!r}: {key} must be a positive int, got {value!r}")
    return value


def _number(value: Any) -> float | None:
    """A float, or None for missing / non-numeric ("n/a") / NaN values."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


def sweeps(store: Store) -> list[dict]:
    """Sweep runs, newest first, each with `cases` (how many) and `strict_passed` (how many passed)."""
    counts = (
        select(
            SweepCaseRow.run_id,
            func.count().label("cases"),
            func.sum(cast(SweepCaseRow.strict_pass, Integer)).label("strict_passed"),
        )
        .group_by(SweepCaseRow.run_id)
        .subquery()
    )
    stmt = (
        select(SweepRunRow.__table__, counts.c.cases, counts.c.strict_passed)
        .outerjoin(counts, counts.c.run_id == SweepRunRow.id)
        .order_by(SweepRunRow.id.desc())
    )
    rows = fetch_rows(store, stmt)
    for row in rows:
        row["cases"] = int(row["cases"] or 0)
        row["strict_passed"] = int(row["strict_passed"] or 0)
    return rows


def sweep_cases(store: Store, run_id: int) -> list[dict]:
    """A run's cases in the order they were reported."""
    return fetch_rows(
        store, select(SweepCaseRow.__table__).where(SweepCaseRow.run_id == run_id).order_by(SweepCaseRow.id)
    )


def sweep_steps(store: Store, run_id: int, case: str | None = None) -> list[dict]:
    """A run's per-step metrics (optionally one case), ordered by case then step."""
    stmt = select(SweepStepRow.__table__).where(SweepStepRow.run_id == run_id)
    if case is not None:
        stmt = stmt.where(SweepStepRow.case == case)
    return fetch_rows(store, stmt.order_by(SweepStepRow.case, SweepStepRow.step))
