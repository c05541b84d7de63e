"""Overview: adapters (topologies) with device names, campaigns with status and progress, trials by status."""

import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import refreshing, store
from farm.store.repo import STALE_AFTER_S

st.title("Tuning farm")
db = store()


def render() -> None:
    st.subheader("Topologies")
    st.dataframe(data.topology_table(db), hide_index=True)

    st.subheader("Campaigns")
    campaigns = data.campaign_table(db)
    st.dataframe(
        campaigns,
        hide_index=True,
        column_config={"progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0)},
    )
    if any(row["status"] == "interrupted" for row in campaigns):
        st.caption(
            f"interrupted: its driver stopped (Ctrl-C, or no heartbeat for {STALE_AFTER_S:.0f} s: killed). "
            "Run the same command again to resume it: recorded trials are kept, not re-run."
        )

    st.subheader("Trials by status")
    counts = data.status_counts(db)
    st.bar_chart(counts, x="status", y="trials")
    st.dataframe(counts, hide_index=True)


refreshing(db, render)
