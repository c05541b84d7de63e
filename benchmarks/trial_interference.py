"""Does the host's background work change a trial's GPU time? (issue 21, session 9)

Two H200 campaigns of session 8 measured the same schedules up to 2.4x apart (ternary_gemv
m=65536,k=16384, gemm 1024^3), in long runs of one campaign's trials while, on the same
worker, a background thread generated the next problem's inputs and reference
(`TrialRunner.prefetch`). This times one fixed set of schedules as a tuning worker does
(TrialRunner.evaluate, batches of 4, GPU timestamps, farm's warm-up rules) in rounds, each
round under one condition:

- quiet: nothing else runs;
- prefetch: the worker prefetches the next problem of `farm tune --all` (started at the
  round's start; its generation and reference run on the worker's threads);
- numpy: a thread multiplies 2048^2 matrices (BLAS, the GIL released);
- python: a thread runs a pure-Python loop (holds the GIL in 5 ms slices);
- python+leadN: the same, every timing's reps behind N ms of contiguous untimed passes in
  their own submission (is a contiguous lead-in enough to bring the clocks back?);
- stallN: the trial thread idles N ms before each trial, the GPU lock held (a trial
  waiting for its pipeline's compile).

Per condition: each schedule's median over the rounds, as a ratio to its quiet median, and
the median of those ratios; also how many warm-up seconds the device spent. Prints a table;
writes trial-interference.json under --out.

    python3 benchmarks/trial_interference.py --out /tmp/ti              # on the H200
    python3 benchmarks/trial_interference.py --allow-cpu --out /tmp/ti  # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from farm import catalog
from farm.gpu import benchmark_device
from farm.tuning.job import Job
from farm.tuning.runner import TrialRunner

# (kernel, problem dims, next problem's dims): the two session-8 misses and what followed them
GPU_CASES = (
    ("ternary_gemv", {"m": 65536, "k": 16384}, {"m": 16384, "k": 65536}),
    ("gemm", {"m": 1024, "k": 1024, "n": 1024}, {"m": 2048, "k": 2048, "n": 2048}),
)
CPU_CASES = (("gemm", {"m": 128, "k": 128, "n": 128}, {"m": 256, "k": 256, "n": 256}),)
CONDITIONS = ("quiet", "prefetch", "numpy", "python", "python+lead10", "python+lead30", "python+lead100",
              "stall20", "stall60", "quiet")  # fmt: skip


@contextmanager
def stall(bench: TrialRunner, ms: float):
    """The trial thread idles `ms` before each trial with the GPU lock held (the GPU idle
    meanwhile), as a trial waiting for its pipeline's compile does: campaign a of both
    session-9 stability runs (a cold shader cache?) spent 2-4x campaign b's time per problem."""
    real = TrialRunner._trial

    def stalled(self, job, ahead):
        time.sleep(ms / 1e3)
        return real(self, job, ahead)

    bench._trial = stalled.__get__(bench)
    try:
        yield
    finally:
        del bench._trial


@contextmanager
def lead_in(ms: float):
    """Every timing's reps behind a contiguous lead-in of `ms` GPU milliseconds in their own
    submission (farm.gpu.device's LEAD_IN_S rule, forced on): whether that brings the clocks
    back under a host that feeds the GPU only now and then."""
    from farm.gpu import device as timing

    saved = (timing.LEAD_IN_S, timing.MAX_LEAD_PASSES, timing._rising)
    timing.LEAD_IN_S, timing.MAX_LEAD_PASSES, timing._rising = ms / 1e3, 8192, lambda samples: True
    try:
        yield
    finally:
        timing.LEAD_IN_S, timing.MAX_LEAD_PASSES, timing._rising = saved


