"""Queue: tuning requests (farm request, runtime misses) and the drainers (farm serve) holding their leases."""

import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import pick, refreshing, store

st.title("Tuning queue")
db = store()
status = pick("Status", {s: s for s in data.queue_counts(db)}, key="queue_status")


def render() -> None:
    counts = data.queue_counts(db)
    for column, (name, count) in zip(st.columns(len(counts)), counts.items(), strict=True):
        column.metric(name, count)
    rows = data.queue_table(db, status)
    if not rows:
        st.info("No requests here: `farm request KERNEL --sizes SPEC` queues one, `ForgeRuntime(request_tuning=True)` "
                "queues its misses, and `farm serve` drains the queue.")  # fmt: skip
        return
    st.dataframe(
        rows,
        hide_index=True,
        column_config={
            "age_s": st.column_config.NumberColumn("age (s)"),
            "drainer": st.column_config.TextColumn("lease held by", help="the farm serve process tuning it"),
            "lease_left_s": st.column_config.NumberColumn("lease left (s)", help="renewed while it tunes"),
            "why": st.column_config.TextColumn("why", help="the last error, or why it is still queued"),
        },
    )


refreshing(db, render)
