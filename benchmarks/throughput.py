"""Farm tuning throughput (configs/s) on 1, 2, ... GPUs: the same schedules, the same reps.

What `farm tune` does per trial, end to end: Ray workers (one per GPU) certify each
schedule against the numpy reference and time it (inputs resident, next pipeline
compiled ahead on a CPU thread); the driver collects results as they arrive and records
them in SQLite and Parquet. The schedule list is a seeded sample of the kernel's *valid*
schedules for the problem (for gemm, the register-tiled part of the space: reg_m, reg_n
>= 2, comparable to Kernel Tuner's register-tiled SGEMM space), identical at every GPU
count. Per GPU count it reports configs/s (pool start excluded, reported apart), the
scaling efficiency against one GPU, each worker's GPU (Ray GPU id -> Vulkan adapter, with
nvidia-smi's placement check), each GPU's mean utilization while tuning, the driver's CPU
use, the driver's time in SQL and Parquet writes (is collection the bottleneck?), and
each worker's milliseconds per trial by stage (waiting for the compile, run + readback,
timing incl. warm-up, waiting for certification, for the GPU lock; farm.tuning.job.StageTimes).

    python benchmarks/throughput.py --gpus 1,2 --configs 288 --reps 7 --out /tmp/throughput

A benchmark, not a test: refuses a CPU adapter unless --allow-cpu.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from farm import catalog, store
from farm.gpu import benchmark_device
from farm.schedule import Problem, Schedule
from farm.tuning.job import Job, format_stage_report
from farm.tuning.recording import recorded
from farm.tuning.workers import WorkerPool


class UtilSampler:
    """nvidia-smi utilization.gpu per GPU index, sampled every `period` s in a thread."""

    def __init__(self, period: float = 0.25):
        self.period = period
        self.samples: dict[int, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> UtilSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        cmd = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout
            except (OSError, subprocess.SubprocessError):
                return  # no nvidia-smi: utilization stays unknown
            for line in out.strip().splitlines():
                index, util = (x.strip() for x in line.split(","))
                if util.isdigit():
                    self.samples.setdefault(int(index), []).append(int(util))
            self._stop.wait(self.period)

    def means(self) -> dict[int, float]:
        return {i: sum(v) / len(v) for i, v in sorted(self.samples.items()) if v}


def valid_schedules(kernel: str, problem: Problem, profile, count: int, seed: int) -> list[Schedule]:
    """A seeded sample of `count` schedules that pass the kernel's checks on `profile`."""
    spec = catalog.get(kernel)
    valid = [
        schedule
        for schedule in spec.schedules()
        if not (kernel == "gemm" and (schedule.get("reg_m", 1) < 2 or schedule.get("reg_n", 1) < 2))
        and not spec.invalid_reason(schedule, problem, profile)
    ]
    if len(valid) < count:
        print(f"note: only {len(valid)} valid schedules; using all of them", file=sys.stderr)
    return random.Random(seed).sample(valid, min(count, len(valid)))


