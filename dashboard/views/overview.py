"""Overview: adapters (topologies) with device names, campaigns with status and progress, trials by status."""

import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import refreshing, store

st.title("Tuning farm")
db = store()


def render() -> None:
    st.subheader("Topologies")
    st.dataframe(data.topology_table(db), hide_index=True)

    st.subheader("Campaigns")
    st.dataframe(
        data.campaign_table(db),
        hide_index=True,
        column_config={"progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0)},
    )

    st.subheader("Trials by status")
    counts = data.status_counts(db)
    st.bar_chart(counts, x="status", y="trials")
    st.dataframe(counts, hide_index=True)


refreshing(db, render)
