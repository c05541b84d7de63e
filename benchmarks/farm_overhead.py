"""Per-trial overhead of the farm (Ray + oracle + SQL/Parquet writes) vs a bare loop.

The bare loop is what a hand-written tuner does on one device: prepare (compile +
upload) and time each schedule. The farm path is what `farm tune` does per trial: a
Ray worker certifies the schedule against the numpy reference and times it, the driver
consumes results as they arrive and records them in SQLite and Parquet in batches.
Both run the same schedules twice, cold (compiling) and warm (pipelines cached); the
overhead is the difference in wall time per trial. Each pass of either path starts after
IDLE_BEFORE_PASS_S of GPU idle, so both begin from the same clocks: otherwise the bare
warm pass would start on a GPU its cold pass just left hot while the farm's starts after
the Ray and SQL round trips between passes (> 0.25 s), and its first trial's warm-up
rounds (~25 ms, once per pass, not per trial) would read as per-trial overhead. A benchmark,
not a test.

    python benchmarks/farm_overhead.py --kernel gemv --size m=4096,n=4096 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from farm import catalog, store
from farm.gpu import Buffer, Device, benchmark_device
from farm.oracle.launch import Prepared, compile_launch
from farm.schedule import Problem
from farm.tuning.job import Job
from farm.tuning.recording import recorded
from farm.tuning.workers import WorkerPool

IDLE_BEFORE_PASS_S = 0.5  # same GPU state at the start of every pass (see the docstring)


def bare_loop(spec, problem: Problem, schedules, warmup: int, reps: int) -> dict:
    """Wall time per trial of a minimal hand-written tuner on one device, cold then warm:
    inputs uploaded once, then per schedule compile (cached when warm) and time. No
    certification, no Ray, no database: what the farm's extra work is measured against."""
    device = Device()
    inputs = spec.generate(problem, 0)
    resident: dict[int, Buffer] = {}
    passes = {}
    kernel_ns = []
    for name in ("cold", "warm"):
        time.sleep(IDLE_BEFORE_PASS_S)
        warm_before = device.warm_spent_s
        start = time.perf_counter()
        for schedule in schedules:
            kernel_ns.append(_time_bare(device, spec, schedule, problem, inputs, resident, warmup, reps))
        passes[name] = (time.perf_counter() - start) / len(schedules)
        passes[f"{name}_warm_up_ms"] = (device.warm_spent_s - warm_before) * 1e3 / len(schedules)
    device.release(*resident.values())
    passes["kernel_median_ns"] = sorted(kernel_ns)[len(kernel_ns) // 2]
    passes["device"] = device.profile.summary
    return passes


def _time_bare(device, spec, schedule, problem, inputs, resident, warmup, reps) -> float:
    launch = spec.launch(schedule, problem, inputs)
    pipelines = compile_launch(device, spec, schedule, launch)
    shared = {id(a) for a in inputs.values()}
    buffers, transient = [], []
    for arg in launch.args:
        if arg.data is not None and id(arg.data) in shared:
            if id(arg.data) not in resident:
                resident[id(arg.data)] = device.upload(arg.data, arg.kind)
            buffers.append(resident[id(arg.data)])
        else:
            buffer = device.upload(arg.data, arg.kind) if arg.data is not None else device.empty(arg.nbytes, arg.kind)
            buffers.append(buffer)
            transient.append(buffer)
    try:
        prepared = Prepared(spec, schedule, problem, launch, pipelines, buffers, device)
        return prepared.time(warmup, reps).median_ns
    finally:
        device.release(*transient)


def farm_path(spec, problem: Problem, schedules, warmup: int, reps: int, allow_cpu: bool) -> dict:
    """Wall time per trial through a WorkerPool, recording into a throwaway SQLite + Parquet."""
    with tempfile.TemporaryDirectory() as tmp, WorkerPool(allow_cpu=allow_cpu) as pool:
        db = store.open_store(f"sqlite:///{tmp}/bench.db")
        topology = next(iter(pool.topologies()))
        store.upsert_topology(db, pool.profiles()[pool.topologies()[topology][0]])
        campaign = store.start_campaign(db, "farm_overhead", "exhaustive", None, reps, 2 * len(schedules))
        jobs = [Job(spec.name, problem, s, 0, warmup, reps) for s in schedules]
        passes = {"workers": len(pool.profiles())}
        for name in ("cold", "warm"):
            before = _stage_seconds(pool)
            time.sleep(IDLE_BEFORE_PASS_S)
            start = time.perf_counter()
            for _ in recorded(pool.stream(jobs, topology), db, campaign, Path(tmp) / "artifacts"):
                pass
            passes[name] = (time.perf_counter() - start) / len(jobs)
            after = _stage_seconds(pool)
            # where the workers' time went this pass, ms per trial (farm.tuning.job.StageTimes)
            passes[f"{name}_stages_ms"] = {
                stage: round((after[stage] - before.get(stage, 0.0)) * 1e3 / len(jobs), 2) for stage in sorted(after)
            }
        return passes


def _stage_seconds(pool: WorkerPool) -> dict[str, float]:
    """The workers' seconds per stage so far, summed over workers."""
    total: dict[str, float] = {}
    for report in pool.stage_times().values():
        for stage, seconds in report.get("seconds", {}).items():
            total[stage] = total.get(stage, 0.0) + seconds
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="gemv")
    parser.add_argument("--size", default=None, help="problem, e.g. m=4096,n=4096 (default: first default problem)")
    parser.add_argument("--schedules", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args(argv)

    spec = catalog.get(args.kernel)
    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    problem = Problem.from_key(args.size) if args.size else spec.default_problems(device.profile)[0]
    del device
    schedules = [spec.default] + spec.sample_schedules(args.schedules - 1, seed=0)
    bare = bare_loop(spec, problem, schedules, args.warmup, args.reps)
    farm = farm_path(spec, problem, schedules, args.warmup, args.reps, args.allow_cpu)
    report = {
        "kernel": spec.name,
        "problem": problem.key(),
        "device": bare["device"],
        "schedules": len(schedules),
        "warmup": args.warmup,
        "reps": args.reps,
        "kernel_median_ns": bare["kernel_median_ns"],
        "workers": farm["workers"],
    }
    print(f"{spec.name} {problem} on {bare['device']}: {len(schedules)} schedules, {farm['workers']} worker(s)")
    # The farm's wall time per trial shrinks with its worker count; per-GPU cost (wall x
    # workers) is what compares with a one-device bare loop.
    workers = farm["workers"]
    print(f"{'pass':<6} {'bare ms/trial':>14} {'farm ms/trial':>14} {'farm GPU-ms/trial':>18} {'overhead ms':>12}")
    for name in ("cold", "warm"):
        per_gpu = farm[name] * workers
        overhead = per_gpu - bare[name]
        report[name] = {
            "bare_ms": bare[name] * 1e3,
            "farm_ms": farm[name] * 1e3,
            "farm_gpu_ms": per_gpu * 1e3,
            "overhead_ms": overhead * 1e3,
        }
        cells = f"{bare[name] * 1e3:>14.2f} {farm[name] * 1e3:>14.2f} {per_gpu * 1e3:>18.2f}"
        print(f"{name:<6} {cells} {overhead * 1e3:>12.2f}")
    for name in ("cold", "warm"):
        report[name]["farm_worker_stages_ms"] = farm[f"{name}_stages_ms"]
        report[name]["bare_warm_up_ms"] = bare[f"{name}_warm_up_ms"]
        stages = " ".join(f"{stage} {ms:g}" for stage, ms in farm[f"{name}_stages_ms"].items())
        print(f"{name}: farm worker ms/trial: {stages}; bare loop warm-up {bare[f'{name}_warm_up_ms']:.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"farm_overhead_{spec.name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
