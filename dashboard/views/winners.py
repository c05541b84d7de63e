"""Winners: the best certified schedule per (topology, kernel, problem): headline numbers, the
table with time, speedup and how the winner was decided (margin, tie, runner-up), the state
(current, stale, unknown kernel), each winner's search as best-so-far time against trials,
and the full schedules and decision details in an expander."""

import streamlit as st

from farm.dashboard import charts, charts_data, data
from farm.dashboard.connection import pick, refreshing, store

st.title("Winners")
db = store()
left, right = st.columns(2)
with left:
    topology = pick("Topology", data.topology_choices(db), key="winners_topology")
with right:
    kernel = pick("Kernel", {k: k for k in data.kernel_names(db)}, key="winners_kernel")

# The decision first, the schedule last: it is the widest and whole in the details.
MAIN_COLUMNS = ("kernel", "problem", "median_us", "speedup", "margin_pct", "tie", "runner_up", "vendor_ratio",
                "state", "schedule", "device")  # fmt: skip
DETAIL_COLUMNS = ("kernel", "problem", "schedule_full", "median_us", "default_us", "speedup", "margin_pct",
                  "margin_low_pct", "margin_high_pct", "rounds", "vendor_ratio", "vendor_method",
                  "vendor_measured_at", "topology", "campaign", "updated_at")  # fmt: skip


def column_config() -> dict:
    number, text = st.column_config.NumberColumn, st.column_config.TextColumn
    return {
        "kernel": text("kernel", pinned=True),
        "problem": text("problem", pinned=True, width=150),
        "median_us": number("median", format="%.2f µs", help="the winner's re-measured median time", width="small"),
        "default_us": number("default", format="%.2f µs", help="the default schedule's median time"),
        "speedup": number("speedup", format="%.2f×", help="the default schedule's time / the winner's", width="small"),
        "margin_pct": number("margin", format="%+.1f%%", help=charts.MARGIN_HELP, width="small"),
        "margin_low_pct": number("margin low", format="%+.1f%%", help="the margin's sign-test interval, low end"),
        "margin_high_pct": number("margin high", format="%+.1f%%", help="the margin's sign-test interval, high end"),
        "tie": text("tie", help=charts.TIE_HELP),
        "runner_up": text("runner-up", help="the runner-up's knobs that differ from the winner's", width=150),
        "schedule": text(
            "schedule",
            help="the knobs that differ from the kernel's default schedule; the whole schedule is in the details below",
            width="medium",
        ),  # fmt: skip
        "schedule_full": text("schedule"),
        "vendor_ratio": number("vs vendor", format="%.2f×", help=charts.VENDOR_HELP, width="small"),
        "vendor_measured_at": st.column_config.DatetimeColumn("benchmarked", format="YYYY-MM-DD"),
        "state": text("state", help=charts_data.STATE_HELP, width="small"),
        "device": text("device"),
        "updated_at": st.column_config.DatetimeColumn("updated", format="YYYY-MM-DD HH:mm"),
    }


def render_convergence(rows: list[dict]) -> None:
    st.subheader("Convergence")
    # options by identity, not position: a running campaign adds winners between refreshes
    by_id = {(r["topology_hash"], r["kernel"], r["problem"]): r for r in rows}
    labels = {i: f"{r['kernel']} · {r['problem']} · {r['device']} ({r['topology']})" for i, r in by_id.items()}
    key = f"winners_convergence_{kernel}_{topology}"  # new filters, new list: start at its first winner
    chosen = by_id[st.selectbox("Winner", list(labels), format_func=labels.get, key=key)]
    trials = charts_data.convergence(
        db, chosen["topology_hash"], chosen["kernel"], chosen["problem"], chosen["source_hash"]
    )
    if not trials:
        st.info("No trials of this winner's kernel source are stored (its trials were tuned on another source).")
        return
    charts.convergence(trials, chosen["default_us"], chosen["median_us"])


def render() -> None:
    rows = charts_data.winner_rows(db, kernel=kernel, topology=topology)
    if not rows:
        st.info(
            "No winners for this selection yet: a campaign records one per kernel and problem once a schedule certifies"
        )
        return
    charts.headline_metrics(charts_data.headline(rows))
    left, right = st.columns(2)
    with left:
        charts.speedup_per_problem(rows)
    with right:
        render_convergence(rows)
    config = column_config()
    st.dataframe(rows, hide_index=True, column_order=MAIN_COLUMNS, column_config=config, placeholder="–")
    st.caption(charts.TERMS_CAPTION)
    stale = sum(row["state"] == charts_data.STALE for row in rows)
    if stale:
        st.warning(
            f"{stale} winner(s) are stale: their kernel source changed since they were tuned. Re-run `farm tune`."
        )
    unknown = sorted({row["kernel"] for row in rows if row["state"] == charts_data.UNKNOWN})
    if unknown:
        st.info(
            f"Unknown to this dashboard: {', '.join(unknown)}. Start it with `farm dashboard --kernels-file FILE` "
            "(the file that defines them) to see whether their winners are current or stale."
        )
    with st.expander("Full schedules and decision details"):
        st.dataframe(rows, hide_index=True, column_order=DETAIL_COLUMNS, column_config=config, placeholder="–")


refreshing(db, render)