def run_at(gpus: int, kernel: str, problem: Problem, schedules, warmup: int, reps: int, allow_cpu: bool) -> dict:
    """One pass through a fresh pool of `gpus` workers; configs/s and where the time went."""
    import ray

    spent = {"sql_s": 0.0, "parquet_s": 0.0}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, WorkerPool(allow_cpu=allow_cpu, gpus=gpus, trial_timeout_s=300) as pool:
        start_s = time.perf_counter() - t0
        db = store.open_store(f"sqlite:///{tmp}/throughput.db")
        topology = next(iter(pool.topologies()))
        store.upsert_topology(db, pool.profiles()[pool.topologies()[topology][0]])
        campaign = store.start_campaign(db, "throughput", "random", len(schedules), reps, len(schedules))
        jobs = [Job(kernel, problem, s, 0, warmup, reps) for s in schedules]

        statuses: dict[str, int] = {}
        best = None
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        with UtilSampler() as sampler:
            t1 = time.perf_counter()
            for result in recorded(pool.stream(jobs, topology), db, campaign, Path(tmp) / "artifacts", spent):
                statuses[result.status.value] = statuses.get(result.status.value, 0) + 1
                if result.median_ns and (best is None or result.median_ns < best[0]):
                    best = (result.median_ns, result.key.schedule.key())
            wall = time.perf_counter() - t1
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        reports = pool.reports()
        stages = pool.stage_times()
    ray.shutdown()
    driver_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    workers = []
    for slot, report in sorted(reports.items()):
        mapping = report.get("mapping", {})
        workers.append(
            {
                "worker": slot,
                "ray_gpu_ids": mapping.get("ray_gpu_ids"),
                "adapter_index": mapping.get("adapter_index"),
                "adapter": mapping.get("adapter"),
                "placement_ok": mapping.get("placement_ok"),
            }
        )
    return {
        "gpus": len(workers),
        "configs": len(jobs),
        "statuses": statuses,
        "pool_start_s": start_s,
        "wall_s": wall,
        "configs_per_s": len(jobs) / wall,
        "configs_per_s_per_gpu": len(jobs) / wall / max(1, len(workers)),
        "driver_cpu_pct": 100.0 * driver_cpu / wall,
        "driver_sql_s": spent["sql_s"],
        "driver_parquet_s": spent["parquet_s"],
        "gpu_util_mean_pct": sampler.means(),
        "workers": workers,
        "worker_stage_s": stages,
        "best_ns": best[0] if best else None,
        "best_schedule": best[1] if best else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="gemm")
    parser.add_argument("--size", default="m=4096,k=4096,n=4096")
    parser.add_argument("--configs", type=int, default=288)
    parser.add_argument("--gpus", default="1,2", help="comma-separated GPU counts (those above the host's skipped)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args(argv)

    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    problem = catalog.get(args.kernel).problem(**Problem.from_key(args.size).as_dict())
    schedules = valid_schedules(args.kernel, problem, device.profile, args.configs, args.seed)
    summary = device.profile.summary
    del device
    rows = []
    for gpus in (int(g) for g in args.gpus.split(",")):
        row = run_at(gpus, args.kernel, problem, schedules, args.warmup, args.reps, args.allow_cpu)
        if rows and row["gpus"] < gpus:
            print(f"only {row['gpus']} GPU(s) here; stopping at {gpus}", file=sys.stderr)
            break
        rows.append(row)
    base = rows[0]["configs_per_s"] / max(1, rows[0]["gpus"])
    print(f"{args.kernel} {problem} on {summary}: {len(schedules)} valid schedules, reps {args.reps}")
    print(
        f"{'gpus':>4} {'configs/s':>10} {'per GPU':>8} {'efficiency':>10} {'wall s':>7} {'start s':>7} "
        f"{'driver CPU%':>11} {'sql s':>6} {'parquet s':>9}  GPU util %"
    )
    for row in rows:
        row["scaling_efficiency"] = row["configs_per_s"] / (base * max(1, row["gpus"]))
        util = " ".join(f"{i}:{u:.0f}" for i, u in row["gpu_util_mean_pct"].items()) or "n/a"
        print(
            f"{row['gpus']:>4} {row['configs_per_s']:>10.2f} {row['configs_per_s_per_gpu']:>8.2f} "
            f"{row['scaling_efficiency']:>10.2f} {row['wall_s']:>7.1f} {row['pool_start_s']:>7.1f} "
            f"{row['driver_cpu_pct']:>11.0f} {row['driver_sql_s']:>6.2f} {row['driver_parquet_s']:>9.2f}  {util}"
        )
        for w in row["workers"]:
            where = f"ray GPU {w['ray_gpu_ids']} -> adapter {w['adapter_index']}"
            spent = format_stage_report(row["worker_stage_s"].get(w["worker"], {}))
            print(f"     {w['worker']}: {where}, placement_ok={w['placement_ok']}; ms/trial: {spent}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"throughput_{args.kernel}.json"
        report = {"kernel": args.kernel, "problem": problem.key(), "device": summary, "warmup": args.warmup}
        report |= {"reps": args.reps, "configs": len(schedules), "rows": rows}
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
