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
- `private_array_loop` / `private_array_unrolled`: 64 steps of 16 dependent FMA pairs over a
  private `array<vec4<f32>, 16>` indexed by an inner loop's counter, against the same over 16
  named vars with the inner loop unrolled by the host: a loop row well above the unrolled one
  says the driver keeps loop-indexed private arrays in (slow) local memory, not registers;
- `dynamic_component_loop` / `dynamic_component_unrolled`: 64 steps of 4 dependent FMAs on a
  vec4 written and read as x[k] in a 4-step loop, against .x/.y/.z/.w: a gap says indexing a
  vector by a loop variable spills it (or serializes it through selects);
- `loads_loop_16` / `loads_unrolled_16`: each thread moves 16 coalesced f32 loads from a
  read-only buffer of 64-128 MiB (every workgroup its own 16 KiB) into a workgroup array, in
  a strided loop (load, store, next) against 16 loads into named lets before the 16 stores;
  a loop row well above the unrolled one says the loop serializes the loads' DRAM latency.
Each case: one dispatch of GROUPS workgroups of 256 threads; the table gives the
dispatch's median and ns per workgroup. Prints a table; writes wgsl-overheads.json, with the
adapter's full feature list (and prints whether it has `cooperative-matrix`).

    python3 benchmarks/wgsl_overheads.py --out DIR [--allow-cpu] [--groups N] [--reps N]
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
# the loads pair's input: read-only, a power of two of f32 (addresses wrap with & (length - 1))
SRC_DECL = "@group(0) @binding(1) var<storage, read> src: array<f32>;"
SRC_MAX_BYTES = 128 << 20  # 8192 workgroups' 16 KiB each: no workgroup rereads another's data
SRC_MIN_BYTES = 64 << 20


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
    out.update(_private_array_cases())
    out.update(_dynamic_component_cases())
    out.update(_load_cases())
    return out


def _private_array_cases() -> dict[str, str]:
    """16 vec4 of private state, 64 steps over all 16: r[k] in loops against r0..r15 unrolled.
    Every step feeds acc into the next (acc += old*q; r = old*m + acc) and q comes from the
    outer counter, so nothing is constant and no step can be folded."""
    m = "    let m = vec4<f32>(0.5, 0.499, 0.498, 0.497);"
    q = "        let q = vec4<f32>(f32(s) * (1.0 / 4096.0) + 0.001);"  # grows acc by ~e^18 at most
    loop = f"""{m}
    var r: array<vec4<f32>, 16>;
    for (var k = 0u; k < 16u; k++) {{
        r[k] = acc + vec4<f32>(f32(k));
    }}
    for (var s = 0u; s < 64u; s++) {{
{q}
        for (var k = 0u; k < 16u; k++) {{
            let old = r[k];
            acc += old * q;
            r[k] = old * m + acc;
        }}
    }}
    for (var k = 0u; k < 16u; k++) {{
        acc += r[k];
    }}"""
    ks = range(16)
    unrolled = "\n".join(
        [m, *(f"    var r{k} = acc + vec4<f32>({k}.0);" for k in ks), "    for (var s = 0u; s < 64u; s++) {", q]
        + [f"        let old{k} = r{k};\n        acc += old{k} * q;\n        r{k} = old{k} * m + acc;" for k in ks]
        + ["    }", *(f"    acc += r{k};" for k in ks)]
    )
    return {"private_array_loop": _kernel("", loop), "private_array_unrolled": _kernel("", unrolled)}


