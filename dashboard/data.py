"""What the dashboard shows, as plain functions over a read-only `Store` (no Streamlit here).

Every query is a SQLAlchemy Core select with bound parameters; user choices (kernel,
topology, status, page) only ever become parameter values, never SQL text. Each function
returns plain lists of dicts with display-ready columns (times in microseconds, short
topology hashes), so pages only lay them out and tests can check values directly.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import func, literal, select

from farm import catalog
from farm.dashboard.display import SHORT_HASH, schedule_text, short, us  # noqa: F401  (data.short etc.)
from farm.dashboard.trial_data import (  # noqa: F401  (the Trials page's queries, as data.*)
    FAILURE_GROUPS,
    MAX_CHART_TRIALS,
    TrialPage,
    failure_summary,
    knob_names,
    knob_timings,
    normalize_message,
    trial_count,
    trial_page,
)
from farm.schedule import Status
from farm.store.database import Store, open_store
from farm.store.engine import mask_secrets
from farm.store.listing import NOT_RECORDED, runner_up_knobs
from farm.store.models import CampaignRow, SweepCaseRow, TopologyRow, TrialRow, WinnerRow, utcnow
from farm.store.records import WinnerRecord
from farm.store.repo import campaigns, fetch_rows, live_campaigns, trial_status_counts
from farm.store.summaries import has_summaries, summary_counts
from farm.store.sweeps import sweep_cases, sweep_steps, sweeps
from farm.store.winner_rows import winner_columns, winners

START_HINT = (
    "Fill it with a tuning campaign, e.g. `farm tune gemv --allow-cpu` (or `farm tune --all` on a GPU machine), "
    "or a recurrent sweep with `farm sweep recurrent`, then reload this page."
)
# The columns of the recurrent sweep's Markdown table (farm.recurrent.report.format_markdown), in its order:
# (title, sweep_cases column); runtime_mode is derived from whether the runtime path was timed.
SWEEP_COLUMNS = (
    ("case", "name"),
    ("embd", "E"),
    ("baseline_ms", "baseline_ms"),
    ("fused_ms", "fused_ms"),
    ("runtime_ms", "runtime_ms"),
    ("fused_speedup_x", "speedup"),
    ("runtime_speedup_x", "runtime_speedup"),
    ("step_ctx_max_abs", "step_context_max_abs"),
    ("step_rho_max_abs", "step_rho_max_abs"),
    ("strict_pass", "strict_pass"),
    ("reps", "reps"),
    ("gpu_util_pct", "gpu_util"),
    ("runtime_mode", None),
)
STEP_METRICS = ("context_max_abs", "context_rmse", "rho_max_abs", "rho_rmse")


class NoData(LookupError):
    """The database is missing, has no tables yet, or holds nothing to show; the message says how to start."""


def open_readonly(url: str | None = None) -> Store:
    """The read-only store the dashboard reads; NoData (with how to start) when there is no database yet."""
    try:
        store = open_store(url, read_only=True)
    except FileNotFoundError as exc:
        raise NoData(f"No farm database yet ({exc}). {START_HINT}") from exc
    if not store.has_schema():
        raise NoData(f"The database {store.safe_url} has no farm tables yet. {START_HINT}")
    return store


def require_data(store: Store) -> None:
    """NoData when no campaign, trial, winner or sweep has been recorded."""
    with store.engine.connect() as conn:
        for table in (CampaignRow, TrialRow, WinnerRow, SweepCaseRow):
            if conn.scalar(select(literal(1)).select_from(table).limit(1)):  # stops at the first row
                return
    raise NoData(f"The database {store.safe_url} is empty. {START_HINT}")


# ---------------------------------------------------------------- overview


def topology_table(store: Store) -> list[dict]:
    """Known adapters with their device names and how many trials and winners each has."""
    if has_summaries(store):
        trial_counts = {topology: n for (topology,), n in summary_counts(store, ("topology_hash",)).items()}
    else:
        trial_counts = _count_by(store, TrialRow.topology_hash)
    winner_counts = _count_by(store, WinnerRow.topology_hash)
    rows = fetch_rows(store, select(TopologyRow.__table__).order_by(TopologyRow.first_seen, TopologyRow.hash))
    return [
        {
            "device": row["device_name"],
            "type": row["adapter_type"],
            "backend": row["backend"],
            "driver": row["driver_description"],
            "topology": short(row["hash"]),
            "trials": trial_counts.get(row["hash"], 0),
            "winners": winner_counts.get(row["hash"], 0),
            "first_seen": row["first_seen"],
        }
        for row in rows
    ]


def _count_by(store: Store, column) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {key: int(n) for key, n in conn.execute(select(column, func.count()).group_by(column)).all()}


def campaign_table(store: Store, limit: int = 50) -> list[dict]:
    """The newest campaigns with status (`interrupted`: its driver stopped, see repo.campaign_status),
    progress (done/total as a 0..1 fraction, resumed trials included) and when its driver was last seen."""
    return [
        {
            "id": row["id"],
            "status": row["status"],
            "progress": (row["done"] / row["total"]) if row["total"] else (1.0 if row["status"] == "done" else 0.0),
            "done": row["done"],
            "total": row["total"],
            "failures": row["failures"],
            "strategy": row["strategy"],
            "budget": row["budget"],
            "command": mask_secrets(row["command"] or ""),  # rows stored before commands were masked
            "host": row["host"],
            "started_at": row["started_at"],
            "finished_at": row["finished_at"],
            "last_seen": row["heartbeat_at"] or row["started_at"],
        }
        for row in campaigns(store, limit=limit)
    ]


def running_campaigns(store: Store) -> list[int]:
    """Ids of campaigns still running (heartbeat fresh; a killed driver's is not): their pages refresh themselves."""
    return live_campaigns(store)


def status_counts(
    store: Store, kernel: str | None = None, topology: str | None = None, campaign: int | None = None
) -> list[dict]:
    """Trials per status, every Status listed (zeros included) in the enum's order."""
    counts = trial_status_counts(store, topology=topology, kernel=kernel, campaign=campaign)
    return [{"status": s.value, "trials": counts.get(s.value, 0)} for s in Status]


# ---------------------------------------------------------------- filters


def kernel_names(store: Store) -> list[str]:
    """Kernels that have trials or winners, sorted."""
    with store.engine.connect() as conn:
        found = set(conn.scalars(select(WinnerRow.kernel).distinct()))
        if not has_summaries(store):
            return sorted(found | set(conn.scalars(select(TrialRow.kernel).distinct())))
    return sorted(found | {kernel for (kernel,) in summary_counts(store, ("kernel",))})


def topology_choices(store: Store) -> dict[str, str]:
    """topology hash → `device name (short hash)`, for select boxes."""
    rows = fetch_rows(
        store, select(TopologyRow.hash, TopologyRow.device_name).order_by(TopologyRow.device_name, TopologyRow.hash)
    )
    return {row["hash"]: f"{row['device_name']} ({short(row['hash'])})" for row in rows}


def problem_keys(store: Store, kernel: str) -> list[str]:
    """Problem keys tuned or tried for `kernel`, sorted."""
    with store.engine.connect() as conn:
        keys = set(conn.scalars(select(WinnerRow.problem).where(WinnerRow.kernel == kernel).distinct()))
        if not has_summaries(store):
            tried = select(TrialRow.problem).where(TrialRow.kernel == kernel).distinct()
            return sorted(keys | set(conn.scalars(tried)))
    return sorted(keys | {problem for (problem,) in summary_counts(store, ("problem",), kernel=kernel)})


# ---------------------------------------------------------------- winners


def current_source_hashes() -> dict[str, str]:
    """kernel name → the catalog's source hash now (a winner tuned on another hash is stale)."""
    return {spec.name: spec.source_hash() for spec in catalog.all_specs()}


def winner_table(store: Store, kernel: str | None = None, topology: str | None = None) -> list[dict]:
    """Winners with schedule, median, speedup vs the default schedule, how the winner was
    decided (margin of the runner-up, tie, the runner-up's differing knobs, rounds), `farm
    bench`'s speed against the vendor library (vendor time / tuned time, its method and
    date) and the stale flag. Decision and vendor cells are text, NOT_RECORDED ("–") where a
    row has none (rows from before revision 0005, winners never benchmarked).

    A winner is stale when its source hash differs from the catalog's current one, or its
    kernel is no longer in the catalog.
    """
    current = current_source_hashes()
    return [
        {
            "kernel": w.kernel,
            "problem": w.problem_key,
            "device": w.device_name,
            "topology": short(w.topology_hash),
            "schedule": schedule_text(w.schedule_key),
            "median_us": us(w.median_ns),
            "default_median_us": us(w.default_median_ns),
            "speedup": w.speedup,
            **decision_cells(w),
            "stale": current.get(w.kernel) != w.source_hash,
            "campaign": w.campaign_id,
            "updated_at": w.updated_at,
        }
        for w in winners(store, kernel=kernel, topology=topology)
    ]


def decision_cells(w: WinnerRecord) -> dict[str, str]:
    """The Winners page's decision and vendor columns of one winner, as display text."""
    margin = NOT_RECORDED
    if w.margin is not None:
        interval = "" if w.margin_low is None or w.margin_high is None else (
            f" [{100 * w.margin_low:+.1f}, {100 * w.margin_high:+.1f}]"
        )  # fmt: skip
        margin = f"{100 * w.margin:+.1f}%{interval}"
    vendor = NOT_RECORDED
    if w.vendor_ratio is not None:
        when = f", {w.vendor_measured_at:%Y-%m-%d}" if w.vendor_measured_at is not None else ""
        vendor = f"{w.vendor_ratio:.2f}x ({w.vendor_method or 'method unknown'}{when})"
    return {
        "margin": margin,
        "tie": NOT_RECORDED if w.tie is None else ("yes" if w.tie else "no"),
        "runner_up": runner_up_knobs(w),
        "rounds": NOT_RECORDED if w.rounds is None else str(w.rounds),
        "vs_vendor": vendor,
    }


# ---------------------------------------------------------------- recurrent sweeps


def sweep_table(store: Store) -> list[dict]:
    """Sweep runs, newest first, with adapter, device and strict passes out of cases."""
    devices = {
        row["hash"]: row["device_name"] for row in fetch_rows(store, select(TopologyRow.hash, TopologyRow.device_name))
    }
    return [
        {
            "run": row["id"],
            "started_at": row["started_at"],
            "device": devices.get(row["topology_hash"], ""),
            "adapter": row["adapter"],
            "topology": short(row["topology_hash"]),
            "cases": row["cases"],
            "strict_passed": row["strict_passed"],
        }
        for row in sweeps(store)
    ]


def sweep_case_table(store: Store, run_id: int) -> list[dict]:
    """A run's cases with the Markdown artifact's columns and spellings (strict_pass as pass/fail)."""
    table = []
    for row in sweep_cases(store, run_id):
        out = {title: row[column] for title, column in SWEEP_COLUMNS if column is not None}
        out["strict_pass"] = "pass" if row["strict_pass"] else "fail"
        out["runtime_mode"] = "measured_distinct" if row["runtime_ms"] is not None else "runtime_path_missing"
        table.append(out)
    return table


def sweep_speedups(store: Store, run_id: int) -> list[dict]:
    """`{E, case, speedup, runtime_speedup}` per case, ordered by E, for the speedup-vs-E chart."""
    rows = sorted(sweep_cases(store, run_id), key=lambda r: (r["E"], r["name"]))
    return [
        {"E": r["E"], "case": r["name"], "speedup": r["speedup"], "runtime_speedup": r["runtime_speedup"]} for r in rows
    ]


def sweep_step_errors(store: Store, run_id: int, case: str | None = None) -> list[dict]:
    """Per-step errors `{case, step, context_max_abs, context_rmse, rho_max_abs, rho_rmse}`."""
    return [
        {"case": r["case"], "step": r["step"]} | {m: r[m] for m in STEP_METRICS}
        for r in sweep_steps(store, run_id, case)
    ]


def sweep_strict_table(store: Store, run_id: int) -> list[dict]:
    """Per case: the strict-pass verdict with the four numbers it is judged on."""
    return [
        {
            "case": r["name"],
            "strict_pass": r["strict_pass"],
            "context_max_abs": r["context_max_abs"],
            "context_rmse": r["context_rmse"],
            "rho_max_abs": r["rho_max_abs"],
            "rho_rmse": r["rho_rmse"],
        }
        for r in sweep_cases(store, run_id)
    ]


# ---------------------------------------------------------------- compare topologies


def compared_problems(store: Store) -> list[tuple[str, str]]:
    """(kernel, problem) pairs with winners on two or more topologies, sorted; those worth comparing first."""
    stmt = select(WinnerRow.kernel, WinnerRow.problem, func.count().label("n")).group_by(
        WinnerRow.kernel, WinnerRow.problem
    )
    rows = fetch_rows(store, stmt)
    return [(r["kernel"], r["problem"]) for r in sorted(rows, key=lambda r: (-r["n"], r["kernel"], r["problem"]))]


def topology_comparison(store: Store, kernel: str, problem: str) -> list[dict]:
    """The same kernel and problem across GPUs: each topology's winner, fastest first, with time relative to it."""
    stmt = select(*winner_columns(store)).where(WinnerRow.kernel == kernel, WinnerRow.problem == problem)
    stmt = stmt.order_by(WinnerRow.median_ns)
    rows = fetch_rows(store, stmt)
    best = rows[0]["median_ns"] if rows else None
    return [
        {
            "gpu": f"{r['device_name']} ({short(r['topology_hash'])})",
            "device": r["device_name"],
            "topology": short(r["topology_hash"]),
            "schedule": schedule_text(r["schedule"]),
            "median_us": us(r["median_ns"]),
            "vs_fastest": r["median_ns"] / best,
            "speedup_vs_default": r["speedup"],
        }
        for r in rows
    ]


def trials_by_topology(store: Store, kernel: str, problem: str) -> list[dict]:
    """Per topology: trials run and certified for one kernel/problem (how much each GPU was explored)."""
    if has_summaries(store):
        counts = summary_counts(store, ("topology_hash", "status"), kernel=kernel, problem=problem)
    else:
        stmt = (
            select(TrialRow.topology_hash, TrialRow.status, func.count())
            .where(TrialRow.kernel == kernel, TrialRow.problem == problem)
            .group_by(TrialRow.topology_hash, TrialRow.status)
        )
        with store.engine.connect() as conn:
            counts = {(topology, status): int(n) for topology, status, n in conn.execute(stmt)}
    totals: dict[str, dict[str, int]] = defaultdict(lambda: {"trials": 0, "ok": 0})
    for (topology, status), n in counts.items():
        totals[topology]["trials"] += n
        if status == Status.OK.value:
            totals[topology]["ok"] += n
    return [{"topology": short(h)} | counts for h, counts in sorted(totals.items())]


# ---------------------------------------------------------------- the tuning queue


def queue_table(store: Store, status: str | None = None, limit: int = 500) -> list[dict]:
    """Tuning requests (farm.store.queue.requests' order: claimed, queued, failed, done) with their
    age, who asked, which drainer holds the lease and for how long; [] before revision 0004."""
    from farm.store import queue

    if not queue.has_queue(store):
        return []
    now = utcnow()
    return [
        {
            "id": r["id"],
            "status": r["status"],
            "priority": r["priority"],
            "kernel": r["kernel"],
            "problem": r["problem"],
            "topology": short(r["topology_hash"]),
            "age_s": round((now - r["created_at"]).total_seconds()),
            "requested_by": r["requested_by"],
            "drainer": r["claimed_by"] if r["status"] == "claimed" else None,
            "lease_left_s": round((r["lease_expires_at"] - now).total_seconds())
            if r["status"] == "claimed" and r["lease_expires_at"] is not None
            else None,
            "attempts": r["attempts"],
            "why": r["last_error"] or r["note"],
            "campaign": r["campaign_id"],
        }
        for r in queue.requests(store, status, limit)
    ]


def queue_counts(store: Store) -> dict[str, int]:
    """{queued, claimed, done, failed: requests}; zeros before revision 0004."""
    from farm.store import queue

    return queue.status_counts(store) if queue.has_queue(store) else dict.fromkeys(queue.REQUEST_STATUSES, 0)
