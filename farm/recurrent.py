"""Recurrent linear attention on the GPU: the fused catalog kernel, the op-by-op baseline
a tensor framework would run, like-for-like timing, and stepwise consistency.

Both paths take numpy inputs (query [B,H,T,L], value [B,VH,T,E], optional rho
[B,H,L,E] and decay [H]) and return numpy (context [B,H,T,E], rho [B,H,L,E]).
The math and the float64 reference live in `farm.catalog.recurrent`. The scaling
sweep (`farm sweep recurrent`: `SweepConfig`, `run_case`, `run_sweep`, artifacts) sits
below the paths so one module owns the recurrent idea; `run_case(device, case, config)`
is the unit farm.cluster fans out.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from farm import catalog
from farm.catalog.recurrent import check_shapes, reference_recurrent, sections, sweep_decay
from farm.gpu import Buffer, Device, Pipeline, Timing
from farm.launch import Prepared, prepare
from farm.oracle import ErrorMetrics, error_metrics
from farm.schedule import Problem, Schedule

__all__ = [
    "BaselinePlan",
    "SweepCase",
    "SweepConfig",
    "run_case",
    "run_sweep",
    "strict_summary",
    "baseline_recurrent",
    "fused_recurrent",
    "prepare_fused",
    "reference_recurrent",
    "recurrent_problem",
    "stepwise_consistency",
    "sweep_decay",
]

OPS_FILE = "recurrent_ops.wgsl"
OPS_WORKGROUP = 256


def recurrent_problem(query: np.ndarray, value: np.ndarray, rho=None, decay=None) -> Problem:
    """The catalog problem (B, H, VH, T, L, E) for these inputs; ValueError on bad shapes."""
    b, h, vh, t, l_dim, e = check_shapes(query, value, rho, decay)
    return catalog.get("recurrent").problem(B=b, H=h, VH=vh, T=t, L=l_dim, E=e)


# -- fused -----------------------------------------------------------------------------
def prepare_fused(device: Device, schedule: Schedule, query, value, rho=None, decay=None) -> Prepared:
    """Compile (cached) and upload the fused kernel's launch; the caller releases it."""
    spec = catalog.get("recurrent")
    problem = recurrent_problem(query, value, rho, decay)
    inputs = {"query": query, "value": value}
    if rho is not None:
        inputs["rho"] = rho
    if decay is not None:
        inputs["decay"] = decay
    return prepare(device, spec, schedule, problem, inputs)


def fused_recurrent(
    device: Device, schedule: Schedule, query, value, rho=None, decay=None
) -> tuple[np.ndarray, np.ndarray]:
    """(context, rho) from one dispatch of the fused kernel under `schedule`."""
    with prepare_fused(device, schedule, query, value, rho, decay) as prepared:
        prepared.run()
        out = prepared.outputs()
    return out["context"], out["rho"]


def fused_calls(device: Device, prepared: Prepared) -> list:
    """The fused launch as a one-pass call list for `Device.time_calls`."""
    return [(prepared.pipeline, device.bind(prepared.pipeline, prepared.buffers), prepared.launch.groups)]


# -- baseline --------------------------------------------------------------------------
def _ops_pipeline(device: Device, op: str) -> Pipeline:
    parts = sections(OPS_FILE)
    if op in ("mul", "add"):
        source = catalog.render(parts["binary"], {"OP": "*" if op == "mul" else "+"})
    else:
        source = parts[op]
    return device.pipeline(source, label=f"recurrent_ops.{op}")


