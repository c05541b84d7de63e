"""How the pages draw: the headline metrics, the autotuner's charts (Altair, categorical
axes where the values are choices) and the captions that say what a term means."""

from __future__ import annotations

import altair as alt
import streamlit as st

from farm.dashboard import charts_data
from farm.tuning.tasks import CPU_BUDGET

TOPOLOGY_CAPTION = (
    "A topology is one adapter as the farm fingerprints it: device, driver, backend and limits, hashed. "
    "Winners are per topology, so the same GPU with another driver tunes separately."
)
MARGIN_HELP = (
    "how much slower the runner-up was: runner-up / winner − 1 over the re-measurement's rounds "
    "(its sign-test interval is in the details)"
)
TIE_HELP = (
    "yes: the finalists were within the noise, so the winner was chosen by rule "
    "(the stored winner, else the default, else the simplest)"
)
VENDOR_HELP = "farm bench: the vendor library's kernel-only time / the tuned kernel's (> 1×: faster than the vendor)"
BUDGET_HELP = (
    f"the most schedules tried per problem: --budget (all: every schedule), capped at {CPU_BUDGET} "
    "on a CPU adapter and by what the problem has; without --budget it grows with a large space while the search "
    "improves"
)
TERMS_CAPTION = (
    "**margin**: how much slower the runner-up was than the winner (runner-up / winner − 1). "
    "**tie**: the finalists were within the noise, so the winner was chosen by rule. "
    "**runner-up**: its knobs that differ from the winner's. "
    "**stale**: the kernel's source changed since tuning; not served until re-tuned. "
    "**unknown kernel**: this dashboard doesn't know the kernel (a user kernel: start it with "
    "`farm dashboard --kernels-file FILE`), so it can't tell whether it is stale."
)
STATE_CAPTION = (
    "stale: the kernel's source changed since tuning; unknown kernel: the dashboard doesn't know the kernel "
    "(start it with --kernels-file)"
)
SPEEDUP = alt.Axis(format=".3~r", labelExpr="datum.label + '×'", tickCount=6)


def _show(chart: alt.Chart) -> None:
    st.altair_chart(chart, width="stretch")


def _times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def headline_metrics(h: dict) -> None:
    """Problems tuned, geomean speedup over default, tuned/vendor where benchmarked, coverage, state."""
    cols = st.columns(5)
    cols[0].metric("Problems tuned", h["problems"], help="winners: one per topology, kernel and problem")
    cols[1].metric(
        "Speedup vs default",
        _times(h["geomean_speedup"]),
        help="geometric mean over the winners of the default schedule's time / the winner's",
    )
    cols[2].metric(
        "Tuned vs vendor",
        _times(h["geomean_vendor"]),
        help=VENDOR_HELP + "; run `farm bench` to measure it",
    )
    cols[3].metric("Kernels · GPUs", f"{h['kernels']} · {h['topologies']}", help="GPUs: topologies (adapters)")
    cols[4].metric("Stale · unknown", f"{h['stale']} · {h['unknown']}", help=STATE_CAPTION)
    vendor = (f"; tuned vs vendor over the {h['benchmarked']} benchmarked of them" if h["benchmarked"]
              else "; none benchmarked against the vendor library yet (`farm bench`)")  # fmt: skip
    st.caption(f"Geometric means over {h['problems']} winner(s){vendor}.")


def _bars(
    rows: list[dict], y: str, x: str, title: str, tooltip: list, ratio: bool = True, group: str | None = None
) -> alt.LayerChart:
    """Horizontal bars (labels never cut) with the value at each bar's end; a ratio's axis reads
    in × with a dashed rule at 1×. `group`: a field whose values get a bar each within a label's
    row, told apart by colour (the GPUs of one problem)."""
    base = alt.Chart(alt.Data(values=rows))
    grouped = {}
    if group is not None:
        legend = alt.Legend(orient="bottom", title=None, labelLimit=240, columns=1)
        grouped = {"yOffset": alt.YOffset(f"{group}:N"), "color": alt.Color(f"{group}:N", legend=legend)}
    top = max(1.0 if ratio else 0.0, *(row[x] for row in rows))
    bars = base.mark_bar().encode(
        y=alt.Y(f"{y}:N", title=None, sort=None, axis=alt.Axis(labelLimit=320)),
        # room at the right for the value printed past the longest bar
        x=alt.X(
            f"{x}:Q",
            title=title,
            axis=SPEEDUP if ratio else alt.Axis(format="~s"),
            scale=alt.Scale(domain=[0, 1.15 * top], nice=False),
        ),
        tooltip=tooltip,
        **grouped,
    )
    labels = base.mark_text(align="left", dx=4, fontSize=10).encode(
        y=alt.Y(f"{y}:N", sort=None),
        x=f"{x}:Q",
        text=alt.Text(f"{x}:Q", format=".2f"),
        **({"yOffset": grouped["yOffset"]} if grouped else {}),
    )
    layers = [bars, labels]
    if ratio:
        one = alt.Chart(alt.Data(values=[{"one": 1.0}]))
        layers.append(one.mark_rule(strokeDash=[4, 3], color="gray").encode(x="one:Q"))
    step = 14 if grouped else 26  # a step: the axes don't squeeze the bars (grouped: each GPU's bar)
    return alt.layer(*layers).properties(height=alt.Step(step))