class Load:
    """A background thread of CPU work until stopped: 'numpy' (BLAS) or 'python' (GIL)."""

    def __init__(self, kind: str):
        self.kind, self.stop = kind, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        a = np.random.default_rng(0).random((2048, 2048), dtype=np.float32)
        while not self.stop.is_set():
            if self.kind == "numpy":
                a = a @ a
                a /= np.abs(a).max() + 1
            else:
                end = time.perf_counter() + 0.005
                x = 0
                while time.perf_counter() < end:
                    x += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def run_case(bench: TrialRunner, kernel: str, dims: dict, nxt: dict, count: int, rounds: int) -> dict:
    spec = catalog.get(kernel)
    problem, next_problem = spec.problem(**dims), spec.problem(**nxt)
    profile = bench.device.profile
    space = [s for s in spec.schedules() if not spec.invalid_reason(s, problem, profile)]
    step = max(1, len(space) // count)
    schedules = space[::step][:count]
    jobs = [Job(kernel, problem, s) for s in schedules]
    bench.evaluate(jobs[:4])  # inputs, reference, pipelines: not part of any condition
    times: dict[str, dict[str, list[float]]] = {}
    warm: dict[str, float] = {}
    retimed: dict[str, int] = {}  # timings the clock check (farm.gpu.clocks) re-timed
    methods: set[str] = set()
    for index, condition in enumerate(CONDITIONS):
        label = condition if condition != "quiet" or index == 0 else "quiet again"
        spent = bench.device.warm_spent_s
        if condition == "prefetch":
            bench.forget(kernel, next_problem)
            bench.inputs.settled()
            bench.prefetch(kernel, next_problem)
        kind, _, lead = condition.partition("+lead")
        retimes = bench.device.clock_retimes
        with ExitStack() as context:
            if kind in ("numpy", "python"):
                context.enter_context(Load(kind))
            if kind.startswith("stall"):
                context.enter_context(stall(bench, float(kind[len("stall") :])))
            if lead:
                context.enter_context(lead_in(float(lead)))
            for _ in range(rounds):
                for start in range(0, len(jobs), 4):
                    batch = jobs[start : start + 4]
                    for job, result in zip(batch, bench.evaluate(batch), strict=True):
                        if result.ok and result.median_ns:
                            times.setdefault(label, {}).setdefault(job.schedule.key(), []).append(result.median_ns)
                            methods.add(result.timing.method)
        if condition == "prefetch":
            bench.inputs.settled()
        warm[label] = bench.device.warm_spent_s - spent
        retimed[label] = bench.device.clock_retimes - retimes
    quiet = {k: statistics.median(v) for k, v in times["quiet"].items()}
    rows = []
    for label, per in times.items():
        ratios = [statistics.median(v) / quiet[k] for k, v in per.items() if k in quiet]
        worst = [max(v) / quiet[k] for k, v in per.items() if k in quiet]
        rows.append({"kernel": kernel, "problem": problem.key(), "condition": label,
                     "median_ratio": statistics.median(ratios), "worst_ratio": max(worst),
                     "schedules": len(ratios), "warm_s": warm[label], "clock_retimes": retimed[label],
                     "method": "/".join(sorted(methods))})  # fmt: skip
    return {"rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--schedules", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args()
    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    cases = CPU_CASES if device.profile.is_cpu else GPU_CASES
    bench = TrialRunner(device, "interference")
    rows = []
    try:
        for kernel, dims, nxt in cases:
            rows += run_case(bench, kernel, dims, nxt, args.schedules, args.rounds)["rows"]
    finally:
        bench.close()
    methods = "/".join(sorted({r["method"] for r in rows}))
    print(f"{device.profile.device_name}: per schedule the median over {args.rounds} rounds of its trial medians "
          f"({methods}), over its quiet median")  # fmt: skip
    print("| kernel | problem | condition | median ratio | worst | warm-up s | re-timed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['kernel']} | {r['problem']} | {r['condition']} | {r['median_ratio']:.3f} | "
              f"{r['worst_ratio']:.2f} | {r['warm_s']:.2f} | {r['clock_retimes']} |")  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "device": device.profile.device_name, "rows": rows}
    (out / "trial-interference.json").write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
