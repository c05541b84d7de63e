"""What a short workgroup costs before its work: probes for the chunked recurrence's gap (issue 17).

The chunked recurrence's passes are many short workgroups (a few microseconds of FMAs
each) and run 10-50x slower on the H200 than their FLOPs and bytes predict, while gemm's
long-lived workgroups reach 35 TFLOP/s through the same toolchain. This times, by GPU
timestamps (farm.gpu's `time_calls`), dispatches whose workgroups do almost nothing but
one of the things a chunked pass does, so the per-workgroup price of each shows:
- `empty`: one store per workgroup (the launch and the grid);
- `wgmem_<KiB>`: a workgroup array of that size, each thread writing and reading one
  element around a barrier (WebGPU zero-initializes workgroup memory at every workgroup's
  start: a cost that grows with the array, whoever does it);
- `barriers_<n>`: n barriers in a loop;
- `fma_loop` / `fma_unrolled`: 256 dependent vec4 steps (a multiply and an FMA, acc*(acc*m)+c,
  which no compiler can fold into one) a thread in a loop (WGSL loops get wgpu's loop
  bounding) and unrolled by the host.
Each case: one dispatch of GROUPS workgroups of 256 threads; the table gives the
dispatch's median and ns per workgroup. Prints a table; writes wgsl-overheads.json.

    python3 benchmarks/wgsl_overheads.py --out DIR [--allow-cpu] [--groups N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from farm.gpu import Device

WG = 256
HEAD = """
@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
"""


def _kernel(decl: str, body: str) -> str:
    return f"""{HEAD}
{decl}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
    let g = wid.x + wid.y * nwg.x;
    var acc = vec4<f32>(f32(lid) / 256.0, 0.1, 0.2, 0.3);
{body}
    if (lid == 0u || acc.x == -1.0) {{  // every thread's acc may be stored: none of its work is dead
        out[g] = acc;
    }}
}}
"""


def cases() -> dict[str, str]:
    out = {"empty": _kernel("", "")}
    for kib in (4, 16, 32, 48):
        n = kib * 1024 // 16
        body = f"""    buf[lid % {n}u] = acc;
    workgroupBarrier();
    acc += buf[(lid + 1u) % {n}u];"""
        out[f"wgmem_{kib}"] = _kernel(f"var<workgroup> buf: array<vec4<f32>, {n}>;", body)
    for count in (2, 8, 32):
        body = f"""    for (var i = 0u; i < {count}u; i++) {{
        buf[lid] = acc;
        workgroupBarrier();
        acc += buf[(lid + i + 1u) % {WG}u] * 0.5;
        workgroupBarrier();
    }}"""
        out[f"barriers_{2 * count}"] = _kernel(f"var<workgroup> buf: array<vec4<f32>, {WG}>;", body)
    # a step no compiler may fold across iterations: on the H200 (2026-12-01) the affine
    # step acc * m + 0.5 unrolled ran in the empty kernel's time (256 affine maps folded
    # into one), which made the loop look 23x slower than it is
    step = "acc = acc * (acc * m) + vec4<f32>(0.25);"
    loop = f"""    let m = vec4<f32>(0.499, 0.498, 0.497, 0.496);
    for (var i = 0u; i < 256u; i++) {{
        {step}
    }}"""
    out["fma_loop"] = _kernel("", loop)
    unrolled = "    let m = vec4<f32>(0.499, 0.498, 0.497, 0.496);\n" + "\n".join([f"    {step}"] * 256)
    out["fma_unrolled"] = _kernel("", unrolled)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--groups", type=int, default=8192, help="workgroups per dispatch")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args()
    device = Device()
    if device.profile.is_cpu and not args.allow_cpu:
        print(f"refusing to time on CPU adapter {device.profile.summary}; pass --allow-cpu", file=sys.stderr)
        return 2
    out = device.empty(16 * args.groups, "storage")
    rows = []
    for name, source in cases().items():
        pipeline = device.pipeline(source, "main", None, f"overheads {name}")
        calls = [(pipeline, device.bind(pipeline, [out]), args.groups)]
        timing = device.time_calls(calls, warmup=3, reps=args.reps)
        rows.append({"case": name, "dispatch_us": timing.median_ns / 1e3, "ns_per_workgroup":
                     timing.median_ns / args.groups, "method": timing.method})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    device.release(out)
    result = {"adapter": device.profile.summary, "date": time.strftime("%Y-%m-%d"), "groups": args.groups,
              "workgroup_size": WG, "rows": rows}  # fmt: skip
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "wgsl-overheads.json").write_text(json.dumps(result, indent=2))
    print(f"\n{result['adapter']}, {args.groups} workgroups of {WG}, GPU timestamps (median of {args.reps})")
    print("| case | dispatch us | ns per workgroup |\n| --- | --- | --- |")
    for row in rows:
        print(f"| {row['case']} | {row['dispatch_us']:.1f} | {row['ns_per_workgroup']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
