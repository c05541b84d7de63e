"""Where ternary_gemv stage_x=4's time goes, on the catalog kernel (tile sums, lean body,
weight loads an iteration ahead; --base s20_catalog: session 20's, without ahead): the
H200's two winners (wg128 rows4 vw4 tpr8; splits 1 on the tall m=65536,k=16384, 8 on the
wide m=16384,k=65536), each timed interleaved with (--variants) three variants of its own loop pass
(built by benchmarks/ternary_probe_kernels.py's source rewrites; passes 1 and 3 unchanged):

- catalog: that kernel as `farm tune` ran it, certified against the reference;
- compute_only: every weight load replaced by a hash of its index (no weight traffic; the
  hash adds ~5 integer instructions a vector, ~4% of the loop's);
- no_dot: the weights loaded and decoded, every dot product replaced by an XOR of its
  operands (the loop without its 12 IDPs a word and row);
- compute_no_dot: both.

The variants' outputs are not the product (not certified). If compute_only reads about the
catalog's time, the weight loads are hidden and the loop's issue is the bound; if it reads
far below, the loads are not hidden behind the loop. Each row also records the SM clock and
power right after its timings (nvidia-smi). Prints a table and writes ternary-parts.json
under --out.

    python3 benchmarks/ternary_parts.py --out DIR [--base ARM] [--variants catalog,compute_only] [--allow-cpu]
"""

from __future__ import annotations

import dataclasses
import sys
from contextlib import ExitStack

from interleaved import (  # benchmarks/, on the path as the script's folder
    arm_list,
    options,
    start,
    time_interleaved,
    write_result,
)
from ternary_hooks import ALL_ARMS, CPU_CASES, SPEC, TALL, WIDE, _Hooks
from ternary_probe_kernels import compute_only_source, dp4a_no_dot_source

from farm.catalog.ternary_gemv import split_schedule
from farm.gpu.nvidia import query_gpus
from farm.oracle import compare as oracle
from farm.oracle.launch import prepare

CASES = [(TALL, (128, 4, 4, 8, 1)), (WIDE, (128, 4, 4, 8, 8))]
VARIANTS = {
    "catalog": (),
    "compute_only": (compute_only_source,),
    "no_dot": (dp4a_no_dot_source,),
    "compute_no_dot": (compute_only_source, dp4a_no_dot_source),
}


def sm_clock() -> dict | None:
    """The SM and memory clocks (MHz) and power (W) right after a row's timings: a row read
    slower than the same kernel elsewhere is told apart from a slower clock (None without
    nvidia-smi)."""
    gpus = query_gpus(["clocks.sm", "clocks.mem", "power.draw"])
    return gpus[0] if gpus else None


class _Part(_Hooks):
    """The catalog's switches with its loop pass rewritten by `rewrites`, in order; trusted
    like _Hooks (a subclass defined outside farm.catalog runs checked unless it says so:
    until session 22 this one did, its catalog reading 136 us against the trusted 119)."""

    runtime_checks = False

    def __init__(self, rewrites: tuple, base: str):
        super().__init__(*ALL_ARMS[base])
        self.rewrites = rewrites

    def launch(self, schedule, problem, inputs):
        launch = super().launch(schedule, problem, inputs)
        source = launch.source
        for rewrite in self.rewrites:
            source = rewrite(source, schedule)
        return dataclasses.replace(launch, source=source)


def main() -> int:
    parser = options(__doc__)
    parser.add_argument("--base", default="catalog", choices=sorted(ALL_ARMS),
                        help="ternary_hooks.py's arm whose loop is taken apart (default: catalog)")  # fmt: skip
    parser.add_argument("--variants", type=arm_list(VARIANTS, first="catalog"), default=list(VARIANTS),
                        help=f"which of {','.join(VARIANTS)} to time, comma-separated, catalog first "
                             "(default: all)")  # fmt: skip
    args, device = start(__doc__, parser)
    rows = []
    print(f"{device.profile.device_name}: ternary_gemv stage_x=4's parts of {args.base}, "
          f"{args.rounds} interleaved rounds")  # fmt: skip
    names = args.variants
    print("| problem | schedule | " + " | ".join(f"{n} us" for n in names) + " | certified | method |")
    print("| --- " * (len(names) + 4) + "|")
    for shape, knobs in CPU_CASES if device.profile.is_cpu else CASES:
        problem = SPEC.problem(m=shape[0], k=shape[1])
        schedule = split_schedule(*knobs)
        inputs = SPEC.generate(problem, 0)
        expected = SPEC.reference(problem, schedule, inputs)
        row = {"schedule": schedule.key(), "problem": problem.key(), "base": args.base, "method": None}
        with ExitStack() as stack:
            prepared = {name: stack.enter_context(prepare(device, _Part(VARIANTS[name], args.base), schedule, problem,
                                                          inputs))
                        for name in names}  # fmt: skip
            row["catalog_certified"] = oracle.certify_prepared(prepared["catalog"], expected).ok
            time_interleaved(row, prepared, args.reps, args.rounds)
            row["clocks"] = sm_clock()
        rows.append(row)
        times = " | ".join(f"{row[f'{n}_us']:.1f}" for n in names)
        print(f"| {row['problem']} | {row['schedule']} | {times} | {row['catalog_certified']} | {row['method']} |",
              flush=True)  # fmt: skip
    write_result(args.out, "ternary-parts.json", device, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
