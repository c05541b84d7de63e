"""The recurrent sweep's report in every layout it is read in: the Markdown table (printed
too), the summary and steps CSVs and the JSON of the reference sweep (its raw_wgsl_*
columns are our fused_*, its core_* our runtime_*; numbers in its Rust-style exponent
format), plus the SQL record and the Parquet datasets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from farm import paths
from farm.recurrent.cases import CASE_FIELDS, SweepConfig

SUMMARY_HEADER = (
    "case,embd,batch,heads,value_heads,time,latent,warmup,repetitions,extra_repetitions_applied,"
    "sampled_gpu_utilization_pct,baseline_ms,fused_ms,runtime_ms,fused_speedup_x,runtime_speedup_x,"
    "full_context_max_abs,full_context_mean_abs,full_context_rmse,full_context_max_rel,"
    "final_rho_max_abs,final_rho_mean_abs,final_rho_rmse,final_rho_max_rel,"
    "step_context_max_abs,step_context_rmse_max,step_rho_max_abs,step_rho_rmse_max,"
    "strict_consistency_pass,runtime_mode"
)
STEPS_HEADER = (
    "case,embd,step,context_max_abs,context_mean_abs,context_rmse,context_max_rel,"
    "rho_max_abs,rho_mean_abs,rho_rmse,rho_max_rel"
)
METRIC_KEYS = ("max_abs", "mean_abs", "rmse", "max_rel")


def rust_exp(value: float | None, digits: int) -> str:
    """Rust's `{:.Ne}` (e.g. 1.53e-5, no exponent padding), which the reference layouts use."""
    if value is None:
        return ""
    if not np.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "NaN")
    mantissa, exponent = f"{value:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _fixed(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def format_markdown(report: dict) -> str:
    cases = report["cases"]
    limits = report["strict_thresholds"]
    passed = sum(1 for c in cases if c["step_consistency"]["strict_pass"])
    lines = [
        report["benchmark"],
        f"adapter: {report['adapter']}",
        f"warmup: {report['warmup']}, repetitions: {report['repetitions']}, extra_repetitions: "
        f"{report['extra_repetitions']}, heavy_min_embd: {report['heavy_min_embd']}, gpu_util_threshold_pct: "
        f"{report['gpu_util_threshold']:.1f}",
        f"runtime_path_distinct: {str(report['runtime_path_distinct']).lower()}",
        f"runtime_path_description: {report['runtime_path_description']}",
        "strict_consistency_thresholds: "
        + ", ".join(
            f"{label}<={rust_exp(limits[key], 2)}"
            for label, key in (
                ("context_max_abs", "context_max_abs"),
                ("context_rmse", "context_rmse_max"),
                ("rho_max_abs", "rho_max_abs"),
                ("rho_rmse", "rho_rmse_max"),
            )
        ),
        f"strict_consistency_pass_cases: {passed}/{len(cases)}",
        f"timing: {report['timing']}",
        "fused_schedules: " + "; ".join(sorted({f"{c['fused_schedule']} ({c['schedule_source']})" for c in cases})),
        "",
        "| case | embd | baseline_ms | fused_ms | runtime_ms | fused_speedup_x | runtime_speedup_x | "
        "step_ctx_max_abs | step_rho_max_abs | strict_pass | reps | gpu_util_pct | runtime_mode |",
        "| :-- | --: | --: | --: | --: | --: | --: | --: | --: | :--: | --: | --: | :-- |",
    ]
    lines += [case_row(c) for c in cases]
    before, after = report["memory_before_bytes"], report["memory_after_bytes"]
    device_ms = [f"{c['case']['name']}={_fixed(c.get('runtime_device_ms'), 3) or 'n/a'}" for c in cases]
    lines += [
        "",
        "runtime_device_ms (the runtime on DeviceArrays, a sync each call): " + ", ".join(device_ms),
        f"memory_before_bytes: reserved={before['reserved']} in_use={before['in_use']}",
        f"memory_after_bytes: reserved={after['reserved']} in_use={after['in_use']}",
    ]
    return "\n".join(lines) + "\n"


def case_row(c: dict) -> str:
    """One case's row of the Markdown table; `reps` adds the op-by-op baseline's where it
    took fewer (baseline_counts holds a long case's baseline to ~64Ki dispatches)."""
    util = c["sampled_gpu_utilization_pct"]
    reps, base = c["repetitions"], c.get("baseline_repetitions")
    reps_cell = f"{reps}" if base in (None, reps) else f"{reps} (baseline {base})"
    step = c["step_consistency"]
    return (
        f"| {c['case']['name']} | {c['case']['embd']} | {c['baseline_ms']:.3f} | {c['fused_ms']:.3f} | "
        f"{_fixed(c['runtime_ms'], 3) or 'n/a'} | {_fixed(c['fused_speedup_x'], 2) or 'n/a'} | "
        f"{_fixed(c['runtime_speedup_x'], 2) or 'n/a'} | {rust_exp(step['context_max_abs'], 2)} | "
        f"{rust_exp(step['rho_max_abs'], 2)} | {'pass' if step['strict_pass'] else 'fail'} | "
        f"{reps_cell} | {'n/a' if util is None else f'{util:.1f}'} | {c['runtime_mode']} |"
    )


