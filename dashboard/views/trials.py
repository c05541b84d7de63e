"""Trials: every measured schedule (filtered, newest first, keyset pages), the knob landscape (time by one
selected knob, or a heat map of two) of the current kernel source, failures by category and message pattern."""

import streamlit as st

from farm.dashboard import charts, data
from farm.dashboard.connection import pick, refreshing, store
from farm.schedule import Status

PAGE_SIZE = 100
TRIAL_COLUMNS = {
    "id": st.column_config.NumberColumn("id", pinned=True, width="small"),
    "median_us": st.column_config.NumberColumn("median", format="%.2f µs"),
    "p20_us": st.column_config.NumberColumn("p20", format="%.2f µs", help="20th percentile of the reps"),
    "p80_us": st.column_config.NumberColumn("p80", format="%.2f µs", help="80th percentile of the reps"),
    "max_abs": st.column_config.NumberColumn("max abs err", format="%.1e", help="against the numpy reference"),
    "max_rel": st.column_config.NumberColumn("max rel err", format="%.1e", help="against the numpy reference"),
    "schedule": st.column_config.TextColumn("schedule", width="medium"),
    "message": st.column_config.TextColumn("message", width="medium"),
}

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
    total = data.trial_count(db, **filters)  # once per render
    cursor_key = "trials_cursor_" + "_".join(str(v) for v in filters.values())  # new filters start at the newest
    cursor = st.session_state.get(cursor_key, {})
    page = data.trial_page(db, PAGE_SIZE, **cursor, **filters)
    st.caption(f"{total} trials, newest first")
    st.dataframe(page.rows, hide_index=True, column_config=TRIAL_COLUMNS)
    cols = st.columns(3)
    if cols[0].button("Newest", key="trials_newest", disabled=not cursor):
        st.session_state[cursor_key] = {}
        st.rerun()
    if cols[1].button("Newer", key="trials_newer", disabled=page.newer is None):
        st.session_state[cursor_key] = {"after": page.newer}
        st.rerun()
    if cols[2].button("Older", key="trials_older", disabled=page.older is None):
        st.session_state[cursor_key] = {"before": page.older}
        st.rerun()


def render_knobs() -> None:
    st.subheader("Knob landscape: time by one schedule knob")
    chart_kernel = kernel or (kernels[0] if kernels else None)
    if chart_kernel is None:
        st.info("No trials yet.")
        return
    problems = data.problem_keys(db, chart_kernel)
    cols = st.columns(3)
    problem = cols[0].selectbox(f"Problem ({chart_kernel})", problems, key="trials_problem") if problems else None
    rows = data.knob_timings(db, chart_kernel, problem=problem, topology=topology)
    if not rows:
        st.info(f"No certified {chart_kernel} trials for this selection.")
        return
    knobs = data.knob_names(rows)
    knob = cols[1].selectbox("Knob", knobs, key=f"trials_knob_{chart_kernel}")
    others = [k for k in knobs if k != knob]
    second = cols[2].selectbox(
        "Against a second knob (heat map)", [None, *others], format_func=lambda k: "none" if k is None else k,
        key=f"trials_knob2_{chart_kernel}",
    )  # fmt: skip
    charts.knob_landscape(rows, knob, second)
    st.caption(
        ("Each tick: one trial's median time; a box spans the fastest to the slowest. " if second is None else "")
        + f"From the certified trials of {chart_kernel}'s current source, the newest {len(rows)} (at most "
        f"{data.MAX_CHART_TRIALS}); one problem at a time, since times of different problems don't compare."
    )


def render_failures() -> None:
    st.subheader(f"Failures by category and message (values stripped; top {data.FAILURE_GROUPS})")
    failures = data.failure_summary(db, kernel=kernel, topology=topology, campaign=campaign)
    if not failures:
        st.success("No failed trials for this selection.")
        return
    counts = data.status_counts(db, kernel=kernel, topology=topology, campaign=campaign)
    by_category = [{"category": r["status"], "trials": r["trials"]} for r in counts if r["status"] != Status.OK.value]
    st.bar_chart([r for r in by_category if r["trials"]], x="category", y="trials")
    st.dataframe(failures, hide_index=True)


def render() -> None:
    render_knobs()
    st.subheader("Trials")
    render_table()
    render_failures()


refreshing(db, render)
