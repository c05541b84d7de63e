"""Trials: every measured schedule (filtered, paginated), time vs each schedule knob, failures by category."""

import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import pick, refreshing, store
from farm.schedule import Status

PAGE_SIZE = 100

st.title("Trials")
db = store()
kernels = data.kernel_names(db)
cols = st.columns(4)
with cols[0]:
    kernel = pick("Kernel", {k: k for k in kernels}, key="trials_kernel")
with cols[1]:
    topology = pick("Topology", data.topology_choices(db), key="trials_topology")
with cols[2]:
    status = pick("Status", {s.value: s.value for s in Status}, key="trials_status")
with cols[3]:
    campaign = pick(
        "Campaign", {c["id"]: f"#{c['id']} ({c['status']})" for c in data.campaign_table(db)}, key="trials_campaign"
    )


def render_table() -> None:
    filters = {"kernel": kernel, "topology": topology, "status": status, "campaign": campaign}
    total = data.trial_count(db, **filters)
    pages = max(1, -(-total // PAGE_SIZE))
    page_key = "trials_page_" + "_".join(str(v) for v in filters.values())  # new filters start at page 1
    page = st.number_input(f"Page (of {pages}; {total} trials)", min_value=1, max_value=pages, key=page_key)
    rows, _ = data.trial_page(db, int(page), PAGE_SIZE, **filters)
    st.dataframe(rows, hide_index=True)


def render_knobs() -> None:
    st.subheader("Time vs schedule knob")
    chart_kernel = kernel or (kernels[0] if kernels else None)
    if chart_kernel is None:
        st.info("No trials yet.")
        return
    problems = data.problem_keys(db, chart_kernel)
    problem = st.selectbox(f"Problem ({chart_kernel})", problems, key="trials_problem") if problems else None
    rows = data.knob_timings(db, chart_kernel, problem=problem, topology=topology)
    if not rows:
        st.info(f"No certified {chart_kernel} trials for this selection.")
        return
    for knob in data.knob_names(rows):
        st.caption(f"median µs vs {knob}")
        st.scatter_chart(rows, x=knob, y="median_us")


def render_failures() -> None:
    st.subheader("Failures by category")
    failures = data.failure_summary(db, kernel=kernel, topology=topology, campaign=campaign)
    if not failures:
        st.success("No failed trials for this selection.")
        return
    by_category: dict[str, int] = {}
    for row in failures:
        by_category[row["category"]] = by_category.get(row["category"], 0) + row["trials"]
    st.bar_chart([{"category": c, "trials": n} for c, n in by_category.items()], x="category", y="trials")
    st.dataframe(failures, hide_index=True)


def render() -> None:
    render_table()
    render_knobs()
    render_failures()


refreshing(db, render)
