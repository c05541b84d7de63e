"""Why does `farm sweep recurrent`'s fused column read 1.7-2.5x `farm bench`'s tuned row for
the same winner (E >= 192; H200, session 11: 0.034 vs 0.0154 ms at E=192)?

For each case, the same tuned schedule timed seven ways on one device, one factor changed
at a time (GPU timestamps where the adapter has them, medians; each row says which):
- `bench`: the catalog's certify inputs (`spec.generate`), warm-up 3, 20 reps (farm bench's
  counts, without its REPORT_WARM_S warm-up: what the warm-up rules alone give);
- `bench_4reps`: the same inputs, the sweep's warm-up 2 and 4 reps;
- `sweep_inputs`: the sweep's inputs (`case_inputs`: rho zeros), bench's warm-up and reps;
- `sweep_alone`: the sweep's inputs, warm-up and reps, no baseline timed before;
- `sweep`: exactly the sweep's `_time_paths` (the op-by-op baseline timed first, then the
  fused kernel after its REPORT_WARM_S keep-busy), and `sweep_again` the same once more;
- `forced`: the sweep's inputs after 0.5 s of the same dispatches back to back,
  whatever the warm-up rules think of the GPU's state.
After each: the clock canary (farm.gpu.clocks, set by the SM clock alone) and nvidia-smi's
SM/memory clocks and pstate, read at once. If only `sweep` is slow, the baseline before it
is what the fused timing pays for; if the memory clock drops where the canary doesn't, the
GPU's memory, not its SM clock, is what a host-bound stretch leaves slow.

    python3 benchmarks/sweep_vs_bench.py --db sqlite:///farm.db --out DIR [--embd 96,192,768]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from farm import catalog
from farm.gpu import benchmark_device
from farm.gpu.clocks import ClockCheck
from farm.gpu.nvidia import query_gpus
from farm.oracle.launch import prepare
from farm.recurrent.cases import SweepCase
from farm.recurrent.paths import fused_calls, prepare_fused, recurrent_problem
from farm.recurrent.sweep import _time_paths, case_inputs
from farm.runtime.forge import ForgeRuntime


def _timed(device, spec, schedule, problem, inputs, warmup, reps) -> float:
    with prepare(device, spec, schedule, problem, inputs) as prepared:
        return prepared.time(warmup=warmup, reps=reps).median_ns / 1e3


def _sweep_alone(device, schedule, inputs, warmup, reps, force_s: float = 0.0) -> float:
    with prepare_fused(device, schedule, **inputs) as prepared:
        if force_s:
            device.keep_busy(fused_calls(device, prepared), force_s, force=True)
        return device.time_calls(fused_calls(device, prepared), warmup, reps).median_ns / 1e3


def _ways(device, spec, schedule, problem, bench_in, sweep_in) -> dict:
    """The seven ways, each a call returning us per dispatch."""
    return {
        "bench": lambda: _timed(device, spec, schedule, problem, bench_in, 3, 20),
        "bench_4reps": lambda: _timed(device, spec, schedule, problem, bench_in, 2, 4),
        "sweep_inputs": lambda: _timed(device, spec, schedule, problem, sweep_in, 3, 20),
        "sweep_alone": lambda: _sweep_alone(device, schedule, sweep_in, 2, 4),
        "sweep": lambda: _time_paths(device, schedule, sweep_in, 2, 4)["fused"].median_ns / 1e3,
        "sweep_again": lambda: _time_paths(device, schedule, sweep_in, 2, 4)["fused"].median_ns / 1e3,
        "forced": lambda: _sweep_alone(device, schedule, sweep_in, 2, 4, force_s=0.5),
    }


def _state(canary: ClockCheck) -> str:
    """The canary's us and nvidia-smi's SM/memory MHz and pstate, right now."""
    rows = query_gpus(("clocks.sm", "clocks.mem", "pstate"), timeout_s=5.0) or [{}]
    smi = rows[0]
    clocks = f"{smi.get('clocks.sm', '?')}/{smi.get('clocks.mem', '?')} {smi.get('pstate', '')}"
    return f"{canary.read_ns() / 1e3:.1f}us {clocks}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--embd", default="96,192,256,768")
    ap.add_argument("--allow-cpu", action="store_true")
    args = ap.parse_args(argv)
    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    spec = catalog.get("recurrent")
    rt = ForgeRuntime(db=args.db, device=device)
    canary = ClockCheck(device)
    rows = []
    for e in [int(x) for x in args.embd.split(",")]:
        case = SweepCase(f"sweep_b1_h8_t64_l64_e{e}", 1, 8, 1, 64, 64, e)
        sweep_in = case_inputs(case, 0)
        problem = recurrent_problem(sweep_in["query"], sweep_in["value"], sweep_in["rho"], sweep_in["decay"])
        schedule, source = rt.tuned_schedule("recurrent", problem)
        bench_in = spec.generate(problem, 0)
        method = "timestamp" if device.timestamps else "host"
        row = {"embd": e, "schedule": schedule.key(), "source": source, "method": method}
        for name, way in _ways(device, spec, schedule, problem, bench_in, sweep_in).items():
            row[name] = way()
            row[f"{name}_state"] = _state(canary)
        print(json.dumps(row), flush=True)
        rows.append(row)
    rt.close()
    canary.close()
    cols = ["bench", "bench_4reps", "sweep_inputs", "sweep_alone", "sweep", "sweep_again", "forced"]
    method = "GPU timestamps" if device.timestamps else "host wall per submission"
    after = "after each: canary us, SM/memory MHz, pstate"
    print(f"\n{device.profile.summary}: us per dispatch ({method}, medians; {after})")
    print("| E | " + " | ".join(cols) + " | schedule |")
    print("| --- |" + " --- |" * (len(cols) + 1))
    for r in rows:
        cells = " | ".join(f"{r[c]:.1f} ({r[c + '_state']})" for c in cols)
        print(f"| {r['embd']} | {cells} | {r['schedule']} |")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"device": device.profile.summary, "rows": rows}
    (args.out / "sweep-vs-bench.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
