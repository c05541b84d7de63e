"""Where ternary_gemv stage_x=4's time goes, on session 20's catalog kernel (tile sums, lean
body; its weight loads not yet an iteration ahead, which the rewrites below do not handle):
the H200's two winners (wg128 rows4 vw4 tpr8; splits 1 on the tall m=65536,k=16384, 8 on
the wide m=16384,k=65536), each timed interleaved with three variants of its own loop pass
(built by benchmarks/ternary_probe_kernels.py's source rewrites; passes 1 and 3 unchanged):

- catalog: that kernel as `farm tune` ran it, certified against the reference;
- compute_only: every weight load replaced by a hash of its index (no weight traffic; the
  hash adds ~5 integer instructions a vector, ~4% of the loop's);
- no_dot: the weights loaded and decoded, every dot product replaced by an XOR of its
  operands (the loop without its 12 IDPs a word and row);
- compute_no_dot: both.

The variants' outputs are not the product (not certified). If compute_only reads about the
catalog's time, the weight loads are hidden and the loop's issue is the bound; if it reads
far below, the loads are not hidden behind the loop. Prints a table and writes
ternary-parts.json under --out.

    python3 benchmarks/ternary_parts.py --out DIR [--allow-cpu]
"""

from __future__ import annotations

import dataclasses
import sys
from contextlib import ExitStack

from interleaved import start, time_interleaved, write_result  # benchmarks/, on the path as the script's folder
from ternary_hooks import ALL_ARMS, CPU_CASES, SPEC, TALL, WIDE, _Hooks
from ternary_probe_kernels import compute_only_source, dp4a_no_dot_source

from farm.catalog.ternary_gemv import split_schedule
from farm.oracle import compare as oracle
from farm.oracle.launch import prepare

CASES = [(TALL, (128, 4, 4, 8, 1)), (WIDE, (128, 4, 4, 8, 8))]
VARIANTS = {
    "catalog": (),
    "compute_only": (compute_only_source,),
    "no_dot": (dp4a_no_dot_source,),
    "compute_no_dot": (compute_only_source, dp4a_no_dot_source),
}


class _Part(_Hooks):
    """The catalog's switches with its loop pass rewritten by `rewrites`, in order."""

    def __init__(self, rewrites: tuple):
        super().__init__(*ALL_ARMS["s20_catalog"])
        self.rewrites = rewrites

    def launch(self, schedule, problem, inputs):
        launch = super().launch(schedule, problem, inputs)
        source = launch.source
        for rewrite in self.rewrites:
            source = rewrite(source, schedule)
        return dataclasses.replace(launch, source=source)


def main() -> int:
    args, device = start(__doc__)
    rows = []
    print(f"{device.profile.device_name}: ternary_gemv stage_x=4's parts, {args.rounds} interleaved rounds")
    names = list(VARIANTS)
    print("| problem | schedule | " + " | ".join(f"{n} us" for n in names) + " | certified | method |")
    print("| --- " * (len(names) + 4) + "|")
    for shape, knobs in CPU_CASES if device.profile.is_cpu else CASES:
        problem = SPEC.problem(m=shape[0], k=shape[1])
        schedule = split_schedule(*knobs)
        inputs = SPEC.generate(problem, 0)
        expected = SPEC.reference(problem, schedule, inputs)
        row = {"schedule": schedule.key(), "problem": problem.key(), "method": None}
        with ExitStack() as stack:
            prepared = {name: stack.enter_context(prepare(device, _Part(rewrites), schedule, problem, inputs))
                        for name, rewrites in VARIANTS.items()}  # fmt: skip
            row["catalog_certified"] = oracle.certify_prepared(prepared["catalog"], expected).ok
            time_interleaved(row, prepared, args.reps, args.rounds)
        rows.append(row)
        times = " | ".join(f"{row[f'{n}_us']:.1f}" for n in names)
        print(f"| {row['problem']} | {row['schedule']} | {times} | {row['catalog_certified']} | {row['method']} |",
              flush=True)  # fmt: skip
    write_result(args.out, "ternary-parts.json", device, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
