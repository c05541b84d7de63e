"""What the per-stage twiddle table saves fft's Stockham kernels: each schedule built three
times on one Device, `stage_twiddles` 0 (the half table read at t = k·m: a warp's lanes read
entries m apart, up to 32 cache lines a load for radix 32 at n = 1024), 1 (the table
`farm.catalog.fft_stockham.stage_twiddles` lays out [stage][q][k], so a warp's lanes read
consecutive entries) and 2 (only the power-of-two points read from it, the others products:
log2(r) loads a stage instead of r - 1). All certified against the reference, 0 and 1
checked equal bit for bit, 2's largest difference from 1 recorded, then timed interleaved
(`--rounds`, the order rotated each round, `--reps` dispatches a timing, GPU timestamps, a
fifth of `farm bench`'s clock warm-up before each). The row gives the median over rounds of
each, staged / half and products / staged. (Session 15's A/B of the per-point twiddle
specialization, 0.997-0.999, is in NOTES and results/2026-12-02-h200-s15-fft-twiddles.json.)

    python3 benchmarks/fft_twiddles.py --out DIR [--allow-cpu]
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

import numpy as np
from interleaved import certify_and_time, start, write_result  # benchmarks/, on the path as the script's folder

from farm import catalog
from farm.gpu import Device
from farm.oracle.launch import prepare
from farm.schedule import Schedule

SPEC = catalog.get("fft")
SHAPES = [  # part 32's winner and runner-up shapes (radix 32), session 14's (radix 16)
    {"workgroup_size": 32, "items_per_invocation": 1, "stockham": 32, "swizzle": 3},
    {"workgroup_size": 64, "items_per_invocation": 2, "stockham": 32, "swizzle": 3},
    {"workgroup_size": 128, "items_per_invocation": 4, "stockham": 32, "swizzle": 3},
    {"workgroup_size": 256, "items_per_invocation": 2, "stockham": 16, "swizzle": 1},
    {"workgroup_size": 64, "items_per_invocation": 1, "stockham": 16, "swizzle": 1},  # part 37's winner
]
SCHEDULES = [Schedule.of(**shape, vector_width=2, single_buffer=1) for shape in SHAPES]


def measure(device: Device, schedule: Schedule, problem, reps: int, rounds: int) -> dict:
    inputs = SPEC.generate(problem, 0)
    expected = SPEC.reference(problem, schedule, inputs)
    row = {"schedule": schedule.key(), "problem": problem.key(), "method": "timestamp"}
    with ExitStack() as stack:
        tables = {"half": 0, "staged": 1, "products": 2}
        built = {name: Schedule.of(**schedule.as_dict(), stage_twiddles=v) for name, v in tables.items()}
        prepared = {name: stack.enter_context(prepare(device, SPEC, s, problem, inputs)) for name, s in built.items()}
        outputs = certify_and_time(row, prepared, expected, "y", reps, rounds)
    row["bit_for_bit"] = bool(np.array_equal(outputs["half"], outputs["staged"]))
    scale = float(np.abs(outputs["staged"]).max()) or 1.0
    row["products_max_rel"] = float(np.abs(outputs["products"] - outputs["staged"]).max()) / scale
    if "staged_us" in row:
        row["staged_over_half"] = row["staged_us"] / row["half_us"]
        row["products_over_staged"] = row["products_us"] / row["staged_us"]
    return row


def main() -> int:
    args, device = start(__doc__)
    problem = SPEC.problem(n=256, batch=64) if device.profile.is_cpu else SPEC.problem(n=1024, batch=16384)
    rows = []
    print("| schedule | half table us | stage table us | products us | staged / half | products / staged "
          "| bit for bit | products' max rel diff | method |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for schedule in SCHEDULES:
        row = measure(device, schedule, problem, args.reps, args.rounds)
        rows.append(row)
        if "staged_over_half" in row:
            print(f"| {row['schedule']} | {row['half_us']:.1f} | {row['staged_us']:.1f} | {row['products_us']:.1f} "
                  f"| {row['staged_over_half']:.3f} | {row['products_over_staged']:.3f} | {row['bit_for_bit']} "
                  f"| {row['products_max_rel']:.1e} | GPU timestamps, interleaved |", flush=True)  # fmt: skip
        else:
            print(f"| {row['schedule']} | not certified: {row} | | | | | | | |", flush=True)
    write_result(args.out, "fft-twiddles.json", device, problem=problem.key(), rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
