"""The dashboard's headline numbers and chart data (no Streamlit here): winners with numeric
margin and vendor columns and a three-way state (current, stale, unknown kernel), the
geomean speedups, each problem's best-so-far time against trial number, and the budget a
campaign actually had per problem.

Winners are few (one per topology, kernel and problem), so the headline numbers are
computed in Python over `winner_rows`; the convergence query reads one (topology, kernel,
source, problem), a prefix of the trials' unique index, at most MAX_CONVERGENCE_TRIALS rows.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

from sqlalchemy import select

from farm import catalog
from farm.dashboard.display import schedule_text, short, us
from farm.store.database import Store
from farm.store.listing import NOT_RECORDED, STALE, UNKNOWN, changed_knobs, runner_up_knobs, winner_state
from farm.store.models import TopologyRow, TrialRow
from farm.store.repo import fetch_rows
from farm.store.winner_rows import winners
from farm.tuning.tasks import CPU_BUDGET

MAX_CONVERGENCE_TRIALS = 5000
STATE_HELP = (
    "current: tuned on the kernel source this process has; stale: the source changed since "
    "(not served, re-run farm tune); unknown kernel: this dashboard doesn't know the kernel "
    "(a user kernel: start it with --kernels-file FILE), so it can't tell"
)


def _known_kernels() -> dict[str, tuple[str, dict]]:
    """kernel name -> (source hash now, default schedule's knobs), for every kernel this process knows."""
    return {spec.name: (spec.source_hash(), spec.default.as_dict()) for spec in catalog.all_specs()}


def short_schedule(schedule_key: str, default: dict | None) -> str:
    """The knobs where a schedule differs from its kernel's default (`default` when none do);
    the whole schedule when the default isn't known."""
    if default is None:
        return schedule_text(schedule_key)
    return changed_knobs(json.loads(schedule_key), default, sep=", ")


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def winner_rows(store: Store, kernel: str | None = None, topology: str | None = None) -> list[dict]:
    """Winners with numbers kept numeric for formatting (µs, ×, %), the schedule shortened to
    what differs from the default (`schedule_full` whole), and `state` (winner_state)."""
    known = _known_kernels()
    current = {name: source for name, (source, _) in known.items()}
    rows = []
    for w in winners(store, kernel=kernel, topology=topology):
        default = known.get(w.kernel, (None, None))[1]
        rows.append(
            {
                "kernel": w.kernel,
                "problem": w.problem_key,
                "median_us": us(w.median_ns),
                "speedup": w.speedup,
                "margin_pct": _percent(w.margin),
                "tie": NOT_RECORDED if w.tie is None else ("yes" if w.tie else "no"),
                "runner_up": runner_up_knobs(w),
                "schedule": short_schedule(w.schedule_key, default),
                "default_us": us(w.default_median_ns),
                "vendor_ratio": w.vendor_ratio,
                "state": winner_state(w.source_hash, current.get(w.kernel)),
                "device": w.device_name,
                "topology": short(w.topology_hash),
                # detail columns (the expander)
                "schedule_full": schedule_text(w.schedule_key),
                "margin_low_pct": _percent(w.margin_low),
                "margin_high_pct": _percent(w.margin_high),
                "rounds": w.rounds,
                "vendor_method": w.vendor_method,
                "vendor_measured_at": w.vendor_measured_at,
                "campaign": w.campaign_id,
                "updated_at": w.updated_at,
                "topology_hash": w.topology_hash,
                "source_hash": w.source_hash,
            }
        )
    return rows


def geomean(values: list[float]) -> float | None:
    """The geometric mean of positive values (the mean of ratios), None for none."""
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def headline(rows: list[dict]) -> dict:
    """The numbers at the top of Overview and Winners, over `winner_rows`: problems tuned,
    kernels, topologies, geomean speedup over the default schedule, geomean tuned/vendor
    speed over the benchmarked winners and how many those are, and winners by state."""
    vendor = [r["vendor_ratio"] for r in rows if r["vendor_ratio"] is not None]
    return {
        "problems": len(rows),
        "kernels": len({r["kernel"] for r in rows}),
        "topologies": len({r["topology_hash"] for r in rows}),
        "geomean_speedup": geomean([r["speedup"] for r in rows]),
        "best_speedup": max((r["speedup"] for r in rows if r["speedup"] is not None), default=None),
        "geomean_vendor": geomean(vendor),
        "benchmarked": len(vendor),
        "stale": sum(r["state"] == STALE for r in rows),
        "unknown": sum(r["state"] == UNKNOWN for r in rows),
    }


def speedup_per_kernel(rows: list[dict]) -> list[dict]:
    """Per kernel: geomean, lowest and highest speedup over the default across its winners, and how many."""
    by_kernel: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["speedup"] is not None:
            by_kernel[r["kernel"]].append(r["speedup"])
    return [
        {"kernel": k, "geomean_speedup": geomean(v), "lowest": min(v), "highest": max(v), "problems": len(v)}
        for k, v in sorted(by_kernel.items())
    ]


def gpu_label(row: dict) -> str:
    """`device (short topology hash)`: the same GPU with another driver is another topology."""
    return f"{row['device']} ({row['topology']})"


def gpu_group(rows: list[dict]) -> str | None:
    """The field `gpu` when the rows span several topologies (a bar per GPU in a problem's row), else None."""
    return "gpu" if len({r["topology_hash"] for r in rows}) > 1 else None


def vendor_rows(rows: list[dict]) -> list[dict]:
    """The benchmarked winners: tuned/vendor speed per problem (> 1: the tuned kernel is faster)."""
    rows = [r for r in rows if r["vendor_ratio"] is not None]
    return [
        {
            "kernel": r["kernel"],
            "problem": r["problem"],
            "label": f"{r['kernel']} · {r['problem']}",
            "gpu": gpu_label(r),
            "device": r["device"],
            "vendor_ratio": r["vendor_ratio"],
            "method": r["vendor_method"] or "",
        }
        for r in rows
    ]


def convergence(store: Store, topology_hash: str, kernel: str, problem: str, source_hash: str) -> list[dict]:
    """The search for one winner, in the order its trials finished: `{trial, median_us,
    best_us, status, campaign}`, best_us the fastest certified time so far (None before the
    first); failed trials count (they used budget) with no time. At most MAX_CONVERGENCE_TRIALS."""
    stmt = (
        select(TrialRow.id, TrialRow.status, TrialRow.median_ns, TrialRow.campaign_id)
        .where(
            TrialRow.topology_hash == topology_hash,
            TrialRow.kernel == kernel,
            TrialRow.source_hash == source_hash,
            TrialRow.problem == problem,
        )
        .order_by(TrialRow.finished_at, TrialRow.id)  # ids follow key order within a recorded batch
        .limit(MAX_CONVERGENCE_TRIALS)
    )
    out, best = [], None
    for number, row in enumerate(fetch_rows(store, stmt), start=1):
        time = us(row["median_ns"]) if row["status"] == "ok" else None
        if time is not None and (best is None or time < best):
            best = time
        status, campaign = row["status"], row["campaign_id"]
        out.append({"trial": number, "median_us": time, "best_us": best, "status": status, "campaign": campaign})
    return out


def effective_budgets(store: Store, campaigns: list[dict]) -> dict[int, str]:
    """campaign id -> the budget per problem it ran with, as text: `--budget` (None: every
    schedule), capped at CPU_BUDGET on a CPU adapter and at the campaign's planned trials;
    `8 (64 asked)` where the cap changed it. One indexed read per campaign for its adapter."""
    cpu = {
        row["hash"]
        for row in fetch_rows(store, select(TopologyRow.hash, TopologyRow.adapter_type))
        if row["adapter_type"] == "CPU"
    }
    out = {}
    with store.engine.connect() as conn:
        for c in campaigns:
            stmt = select(TrialRow.topology_hash).where(TrialRow.campaign_id == c["id"]).order_by(TrialRow.id)
            topology = conn.scalar(stmt.limit(1))
            asked = c["budget"]
            cap = math.inf if asked is None else asked
            if topology in cpu:
                cap = min(cap, CPU_BUDGET)
            if c["total"]:
                cap = min(cap, c["total"])
            asked_text = "all" if asked is None else str(asked)
            shown = asked_text if cap == math.inf else str(int(cap))
            out[c["id"]] = shown if shown == asked_text else f"{shown} ({asked_text} asked)"
    return out
