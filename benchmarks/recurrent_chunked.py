"""The chunked recurrence's landscape against flash-linear-attention, kernel-only.

For each case: the chunked schedules (form=1: three passes; form=2: one workgroup walking
the chunks) valid on the adapter (six of each; --all-schedules for every one), timed by GPU
timestamps (the farm's own `time_calls`, warm-up rounds included), next to FLA's
`fused_recurrent_rwkv6` and `chunk_rwkv6` timed by CUDA-graph replay (farm.cli.vendor) on
the same inputs. Prints a table and writes JSON (after every case, so a cut-off run keeps
what it measured).

With --ablate, the best form-1 schedule's state and output passes are also timed alone
with blocks of their WGSL rendered empty (`chunked_sources(drop=...)`: the products, the
attention matrix, the loads), on the chunk states a real run left: where a pass's time
goes, block by block (the results of those variants are wrong; only their time counts).

    python benchmarks/recurrent_chunked.py --out DIR [--case B,H,VH,T,L,E ...] [--ablate]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from farm import catalog
from farm.catalog.recurrent_chunked import chunked_schedules, chunked_sources
from farm.gpu import Device
from farm.oracle.launch import prepare
from farm.schedule import Schedule

# The long cases first: each case costs ~60-90 s on an H200 (27 schedules, each compiled
# and warmed up, and FLA's Triton kernels compiled on first use).
CASES = [(1, 8, 8, 1024, 64, 768), (8, 8, 8, 1024, 64, 256), (1, 8, 8, 4096, 64, 768)] + [
    (1, 8, 1, 64, 64, e) for e in (96, 384, 768)
]


def fla_times(problem, inputs) -> dict[str, float]:
    """FLA's two kernels on our recurrence, kernel-only by CUDA-graph replay (µs), fp32 in fp32
    (before session 14 its chunk kernel's dots ran in TF32)."""
    try:
        import torch

        from farm.cli import vendor
    except ImportError as exc:
        return {"error": str(exc)}
    vendor.set_vendor_fp32(torch, "ieee")  # as farm bench: FLA's chunk dots in fp32, not TF32
    t = {k: torch.from_numpy(v).cuda() for k, v in inputs.items()}
    out = {}
    for label, chunked in (("fla_fused_us", False), ("fla_chunk_us", True)):
        try:
            fn, _, _ = vendor._fla_recurrent(torch, problem, t, chunked=chunked)
            ns, method = vendor.vendor_kernel_ns(torch, fn, reps=20)
            out[label], out[label + "_method"] = ns / 1e3, method
        except Exception as exc:  # noqa: BLE001 - report, keep the landscape
            out[label + "_error"] = str(exc)[:200]
    return out


def pass_times(device: Device, calls: list, reps: int = 10) -> list[float]:
    """Each pass's own GPU time (us, median over reps) inside one submission of all passes:
    a timestamp pair around every pass, so no pass is timed cold on its own (timing a pass
    alone after the others read 1.5-3x high on the H200: clocks and caches)."""
    import numpy as np

    wgpu, gpu = device._wgpu, device.device
    count = 2 * len(calls) * reps
    query_set = gpu.create_query_set(type="timestamp", count=count)
    resolve = gpu.create_buffer(size=8 * count, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    for rep in range(reps):
        encoder = gpu.create_command_encoder()
        for index, (pipeline, bind_group, groups) in enumerate(calls):
            at = 2 * (rep * len(calls) + index)
            writes = {"query_set": query_set, "beginning_of_pass_write_index": at, "end_of_pass_write_index": at + 1}
            device._encode_pass(encoder, pipeline, bind_group, groups, writes)
        gpu.queue.submit([encoder.finish()])
    encoder = gpu.create_command_encoder()
    encoder.resolve_query_set(query_set, 0, count, resolve, 0)
    gpu.queue.submit([encoder.finish()])
    stamps = np.frombuffer(bytes(gpu.queue.read_buffer(resolve)), dtype=np.uint64).astype(np.int64)
    resolve.destroy()
    query_set.destroy()
    spans = (stamps[1::2] - stamps[0::2]).reshape(reps, len(calls)) / 1e3
    return [float(x) for x in np.median(spans, axis=0)]


# Blocks of each pass rendered empty, per variant (farm.catalog.recurrent_chunked.chunked_sources)
ABLATIONS = {
    "state": {"full": (), "no_products": ("FMA",), "no_loads": ("LOAD_QS", "LOAD_V")},
    "output": {
        "full": (),
        "no_attention": ("ATTENTION",),
        "no_state_products": ("STATE_FMA",),
        "no_value_products": ("ATT_FMA",),
        "no_products": ("ATTENTION", "STATE_FMA", "ATT_FMA"),
        "no_loads": ("LOAD_Q", "LOAD_V", "LOAD_S"),
    },
}
PASS_BINDINGS = {"state": (0, 1, 3, 6, 7), "output": (0, 1, 3, 4, 6, 7, 8)}  # 8: attention_pass=1's scratch


def _used(source: str, bindings: tuple[int, ...]) -> tuple[int, ...]:
    """The bindings whose variable the source still reads or writes (wgpu's automatic
    layout leaves out the others, and a variant with its loads removed uses fewer)."""
    names = dict(re.findall(r"@binding\((\d+)\) var<[^>]+> (\w+)", source))
    code = re.sub(r"//[^\n]*", "", source)
    return tuple(b for b in bindings if str(b) in names and len(re.findall(rf"\b{names[str(b)]}\b", code)) > 1)


def ablation_times(device: Device, prepared, reps: int = 20) -> dict[str, dict[str, float]]:
    """Each pass variant of ABLATIONS timed alone (GPU timestamps, time_calls median, µs)
    on the prepared launch's buffers, after one real run filled its chunk states."""
    prepared.run()
    calls = prepared.calls()  # [attention (attention_pass=1),] state, scan, output
    groups = {"state": calls[-3][2], "output": calls[-1][2]}
    out: dict[str, dict[str, float]] = {}
    for name, variants in ABLATIONS.items():
        index = 0 if name == "state" else 2  # in chunked_sources' (state, scan, output)
        out[name] = {}
        for variant, drop in variants.items():
            source = chunked_sources(prepared.schedule, prepared.problem, frozenset(drop))[index]
            pipeline = device.pipeline(source, "main", None, f"ablate {name} {variant}")
            bind = device.bind(pipeline, prepared.buffers, None, _used(source, PASS_BINDINGS[name]))
            timing = device.time_calls([(pipeline, bind, groups[name])], warmup=3, reps=reps)
            out[name][variant] = timing.median_ns / 1e3
    return out


# The schedules timed on every case (the full 27 cost ~60-90 s a case): each chunk size at
# the widest column block that fits 48 KiB of workgroup memory, and a narrower one.
QUICK = [(256, 16, 64), (256, 32, 64), (256, 64, 16), (128, 16, 32), (128, 32, 32), (256, 32, 32)]
# The walked form (form=2): one workgroup per (b, h, column block), so narrow blocks give the
# long cases' few heads more workgroups; wide ones fewer, longer-lived ones.
QUICK_WALK = [(64, 16, 16), (128, 16, 16), (128, 16, 32), (256, 16, 64), (128, 32, 16), (256, 32, 32)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--case", action="append", default=[], help="B,H,VH,T,L,E")
    parser.add_argument("--all-schedules", action="store_true", help="all 27 chunked schedules (slow)")
    parser.add_argument("--no-fla", action="store_true", help="skip flash-linear-attention")
    parser.add_argument("--ablate", action="store_true", help="time the best form-1 passes with blocks removed")
    args = parser.parse_args()
    cases = [tuple(int(x) for x in c.split(",")) for c in args.case] or CASES
    spec = catalog.get("recurrent")
    device = Device()
    schedules = (
        chunked_schedules()
        if args.all_schedules
        else [
            Schedule.of(workgroup_size=wg, form=form, chunk_size=c, block_e=eb, **extra)
            for form, quick in ((1, QUICK), (2, QUICK_WALK))
            for extra in ({}, {"attention_pass": 1})
            for wg, c, eb in quick
        ]
    )
    rows: list[dict] = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{time.strftime('%Y-%m-%d')}-h200-recurrent-chunked.json"
    meta = {
        "adapter": device.profile.summary,
        "method": "ours: GPU timestamps (time_calls median, 20 reps; passes: a timestamp pair around each pass "
        "in one submission, median of 10; ablation: each pass variant alone, time_calls median of 20); "
        "FLA: CUDA-graph replay (vendor_kernel_ns)",
    }
    for dims in cases:
        problem = spec.problem(**dict(zip(spec.dims, dims, strict=True)))
        inputs = spec.generate(problem, seed=0)
        times: dict[str, float] = {}
        methods: set[str] = set()  # how ours were timed: "timestamp" on a GPU
        for schedule in [spec.default, *schedules]:
            if spec.invalid_reason(schedule, problem, device.profile):
                continue
            with prepare(device, spec, schedule, problem, inputs) as prepared:
                timing = device.time_calls(prepared.calls(), warmup=3, reps=20, schedule=schedule)
            times[schedule.key()] = timing.median_ns / 1e3
            methods.add(timing.method)
        chunked = {k: v for k, v in times.items() if '"form":1' in k}
        walked = {k: v for k, v in times.items() if '"form":2' in k}
        best = min(chunked, key=chunked.get)
        best_walk = min(walked, key=walked.get) if walked else None
        with prepare(device, spec, Schedule.from_key(best), problem, inputs) as prepared:
            device.time_calls(prepared.calls(), warmup=3, reps=5)  # clocks up
            passes = pass_times(device, prepared.calls())
            ablation = ablation_times(device, prepared) if args.ablate else None
        b, h, vh, t, l_dim, e = dims
        row = {
            "case": dims,
            "default_stepwise_us": times.get(spec.default.key()),
            "best_chunked": best,
            "best_chunked_us": chunked[best],
            "best_chunked_passes_us": passes,  # [attention,] state, scan, output: one submission, a pair each
            "chunk_states_mb": 4 * b * h * -(-t // Schedule.from_key(best)["chunk_size"]) * l_dim * e / 1e6,
            "chunked_timed": len(chunked),
            "best_walk": best_walk,  # form 2: one dispatch, its own timing only (no passes)
            "best_walk_us": walked.get(best_walk),
            "walk_timed": len(walked),
            "all_us": times,
            "kernel_method": ",".join(sorted(methods)),  # ours: every *_us above and ablation_us; FLA's: fla_*_method
            "ablation_us": ablation,
        } | ({} if args.no_fla else fla_times(problem, inputs))
        rows.append(row)
        print(
            f"{dims}: stepwise default {row['default_stepwise_us']:.1f} us, best chunked {chunked[best]:.1f} us "
            f"({best}; passes {[round(x, 1) for x in passes]}; states {row['chunk_states_mb']:.0f} MB), "
            f"best walked {row['best_walk_us'] or float('nan'):.1f} us, "
            f"(ours by {row['kernel_method']}), FLA fused {row.get('fla_fused_us', float('nan')):.1f} "
            f"chunk {row.get('fla_chunk_us', float('nan')):.1f} us ({row.get('fla_fused_us_method', 'not run')})",
            flush=True,
        )
        if ablation:
            for name, variants in ablation.items():
                print(f"  {name} pass: " + ", ".join(f"{k} {v:.1f} us" for k, v in variants.items()), flush=True)
        path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(path)


if __name__ == "__main__":
    main()
