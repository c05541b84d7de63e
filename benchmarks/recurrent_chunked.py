"""The chunked recurrence's landscape against flash-linear-attention, kernel-only.

For each case: every chunked schedule (form=1) valid on the adapter, timed by GPU
timestamps (the farm's own `time_calls`, warm-up rounds included), next to FLA's
`fused_recurrent_rwkv6` and `chunk_rwkv6` timed by CUDA-graph replay (farm.cli.vendor) on
the same inputs. Prints a table and writes JSON.

    python benchmarks/recurrent_chunked.py --out DIR [--case B,H,VH,T,L,E ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from farm import catalog
from farm.catalog.recurrent_chunked import chunked_schedules
from farm.gpu import Device
from farm.oracle.launch import prepare
from farm.schedule import Schedule

# The long cases first: each case costs ~60-90 s on an H200 (27 schedules, each compiled
# and warmed up, and FLA's Triton kernels compiled on first use).
CASES = [(1, 8, 8, 1024, 64, 768), (8, 8, 8, 1024, 64, 256), (1, 8, 8, 4096, 64, 768)] + [
    (1, 8, 1, 64, 64, e) for e in (96, 384, 768)
]


def fla_times(problem, inputs) -> dict[str, float]:
    """FLA's two kernels on our recurrence, kernel-only by CUDA-graph replay (µs)."""
    try:
        import torch

        from farm.cli import vendor
    except ImportError as exc:
        return {"error": str(exc)}
    t = {k: torch.from_numpy(v).cuda() for k, v in inputs.items()}
    out = {}
    for label, chunk_from in (("fla_fused_us", 10**9), ("fla_chunk_us", 1)):
        saved = vendor.FLA_CHUNK_FROM
        vendor.FLA_CHUNK_FROM = chunk_from  # which of FLA's kernels _fla_recurrent calls
        try:
            fn, _, _ = vendor._fla_recurrent(torch, problem, t)
            ns, method = vendor.vendor_kernel_ns(torch, fn, reps=20)
            out[label], out[label + "_method"] = ns / 1e3, method
        except Exception as exc:  # noqa: BLE001 - report, keep the landscape
            out[label + "_error"] = str(exc)[:200]
        finally:
            vendor.FLA_CHUNK_FROM = saved
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--case", action="append", default=[], help="B,H,VH,T,L,E")
    args = parser.parse_args()
    cases = [tuple(int(x) for x in c.split(",")) for c in args.case] or CASES
    spec = catalog.get("recurrent")
    device = Device()
    rows = []
    for dims in cases:
        problem = spec.problem(**dict(zip(spec.dims, dims, strict=True)))
        inputs = spec.generate(problem, seed=0)
        times = {}
        for schedule in [spec.default, *chunked_schedules()]:
            if spec.invalid_reason(schedule, problem, device.profile):
                continue
            with prepare(device, spec, schedule, problem, inputs) as prepared:
                timing = device.time_calls(prepared.calls(), warmup=3, reps=20, schedule=schedule)
            times[schedule.key()] = timing.median_ns / 1e3
        chunked = {k: v for k, v in times.items() if '"form":1' in k}
        best = min(chunked, key=chunked.get)
        with prepare(device, spec, Schedule.from_key(best), problem, inputs) as prepared:
            passes = [device.time_calls([c], warmup=3, reps=20).median_ns / 1e3 for c in prepared.calls()]
        row = {
            "case": dims,
            "default_stepwise_us": times.get(spec.default.key()),
            "best_chunked": best,
            "best_chunked_us": chunked[best],
            "best_chunked_passes_us": passes,
            "chunked_valid": len(chunked),
            "all_us": times,
        } | fla_times(problem, inputs)
        rows.append(row)
        print(
            f"{dims}: stepwise default {row['default_stepwise_us']:.1f} us, best chunked {chunked[best]:.1f} us "
            f"({best}; passes {[round(x, 1) for x in passes]}), "
            f"FLA fused {row.get('fla_fused_us', float('nan')):.1f} "
            f"chunk {row.get('fla_chunk_us', float('nan')):.1f} us",
            flush=True,
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{time.strftime('%Y-%m-%d')}-h200-recurrent-chunked.json"
    meta = {"method": "ours: GPU timestamps (time_calls median, 20 reps); FLA: CUDA-graph replay (vendor_kernel_ns)"}
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(path)


if __name__ == "__main__":
    main()