def _dynamic_component_cases() -> dict[str, str]:
    """A vec4 x, 64 steps of x[k] = x[k] * x[(k+1) & 3] + q for k = 0..3 (each reads the
    component the previous wrote, for k = 3): by a loop index against .x/.y/.z/.w."""
    q = "        let q = f32(s) * (1.0 / 4096.0) + 0.001;"
    loop = f"""    var x = acc;
    for (var s = 0u; s < 64u; s++) {{
{q}
        for (var k = 0u; k < 4u; k++) {{
            x[k] = x[k] * x[(k + 1u) & 3u] + q;
        }}
    }}
    acc += x;"""
    c = "xyzw"
    steps = "\n".join(f"        x.{c[k]} = x.{c[k]} * x.{c[(k + 1) % 4]} + q;" for k in range(4))
    unrolled = f"""    var x = acc;
    for (var s = 0u; s < 64u; s++) {{
{q}
{steps}
    }}
    acc += x;"""
    return {"dynamic_component_loop": _kernel("", loop), "dynamic_component_unrolled": _kernel("", unrolled)}


def _load_cases() -> dict[str, str]:
    """16 coalesced f32 loads a thread (workgroup g reads src[g*4096 ..][.. 4096], wrapped)
    into a 16 KiB workgroup array: a load-store loop against 16 lets first. Each thread then
    sums the 16 elements thread lid+1 stored (conflict-free), so every load is live."""
    decl = f"{SRC_DECL}\nvar<workgroup> buf: array<f32, 4096>;"
    setup = "    let base = g * 4096u;\n    let mask = arrayLength(&src) - 1u;"
    read = "\n".join(["    workgroupBarrier();"]
                     + [f"    acc.x += buf[{256 * j}u + ((lid + 1u) & 255u)];" for j in range(16)])  # fmt: skip
    loop = f"""{setup}
    for (var i = lid; i < 4096u; i += 256u) {{
        buf[i] = src[(base + i) & mask];
    }}
{read}"""
    offsets = [f"{256 * j}u" for j in range(16)]
    unrolled = "\n".join(
        [setup, *(f"    let x{j} = src[(base + lid + {o}) & mask];" for j, o in enumerate(offsets))]
        + [f"    buf[lid + {o}] = x{j};" for j, o in enumerate(offsets)]
        + [read]
    )
    return {"loads_loop_16": _kernel(decl, loop), "loads_unrolled_16": _kernel(decl, unrolled)}


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
    features = sorted(device.adapter.features)
    coop = "cooperative-matrix" in features
    print(f"{device.profile.summary}: cooperative-matrix {'IS' if coop else 'is NOT'} among the adapter's features")
    out = device.empty(16 * args.groups, "storage")
    limit = device.adapter.limits.get("max-storage-buffer-binding-size", SRC_MAX_BYTES)
    src_bytes = SRC_MAX_BYTES if limit >= SRC_MAX_BYTES else SRC_MIN_BYTES
    src = device.empty(src_bytes, "read")  # wgpu zero-fills it; the values do not matter
    rows = []
    for name, source in cases().items():
        pipeline = device.pipeline(source, "main", None, f"overheads {name}")
        bindings = (0, 1) if SRC_DECL in source else (0,)  # layout "auto" has only the bindings used
        calls = [(pipeline, device.bind(pipeline, [out, src], bindings=bindings), args.groups)]
        timing = device.time_calls(calls, warmup=3, reps=args.reps)
        rows.append({"case": name, "dispatch_us": timing.median_ns / 1e3, "ns_per_workgroup":
                     timing.median_ns / args.groups, "method": timing.method})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    device.release(out, src)
    result = {"adapter": device.profile.summary, "date": time.strftime("%Y-%m-%d"), "groups": args.groups,
              "workgroup_size": WG, "src_bytes": src_bytes, "cooperative_matrix": coop, "features": features,
              "rows": rows}  # fmt: skip
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "wgsl-overheads.json").write_text(json.dumps(result, indent=2))
    print(f"\n{result['adapter']}, {args.groups} workgroups of {WG}, GPU timestamps (median of {args.reps})")
    print("| case | dispatch us | ns per workgroup |\n| --- | --- | --- |")
    for row in rows:
        print(f"| {row['case']} | {row['dispatch_us']:.1f} | {row['ns_per_workgroup']:.1f} |")
    print(f"cooperative-matrix among the adapter's {len(features)} features: {coop}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
