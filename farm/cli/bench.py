"""`farm bench`: default schedule vs the farm's tuned winner vs the vendor library.

For each kernel at realistic sizes: the default schedule, the tuned winner (read from
the database for this topology; run `farm tune` first, in the same session), and the
vendor library through torch on the same inputs (cuBLAS, cuFFT, torch.topk, torch
expressions for ternary/p64; flash-linear-attention for recurrent), multiplying fp32 inputs
in fp32 FMAs like ours: TF32 off in cuBLAS and in Triton's dots (`--vendor-fp32 tf32` allows it),
plus a vec4 WGSL copy kernel for the bandwidth ceiling. Every output is checked against the
reference, and the GPU warmed to its clocks (the kernel, then the clock canary's heater
while the canary reads slow) before timing. Writes Markdown +
JSON, and stores each winner's vendor time / tuned time (kernel-only) on its row in the
database (`farm winners`, the dashboard). Refuses a CPU adapter unless --allow-cpu.

Like with like, and every row says how it was timed (`method`):
- kernel-only: ours by GPU timestamps ("timestamp"), the vendor's by CUDA-graph replay
  ("cuda-graph replay": the call captured once, replayed back to back between CUDA
  events), or by the profiler's kernel time where a graph can't be captured
  ("profiler kernel time"). Timing a Python call with CUDA events would include the launch
  path, which makes short vendor kernels read several times faster than they run.
- per call ("host wall, sync each call"): the farm through ForgeRuntime on DeviceArrays,
  the vendor on device tensors, each followed by a synchronize.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from farm import catalog
from farm.cli.bench_report import BenchRow, by_problem, print_rows, vendor_speed, write_results
from farm.cli.vendor import FP32_MATMUL, median_call_ns, set_vendor_fp32, vendor_fn, vendor_kernel_ns
from farm.gpu import Device, Timing, refuse_cpu
from farm.gpu.device import REPORT_WARM_MAX_S, REPORT_WARM_S
from farm.oracle import compare as oracle
from farm.oracle.launch import prepare
from farm.schedule import Problem, Schedule
from farm.tuning.problems import check_sizes

COPY_WGSL = """
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i < arrayLength(&src)) {
        dst[i] = src[i];
    }
}
"""


def bench_problems(spec_name: str, profile) -> list[Problem]:
    """Realistic sizes: the kernel's GPU default problems."""
    spec = catalog.get(spec_name)
    return spec.default_problems(profile)


def _row(kernel, problem, variant, schedule, ns, work, certified, note, method, clock=None) -> BenchRow:
    flops, nbytes = work
    sec = ns * 1e-9
    return BenchRow(
        kernel,
        problem.key() if isinstance(problem, Problem) else str(problem),
        variant,
        str(schedule),
        ns / 1e6,
        flops / sec / 1e12 if sec else 0.0,
        nbytes / sec / 1e9 if sec else 0.0,
        certified,
        note,
        method,
        clock,
    )


def time_schedule(device: Device, spec, schedule: Schedule, problem: Problem, inputs, expected, reps: int):
    """Certify once, warm on this kernel, then on the heater while the canary reads slow (as
    the sweep), time: (Timing | None, cert)."""
    with prepare(device, spec, schedule, problem, inputs) as prepared:
        cert = oracle.certify_prepared(prepared, expected)
        if not cert.ok:
            return None, cert
        prepared.warm_until_clocks(REPORT_WARM_S, REPORT_WARM_MAX_S)
        return prepared.time(warmup=3, reps=reps), cert


