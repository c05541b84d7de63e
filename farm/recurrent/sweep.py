"""The recurrent-attention scaling sweep (`farm sweep recurrent`).

Per case: time the op-by-op baseline, the fused kernel and the runtime path (all from
`farm.recurrent`), compare full outputs and stepwise states, then write Markdown, CSVs
and JSON in the reference sweep's layouts and record the run in SQL and Parquet (both in
`farm.recurrent.report`). `run_case(device, case, config)` is the
unit farm.tuning.workers fans out; `run_sweep(config)` drives the whole sweep.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from farm import catalog
from farm.catalog.recurrent import sweep_decay
from farm.gpu import Device, nvidia, refuse_cpu
from farm.gpu.device import REPORT_WARM_MAX_S, REPORT_WARM_S
from farm.oracle.compare import error_metrics
from farm.paths import file_target
from farm.recurrent.cases import SweepCase, SweepConfig, default_cases, long_cases, merge_cases
from farm.recurrent.paths import BaselinePlan, fused_calls, prepare_fused, recurrent_problem
from farm.recurrent.report import format_markdown, progress_line, record_report, write_artifacts
from farm.recurrent.stepwise import STRICT_THRESHOLDS, stepwise_consistency, strict_summary
from farm.runtime.forge import ForgeRuntime
from farm.schedule import Schedule

__all__ = [
    "SweepCase",
    "SweepConfig",
    "baseline_counts",
    "build_report",
    "default_cases",
    "merge_cases",
    "run_case",
    "run_sweep",
    "sweep_config_from_args",
]

BENCHMARK = "farm recurrent scaling sweep"
CASE_TIMEOUT_S = 600.0
# The op-by-op baseline's timed dispatches, at most (while >= MIN_BASELINE_REPS reps): a rep is
# T·8 dispatches, each encoded by the host, so a long case's reps would take most of its time.
BASELINE_DISPATCHES = 1 << 16
MIN_BASELINE_REPS = 3


def case_inputs(case: SweepCase, seed: int) -> dict[str, np.ndarray]:
    """query, value ~ N(0,1) from the seed; rho zeros; decay[h] = 0.85 + 0.1·h/H."""
    rng = catalog.rng_for(seed, "recurrent_sweep", case.name)
    return {
        "query": rng.standard_normal((case.batch, case.heads, case.time, case.latent), dtype=np.float32),
        "value": rng.standard_normal((case.batch, case.value_heads, case.time, case.embd), dtype=np.float32),
        "rho": np.zeros((case.batch, case.heads, case.latent, case.embd), np.float32),
        "decay": sweep_decay(case.heads),
    }


def _repetitions(case: SweepCase, config: SweepConfig, util: float | None) -> int:
    heavy = case.embd >= config.heavy_min_embd and util is not None and util <= config.gpu_util_threshold
    return config.extra_repetitions if heavy and config.extra_repetitions > 0 else 0


def baseline_counts(dispatches: int, warmup: int, reps: int) -> tuple[int, int]:
    """(warm-up, reps) for an op-by-op baseline of `dispatches` a rep: the sweep's, unless its
    reps would time more than BASELINE_DISPATCHES; then one warm-up submission (the time-based
    warm-up rounds still run) and as many reps as fit, but at least MIN_BASELINE_REPS, which
    may go past it: T=4096 times 3 reps of 32,768 dispatches (98,304) where it had 7; T=1024's
    7 (57,344) fit, its 10 with the sweep's extra repetitions become 8."""
    if dispatches * reps <= BASELINE_DISPATCHES:
        return warmup, reps
    return 1, min(reps, max(MIN_BASELINE_REPS, BASELINE_DISPATCHES // dispatches))


def _time_paths(
    device: Device, schedule: Schedule, inputs: dict, warmup: int, reps: int, phases: dict | None = None
) -> dict:
    """The baseline and the fused kernel timed and compared; `phases` gets the host seconds of each."""
    phases = {} if phases is None else phases
    start = time.perf_counter()
    with BaselinePlan.build(device, **inputs) as plan:
        base_warmup, base_reps = baseline_counts(len(plan.calls), warmup, reps)
        baseline = plan.time(base_warmup, base_reps)
        base_ctx, base_rho = plan.outputs()
    phases["baseline"] = time.perf_counter() - start
    start = time.perf_counter()
    with prepare_fused(device, schedule, **inputs) as prepared:
        # The baseline just before is host-bound (hundreds of tiny dispatches): the GPU ran
        # at low clocks for a "long, recent" timing, so the warm-up rules skipped their
        # rounds and the fused kernel read several times slow. Keep it busy first,
        # forced: the same rules took the baseline for a hot GPU and skipped this too; then the
        # heater while the clock canary reads slow (REPORT_WARM_S, REPORT_WARM_MAX_S: as farm bench's rows).
        warm_s = device.warm_until_clocks(fused_calls(device, prepared), REPORT_WARM_S, REPORT_WARM_MAX_S)
        fused = device.time_calls(fused_calls(device, prepared), warmup, reps)
        clock = device.clock_ratio()  # the canary right after, as farm bench's clock column
        out = prepared.outputs()
    phases["fused"] = time.perf_counter() - start
    return {
        "baseline": baseline,
        "baseline_warmup": base_warmup,
        "fused": fused,
        "fused_warm_s": warm_s,
        "fused_clock": clock,
        "full_context_error": error_metrics(out["context"], base_ctx),
        "final_rho_error": error_metrics(out["rho"], base_rho),
    }


def _time_runtime(rt: ForgeRuntime, inputs: dict, warmup: int, reps: int) -> tuple[float, float, str]:
    """Median host wall ms per call of `rt.recurrent_attention` (a ForgeRuntime on the same
    device), both ways a caller can use it: from numpy (uploads and readback included) and
    on DeviceArrays uploaded once (`rt.synchronize()` each call)."""
    on_device = {name: rt.asarray(array) for name, array in inputs.items()}

    def numpy_call():
        rt.recurrent_attention(**inputs)

    def device_call():
        rt.recurrent_attention(**on_device)
        rt.synchronize()

    medians = []
    for call in (numpy_call, device_call):
        for _ in range(warmup):
            call()
        samples = []
        for _ in range(reps):
            start = time.perf_counter_ns()
            call()
            samples.append((time.perf_counter_ns() - start) / 1e6)
        medians.append(float(np.median(samples)))
    for array in on_device.values():
        array.release()
    return medians[0], medians[1], "measured_distinct"


def run_case(device: Device, case: SweepCase, config: SweepConfig) -> dict:
    """One sweep case on `device` (pure w.r.t. the device: everything it allocates is
    released). Returns the case's JSON record (the reference layout plus our extras)."""
    refuse_cpu(device.profile, config.allow_cpu, "run the recurrent sweep")
    print(f"sweep: {case.name} (B{case.batch} H{case.heads} VH{case.value_heads} T{case.time} "
          f"L{case.latent} E{case.embd}) started", file=sys.stderr, flush=True)  # fmt: skip
    memory_before = dict(device.memory())
    start = time.perf_counter()
    inputs = case_inputs(case, config.seed)
    phases = {"inputs": time.perf_counter() - start}
    problem = recurrent_problem(inputs["query"], inputs["value"], inputs["rho"], inputs["decay"])
    # The fused path uses the runtime's schedule (tuned winner for this topology, else the
    # nearest tuned problem, else the default), so the fused and runtime columns agree.
    rt = ForgeRuntime(db=config.db, device=device)
    schedule, source = rt.tuned_schedule("recurrent", problem)
    source = f"runtime:{source}"
    util = nvidia.gpu_utilization()
    extra = _repetitions(case, config, util)
    reps = config.repetitions + extra
    timed = _time_paths(device, schedule, inputs, config.warmup, reps, phases)
    start = time.perf_counter()
    runtime_ms, runtime_device_ms, runtime_mode = _time_runtime(rt, inputs, config.warmup, reps)
    phases["runtime"] = time.perf_counter() - start
    start = time.perf_counter()
    steps = stepwise_consistency(device, schedule, **inputs, runtime=rt)
    phases["stepwise"] = time.perf_counter() - start
    rt.close()
    baseline_ms, fused_ms = timed["baseline"].median_ns / 1e6, timed["fused"].median_ns / 1e6
    return {
        "case": case.as_dict(),
        "warmup": config.warmup,
        "repetitions": reps,
        "extra_repetitions_applied": extra,
        "baseline_warmup": timed["baseline_warmup"],  # the sweep's, but see baseline_counts
        "baseline_repetitions": timed["baseline"].reps,  # what the baseline's timing took
        "sampled_gpu_utilization_pct": util,
        "baseline_ms": baseline_ms,
        "fused_ms": fused_ms,
        "runtime_ms": runtime_ms,
        "runtime_device_ms": runtime_device_ms,
        "fused_speedup_x": baseline_ms / fused_ms if fused_ms > 0 else None,
        "runtime_speedup_x": baseline_ms / runtime_ms if runtime_ms else None,
        "runtime_mode": runtime_mode,
        "full_context_error": timed["full_context_error"].as_dict(),
        "final_rho_error": timed["final_rho_error"].as_dict(),
        "step_consistency": strict_summary(steps),
        "step_metrics": [s.as_dict() for s in steps],
        "fused_schedule": schedule.key(),
        "schedule_source": source,
        "timing_method": timed["fused"].method,
        "fused_warm_s": timed["fused_warm_s"],  # the GPU kept busy before the fused timing
        "fused_clock": timed["fused_clock"],  # the clock canary after it / its best (None: no canary)
        "phase_s": phases,  # host seconds: inputs, baseline (built, timed), fused, runtime, stepwise
        "topology_hash": device.profile.topology_hash(),
        "topology_profile": device.profile.to_dict(),
        "memory_before_bytes": memory_before,
        "memory_after_bytes": dict(device.memory()),
    }


def _run_case_item(device: Device, item: tuple[SweepCase, SweepConfig]) -> dict:
    """WorkerPool.map entry point: picklable, top-level."""
    case, config = item
    return run_case(device, case, config)


def adapter_line(device: Device) -> str:
    p = device.profile
    return f"name={p.device_name} backend={p.backend} type={p.adapter_type} vendor={p.vendor_id} device={p.device_id}"


def _fan_out(config: SweepConfig) -> tuple[list[dict], str, dict, dict] | None:
    """Cases over farm.tuning.workers.WorkerPool when it exists; None means run locally."""
    import importlib.util

    if importlib.util.find_spec("farm.tuning.workers") is None:
        return None
    from farm.tuning.workers import WorkerPool

    # One case in flight per worker: two cases sharing a GPU would skew each other's timings.
    with WorkerPool(allow_cpu=config.allow_cpu, trial_timeout_s=CASE_TIMEOUT_S, max_in_flight=1) as pool:
        adapter = "; ".join(sorted({p.summary for p in pool.profiles().values()}))
        print(f"adapter: {adapter}", flush=True)
        results = _landed(pool.map(_run_case_item, [(case, config) for case in config.cases]), len(config.cases))
    order = {c.name: i for i, c in enumerate(config.cases)}
    results.sort(key=lambda r: order[r["case"]["name"]])
    before = results[0]["memory_before_bytes"] if results else {"reserved": 0, "in_use": 0}
    after = results[-1]["memory_after_bytes"] if results else {"reserved": 0, "in_use": 0}
    return results, adapter, before, after


def _run_local(config: SweepConfig) -> tuple[list[dict], str, dict, dict]:
    device = Device()
    adapter = adapter_line(device)
    print(f"adapter: {adapter}", flush=True)
    before = dict(device.memory())
    results = _landed((run_case(device, case, config) for case in config.cases), len(config.cases))
    return results, adapter, before, dict(device.memory())


def _landed(records, total: int) -> list[dict]:
    """The records, each one's row printed (stderr) as it lands: a run cut off still shows
    the cases that finished and where their seconds went."""
    results = []
    for record in records:
        results.append(record)
        print(progress_line(len(results), total, record), file=sys.stderr, flush=True)
    return results


def run_sweep(config: SweepConfig, fan_out: bool = True) -> dict:
    """Run every case (over the worker pool when farm.tuning.workers exists and `fan_out`),
    build the report, print the Markdown, write the artifacts, record to SQL when
    farm.store has record_sweep. Returns the report (the JSON artifact's content)."""
    config = config.normalized()
    ran = _fan_out(config) if fan_out else None
    results, adapter, before, after = ran if ran is not None else _run_local(config)
    report = build_report(config, adapter, results, before, after)
    markdown = format_markdown(report)
    print(markdown)
    write_artifacts(config, report, markdown)
    record_report(config, report)
    return report


def build_report(config: SweepConfig, adapter: str, results: list[dict], before: dict, after: dict) -> dict:
    distinct = bool(results) and all(r["runtime_mode"] == "measured_distinct" for r in results)
    description = (
        "ForgeRuntime.recurrent_attention measured distinctly (host wall time per call, uploads and readback included)"
    )
    return {
        "benchmark": BENCHMARK,
        "adapter": adapter,
        "warmup": config.warmup,
        "repetitions": config.repetitions,
        "extra_repetitions": config.extra_repetitions,
        "heavy_min_embd": config.heavy_min_embd,
        "gpu_util_threshold": config.gpu_util_threshold,
        "seed": config.seed,
        "runtime_path_distinct": distinct,
        "runtime_path_description": description,
        "timing": "median per call; GPU timestamps from the first pass's start to the last pass's end when the "
        "adapter has them ('timestamp'), else host wall time around a synchronous submission ('host')",
        "strict_thresholds": dict(STRICT_THRESHOLDS),
        "memory_before_bytes": {"reserved": before["reserved"], "in_use": before["in_use"]},
        "memory_after_bytes": {"reserved": after["reserved"], "in_use": after["in_use"]},
        "topology_hash": results[0]["topology_hash"] if results else None,
        "topology_profile": results[0]["topology_profile"] if results else None,
        "cases": results,
    }


# -- artifacts (the reference sweep's exact layouts) ---------------------------------------
def sweep_config_from_args(args) -> SweepConfig:
    """The SweepConfig for parsed `farm sweep recurrent` flags (minimums applied)."""
    config = SweepConfig(
        warmup=args.warmup,
        repetitions=args.repetitions,
        extra_repetitions=args.extra_repetitions,
        heavy_min_embd=args.heavy_min_embd,
        gpu_util_threshold=args.gpu_util_threshold,
        seed=args.seed,
        allow_cpu=args.allow_cpu,
        db=args.db,
        output_dir=args.output_dir,
        markdown_path=args.artifact_md,
        csv_path=args.artifact_csv,
        json_path=args.artifact_json,
        steps_csv_path=args.artifact_steps_csv,
        cases=tuple(merge_cases(default_cases() + (long_cases() if args.long else []), list(args.case))),
    ).normalized()
    for key, flag in (("markdown_path", "--artifact-md"), ("csv_path", "--artifact-csv"),
                      ("json_path", "--artifact-json"), ("steps_csv_path", "--artifact-steps-csv")):  # fmt: skip
        if getattr(config, key) is not None:
            file_target(getattr(config, key), flag)  # a directory, FIFO or device: refused before the sweep
    return config
