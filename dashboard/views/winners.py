"""Winners: the best certified schedule per (topology, kernel, problem), with speedup and stale flag."""

import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import pick, refreshing, store

st.title("Winners")
db = store()
left, right = st.columns(2)
with left:
    topology = pick("Topology", data.topology_choices(db), key="winners_topology")
with right:
    kernel = pick("Kernel", {k: k for k in data.kernel_names(db)}, key="winners_kernel")


def render() -> None:
    rows = data.winner_table(db, kernel=kernel, topology=topology)
    if not rows:
        st.info(
            "No winners for this selection yet: a campaign records one per kernel and problem once a schedule certifies"
        )
        return
    st.dataframe(
        rows,
        hide_index=True,
        column_config={
            "median_us": st.column_config.NumberColumn("median (µs)", format="%.2f"),
            "default_median_us": st.column_config.NumberColumn("default (µs)", format="%.2f"),
            "speedup": st.column_config.NumberColumn("speedup vs default", format="%.2fx"),
            "stale": st.column_config.CheckboxColumn("stale", help="kernel source changed since tuning: not served"),
        },
    )
    stale = sum(row["stale"] for row in rows)
    if stale:
        st.warning(
            f"{stale} winner(s) are stale: their kernel source changed since they were tuned. Re-run `farm tune`."
        )


refreshing(db, render)
