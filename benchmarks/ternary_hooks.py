"""What ternary_gemv stage_x=4's switches save (farm/catalog/ternary_split.py): tile sums
(TernaryGemv.tile_sums: pass 1 writes each tile's digit sums per lane of pass 2, whose loop
then neither stages nor adds per-word ones, a 16-byte workgroup load and three adds per word
and thread fewer), prefetch (TernaryGemv.prefetch: pass 2 loads the next tile's planes into
registers during a tile's body instead of between its barriers; off in the catalog) and lean
(TernaryGemv.lean: the weight decode in one instruction fewer, one slot_of per vec4, the loop
a known count; TernaryGemv.unroll: that many weight vectors a loop iteration, their loads
first; TernaryGemv.chain: each dot product added to its accumulator alone; TernaryGemv.ahead:
each weight vector loaded a loop iteration early, on since session 21). The arms are --arms
(ALL_ARMS' names; default ARMS: s20_catalog, the catalog's switches before ahead, catalog,
ahead_prefetch; the others were timed in sessions 20 and 21:
results/*-s20d-, *-s20e-, *-s20f- and *-s21-ternary-hooks*.json, whose first arm was `plain`,
all off: the kernel before, in session 20); each is built on one Device, all certified and checked equal to the first
arm bit for bit, then timed interleaved (`--rounds`, the order rotated each round, `--reps`
dispatches a timing, a fifth of `farm bench`'s clock warm-up before each). The schedules are
the H200's winners on the two default shapes (wg128 rows4 vw4 tpr8, splits 1 on the tall
m=65536,k=16384 and 8 on the wide m=16384,k=65536), each on both shapes, and neighbours.
Prints a table and writes ternary-hooks.json under --out.

    python3 benchmarks/ternary_hooks.py --out DIR [--arms s20_catalog,catalog,chain] [--allow-cpu]
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

import numpy as np
from interleaved import (  # benchmarks/, on the path as the script's folder
    arm_list,
    certify_and_time,
    options,
    start,
    write_result,
)

from farm import catalog
from farm.catalog.ternary_gemv import split_schedule
from farm.gpu import Device
from farm.oracle.launch import prepare

SPEC = catalog.get("ternary_gemv")
TALL, WIDE = (65536, 16384), (16384, 65536)
CASES = [  # ((m, k), (wg, rows, vw, tpr, splits))
    (TALL, (128, 4, 4, 8, 1)),
    (TALL, (128, 4, 4, 8, 8)),
    (WIDE, (128, 4, 4, 8, 8)),
    (WIDE, (128, 4, 4, 8, 1)),
    (TALL, (256, 4, 4, 8, 1)),  # session 5's tall winner
    (TALL, (128, 8, 4, 8, 1)),
    (WIDE, (128, 4, 4, 8, 4)),
    (WIDE, (128, 4, 4, 4, 8)),
]
CPU_CASES = [((256, 1024), (128, 4, 4, 8, 1)), ((64, 4096), (128, 4, 4, 8, 8))]
ALL_ARMS = {  # name: (tile_sums, prefetch, lean, unroll, chain, ahead)
    "plain": (False, False, False, 1, False, False),
    "tile_sums": (True, False, False, 1, False, False),
    "prefetch": (False, True, False, 1, False, False),
    "both": (True, True, False, 1, False, False),
    "lean": (False, False, True, 1, False, False),
    "s20_catalog": (True, False, True, 1, False, False),  # the catalog's until session 21 (there named catalog)
    "unroll2": (True, False, True, 2, False, False),
    "unroll4": (True, False, True, 4, False, False),
    "chain": (True, False, True, 1, True, False),
    "chain_unroll2": (True, False, True, 2, True, False),
    "catalog": (True, False, True, 1, False, True),  # ahead, since session 21
    "ahead_prefetch": (True, True, True, 1, False, True),
}
# the first: what the others are over
ARMS = {name: ALL_ARMS[name] for name in ("s20_catalog", "catalog", "ahead_prefetch")}


class _Hooks(type(SPEC)):
    """ternary_gemv with the arm's switches, trusted like the catalog's own (a subclass
    defined here would otherwise run checked)."""

    runtime_checks = False

    def __init__(self, tile_sums: bool, prefetch: bool, lean: bool, unroll: int, chain: bool, ahead: bool):
        self.tile_sums, self.prefetch, self.lean, self.unroll = tile_sums, prefetch, lean, unroll
        self.chain, self.ahead = chain, ahead


def measure(device: Device, shape: tuple[int, int], knobs: tuple, data: tuple, reps: int, rounds: int,
            arms: dict = ARMS) -> dict:  # fmt: skip
    schedule = split_schedule(*knobs)
    problem, inputs, expected = data
    row = {"schedule": schedule.key(), "problem": problem.key(), "method": None}
    with ExitStack() as stack:
        prepared = {name: stack.enter_context(prepare(device, _Hooks(*hooks), schedule, problem, inputs))
                    for name, hooks in arms.items()}  # fmt: skip
        outputs = certify_and_time(row, prepared, expected, "out", reps, rounds)
    base, *others = arms
    first = outputs[base].view(np.uint32)
    row["bit_for_bit"] = all(bool(np.array_equal(out.view(np.uint32), first)) for out in outputs.values())
    if f"{base}_us" in row:
        for name in others:
            row[f"{name}_over_{base}"] = row[f"{name}_us"] / row[f"{base}_us"]
    return row


def main() -> int:
    parser = options(__doc__)
    parser.add_argument("--arms", type=arm_list(ALL_ARMS, least=2), default=list(ARMS),
                        help=f"ALL_ARMS' names, comma-separated, the first what the others are over (default: "
                             f"{','.join(ARMS)}; all: {','.join(ALL_ARMS)})")  # fmt: skip
    args, device = start(__doc__, parser)
    names = args.arms
    arms = {name: ALL_ARMS[name] for name in names}
    rows, data = [], {}
    print(f"{device.profile.device_name}: ternary_gemv stage_x=4, {args.rounds} interleaved rounds")
    print("| problem | schedule | " + " | ".join(f"{n} us" for n in names) + " | "
          + " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " | bit for bit | method |")  # fmt: skip
    print("| --- " * (2 * len(names) + 3) + "|")
    for shape, knobs in CPU_CASES if device.profile.is_cpu else CASES:
        if shape not in data:  # inputs and reference once per shape (256 MiB of weights)
            problem = SPEC.problem(m=shape[0], k=shape[1])
            inputs = SPEC.generate(problem, 0)
            data[shape] = (problem, inputs, SPEC.reference(problem, split_schedule(*knobs), inputs))
        row = measure(device, shape, knobs, data[shape], args.reps, args.rounds, arms)
        rows.append(row)
        if f"{names[0]}_us" in row:
            times = " | ".join(f"{row[f'{n}_us']:.1f}" for n in names)
            ratios = " | ".join(f"{row[f'{n}_over_{names[0]}']:.3f}" for n in names[1:])
            print(f"| {row['problem']} | {row['schedule']} | {times} | {ratios} | {row['bit_for_bit']} | "
                  f"{row['method']} |", flush=True)  # fmt: skip
        else:
            print(f"| {row['problem']} | {row['schedule']} | not certified: {row} |", flush=True)
    write_result(args.out, "ternary-hooks.json", device, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