def time_bars(rows: list[dict], y: str, x: str, title: str, tooltip: list) -> None:
    """Horizontal bars of times (µs), the value printed at each bar's end."""
    _show(_bars(rows, y, x, title, tooltip, ratio=False))


def speedup_per_kernel(rows: list[dict]) -> None:
    st.subheader("Speedup per kernel")
    if not rows:
        st.info("No winner has a default time to compare with yet.")
        return
    tooltip = ["kernel:N", alt.Tooltip("geomean_speedup:Q", format=".2f"), alt.Tooltip("lowest:Q", format=".2f"),
               alt.Tooltip("highest:Q", format=".2f"), "problems:Q"]  # fmt: skip
    chart = _bars(rows, "kernel", "geomean_speedup", "speedup vs default, geomean (dashed: 1×)", tooltip)
    _show(chart)
    st.caption("The default schedule's time / the winner's, geometric mean over each kernel's problems.")


def speedup_per_problem(rows: list[dict]) -> None:
    """Each winner's speedup over the default, one bar per problem (kernel · problem)."""
    st.subheader("Speedup per problem")
    rows = [r for r in rows if r["speedup"] is not None]
    shown = [
        {"label": f"{r['kernel']} · {r['problem']}", "gpu": charts_data.gpu_label(r), "speedup": r["speedup"],
         "kernel": r["kernel"], "problem": r["problem"], "device": r["device"]}
        for r in rows
    ]  # fmt: skip
    if not shown:
        st.info("No winner has a default time to compare with yet.")
        return
    tooltip = ["kernel:N", "problem:N", "device:N", alt.Tooltip("speedup:Q", format=".2f")]
    _show(_bars(shown, "label", "speedup", "speedup (dashed: 1×)", tooltip, group=charts_data.gpu_group(rows)))


def vendor_per_problem(rows: list[dict]) -> None:
    st.subheader("Tuned vs vendor library")
    if not rows:
        st.info("No vendor numbers yet: `farm bench` times the vendor library against each winner.")
        return
    tooltip = ["kernel:N", "problem:N", "device:N", alt.Tooltip("vendor_ratio:Q", format=".2f"), "method:N"]
    title = "vendor time / tuned time (> 1×: tuned is faster)"
    _show(
        _bars(rows, "label", "vendor_ratio", title, tooltip, group="gpu" if len({r["gpu"] for r in rows}) > 1 else None)
    )
    st.caption(VENDOR_HELP + ".")


def status_bars(counts: list[dict]) -> None:
    chart = (
        alt.Chart(alt.Data(values=counts))
        .mark_bar()
        .encode(
            y=alt.Y("status:N", sort=None, title=None),
            x=alt.X("trials:Q", title="trials", axis=alt.Axis(tickMinStep=1, format="d")),
            color=alt.condition("datum.status == 'ok'", alt.value("#2e7d32"), alt.value("#9e9e9e")),
            tooltip=["status:N", "trials:Q"],
        )
        .properties(height=alt.Step(24))
    )
    _show(chart)


