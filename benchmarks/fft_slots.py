"""What fft's slot arithmetic and the pad layout save its Stockham kernels (session 19).
benchmarks/copy_widths.py found fft's global I/O shape at 0.96 of the vec4 copy (70.8 us at
n=1024 x 16384) and one conflict-free exchange free, so the best schedule's 84.3 us is ~13 us
of arithmetic the memory does not hide. Every exchange access used to re-derive its slot
(`slot(tr, j + 64u)`: an add, a shift, a mask and an XOR for swizzle 1, none of them
foldable into the load's immediate offset); the stages now take one base slot a unit and
reach each point by one XOR (swizzles 1-3) or an immediate offset (swizzle 0, and swizzle 4,
the pad layout), farm.catalog.fft_slots. Each shape is built four ways on one Device:

- `unfolded`: its swizzle, the whole expression at each access (the kernel before session 19);
- `folded`: its swizzle, folded (the kernel now);
- `pad unfolded` / `pad folded`: swizzle 4 (one pad slot per R points) instead.

All certified against the reference (the folded and unfolded ones checked equal bit for
bit), then timed interleaved (`--rounds`, the order rotated each round, `--reps` dispatches a
timing, GPU timestamps, a fifth of `farm bench`'s clock warm-up before each). Prints a table
and writes fft-slots.json under --out.

    python3 benchmarks/fft_slots.py --out DIR [--allow-cpu]
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

import numpy as np
from interleaved import certify_and_time, start, write_result  # benchmarks/, on the path as the script's folder

from farm import catalog
from farm.catalog.fft_slots import PAD, Slots
from farm.gpu import Device
from farm.oracle.launch import prepare
from farm.schedule import Schedule

SPEC = catalog.get("fft")
SHAPES = [  # the clean H200 landscape's best three (part 49), then radix 8's best
    {"workgroup_size": 64, "stockham": 16, "swizzle": 1, "stage_twiddles": 2},
    {"workgroup_size": 32, "stockham": 32, "swizzle": 3, "stage_twiddles": 2},
    {"workgroup_size": 128, "stockham": 16, "swizzle": 1, "stage_twiddles": 1},
    {"workgroup_size": 128, "stockham": 8, "swizzle": 0, "stage_twiddles": 2},
]
ARMS = ("unfolded", "folded", "pad unfolded", "pad folded")


class _Layout(type(SPEC)):
    """fft with the arm's slot arithmetic (folded or not), trusted like the catalog's own (a
    subclass defined here would otherwise run checked: part 52 timed every arm checked)."""

    runtime_checks = False

    def __init__(self, fold: bool):
        self.fold = fold

    def slots(self, schedule: Schedule) -> Slots:
        return Slots(schedule.get("swizzle", 0), schedule.get("stockham", 0), self.fold)


def measure(device: Device, shape: dict, problem, reps: int, rounds: int) -> dict:
    own = Schedule.of(**shape, items_per_invocation=1, vector_width=2, single_buffer=1)
    padded = Schedule.of(**(own.as_dict() | {"swizzle": PAD}))
    inputs = SPEC.generate(problem, 0)
    expected = SPEC.reference(problem, own, inputs)
    row = {"schedule": own.key(), "problem": problem.key(), "method": None}
    built = {"unfolded": (False, own), "folded": (True, own)}
    built |= {"pad unfolded": (False, padded), "pad folded": (True, padded)}
    with ExitStack() as stack:
        prepared = {
            name: stack.enter_context(prepare(device, _Layout(fold), s, problem, inputs))
            for name, (fold, s) in built.items()
        }
        outputs = certify_and_time(row, prepared, expected, "y", reps, rounds)
    pairs = (("unfolded", "folded"), ("pad unfolded", "pad folded"))
    row["bit_for_bit"] = all(bool(np.array_equal(outputs[a], outputs[b])) for a, b in pairs)
    if "folded_us" not in row:
        return row
    row["folded_over_unfolded"] = row["folded_us"] / row["unfolded_us"]
    row["pad_folded_over_unfolded"] = row["pad folded_us"] / row["unfolded_us"]
    return row


def main() -> int:
    args, device = start(__doc__)
    problem = SPEC.problem(n=256, batch=64) if device.profile.is_cpu else SPEC.problem(n=1024, batch=16384)
    rows = []
    print(f"{device.profile.device_name}: fft {problem.key()}, {args.rounds} interleaved rounds")
    print("| schedule | " + " | ".join(f"{a} us" for a in ARMS) + " | folded / unfolded | pad folded / unfolded "
          "| bit for bit | method |")  # fmt: skip
    print("| --- " * (len(ARMS) + 5) + "|")
    for shape in SHAPES:
        row = measure(device, shape, problem, args.reps, args.rounds)
        rows.append(row)
        if "folded_over_unfolded" in row:
            times = " | ".join(f"{row[f'{a}_us']:.1f}" for a in ARMS)
            ratios = f"{row['folded_over_unfolded']:.3f} | {row['pad_folded_over_unfolded']:.3f}"
            print(f"| {row['schedule']} | {times} | {ratios} | {row['bit_for_bit']} | {row['method']} |", flush=True)
        else:
            print(f"| {row['schedule']} | not certified: {row} |" + " |" * (len(ARMS) + 3), flush=True)
    write_result(args.out, "fft-slots.json", device, problem=problem.key(), rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
