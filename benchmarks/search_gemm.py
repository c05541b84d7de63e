"""Model-based search vs random search at equal budget on the real gemm kernel.

Each schedule is measured once on this machine's adapter (certified, then timed) and
memoized, so every strategy and seed sees the same numbers; the comparison is the best
time each strategy finds within the budget, averaged over seeds. A benchmark, not a test:
run on the H200 (`python benchmarks/search_gemm.py --size 2048 --budget 40 --seeds 10`).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

from farm import catalog
from farm.gpu import benchmark_device
from farm.trial import TrialResult
from farm.tuning.job import Job
from farm.tuning.runner import TrialRunner
from farm.tuning.search import Budget, model_based, random_search


def memoized_evaluate(bench: TrialRunner, problem, reps: int, cache: dict[str, TrialResult]):
    def evaluate(batch):
        fresh = [s for s in batch if s.key() not in cache]
        for result in bench.evaluate([Job("gemm", problem, s, 0, 2, reps) for s in fresh]):
            cache[result.key.schedule.key()] = result
        return [cache[s.key()] for s in batch]

    return evaluate


def best(results: list[TrialResult]) -> float:
    return min((r.median_ns for r in results if r.ok), default=math.inf)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=1024, help="m = k = n")
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args(argv)

    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    spec = catalog.get("gemm")
    problem = spec.problem(m=args.size, k=args.size, n=args.size)
    space = [s for s in spec.schedules() if s != spec.default]
    bench = TrialRunner(device, "search-bench")
    cache: dict[str, TrialResult] = {}
    evaluate = memoized_evaluate(bench, problem, args.reps, cache)
    found: dict[str, list[float]] = {"model": [], "random": []}
    start = time.perf_counter()
    for seed in range(args.seeds):
        for name, fn in (("model", model_based), ("random", random_search)):
            found[name].append(best(fn(space, evaluate, Budget(args.budget), random.Random(seed))))
        print(f"seed {seed}: model {found['model'][-1] / 1e3:.1f} us, random {found['random'][-1] / 1e3:.1f} us")
    flops = 2.0 * args.size**3
    summary = {
        "device": device.profile.summary,
        "problem": problem.key(),
        "space": len(space),
        "budget": args.budget,
        "seeds": args.seeds,
        "measured_schedules": len(cache),
        "best_seen_ns": best(list(cache.values())),
        "wall_s": time.perf_counter() - start,
    }
    for name, values in found.items():
        mean_ns = statistics.mean(values)
        summary[name] = {"mean_best_ns": mean_ns, "per_seed_ns": values, "mean_tflops": flops / mean_ns / 1e3}
    wins = sum(m <= r for m, r in zip(found["model"], found["random"], strict=True))
    summary["model_wins_or_ties"] = wins
    print(f"{'strategy':<8} {'mean best us':>13} {'TFLOP/s':>8}")
    for name in found:
        print(f"{name:<8} {summary[name]['mean_best_ns'] / 1e3:>13.1f} {summary[name]['mean_tflops']:>8.2f}")
    print(f"model <= random on {wins}/{args.seeds} seeds; {len(cache)} schedules measured")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"search_gemm_{args.size}.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