def _contiguous(shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    return (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1)


def _groups(count: int) -> int:
    return -(-count // OPS_WORKGROUP)


@dataclass
class BaselinePlan:
    """The op-by-op recurrence, encoded once as a framework would run it: per step t
    slice q_t, slice+broadcast v_t, state·q_t (broadcast multiply), sum over L, write the
    context slice, q_t⊗v_t, add, decay multiply: one dispatch per op, intermediates in
    their own buffers (reused across steps like a caching allocator), one submission."""

    device: Device
    dims: tuple[int, int, int, int, int, int]
    inputs: list[Buffer]
    scratch: list[Buffer] = field(default_factory=list)
    uniforms: list[Buffer] = field(default_factory=list)
    calls: list = field(default_factory=list)
    context: Buffer | None = None
    final_rho: Buffer | None = None

    @classmethod
    def build(cls, device: Device, query, value, rho=None, decay=None) -> BaselinePlan:
        b, h, vh, t, l_dim, e = check_shapes(query, value, rho, decay)
        rho = np.zeros((b, h, l_dim, e), np.float32) if rho is None else rho
        bufs = [device.upload(np.ascontiguousarray(x, np.float32)) for x in (query, value, rho)]
        if decay is not None:
            bufs.append(device.upload(np.ascontiguousarray(decay, np.float32)))
        plan = cls(device, (b, h, vh, t, l_dim, e), bufs)
        try:
            plan._encode(decay is not None)
        except Exception:
            plan.release()
            raise
        return plan

    def _buffer(self, count: int) -> Buffer:
        buf = self.device.empty(4 * count, "storage")
        self.scratch.append(buf)
        return buf

    def _uniform(self, words: list[int]) -> Buffer:
        buf = self.device.upload(np.array(words, np.uint32), "uniform")
        self.uniforms.append(buf)
        return buf

    def _call(self, op: str, buffers: list[Buffer], count: int) -> None:
        pipeline = _ops_pipeline(self.device, op)
        self.calls.append((pipeline, self.device.bind(pipeline, buffers), _groups(count)))

    def _copy(self, src: Buffer, dst: Buffer, shape, a_strides, a_off: int, out_strides, out_off: int) -> None:
        count = int(np.prod(shape))
        params = self._uniform([*shape, *a_strides, *out_strides, a_off, out_off, count, 0])
        self._call("strided_copy", [src, dst, params], count)

    def _binary(self, op: str, a: Buffer, b: Buffer, out: Buffer, shape, a_strides, b_strides) -> None:
        count = int(np.prod(shape))
        params = self._uniform([*shape, *a_strides, *b_strides, count, 0, 0, 0])
        self._call(op, [a, b, out, params], count)

    def _encode(self, has_decay: bool) -> None:
        b, h, vh, t, l_dim, e = self.dims
        query, value, rho = self.inputs[:3]
        q_t, v_t, ctx_t = self._buffer(b * h * l_dim), self._buffer(b * h * e), self._buffer(b * h * e)
        prod, outer, summed = (self._buffer(b * h * l_dim * e) for _ in range(3))
        states = [self._buffer(b * h * l_dim * e) for _ in range(2)]
        self.context = self._buffer(b * h * t * e)
        full = (b, h, l_dim, e)
        sum_params = self._uniform([b * h, l_dim, e, b * h * e])
        state = rho
        for step in range(t):
            self._copy(
                query,
                q_t,
                (b, h, 1, l_dim),
                (h * t * l_dim, t * l_dim, 0, 1),
                step * l_dim,
                (h * l_dim, l_dim, 0, 1),
                0,
            )
            v_head = t * e if vh == h else 0
            self._copy(value, v_t, (b, h, 1, e), (vh * t * e, v_head, 0, 1), step * e, (h * e, e, 0, 1), 0)
            self._binary("mul", state, q_t, prod, full, _contiguous(full), (h * l_dim, l_dim, 1, 0))
            self._call("sum_axis", [prod, ctx_t, sum_params], b * h * e)
            self._copy(ctx_t, self.context, (b, h, 1, e), (h * e, e, 0, 1), 0, (h * t * e, t * e, 0, 1), step * e)
            self._binary("mul", q_t, v_t, outer, full, (h * l_dim, l_dim, 1, 0), (h * e, e, 0, 1))
            nxt = states[step % 2]
            self._binary("add", state, outer, summed if has_decay else nxt, full, _contiguous(full), _contiguous(full))
            if has_decay:
                self._binary("mul", summed, self.inputs[3], nxt, full, _contiguous(full), (0, 1, 0, 0))
            state = nxt
        self.final_rho = state

    def run(self) -> None:
        self.device.dispatch_many(self.calls)

    def outputs(self) -> tuple[np.ndarray, np.ndarray]:
        b, h, _, t, l_dim, e = self.dims
        context = self.device.read(self.context, np.float32, b * h * t * e).reshape(b, h, t, e)
        rho = self.device.read(self.final_rho, np.float32, b * h * l_dim * e).reshape(b, h, l_dim, e)
        return context, rho

    def time(self, warmup: int, reps: int) -> Timing:
        return self.device.time_calls(self.calls, warmup, reps)

    def release(self) -> None:
        self.device.release(*self.inputs, *self.scratch, *self.uniforms)
        self.inputs, self.scratch, self.uniforms, self.calls = [], [], [], []

    def __enter__(self) -> BaselinePlan:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def baseline_recurrent(device: Device, query, value, rho=None, decay=None) -> tuple[np.ndarray, np.ndarray]:
    """(context, rho) from the op-by-op path (one dispatch per elementary op per step)."""
    with BaselinePlan.build(device, query, value, rho, decay) as plan:
        plan.run()
        return plan.outputs()


# -- stepwise consistency ----------------------------------------------------------------
@dataclass(frozen=True)
class StepMetrics:
    step: int
    context: ErrorMetrics
    rho: ErrorMetrics

    def as_dict(self) -> dict:
        out: dict = {"step": self.step}
        for name, metrics in (("context", self.context), ("rho", self.rho)):
            out |= {f"{name}_{k}": v for k, v in metrics.as_dict().items()}
        return out


STRICT_THRESHOLDS = {"context_max_abs": 1e-3, "context_rmse_max": 2e-4, "rho_max_abs": 1e-3, "rho_rmse_max": 2e-4}


def strict_summary(steps: list[StepMetrics]) -> dict:
    """Maxima over steps and the strict verdict (every maximum within STRICT_THRESHOLDS)."""
    summary = {
        "context_max_abs": max((s.context.max_abs for s in steps), default=0.0),
        "context_rmse_max": max((s.context.rmse for s in steps), default=0.0),
        "rho_max_abs": max((s.rho.max_abs for s in steps), default=0.0),
        "rho_rmse_max": max((s.rho.rmse for s in steps), default=0.0),
    }
    summary["strict_pass"] = all(summary[k] <= limit for k, limit in STRICT_THRESHOLDS.items())
    return summary


def stepwise_consistency(device: Device, schedule: Schedule, query, value, rho=None, decay=None) -> list[StepMetrics]:
    """Run both paths one step at a time, each carrying its own state, and compare the
    fused step's context and state with the baseline's at every step."""
    _, h, _, t, l_dim, e = check_shapes(query, value, rho, decay)
    start = np.zeros((query.shape[0], h, l_dim, e), np.float32) if rho is None else rho
    base_state, fused_state = start, start
    steps = []
    for step in range(t):
        q_t, v_t = query[:, :, step : step + 1], value[:, :, step : step + 1]
        base_ctx, base_state = baseline_recurrent(device, q_t, v_t, base_state, decay)
        fused_ctx, fused_state = fused_recurrent(device, schedule, q_t, v_t, fused_state, decay)
        steps.append(StepMetrics(step, error_metrics(fused_ctx, base_ctx), error_metrics(fused_state, base_state)))
    return steps


# -- the scaling sweep ---------------------------------------------------------------------
# `farm sweep recurrent`: per case, time baseline / fused / runtime path, compare full
# outputs and stepwise states, then write Markdown, CSVs and JSON in the reference
# sweep's layouts (its raw_wgsl_* columns are our fused_*, its core_* our runtime_*).
BENCHMARK = "farm recurrent scaling sweep"
DEFAULT_EMBDS = (96, 128, 192, 256, 384, 512, 640, 768)
ARTIFACT_NAMES = {
    "markdown_path": "recurrent_scaling.md",
    "csv_path": "recurrent_scaling.csv",
    "json_path": "recurrent_scaling.json",
    "steps_csv_path": "recurrent_scaling_steps.csv",
}
CASE_TIMEOUT_S = 600.0
CASE_FIELDS = ("batch", "heads", "value_heads", "time", "latent", "embd")


@dataclass(frozen=True)
class SweepCase:
    """One sweep shape: query [batch, heads, time, latent], value [batch, value_heads, time, embd]."""

    name: str
    batch: int
    heads: int
    value_heads: int
    time: int
    latent: int
    embd: int

    def as_dict(self) -> dict:
        return {"name": self.name} | {f: getattr(self, f) for f in CASE_FIELDS}

    @classmethod
    def parse(cls, text: str) -> SweepCase:
        """`name:B,H,VH,T,L,E` (as given to --case); ValueError naming the bad part."""
        name, sep, dims = text.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--case {text!r}: expected name:B,H,VH,T,L,E")
        parts = [p.strip() for p in dims.split(",")]
        if len(parts) != 6:
            raise ValueError(f"--case {text!r}: expected 6 dimensions B,H,VH,T,L,E, got {len(parts)}")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"--case {text!r}: dimensions must be integers, got {dims!r}") from None
        case = cls(name.strip(), *values)
        if min(values) < 1:
            raise ValueError(f"--case {text!r}: every dimension must be >= 1")
        if case.value_heads not in (1, case.heads):
            raise ValueError(f"--case {text!r}: VH={case.value_heads} must be 1 or H={case.heads}")
        return case


def default_cases() -> list[SweepCase]:
    return [SweepCase(f"sweep_b1_h8_t64_l64_e{e}", 1, 8, 1, 64, 64, e) for e in DEFAULT_EMBDS]


def merge_cases(base: list[SweepCase], extra: list[SweepCase]) -> list[SweepCase]:
    """`extra` cases replace same-named ones in place, and the rest are appended."""
    merged = {c.name: c for c in base}
    for case in extra:
        merged[case.name] = case
    return list(merged.values())


@dataclass(frozen=True)
class SweepConfig:
    """The sweep's settings; `normalized()` applies the minimums and artifact defaults."""

    warmup: int = 2
    repetitions: int = 4
    extra_repetitions: int = 3
    heavy_min_embd: int = 512
    gpu_util_threshold: float = 25.0
    seed: int = 1337
    allow_cpu: bool = False
    db: str | None = None
    output_dir: str | None = None
    markdown_path: str | None = None
    csv_path: str | None = None
    json_path: str | None = None
    steps_csv_path: str | None = None
    cases: tuple[SweepCase, ...] = field(default_factory=lambda: tuple(default_cases()))

    def normalized(self) -> SweepConfig:
        paths = {}
        if self.output_dir:
            for key, filename in ARTIFACT_NAMES.items():
                if getattr(self, key) is None:
                    paths[key] = str(Path(self.output_dir) / filename)
        return replace(
            self,
            warmup=max(self.warmup, 1),
            repetitions=max(self.repetitions, 1),
            extra_repetitions=max(self.extra_repetitions, 0),
            **paths,
        )


def sample_gpu_utilization() -> float | None:
    """Max utilization.gpu over GPUs from nvidia-smi; None where it is unavailable."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    values = []
    for line in out.stdout.splitlines():
        try:
            values.append(float(line.strip()))
        except ValueError:
            continue
    return max(values) if values else None


def case_inputs(case: SweepCase, seed: int) -> dict[str, np.ndarray]:
    """query, value ~ N(0,1) from the seed; rho zeros; decay[h] = 0.85 + 0.1·h/H."""
    rng = catalog.rng_for(seed, "recurrent_sweep", case.name)
    return {
        "query": rng.standard_normal((case.batch, case.heads, case.time, case.latent), dtype=np.float32),
        "value": rng.standard_normal((case.batch, case.value_heads, case.time, case.embd), dtype=np.float32),
        "rho": np.zeros((case.batch, case.heads, case.latent, case.embd), np.float32),
        "decay": sweep_decay(case.heads),
    }


def resolve_schedule(device: Device, problem: Problem, db: str | None, runtime=None) -> tuple[Schedule, str]:
    """The schedule the fused path uses: `runtime`'s (a ForgeRuntime) choice (tuned winner
    for this topology and the nearest problem, else the default) so the fused and runtime
    paths agree; without one, the freshest stored winner by our own lookup."""
    if runtime is not None:
        schedule, source = runtime.tuned_schedule("recurrent", problem)
        return schedule, f"runtime:{source}"
    return _stored_winner(device, problem, db)


def _stored_winner(device: Device, problem: Problem, db: str | None) -> tuple[Schedule, str]:
    spec = catalog.get("recurrent")
    try:
        from farm import store
    except ImportError:
        return spec.default, "default (farm.store missing)"
    try:
        found = store.winners(
            store.open_store(db, read_only=True), kernel="recurrent", topology=device.profile.topology_hash()
        )
    except Exception as exc:  # noqa: BLE001 - a missing/empty database means "no winner"
        return spec.default, f"default (no winners: {type(exc).__name__})"
    fresh = [w for w in found if w.source_hash == spec.source_hash()]
    if not fresh:
        return spec.default, "default (no tuned winner)"
    best = min(fresh, key=lambda w: _problem_distance(problem, Problem.from_key(w.problem_key)))
    return Schedule.from_key(best.schedule_key), f"tuned winner for {best.problem_key}"


def _runtime_class():
    """farm.runtime.ForgeRuntime when it exists and has recurrent_attention, else None."""
    import importlib.util

    if importlib.util.find_spec("farm.runtime") is None:
        return None
    from farm import runtime

    forge = getattr(runtime, "ForgeRuntime", None)
    return forge if forge is not None and hasattr(forge, "recurrent_attention") else None


def _problem_distance(a: Problem, b: Problem) -> float:
    da, db = a.as_dict(), b.as_dict()
    if set(da) != set(db):
        return float("inf")
    return sum(abs(np.log(da[k]) - np.log(db[k])) for k in da)


def _repetitions(case: SweepCase, config: SweepConfig, util: float | None) -> int:
    heavy = case.embd >= config.heavy_min_embd and util is not None and util <= config.gpu_util_threshold
    return config.extra_repetitions if heavy and config.extra_repetitions > 0 else 0


def _time_paths(device: Device, schedule: Schedule, inputs: dict, warmup: int, reps: int) -> dict:
    with BaselinePlan.build(device, **inputs) as plan:
        baseline = plan.time(warmup, reps)
        base_ctx, base_rho = plan.outputs()
    with prepare_fused(device, schedule, **inputs) as prepared:
        fused = device.time_calls(fused_calls(device, prepared), warmup, reps)
        out = prepared.outputs()
    return {
        "baseline": baseline,
        "fused": fused,
        "full_context_error": error_metrics(out["context"], base_ctx),
        "final_rho_error": error_metrics(out["rho"], base_rho),
    }


def _time_runtime(rt, inputs: dict, warmup: int, reps: int) -> tuple[float | None, str]:
    """Median host wall ms per call of `rt.recurrent_attention` (a ForgeRuntime on the same
    device; uploads and readback included: what a caller sees), or None and
    "runtime_path_missing" when there is no runtime."""
    if rt is None:
        return None, "runtime_path_missing"
    for _ in range(warmup):
        rt.recurrent_attention(**inputs)
    samples = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        rt.recurrent_attention(**inputs)
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return float(np.median(samples)), "measured_distinct"


def run_case(device: Device, case: SweepCase, config: SweepConfig) -> dict:
    """One sweep case on `device` (pure w.r.t. the device: everything it allocates is
    released). Returns the case's JSON record (the reference layout plus our extras)."""
    if device.profile.is_cpu and not config.allow_cpu:
        raise ValueError(f"refusing CPU adapter {device.profile.summary} (pass --allow-cpu)")
    memory_before = dict(device.memory())
    inputs = case_inputs(case, config.seed)
    problem = recurrent_problem(inputs["query"], inputs["value"], inputs["rho"], inputs["decay"])
    runtime = _runtime_class()
    rt = runtime(db=config.db, device=device) if runtime is not None else None
    schedule, source = resolve_schedule(device, problem, config.db, rt)
    util = sample_gpu_utilization()
    extra = _repetitions(case, config, util)
    reps = config.repetitions + extra
    timed = _time_paths(device, schedule, inputs, config.warmup, reps)
    runtime_ms, runtime_mode = _time_runtime(rt, inputs, config.warmup, reps)
    steps = stepwise_consistency(device, schedule, **inputs)
    baseline_ms, fused_ms = timed["baseline"].median_ns / 1e6, timed["fused"].median_ns / 1e6
    return {
        "case": case.as_dict(),
        "warmup": config.warmup,
        "repetitions": reps,
        "extra_repetitions_applied": extra,
        "sampled_gpu_utilization_pct": util,
        "baseline_ms": baseline_ms,
        "fused_ms": fused_ms,
        "runtime_ms": runtime_ms,
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
    """Cases over farm.cluster.WorkerPool when it exists; None means run locally."""
    import importlib.util

    if importlib.util.find_spec("farm.cluster") is None:
        return None
    from farm.cluster import WorkerPool

    # One case in flight per worker: two cases sharing a GPU would skew each other's timings.
    with WorkerPool(allow_cpu=config.allow_cpu, trial_timeout_s=CASE_TIMEOUT_S, max_in_flight=1) as pool:
        adapter = "; ".join(sorted({p.summary for p in pool.profiles().values()}))
        print(f"adapter: {adapter}")
        results = list(pool.map(_run_case_item, [(case, config) for case in config.cases]))
    order = {c.name: i for i, c in enumerate(config.cases)}
    results.sort(key=lambda r: order[r["case"]["name"]])
    before = results[0]["memory_before_bytes"] if results else {"reserved": 0, "in_use": 0}
    after = results[-1]["memory_after_bytes"] if results else {"reserved": 0, "in_use": 0}
    return results, adapter, before, after


def _run_local(config: SweepConfig) -> tuple[list[dict], str, dict, dict]:
    device = Device()
    adapter = adapter_line(device)
    print(f"adapter: {adapter}")
    if device.profile.is_cpu and not config.allow_cpu:
        raise ValueError(f"refusing CPU adapter ({adapter}); pass --allow-cpu to run on it")
    before = dict(device.memory())
    results = [run_case(device, case, config) for case in config.cases]
    return results, adapter, before, dict(device.memory())


def run_sweep(config: SweepConfig, fan_out: bool = True) -> dict:
    """Run every case (over the worker pool when farm.cluster exists and `fan_out`),
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
        if distinct
        else "farm.runtime.ForgeRuntime.recurrent_attention is not available; runtime columns are empty, not aliased"
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
    for c in cases:
        util = c["sampled_gpu_utilization_pct"]
        step = c["step_consistency"]
        lines.append(
            f"| {c['case']['name']} | {c['case']['embd']} | {c['baseline_ms']:.3f} | {c['fused_ms']:.3f} | "
            f"{_fixed(c['runtime_ms'], 3) or 'n/a'} | {_fixed(c['fused_speedup_x'], 2) or 'n/a'} | "
            f"{_fixed(c['runtime_speedup_x'], 2) or 'n/a'} | {rust_exp(step['context_max_abs'], 2)} | "
            f"{rust_exp(step['rho_max_abs'], 2)} | {'pass' if step['strict_pass'] else 'fail'} | "
            f"{c['repetitions']} | {'n/a' if util is None else f'{util:.1f}'} | {c['runtime_mode']} |"
        )
    before, after = report["memory_before_bytes"], report["memory_after_bytes"]
    lines += [
        "",
        f"memory_before_bytes: reserved={before['reserved']} in_use={before['in_use']}",
        f"memory_after_bytes: reserved={after['reserved']} in_use={after['in_use']}",
    ]
    return "\n".join(lines) + "\n"


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
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
        print(f"wrote {label} to {path}", file=sys.stderr)
        written.append(path)
    return written


def record_report(config: SweepConfig, report: dict) -> int | None:
    """Record the sweep in SQL via farm.store.record_sweep when it exists; the run id or None."""
    try:
        from farm import store
    except ImportError:
        return None
    if not hasattr(store, "record_sweep") or not report["topology_hash"]:
        return None
    from farm.gpu import HardwareProfile

    opened = store.open_store(config.db)
    store.upsert_topology(opened, HardwareProfile.from_dict(report["topology_profile"]))
    return store.record_sweep(opened, report["topology_hash"], sql_report(report))


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


def sweep_config_from_args(args) -> SweepConfig:
    """The SweepConfig for parsed `farm sweep recurrent` flags (minimums applied)."""
    return SweepConfig(
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
        cases=tuple(merge_cases(default_cases(), list(args.case))),
    ).normalized()
