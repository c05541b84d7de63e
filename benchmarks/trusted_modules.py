"""What naga's runtime checks cost the catalog's kernels: each kernel's schedule timed with its
shader module made the checked way (wgpu-py's `create_shader_module`: index clamps on every
dynamically indexed array, loop bounding) and the trusted way (wgpu-native 29's
`wgpuDeviceCreateShaderModuleTrusted` with runtime checks 0: neither; farm.gpu.modules). Since
session 14 the farm makes the built-in kernels' modules trusted itself (`KernelSpec.runtime_checks`);
this script forces each way on its own Device.

Per kernel: its realistic problem (or `--sizes`), the schedule stored for this topology in
`--db` (else the kernel's default), both modules certified against the reference, then timed
interleaved (`--rounds` rounds, the order rotated each round, `--reps` dispatches a timing,
GPU timestamps, each timing after a fifth of `farm bench`'s clock warm-up, then the heater
while the canary reads slow); the row gives the
median over rounds of each and trusted / checked. A trusted module that fails certification is
reported as such: an access the clamps hid would be undefined without them. Two Devices on the
one adapter, one making every module checked, the other trusted.

    python3 benchmarks/trusted_modules.py --db sqlite:///farm.db --out DIR [--kernels gemm fft] [--allow-cpu]
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

from interleaved import options, time_interleaved, write_result  # benchmarks/, on the path as the script's folder

from farm import catalog
from farm.cli.bench import bench_problems, tuned_schedules
from farm.gpu import Device, benchmark_device
from farm.oracle import compare as oracle
from farm.oracle.launch import prepare
from farm.tuning.tasks import parse_sizes


def modules(device: Device, checked: bool) -> Device:
    """`device`, every pipeline it compiles made with (`checked`) or without naga's runtime
    checks (farm.gpu.modules), whatever the kernel's `runtime_checks` asks for."""
    pipeline = device.pipeline

    def forced(source, entry_point="main", constants=None, label="", schedule=None, *_, **__):
        return pipeline(source, entry_point, constants, label, schedule, checked=checked)

    device.pipeline = forced
    return device


def measure(devices: dict[str, Device], spec, schedule, problem, reps: int, rounds: int) -> dict:
    inputs = spec.generate(problem, 0)
    expected = spec.reference(problem, schedule, inputs)
    row = {"kernel": spec.name, "problem": problem.key(), "schedule": schedule.key(), "method": "timestamp"}
    with ExitStack() as stack:
        prepared = {n: stack.enter_context(prepare(d, spec, schedule, problem, inputs)) for n, d in devices.items()}
        for name in devices:
            cert = oracle.certify_prepared(prepared[name], expected)
            row[f"{name}_certified"] = cert.ok
            if not cert.ok:
                row[f"{name}_failure"] = cert.message
        if not all(row[f"{name}_certified"] for name in devices):
            return row
        time_interleaved(row, prepared, reps, rounds)
        row["trusted_over_checked"] = row["trusted_us"] / row["checked_us"]
        return row


def main(argv: list[str] | None = None) -> int:
    parser = options(__doc__)
    parser.add_argument("--kernels", nargs="*", default=None, help="kernel names (default: the catalog's)")
    parser.add_argument("--sizes", default=None, help="problems as in farm tune --sizes (default: realistic sizes)")
    parser.add_argument("--db", default=None, help="the tuned winners to time (default: each kernel's default)")
    args = parser.parse_args(argv)
    sizes = parse_sizes(args.sizes) if args.sizes else {}
    checked = benchmark_device(args.allow_cpu)
    if checked is None:
        return 2
    devices = {"checked": modules(checked, True), "trusted": modules(Device(), False)}
    topology = checked.profile.topology_hash()
    winners = tuned_schedules(args.db, topology) if args.db else {}
    rows = []
    for name in args.kernels or catalog.names():
        spec = catalog.get(name)
        for problem in sizes.get(name) or bench_problems(name, checked.profile):
            schedule = winners.get((name, problem.key()), spec.default)
            row = measure(devices, spec, schedule, problem, args.reps, args.rounds)
            row["tuned"] = (name, problem.key()) in winners
            rows.append(row)
            ratio = row.get("trusted_over_checked")
            shown = f"{row['checked_us']:10.1f} {row['trusted_us']:10.1f} {ratio:6.3f}" if ratio else "not certified"
            print(f"{name:<14} {problem.key():<34} {shown}", flush=True)
    write_result(args.out, "trusted-modules.json", checked, reps=args.reps, rounds=args.rounds, rows=rows)
    print("| kernel | problem | checked us | trusted us | trusted / checked | method |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "trusted_over_checked" in r:
            print(f"| {r['kernel']} | {r['problem']} | {r['checked_us']:.1f} | {r['trusted_us']:.1f} "
                  f"| {r['trusted_over_checked']:.3f} | GPU timestamps, interleaved |")  # fmt: skip
        else:
            print(f"| {r['kernel']} | {r['problem']} | not certified: {r.get('trusted_failure', '')[:80]} | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
