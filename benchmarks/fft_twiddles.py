"""What the host's per-point twiddle specialization saves fft's Stockham kernels: each schedule
built twice on one Device, with session 14's twiddle lines (every point through `tw_mul`,
which selects the exact 1 and -1 at run time; its `tw`, the table's sign, is today's
branch-free one, so the A/B is the per-point specialization alone) and with
today's (`farm.catalog.fft_stockham._twiddles`: one k = 0 compare for all points, no -1, the
table read directly where every t is under n/2). Both certified against the reference and
checked equal bit for bit, then timed interleaved (`--rounds`, the order rotated each round,
`--reps` dispatches a timing, GPU timestamps, a fifth of `farm bench`'s clock warm-up before
each). The row gives the median over rounds of each and specialized / generic.

    python3 benchmarks/fft_twiddles.py --out DIR [--allow-cpu]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
from trusted_modules import time_interleaved  # benchmarks/, on the path as the script's folder

from farm import catalog
from farm.catalog import fft_stockham
from farm.gpu import Device, refuse_cpu
from farm.gpu.adapter import CpuAdapterRefused
from farm.oracle import compare as oracle
from farm.oracle.launch import prepare
from farm.schedule import Schedule

SPEC = catalog.get("fft")
ENTRY = "@compute @workgroup_size(WG)\nfn main_stockham"
TW_MUL = """
fn tw_mul(v: vec2<f32>, t: u32) -> vec2<f32> {
    return select(select(cmul(v, tw(t)), -v, t == HALF), v, t == 0u);
}
"""
SCHEDULES = [  # part 32's winner and runner-up shapes (radix 32), session 14's (radix 16)
    Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=2, single_buffer=1, stockham=32, swizzle=3),
    Schedule.of(workgroup_size=64, items_per_invocation=2, vector_width=2, single_buffer=1, stockham=32, swizzle=3),
    Schedule.of(workgroup_size=256, items_per_invocation=2, vector_width=2, single_buffer=1, stockham=16, swizzle=1),
]


def _generic(n: int, r: int, ns: int) -> list[str]:
    if ns == 1:
        return []
    return [f"let k = j % {ns}u;", *(f"v{q} = tw_mul(v{q}, k * {q * n // (r * ns)}u);" for q in range(1, r))]


@contextmanager
def generic_twiddles():
    """Within: fft's Stockham kernels emitted with session 14's twiddle lines and `tw_mul`."""
    emit, template = fft_stockham._twiddles, type(SPEC).template
    fft_stockham._twiddles = _generic
    type(SPEC).template = lambda self: template(self).replace(ENTRY, TW_MUL + ENTRY)
    try:
        yield
    finally:
        fft_stockham._twiddles, type(SPEC).template = emit, template


def measure(device: Device, schedule: Schedule, problem, reps: int, rounds: int) -> dict:
    inputs = SPEC.generate(problem, 0)
    expected = SPEC.reference(problem, schedule, inputs)
    row = {"schedule": schedule.key(), "problem": problem.key(), "method": "timestamp"}
    with ExitStack() as stack:
        with generic_twiddles():
            generic = stack.enter_context(prepare(device, SPEC, schedule, problem, inputs))
        prepared = {
            "generic": generic,
            "specialized": stack.enter_context(prepare(device, SPEC, schedule, problem, inputs)),
        }
        outputs = {}
        for name, p in prepared.items():
            cert = oracle.certify_prepared(p, expected)
            row[f"{name}_certified"] = cert.ok
            outputs[name] = p.outputs()["y"]
        row["bit_for_bit"] = bool(np.array_equal(outputs["generic"], outputs["specialized"]))
        if not (row["generic_certified"] and row["specialized_certified"]):
            return row
        time_interleaved(row, prepared, reps, rounds)
        row["specialized_over_generic"] = row["specialized_us"] / row["generic_us"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args(argv)
    device = Device()
    try:
        refuse_cpu(device.profile, args.allow_cpu, "benchmark")
    except CpuAdapterRefused as exc:
        print(exc, file=sys.stderr)
        return 2
    problem = SPEC.problem(n=256, batch=64) if device.profile.is_cpu else SPEC.problem(n=1024, batch=16384)
    rows = []
    print("| schedule | generic us | specialized us | specialized / generic | bit for bit | method |")
    print("| --- | --- | --- | --- | --- | --- |")
    for schedule in SCHEDULES:
        row = measure(device, schedule, problem, args.reps, args.rounds)
        rows.append(row)
        if "specialized_over_generic" in row:
            print(f"| {row['schedule']} | {row['generic_us']:.1f} | {row['specialized_us']:.1f} "
                  f"| {row['specialized_over_generic']:.3f} | {row['bit_for_bit']} | GPU timestamps, interleaved |",
                  flush=True)  # fmt: skip
        else:
            print(f"| {row['schedule']} | not certified: {row} | | | | |", flush=True)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"date": date, "device": device.profile.summary, "problem": problem.key(), "rows": rows}
    (args.out / "fft-twiddles.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