def progress_line(done: int, total: int, c: dict) -> str:
    """What the sweep prints (stderr) as each case lands: its row, then where its seconds went."""
    phases = c.get("phase_s") or {}
    spent = ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items())
    return f"[{done}/{total}] {case_row(c)} seconds: {spent}, total {sum(phases.values()):.2f}"


def format_summary_csv(report: dict) -> str:
    rows = [SUMMARY_HEADER]
    for c in report["cases"]:
        case, util = c["case"], c["sampled_gpu_utilization_pct"]
        metrics = [c["full_context_error"][k] for k in METRIC_KEYS] + [c["final_rho_error"][k] for k in METRIC_KEYS]
        step = c["step_consistency"]
        metrics += [step["context_max_abs"], step["context_rmse_max"], step["rho_max_abs"], step["rho_rmse_max"]]
        fields = [
            case["name"],
            case["embd"],
            *(case[f] for f in CASE_FIELDS[:-1]),
            c["warmup"],
            c["repetitions"],
            c["extra_repetitions_applied"],
            _fixed(util, 3),
            _fixed(c["baseline_ms"], 6),
            _fixed(c["fused_ms"], 6),
            _fixed(c["runtime_ms"], 6),
            _fixed(c["fused_speedup_x"], 6),
            _fixed(c["runtime_speedup_x"], 6),
            *(rust_exp(m, 8) for m in metrics),
            str(step["strict_pass"]).lower(),
            c["runtime_mode"],
        ]
        rows.append(",".join(str(f) for f in fields))
    return "\n".join(rows) + "\n"


def format_steps_csv(report: dict) -> str:
    rows = [STEPS_HEADER]
    names = [f"{part}_{k}" for part in ("context", "rho") for k in METRIC_KEYS]
    for c in report["cases"]:
        for step in c["step_metrics"]:
            values = ",".join(rust_exp(step[n], 8) for n in names)
            rows.append(f"{c['case']['name']},{c['case']['embd']},{step['step']},{values}")
    return "\n".join(rows) + "\n"


def write_artifacts(config: SweepConfig, report: dict, markdown: str) -> list[str]:
    """Write whichever artifact paths are set; returns the paths written."""
    contents = {
        "markdown_path": (markdown, "markdown artifact"),
        "csv_path": (format_summary_csv(report), "csv artifact"),
        "steps_csv_path": (format_steps_csv(report), "step csv artifact"),
        "json_path": (json.dumps(report, indent=2), "json artifact"),
    }
    written = []
    for key, (text, label) in contents.items():
        path = getattr(config, key)
        if path is None:
            continue
        paths.write_text_atomically(path, text, label)  # whole or not at all; a FIFO or device refused
        print(f"wrote {label} to {path}", file=sys.stderr)
        written.append(path)
    return written


def record_report(config: SweepConfig, report: dict) -> int | None:
    """Record the sweep in SQL (farm.store.record_sweep) and as Parquet (cases and steps,
    partitioned by topology) under `<output dir>/parquet`, or `$FARM_HOME/artifacts` without
    an output dir; returns the SQL run id (None for a report without a topology)."""
    from farm import store
    from farm.gpu import HardwareProfile
    from farm.store import parquet as artifacts

    if not report["topology_hash"]:
        return None
    rows = sql_report(report)
    out = Path(config.output_dir) / "parquet" if config.output_dir else store.farm_home() / "artifacts"
    paths = artifacts.write_sweep_parquet(out, report["topology_hash"], rows["cases"], rows["steps"])
    print(f"wrote sweep parquet to {paths['cases'].parent.parent.parent}", file=sys.stderr)
    opened = store.open_store(config.db)
    store.upsert_topology(opened, HardwareProfile.from_dict(report["topology_profile"]))
    return store.record_sweep(opened, report["topology_hash"], rows)


def sql_report(report: dict) -> dict:
    """The report in farm.store.record_sweep's layout (flat cases, top-level steps)."""
    cases, steps = [], []
    for c in report["cases"]:
        case = c["case"]
        row = {
            "name": case["name"],
            "B": case["batch"],
            "H": case["heads"],
            "VH": case["value_heads"],
            "T": case["time"],
            "L": case["latent"],
            "E": case["embd"],
            "baseline_ms": c["baseline_ms"],
            "fused_ms": c["fused_ms"],
            "runtime_ms": c["runtime_ms"],
            "speedup": c["fused_speedup_x"],
            "runtime_speedup": c["runtime_speedup_x"],
            "strict_pass": c["step_consistency"]["strict_pass"],
            "reps": c["repetitions"],
            "gpu_util": c["sampled_gpu_utilization_pct"],
        }
        for part, key in (("context", "full_context_error"), ("rho", "final_rho_error")):
            row |= {f"{part}_{m}": c[key][m] for m in METRIC_KEYS}
            row |= {
                f"step_{part}_{m}": max((s[f"{part}_{m}"] for s in c["step_metrics"]), default=0.0) for m in METRIC_KEYS
            }
        cases.append(row)
        steps += [{"case": case["name"]} | s for s in c["step_metrics"]]
    config = {
        k: report[k]
        for k in (
            "warmup",
            "repetitions",
            "extra_repetitions",
            "heavy_min_embd",
            "gpu_util_threshold",
            "seed",
            "runtime_path_distinct",
        )
    }
    return {
        "adapter": report["adapter"],
        "config": config,
        "memory_before": report["memory_before_bytes"],
        "memory_after": report["memory_after_bytes"],
        "cases": cases,
        "steps": steps,
    }
