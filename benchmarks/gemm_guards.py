"""What gemm's trimmed kernels save (session 19): the kernels test only the bounds a
problem's shape can cross (at 1024^3 and the other tile multiples: none) and store A's
four lanes into the k-major tile from one division of the offset instead of one each
(farm.catalog.gemm_tiling.guards and _puts). Each schedule is built twice on one Device,
`every bound` (Gemm.trimmed False: the kernel before) and `trimmed`, both certified and
checked equal bit for bit, then timed interleaved (`--rounds`, the order rotated each round,
`--reps` dispatches a timing, a fifth of `farm bench`'s clock warm-up before each). The
schedules are the H200's best at 1024^3 (part 50's landscape, the first three; part 54's two
best), and at 2048^3 and 4096^3 (parts 42-44). Prints a table and writes gemm-guards.json under --out.

    python3 benchmarks/gemm_guards.py --out DIR [--allow-cpu]
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

SPEC = catalog.get("gemm")
VEC4_TILES = {"items_per_invocation": 32, "pad_shared": 1, "reg_m": 8, "reg_n": 4, "shared_vec4": 1, "vector_width": 4}
WIDE = VEC4_TILES | {"items_per_invocation": 64, "reg_n": 8, "tile_k": 16, "tile_m": 128, "tile_n": 128, "unroll_k": 1}
SQUARE = VEC4_TILES | {"tile_k": 8, "tile_m": 64, "tile_n": 64, "workgroup_size": 128}
TALL = VEC4_TILES | {"tile_m": 64, "tile_n": 128, "unroll_k": 1, "workgroup_size": 256}
CASES = [  # (size, knobs)
    (1024, TALL | {"tile_k": 32, "warp_cols": 8}),
    (1024, TALL | {"double_buffer": 2, "tile_k": 8}),
    (1024, TALL | {"double_buffer": 1, "tile_k": 16, "tile_n": 64, "warp_cols": 8, "workgroup_size": 128}),
    # part 54's tune --all: 64x64 8x4 tile_k 8 led at 68.0-69.3 us trimmed (82-87 us in part 50's landscape)
    (1024, SQUARE | {"double_buffer": 2}),
    (1024, SQUARE | {"double_buffer": 1, "unroll_k": 1}),
    (2048, WIDE | {"warp_cols": 8, "workgroup_size": 256}),
    (4096, WIDE | {"warp_cols": 8, "workgroup_size": 256}),
]
CPU_CASES = [(64, knobs) for _, knobs in CASES[:2]]


class _EveryBound(type(SPEC)):
    """gemm as before session 19: every bound tested, A's lanes stored one division each.
    Trusted like the catalog's own (a subclass defined here would otherwise run checked)."""

    trimmed = False
    runtime_checks = False


def measure(device: Device, size: int, knobs: dict, reps: int, rounds: int) -> dict:
    schedule = Schedule.of(**knobs)
    problem = SPEC.problem(m=size, k=size, n=size)
    inputs = SPEC.generate(problem, 0)
    expected = SPEC.reference(problem, schedule, inputs)
    row = {"schedule": schedule.key(), "problem": problem.key(), "method": None}
    with ExitStack() as stack:
        built = {"every bound": _EveryBound(), "trimmed": SPEC}
        prepared = {name: stack.enter_context(prepare(device, spec, schedule, problem, inputs))
                    for name, spec in built.items()}  # fmt: skip
        outputs = certify_and_time(row, prepared, expected, "c", reps, rounds)
    row["bit_for_bit"] = bool(np.array_equal(outputs["every bound"], outputs["trimmed"]))
    if "trimmed_us" in row:
        row["trimmed_over_every_bound"] = row["trimmed_us"] / row["every bound_us"]
    return row


def main() -> int:
    args, device = start(__doc__)
    rows = []
    print(f"{device.profile.device_name}: gemm, {args.rounds} interleaved rounds")
    print("| problem | schedule | every bound us | trimmed us | trimmed / every bound | bit for bit | method |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size, knobs in CPU_CASES if device.profile.is_cpu else CASES:
        row = measure(device, size, knobs, args.reps, args.rounds)
        rows.append(row)
        if "trimmed_us" in row:
            times = f"{row['every bound_us']:.1f} | {row['trimmed_us']:.1f} | {row['trimmed_over_every_bound']:.3f}"
            tail = f"{row['bit_for_bit']} | {row['method']}"
            print(f"| {row['problem']} | {row['schedule']} | {times} | {tail} |", flush=True)
        else:
            print(f"| {row['problem']} | {row['schedule']} | not certified: {row} | | | | |", flush=True)
    write_result(args.out, "gemm-guards.json", device, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