def copy_timing(device: Device, nbytes: int, reps: int) -> tuple[float, Timing]:
    """(GB/s read + write, its Timing) of a vec4 WGSL copy of `nbytes`, warmed to the clocks
    as every bench row is."""
    n4 = nbytes // 16
    src = device.upload(np.ones(n4 * 4, np.float32))
    dst = device.empty(n4 * 16)
    try:  # checks its bounds itself: no runtime checks, as the built-in kernels it is the ceiling of
        pipeline = device.pipeline(COPY_WGSL, "main", label="copy", checked=False)
        calls = [(pipeline, device.bind(pipeline, [src, dst]), -(-n4 // 256))]
        device.warm_until_clocks(calls, REPORT_WARM_S, REPORT_WARM_MAX_S)
        timing = device.time_calls(calls, warmup=3, reps=reps)
    finally:
        device.release(src, dst)
    return 2 * n4 * 16 / timing.median_ns, timing


def settle_clocks(device: Device, seconds: float = 2.0, nbytes: int = 1 << 28) -> float:
    """Keep the GPU copying `nbytes` for `seconds` (`Device.keep_busy`) and return the
    seconds spent: right after a machine starts, a GPU can need longer than the per-timing
    warm-up rounds allow to reach its clocks. A no-op on a CPU adapter. For benchmarks that
    time without a warm-up of their own (`farm bench` warms each kernel itself)."""
    if device.profile.is_cpu or seconds <= 0:
        return 0.0
    n4 = nbytes // 16
    src = device.empty(n4 * 16, "read")
    dst = device.empty(n4 * 16)
    try:
        pipeline = device.pipeline(COPY_WGSL, "main", label="copy", checked=False)
        return device.keep_busy([(pipeline, device.bind(pipeline, [src, dst]), -(-n4 // 256))], seconds)
    finally:
        device.release(src, dst)


def tuned_schedules(db: str | None, topology: str) -> dict[tuple[str, str], Schedule]:
    """The stored winners for `topology`, read-only: none (not an error) when there is no database yet."""
    try:
        from farm import store
    except ImportError:
        return {}
    st = store.open_existing(db)
    if st is None:
        return {}
    try:
        records = store.winners(st, topology=topology)
    finally:
        st.engine.dispose()
    return {(w.kernel, w.problem_key): Schedule.from_key(w.schedule_key) for w in records}


def run_bench(
    kernels: list[str],
    out: Path | None,
    db: str | None,
    allow_cpu: bool,
    reps: int,
    sizes: dict | None = None,
    vendor_fp32: str = "ieee",
) -> list[BenchRow]:
    """Bench `kernels` at `sizes`' problems where it names the kernel (farm tune --sizes'
    {kernel: [Problem]}), else at its realistic sizes, the vendor multiplying fp32 inputs in
    `vendor_fp32` ("ieee" like ours, or "tf32"); see the module docstring."""
    device = Device()
    profile = device.profile
    refuse_cpu(profile, allow_cpu, "benchmark")
    check_sizes(sizes or {}, profile)  # every --sizes problem fits this adapter, before any row
    print(f"adapter: {profile.summary}  topology {profile.topology_hash()[:16]}")
    tuned = tuned_schedules(db, profile.topology_hash())
    vendor = _vendor(vendor_fp32)
    rows: list[BenchRow] = []
    stored = 0
    for name in kernels:
        spec = catalog.get(name)
        for problem in (sizes or {}).get(name) or bench_problems(name, profile):
            new = _bench_one(device, spec, problem, tuned, vendor, reps)
            print_rows(new)
            rows.extend(new)
            if tuned:  # as each problem is done: an interrupted bench keeps what it measured
                stored += store_vendor_ratios(db, profile.topology_hash(), new, tuned)
    copy_bytes = min(256 << 20, profile.limit("max-storage-buffer-binding-size"))
    ceiling, copy = copy_timing(device, copy_bytes, reps)
    rows.append(BenchRow("copy", f"bytes={copy_bytes}", "copy", "vec4 wg256", 0.0, 0.0, ceiling, True, "", copy.method))
    print(f"copy kernel bandwidth: {ceiling:.0f} GB/s")
    if out is not None:
        write_results(rows, out, profile.summary, ceiling)
    if tuned:
        print(f"stored the speed against the vendor library on {stored} winner(s)")
    return rows


def store_vendor_ratios(db: str | None, topology: str, rows: list[BenchRow], tuned: dict) -> int:
    """On each winner benchmarked against a certified vendor row: the vendor's kernel-only time
    over the tuned kernel's (`ratios`' tuned_vs_vendor_speed) and the vendor row's method,
    written only where the winner still holds the schedule benchmarked (a campaign may have
    replaced it meanwhile). Returns how many winner rows were updated."""
    from farm import store

    measured = []
    for key, variants in by_problem(rows).items():
        ratio = vendor_speed(variants.get("tuned"), variants.get("vendor"))
        if key in tuned and ratio is not None and math.isfinite(ratio) and ratio > 0:
            measured.append((key, tuned[key].key(), ratio, variants["vendor"].method))
    if not measured:
        return 0
    st = store.open_store(db)
    try:
        return sum(
            store.save_vendor_ratio(st, topology, kernel, problem, schedule, ratio, method)
            for (kernel, problem), schedule, ratio, method in measured
        )
    finally:
        st.engine.dispose()


def _bench_one(device, spec, problem, tuned, vendor, reps) -> list[BenchRow]:
    inputs = spec.generate(problem, 0)
    rows = []
    schedule_tuned = tuned.get((spec.name, problem.key()))
    for variant, schedule in (("default", spec.default), ("tuned", schedule_tuned)):
        if schedule is None:
            rows.append(BenchRow(spec.name, problem.key(), variant, "-", math.nan, 0, 0, False, "no winner stored"))
            continue
        expected = spec.reference(problem, schedule, inputs)
        timing, cert = time_schedule(device, spec, schedule, problem, inputs, expected, reps)
        if timing is None:
            rows.append(
                BenchRow(spec.name, problem.key(), variant, str(schedule), math.nan, 0, 0, False, cert.message[:80])
            )
            continue
        clock = device.clock_ratio()  # the canary right after: a slow row's clock, not its kernel
        work = spec.work(problem)
        rows.append(_row(spec.name, problem, variant, schedule, timing.median_ns, work, True, "", timing.method, clock))
    if schedule_tuned is not None:
        ns = per_call_ns(device, spec, problem, inputs, schedule_tuned)
        rows.append(_row(spec.name, problem, "tuned call", schedule_tuned, ns, spec.work(problem), True, "", PER_CALL))
    if vendor is not None:
        rows.extend(vendor(spec, problem, inputs, schedule_tuned or spec.default, reps))
    return rows


PER_CALL = "host wall, sync each call"


def per_call_ns(device: Device, spec, problem: Problem, inputs: dict, schedule: Schedule) -> float:
    """What a program pays per call for the tuned kernel: ForgeRuntime on DeviceArrays
    (uploaded once), a synchronize after each call."""
    from farm.runtime import ForgeRuntime

    with ForgeRuntime(db="sqlite://", device=device) as rt:
        on_device = {name: rt.asarray(array) for name, array in inputs.items()}

        def call():
            rt.run(spec.name, problem.as_dict(), on_device, schedule=schedule)
            rt.synchronize()

        ns = median_call_ns(call)
        for array in on_device.values():
            array.release()
    return ns


_ANNOUNCED: set[tuple[str, str]] = set()  # (FLA label, problem) told of its autotune


def _vendor(fp32: str = "ieee"):
    """A torch-on-CUDA vendor runner multiplying fp32 in `fp32` (vendor.set_vendor_fp32), or
    None when torch/CUDA is unavailable."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    set_vendor_fp32(torch, fp32)
    return lambda spec, problem, inputs, schedule, reps: _vendor_run(torch, spec, problem, inputs, schedule, reps, fp32)


def _vendor_run(torch, spec, problem, inputs, schedule, reps, fp32: str = "ieee") -> list[BenchRow]:
    dev = torch.device("cuda")
    t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in inputs.items()}
    fn, checks, label = vendor_fn(torch, spec.name, problem, t, schedule)
    if fn is None:
        return [BenchRow(spec.name, problem.key(), "vendor", "-", math.nan, 0, 0, False, label)]
    label = f"{label} fp32 {fp32}" if spec.name in FP32_MATMUL else label
    if label.startswith("fla") and (label, problem.key()) not in _ANNOUNCED:  # else minutes of silence
        _ANNOUNCED.add((label, problem.key()))  # FLA autotunes 4-36 configurations a kernel
        print(f"{spec.name} {problem.key()}: {label} autotunes its Triton kernels on first use", file=sys.stderr)
    got = fn()
    got = got if isinstance(got, dict) else {checks[0]: got}
    expected = spec.reference(problem, schedule, inputs)
    outputs = {name: got[name].cpu().numpy().reshape(expected[name].shape) for name in checks}
    ok, note = vendor_verdict(spec, problem, outputs, {name: expected[name] for name in checks})
    ns, method = vendor_kernel_ns(torch, fn, reps)
    if fp32 == "tf32" and spec.name in FP32_MATMUL:
        method += ", TF32 allowed"  # goes with the ratio onto the winner (farm winners, the dashboard)
    row = _row(spec.name, problem, "vendor", label, ns, spec.work(problem), ok, note, method)

    def call():
        fn()
        torch.cuda.synchronize()

    per_call = _row(
        spec.name, problem, "vendor call", label, median_call_ns(call), spec.work(problem), ok, note, PER_CALL
    )
    return [row, per_call]


def vendor_verdict(spec, problem, outputs: dict, expected: dict) -> tuple[bool, str]:
    """(ok, note): the note names each output failing `oracle.compare` with its metrics over
    their tolerances, e.g. "context max_abs 1.2e-02 > 5.1e-03, max_rel 3.1e-03 > 1e-04"; "" if all pass."""
    bad = []
    for name, want in expected.items():
        cert = oracle.compare(spec, problem, {name: outputs[name]}, {name: want})
        if not cert.ok:
            same_shape = outputs[name].shape == want.shape
            bad.append(_failure(spec, problem, name, cert.metrics) if same_shape else cert.message)
    return not bad, "; ".join(bad)


def _failure(spec, problem, name: str, m) -> str:
    if spec.exact:
        return f"{name} max_abs {_sci(m.max_abs)} > 0 (exact)"
    # np.allclose fails where an element is past atol + rtol*|expected|: usually both metrics are over
    limits = zip(("max_abs", "max_rel"), (m.max_abs, m.max_rel), spec.tolerance(problem), strict=True)
    over = [f"{metric} {_sci(value)} > {_sci(tol)}" for metric, value, tol in limits if 0 < tol < value]
    return f"{name} " + (", ".join(over) or f"max_abs {_sci(m.max_abs)}, max_rel {_sci(m.max_rel)}")


def _sci(x: float) -> str:
    return f"{x:.1e}".replace(".0e", "e")
