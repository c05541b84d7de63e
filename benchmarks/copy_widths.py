"""Is fft's global I/O what holds it at 0.80 of cuFFT? fft n=1024 x 16384 moves 134 MB in and
134 MB out; its best schedule (radix 16 wg64 T1 sw1, 84.3 us on the H200) runs at 3.18 TB/s
where `farm bench`'s vec4 copy kernel moves 4.15 TB/s and cuFFT 3.96. Its lanes load and
store one 8-byte point each (vec2<f32>), 16 of them a thread, 64 threads and one transform
a workgroup. This times, on the same buffers, copies that differ in one thing at a time:

- `copy vec4` / `copy vec2` / `copy f32`: one element a thread, 256 threads a workgroup (the
  bench's ceiling, and the same with 8- and 4-byte lanes);
- `fft io vec2`: fft's pattern without its arithmetic: each of 64 threads loads its 16
  points (stride 64 within the workgroup's 1024) into registers, then stores them;
- `fft io vec2 + exchange`: the same through workgroup memory between load and store (write
  16, barrier, read 16, barrier: the cost of one exchange, conflict-free);
- `fft io vec4`: the same 16 points a thread as 8 loads of two adjacent points.

Each is checked (the output equals the input), then timed interleaved (`--rounds`, the
order rotated each round, `--reps` dispatches a timing after a fifth of `farm bench`'s
clock warm-up, GPU timestamps). Prints GB/s (read + write) and the ratio to `copy vec4`;
writes copy-widths.json under --out. If `fft io vec2` reads near 3.2 TB/s, the 8-byte
lanes and this access shape are fft's limit and 16-byte lanes are the next kernel change;
if it reads near the vec4 copy, the cost is in the exchanges or the arithmetic.

    python3 benchmarks/copy_widths.py --out DIR [--allow-cpu]
"""

from __future__ import annotations

import statistics
import sys

import numpy as np
from interleaved import Calls, options, rounds_us, write_result  # benchmarks/, on the path as the script's folder

from farm.cli.bench import COPY_WGSL
from farm.gpu import benchmark_device

GPU_BYTES = 16384 * 1024 * 8  # fft n=1024 x 16384's input (and output)
CPU_BYTES = 1 << 20


def fft_io(vector: int, loads: int, threads: int, exchange: bool) -> str:
    """WGSL: each workgroup moves threads·loads elements of `vec{vector}<f32>`, each thread
    `loads` of them `threads` apart into registers and back out (through workgroup memory
    in between with `exchange`)."""
    t = f"vec{vector}<f32>"
    per = threads * loads
    lines = [f"var v{q} = src[base + lid + {q * threads}u];" for q in range(loads)]
    if exchange:
        lines += [f"s[lid + {q * threads}u] = v{q};" for q in range(loads)] + ["workgroupBarrier();"]
        lines += [f"v{q} = s[lid + {q * threads}u];" for q in range(loads)] + ["workgroupBarrier();"]
    lines += [f"dst[base + lid + {q * threads}u] = v{q};" for q in range(loads)]
    shared = f"var<workgroup> s: array<{t}, {per}>;\n" if exchange else ""
    body = "\n    ".join(lines)
    return f"""
@group(0) @binding(0) var<storage, read> src: array<{t}>;
@group(0) @binding(1) var<storage, read_write> dst: array<{t}>;
{shared}@compute @workgroup_size({threads})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
    let group = wid.x + wid.y * nwg.x;
    if ((group + 1u) * {per}u > arrayLength(&src)) {{
        return;
    }}
    let base = group * {per}u;
    {body}
}}
"""


# (label, WGSL, bytes an element, elements a workgroup); the flat copies are farm bench's
# vec4 copy kernel (its bandwidth ceiling) and the same with narrower lanes
VARIANTS = [
    ("copy vec4", COPY_WGSL, 16, 256),
    ("copy vec2", COPY_WGSL.replace("vec4<f32>", "vec2<f32>"), 8, 256),
    ("copy f32", COPY_WGSL.replace("vec4<f32>", "f32"), 4, 256),
    ("fft io vec2", fft_io(2, 16, 64, False), 8, 1024),
    ("fft io vec2 + exchange", fft_io(2, 16, 64, True), 8, 1024),
    ("fft io vec4", fft_io(4, 8, 64, False), 16, 512),
]


def main(argv: list[str] | None = None) -> int:
    args = options(__doc__).parse_args(argv)
    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    nbytes = CPU_BYTES if device.profile.is_cpu else GPU_BYTES
    data = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    src, dst = device.upload(data), device.empty(nbytes)
    rows, arms = {}, {}
    try:
        for label, wgsl, size, per_group in VARIANTS:
            pipeline = device.pipeline(wgsl, "main", label=label, checked=False)
            calls = [(pipeline, device.bind(pipeline, [src, dst]), -(-(nbytes // size) // per_group))]
            reads = [("dst", dst, np.float32, nbytes // 4, None)]
            copied = device.run_and_read(calls, [dst], reads).collect()["dst"]  # dst zeroed first
            rows[label] = {"variant": label, "lane_bytes": size, "checked": bool(np.array_equal(copied, data)),
                           "rounds_us": [], "method": None}  # fmt: skip
            if rows[label]["checked"]:
                arms[label] = Calls(device, calls)

        def record(label: str, timing) -> None:
            rows[label]["method"] = f"{timing.method}, interleaved"

        for label, values in rounds_us(arms, args.reps, args.rounds, after=record).items():
            rows[label]["rounds_us"] = values
    finally:
        device.release(src, dst)
    for row in rows.values():
        if row["rounds_us"]:
            row["us"] = statistics.median(row["rounds_us"])
            row["gb_s"] = 2 * nbytes / (row["us"] * 1e3)
    ceiling = rows["copy vec4"].get("gb_s")  # farm bench's ceiling
    print(f"{device.profile.device_name}: {nbytes} bytes in and out, {args.rounds} interleaved rounds")
    print("| variant | lane bytes | us | GB/s (read + write) | / copy vec4 | method | checked |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows.values():
        if "gb_s" in row and ceiling:
            row["of_copy_vec4"] = row["gb_s"] / ceiling
            print(f"| {row['variant']} | {row['lane_bytes']} | {row['us']:.1f} | {row['gb_s']:.0f} "
                  f"| {row['of_copy_vec4']:.3f} | {row['method']} | {row['checked']} |")  # fmt: skip
        else:
            print(f"| {row['variant']} | {row['lane_bytes']} | - | - | - | - | {row['checked']} |")
    args.out.mkdir(parents=True, exist_ok=True)
    write_result(args.out, "copy-widths.json", device, bytes=nbytes, rows=list(rows.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
