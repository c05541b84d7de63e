"""Recurrent sweeps: speedup vs E, per-step error, strict pass, and the Markdown artifact's table."""

import altair as alt
import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import store

st.title("Recurrent sweeps")
db = store()
runs = data.sweep_table(db)
if not runs:
    st.info("No recurrent sweep recorded yet. Run one with `farm sweep recurrent` (add `--allow-cpu` without a GPU).")
    st.stop()

st.dataframe(runs, hide_index=True)
labels = {r["run"]: f"run {r['run']} · {r['device']} · {r['started_at']:%Y-%m-%d %H:%M}" for r in runs}
run_id = st.selectbox("Sweep run", list(labels), format_func=labels.get, key="sweep_run")

st.subheader("Speedup vs E (fused over op-by-op baseline)")
st.line_chart(data.sweep_speedups(db, run_id), x="E", y=["speedup", "runtime_speedup"])

st.subheader("Strict pass")
st.dataframe(data.sweep_strict_table(db, run_id), hide_index=True)

st.subheader("Per-step error (stepwise consistency)")
cases = [row["case"] for row in data.sweep_case_table(db, run_id)]
case = st.selectbox("Case", cases, key="sweep_case")
steps = data.sweep_step_errors(db, run_id, case)
if steps:
    long = [{"step": r["step"], "metric": m, "error": r[m]} for r in steps for m in data.STEP_METRICS if r[m]]
    chart = (
        alt.Chart(alt.Data(values=long))
        .mark_line(point=True)
        .encode(x="step:Q", y=alt.Y("error:Q", scale=alt.Scale(type="log")), color="metric:N")
    )
    st.altair_chart(chart)
    st.dataframe(steps, hide_index=True)
else:
    st.info(f"No per-step metrics recorded for {case}.")

st.subheader("Cases (the columns of recurrent_scaling.md)")
st.dataframe(data.sweep_case_table(db, run_id), hide_index=True)
