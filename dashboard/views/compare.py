"""Compare topologies: the same kernel and problem across GPUs, each with its own winner."""

import altair as alt
import streamlit as st

from farm.dashboard import charts, data
from farm.dashboard.connection import refreshing, store

st.title("Compare topologies")
st.caption(charts.TOPOLOGY_CAPTION)
db = store()
pairs = data.compared_problems(db)
if not pairs:
    st.info("No winners yet: run `farm tune` on each machine against the same database to compare them.")
    st.stop()
kernel, problem = st.selectbox(
    "Kernel and problem", pairs, format_func=lambda p: f"{p[0]} · {p[1]}", key="compare_pair"
)
COLUMNS = {
    "gpu": st.column_config.TextColumn("GPU (topology)", pinned=True),
    "median_us": st.column_config.NumberColumn("median", format="%.2f µs"),
    "vs_fastest": st.column_config.NumberColumn("time vs fastest", format="%.2f×", help="1.00×: the fastest here"),
    "speedup_vs_default": st.column_config.NumberColumn("speedup vs default", format="%.2f×"),
    "schedule": st.column_config.TextColumn("schedule", width="large"),
}


def render() -> None:
    rows = data.topology_comparison(db, kernel, problem)
    if len(rows) == 1:
        st.info(
            f"One topology has tuned {kernel} {problem} so far ({rows[0]['gpu']}): there is nothing to compare yet. "
            "Run `farm tune` on another machine against this database to see them side by side."
        )
    else:
        tooltip = ["gpu:N", alt.Tooltip("median_us:Q", format=".2f"), "schedule:N"]
        charts.time_bars(rows, "gpu", "median_us", "winner's median time (µs, shorter is faster)", tooltip)
    st.dataframe(
        rows, hide_index=True, column_order=("gpu", "median_us", "vs_fastest", "speedup_vs_default", "schedule"),
        column_config=COLUMNS,
    )  # fmt: skip
    st.subheader("Trials per topology")
    st.dataframe(data.trials_by_topology(db, kernel, problem), hide_index=True)


refreshing(db, render)
