"""Compare topologies: the same kernel and problem across GPUs, each with its own winner."""

import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import refreshing, store

st.title("Compare topologies")
db = store()
pairs = data.compared_problems(db)
if not pairs:
    st.info("No winners yet: run `farm tune` on each machine against the same database to compare them.")
    st.stop()
kernel, problem = st.selectbox(
    "Kernel and problem", pairs, format_func=lambda p: f"{p[0]} · {p[1]}", key="compare_pair"
)


def render() -> None:
    rows = data.topology_comparison(db, kernel, problem)
    st.bar_chart(rows, x="gpu", y="median_us")  # device name + hash: same GPU, other driver
    st.dataframe(
        rows,
        hide_index=True,
        column_config={
            "median_us": st.column_config.NumberColumn("median (µs)", format="%.2f"),
            "vs_fastest": st.column_config.NumberColumn("time vs fastest", format="%.2fx"),
            "speedup_vs_default": st.column_config.NumberColumn("speedup vs default", format="%.2fx"),
        },
    )
    if len(rows) == 1:
        st.caption("Only one topology has tuned this problem so far.")
    st.subheader("Trials per topology")
    st.dataframe(data.trials_by_topology(db, kernel, problem), hide_index=True)


refreshing(db, render)