def convergence(rows: list[dict], default_us: float | None, winner_us: float | None) -> None:
    """Best-so-far time against trial number, each trial's time as a faint point, the default as a dashed rule."""
    base = alt.Chart(alt.Data(values=rows))
    y = alt.Y("median_us:Q", title="median time (µs)", scale=alt.Scale(zero=False, padding=12))
    points = base.mark_circle(size=30, opacity=0.35, color="#9e9e9e").encode(
        x=alt.X(
            "trial:Q",
            title="trial number",
            axis=alt.Axis(tickMinStep=1, format="d"),
            scale=alt.Scale(domain=[0, len(rows) + 1], nice=False),  # room at both ends: no point on an edge
        ),
        y=y,
        tooltip=["trial:Q", alt.Tooltip("median_us:Q", format=".2f", title="µs"), "status:N", "campaign:Q"],
    )
    best = base.mark_line(interpolate="step-after", strokeWidth=2.5).encode(
        x="trial:Q", y=alt.Y("best_us:Q"), tooltip=["trial:Q", alt.Tooltip("best_us:Q", format=".2f", title="best µs")]
    )
    layers = [points, best]
    if default_us is not None:
        rule = alt.Chart(alt.Data(values=[{"default": default_us}]))
        layers.append(rule.mark_rule(strokeDash=[4, 3], color="#c62828").encode(y="default:Q"))
    _show(alt.layer(*layers).properties(height=300))
    parts = ["line: the fastest certified time so far", "points: each trial"]
    if default_us is not None:
        parts.append(f"dashed: the default schedule ({default_us:.2f} µs)")
    if winner_us is not None:
        parts.append(f"the winner's re-measured time is {winner_us:.2f} µs")
    st.caption("; ".join(parts) + ". Failed trials count as trials (they used budget) but have no time.")


UNSET = "unset"  # a schedule that leaves a knob out: the kernel's own value for it


def knob_order(rows: list[dict], knob: str) -> list[str]:
    """The knob's values as categories, in their natural order (numbers by value), UNSET first."""
    values = {row[knob] for row in rows if knob in row}
    ordered = [str(v) for v in sorted(values, key=lambda v: (isinstance(v, str), v))]
    return ([UNSET] if any(knob not in row for row in rows) else []) + ordered


def _unset(rows: list[dict], knobs: tuple) -> str:
    if any(row[k] == UNSET for row in rows for k in knobs):
        return f" {UNSET}: the schedule leaves the knob out (the kernel's own value applies)."
    return ""


def knob_landscape(rows: list[dict], knob: str, second: str | None = None) -> None:
    """One knob: a box per value with every trial as a tick across it. Two knobs: a heat map of the
    fastest time in each cell. Categorical axes: the values are choices, not a continuum."""
    picked = (knob, second) if second else (knob,)
    shown = [row | {k: str(row[k]) if k in row else UNSET for k in picked} for row in rows]
    base = alt.Chart(alt.Data(values=shown))
    x = alt.X(f"{knob}:N", sort=knob_order(rows, knob), title=knob, axis=alt.Axis(labelAngle=0))
    if second:
        cells: dict[tuple[str, str], list[float]] = {}
        for row in shown:
            cells.setdefault((row[knob], row[second]), []).append(row["median_us"])
        values = [
            {knob: a, second: b, "fastest_us": min(times), "trials": len(times)} for (a, b), times in cells.items()
        ]
        middle = (min(v["fastest_us"] for v in values) + max(v["fastest_us"] for v in values)) / 2
        cell = alt.Chart(alt.Data(values=values))
        y2 = alt.Y(f"{second}:N", sort=knob_order(rows, second), title=second)
        heat = cell.mark_rect().encode(
            x=x,
            y=y2,
            color=alt.Color("fastest_us:Q", title="fastest µs", scale=alt.Scale(scheme="viridis", reverse=True)),
            tooltip=[f"{knob}:N", f"{second}:N", alt.Tooltip("fastest_us:Q", format=".2f"), "trials:Q"],
        )
        text = cell.mark_text(fontSize=11).encode(
            x=x,
            y=y2,
            text=alt.Text("fastest_us:Q", format=".1f"),
            # white on the dark (slow) end of the reversed viridis, black on the light end
            color=alt.condition(f"datum.fastest_us > {middle}", alt.value("white"), alt.value("black")),
        )
        _show((heat + text).properties(height=alt.Step(36)))
        st.caption(
            f"Each cell: the fastest certified time (µs) with {knob} and {second} at those values."
            + _unset(shown, picked)
        )
        return
    y = alt.Y("median_us:Q", title="median time (µs)", scale=alt.Scale(zero=False, padding=12))
    box = base.mark_boxplot(extent="min-max", opacity=0.4, size=40).encode(x=x, y=y)
    # a tick per trial across its value's box: aligned with the box at any width (jitter would drift)
    strip = base.mark_tick(size=56, thickness=1.5, opacity=0.7).encode(
        x=x, y=y, tooltip=[f"{knob}:N", alt.Tooltip("median_us:Q", format=".2f", title="µs"), "problem:N"]
    )
    _show((box + strip).properties(height=320))
    if note := _unset(shown, picked):
        st.caption(note.strip())
