"""Overview: the headline numbers, speedup per kernel and against the vendor library, then
adapters (topologies), campaigns with status, budget and progress, and trials by status."""

import streamlit as st

from farm.dashboard import charts, charts_data, data
from farm.dashboard.connection import refreshing, store
from farm.store.repo import STALE_AFTER_S

st.title("Tuning farm")
db = store()
CAMPAIGN_COLUMNS = ("id", "status", "progress", "done", "total", "failures", "budget", "strategy", "command", "host",
                    "started_at", "finished_at", "last_seen")  # fmt: skip


def render() -> None:
    winners = charts_data.winner_rows(db)
    charts.headline_metrics(charts_data.headline(winners))
    if winners:
        left, right = st.columns(2)
        with left:
            charts.speedup_per_kernel(charts_data.speedup_per_kernel(winners))
        with right:
            charts.vendor_per_problem(charts_data.vendor_rows(winners))

    st.subheader("Topologies")
    st.caption(charts.TOPOLOGY_CAPTION)
    st.dataframe(
        data.topology_table(db),
        hide_index=True,
        column_config={"first_seen": st.column_config.DatetimeColumn("first seen", format="YYYY-MM-DD HH:mm")},
    )

    st.subheader("Campaigns")
    campaigns = data.campaign_table(db)
    budgets = charts_data.effective_budgets(db, campaigns)
    shown = [row | {"budget": budgets.get(row["id"], row["budget"])} for row in campaigns]
    st.dataframe(
        shown,
        hide_index=True,
        column_order=CAMPAIGN_COLUMNS,
        column_config={
            "id": st.column_config.NumberColumn("id", pinned=True, width="small"),
            "status": st.column_config.TextColumn("status", pinned=True, width="small"),
            # green: a finished campaign is good news, not the theme's red
            "progress": st.column_config.ProgressColumn(
                "progress", min_value=0.0, max_value=1.0, format="percent", color="green", width="small"
            ),
            "done": st.column_config.NumberColumn("trials done", width="small"),
            "total": st.column_config.NumberColumn("planned", width="small"),
            "budget": st.column_config.TextColumn("budget / problem", help=charts.BUDGET_HELP),
            "command": st.column_config.TextColumn("command", width="medium"),
            "started_at": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm:ss"),
            "finished_at": st.column_config.DatetimeColumn("finished", format="YYYY-MM-DD HH:mm:ss"),
            "last_seen": st.column_config.DatetimeColumn("last seen", format="YYYY-MM-DD HH:mm:ss"),
        },
    )
    if any(row["status"] == "interrupted" for row in campaigns):
        st.caption(
            f"interrupted: its driver stopped (Ctrl-C, or no heartbeat for {STALE_AFTER_S:.0f} s: killed). "
            "Run the same command again to resume it: recorded trials are kept, not re-run."
        )

    st.subheader("Trials by status")
    counts = data.status_counts(db)
    left, right = st.columns([2, 1])
    with left:
        charts.status_bars(counts)
    with right:
        st.dataframe(counts, hide_index=True)


refreshing(db, render)
