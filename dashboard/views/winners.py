"""Winners: the best certified schedule per (topology, kernel, problem), with speedup, how it was
decided (margin, tie, runner-up), its speed against the vendor library and the stale flag."""

import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import pick, refreshing, store

MARGIN_HELP = "runner-up / winner - 1 over the re-measurement's rounds, with its sign-test interval"
TIE_HELP = "chosen among finalists within the noise: the stored winner, else the default, else the simplest"
VENDOR_HELP = "farm bench: the vendor's kernel-only time / the tuned kernel's (> 1: faster than the vendor library)"

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
            "margin": st.column_config.TextColumn("margin", help=MARGIN_HELP),
            "tie": st.column_config.TextColumn("tie", help=TIE_HELP),
            "runner_up": st.column_config.TextColumn("runner-up", help="its knobs that differ from the winner"),
            "vs_vendor": st.column_config.TextColumn("vs vendor", help=VENDOR_HELP),
            "stale": st.column_config.CheckboxColumn("stale", help="kernel source changed since tuning: not served"),
        },
    )
    stale = sum(row["stale"] for row in rows)
    if stale:
        st.warning(
            f"{stale} winner(s) are stale: their kernel source changed since they were tuned. Re-run `farm tune`."
        )


refreshing(db, render)
