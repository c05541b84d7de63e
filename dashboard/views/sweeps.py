"""Recurrent sweeps: speedup vs E, per-step error, strict pass, and the Markdown artifact's table."""

import altair as alt
import streamlit as st

from farm.dashboard import data
from farm.dashboard.connection import store

st.title("Recurrent sweeps")
db = store()
number = st.column_config.NumberColumn
# The artifact's column names stay (the cases table mirrors recurrent_scaling.md); only the numbers are formatted.
COLUMNS = {
    "baseline_ms": number(format="%.3f", help="ms, op-by-op: one kernel per operation"),
    "fused_ms": number(format="%.3f", help="ms, the fused recurrent kernel"),
    "runtime_ms": number(format="%.3f", help="ms, through ForgeRuntime"),
    "fused_speedup_x": number(format="%.2f×", help="baseline / fused"),
    "runtime_speedup_x": number(format="%.2f×", help="baseline / runtime"),
    "speedup": number(format="%.2f×"),
    "runtime_speedup": number(format="%.2f×"),
    "gpu_util_pct": number(format="%.0f%%"),
    **{name: number(format="%.1e") for name in ("step_ctx_max_abs", "step_rho_max_abs", *data.STEP_METRICS)},
    "started_at": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm"),
}
runs = data.sweep_table(db)
if not runs:
    st.info("No recurrent sweep recorded yet. Run one with `farm sweep recurrent` (add `--allow-cpu` without a GPU).")
    st.stop()

st.dataframe(
    runs,
    hide_index=True,
    column_order=("run", "started_at", "device", "topology", "cases", "strict_passed", "adapter"),  # adapter: widest
    column_config=COLUMNS,
)
labels = {r["run"]: f"run {r['run']} · {r['device']} · {r['started_at']:%Y-%m-%d %H:%M}" for r in runs}
run_id = st.selectbox("Sweep run", list(labels), format_func=labels.get, key="sweep_run")

st.subheader("Speedup vs E (fused over op-by-op baseline)")
st.line_chart(data.sweep_speedups(db, run_id), x="E", y=["speedup", "runtime_speedup"], y_label="speedup (×)")

st.subheader("Strict pass")
st.dataframe(data.sweep_strict_table(db, run_id), hide_index=True, column_config=COLUMNS)

st.subheader("Per-step error (stepwise consistency)")
cases = [row["case"] for row in data.sweep_case_table(db, run_id)]
case = st.selectbox("Case", cases, key="sweep_case")
steps = data.sweep_step_errors(db, run_id, case)
if steps:
    long = [{"step": r["step"], "metric": m, "error": r[m]} for r in steps for m in data.STEP_METRICS if r[m]]
    chart = (
        alt.Chart(alt.Data(values=long))
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", axis=alt.Axis(tickMinStep=1, format="d")),
            y=alt.Y("error:Q", scale=alt.Scale(type="log")),
            color="metric:N",
        )
    )
    st.altair_chart(chart)
    st.dataframe(steps, hide_index=True, column_config=COLUMNS)
else:
    st.info(f"No per-step metrics recorded for {case}.")

st.subheader("Cases (the columns of recurrent_scaling.md)")
st.dataframe(data.sweep_case_table(db, run_id), hide_index=True, column_config=COLUMNS)
