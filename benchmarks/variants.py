"""Time hand-picked schedule variants against the schedules that won on the H200 in the
first session (2026-11-30): session 1's untimed knobs (topk select, ternary staged x, gemm
shared vec4/padding/warp layout, fft Stockham), session 2's recurrent chunked kernel and
ternary pair lookup table (benchmarks/NOTES.md has the predictions and measurements).

Each schedule is certified against the reference, then timed (TrialRunner: inputs resident,
warm-up until steady). Prints one table and writes variants.json under --out. A benchmark,
not a test; refuses a CPU adapter unless --allow-cpu (then with small sizes).

    python benchmarks/variants.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from farm import catalog
from farm.gpu import benchmark_device
from farm.schedule import Problem, Schedule
from farm.tuning.job import Job
from farm.tuning.runner import TrialRunner


def s(**knobs: int) -> Schedule:
    return Schedule.of(**knobs)


# The 4096^3 winner of 2026-11-30 on the H200.
GEMM_WINNER = dict(
    workgroup_size=64,
    items_per_invocation=64,
    vector_width=4,
    double_buffer=0,
    reg_m=8,
    reg_n=8,
    tile_k=8,
    tile_m=64,
    tile_n=64,
)

# The H200 winners of 2026-12-02 (session 14, checked modules): gemm 4096^3 and fft.
GEMM_S14 = dict(
    workgroup_size=256, items_per_invocation=64, vector_width=4, double_buffer=0, pad_shared=1, reg_m=8,
    reg_n=8, shared_vec4=1, tile_k=16, tile_m=128, tile_n=128,
)  # fmt: skip
_S15_8X4 = dict(
    workgroup_size=256, items_per_invocation=32, vector_width=4, pad_shared=1, reg_m=8, reg_n=4, shared_vec4=1,
    tile_k=16, tile_m=64, tile_n=128,
)  # fmt: skip
_S15_8X8 = GEMM_S14 | dict(warp_cols=8)
_S15_SMALL = dict(
    workgroup_size=64, items_per_invocation=32, vector_width=4, pad_shared=1, reg_m=8, reg_n=4, shared_vec4=1,
    tile_k=16, tile_m=32, tile_n=64,
)  # fmt: skip
GEMM_S15 = {  # size -> (label, knobs): part 32's winner first, then a runner-up shape
    1024: [("64x128 8x4 wc8", _S15_8X4 | dict(warp_cols=8)), ("32x64 8x4", _S15_SMALL)],
    2048: [("128x128 8x8 wc8", _S15_8X8), ("64x128 8x4", _S15_8X4 | dict(tile_k=8))],
    4096: [("64x128 8x4 wc8", _S15_8X4 | dict(warp_cols=8)), ("128x128 8x8", GEMM_S14)],
}
_S15_DB2 = _S15_8X4 | dict(workgroup_size=128, tile_n=64, double_buffer=2, warp_cols=8)  # part 34's 1024^3 winner
GEMM_S16 = {  # size -> (label, knobs): the best of parts 32 and 34, then a runner-up shape
    1024: [("64x64 8x4 db2 wc8", _S15_DB2), ("64x128 8x4 wc8", _S15_8X4 | dict(warp_cols=8))],
    2048: [("128x128 8x8 wc8", _S15_8X8), ("64x128 8x4 k8", _S15_8X4 | dict(tile_k=8, pad_shared=0))],
    4096: [("64x128 8x4 wc8", _S15_8X4 | dict(warp_cols=8)), ("128x128 8x8", GEMM_S14)],
}
FFT_S14 = dict(workgroup_size=256, items_per_invocation=2, vector_width=2, single_buffer=1, stockham=16, swizzle=1)


def tile(bm: int, bn: int, tm: int, tn: int, bk: int = 16, db: int = 0, wc: int = 0, split: int = 0) -> dict:
    """A vec4-tile gemm schedule's knobs (padded A, unroll_k 1): the session-16 layout."""
    return dict(
        workgroup_size=(bm // tm) * (bn // tn), items_per_invocation=tm * tn, vector_width=4, double_buffer=db,
        pad_shared=1, reg_m=tm, reg_n=tn, shared_vec4=1, tile_k=bk, tile_m=bm, tile_n=bn, unroll_k=1,
    ) | ({"warp_cols": wc} if wc else {}) | ({"split_k": split} if split else {})  # fmt: skip


# session 16 (part 38): unroll_k 1 with split_k at 1024^3 (few tiles), warp_cols and buffering at 2048^3
GEMM_S16B = {
    1024: [
        ("64x64 8x4 db1 wc8 (tuned)", tile(64, 64, 8, 4, db=1, wc=8)),
        ("64x64 8x4 wc8", tile(64, 64, 8, 4, wc=8)),
        ("64x64 8x4 db2 wc8", tile(64, 64, 8, 4, db=2, wc=8)),
        ("64x64 8x4 wc8 split2", tile(64, 64, 8, 4, wc=8, split=2)),
        ("64x64 8x8 split2", tile(64, 64, 8, 8, split=2)),
        ("64x64 8x8 split4", tile(64, 64, 8, 8, split=4)),
        ("64x128 8x8 split2", tile(64, 128, 8, 8, split=2)),
        ("64x128 8x8 wc8 split2", tile(64, 128, 8, 8, wc=8, split=2)),
        ("64x128 8x8 wc8 split4", tile(64, 128, 8, 8, wc=8, split=4)),
        ("128x128 8x8 split2", tile(128, 128, 8, 8, split=2)),
        ("128x128 8x8 wc8 split2", tile(128, 128, 8, 8, wc=8, split=2)),
        ("128x128 8x8 wc8 split4", tile(128, 128, 8, 8, wc=8, split=4)),
        ("128x128 8x8 wc8 split8", tile(128, 128, 8, 8, wc=8, split=8)),
        ("128x128 8x8 wc8 k8 split4", tile(128, 128, 8, 8, bk=8, wc=8, split=4)),
        ("64x128 8x4 wc8", tile(64, 128, 8, 4, wc=8)),
        ("32x64 8x4", tile(32, 64, 8, 4)),
    ],
    2048: [
        ("128x128 8x8 (tuned)", tile(128, 128, 8, 8)),
        ("128x128 8x8 wc8", tile(128, 128, 8, 8, wc=8)),
        ("128x128 8x8 wc8 k8 db2", tile(128, 128, 8, 8, bk=8, db=2, wc=8)),
        ("128x128 8x8 wc8 k8", tile(128, 128, 8, 8, bk=8, wc=8)),
        ("128x128 8x8 wc8 split2", tile(128, 128, 8, 8, wc=8, split=2)),
        ("64x128 8x8 wc8", tile(64, 128, 8, 8, wc=8)),
        ("64x128 8x4 wc8", tile(64, 128, 8, 4, wc=8)),
    ],
}

# session 17 (parts 42-43): tile_k 32 against 16 at 4096^3 (1024^3 and 2048^3: the exhaustive landscapes)
GEMM_S17 = {
    4096: [
        (f"s17 {bm}x{bn} {tm}x{tn}{' wc8' if wc else ''} k{bk}", s(**tile(bm, bn, tm, tn, bk=bk, wc=wc)))
        for bm, bn, tm, tn, wc in ((128, 128, 8, 8, 8), (128, 128, 8, 8, 0), (64, 128, 8, 8, 8), (64, 128, 8, 4, 8))
        for bk in (16, 32)
    ],
}


def big_gemm() -> list[tuple[str, Schedule]]:
    """gemm's 128x256 / 256x128 schedules (session 14), labelled by tile and tile_k."""
    out = []
    for schedule in catalog.get("gemm").big_schedules():
        k = schedule.as_dict()
        label = f"{k['tile_m']}x{k['tile_n']} k{k['tile_k']}{' db' if k.get('double_buffer') else ''}"
        out.append((label, schedule))
    return out


STAGED_TPR32 = s(workgroup_size=256, items_per_invocation=4, vector_width=4, threads_per_row=32, stage_x=1)
# ternary_gemv's pair-lookup-table kernel (stage_x=2): the layouts predicted fastest.
LUT_CANDIDATES = [
    (f"wg{wg} r{r} tpr{t}", dict(workgroup_size=wg, items_per_invocation=r, vector_width=4, threads_per_row=t))
    for wg, r, t in ((512, 1, 2), (256, 2, 2), (512, 2, 4), (128, 2, 1), (512, 1, 4), (256, 1, 2), (512, 2, 8))
]

# (kernel, GPU problem, CPU problem, [(label, schedule)]): the 2026-11-30 winner first.
CASES = [
    (
        "topk",
        Problem.of(n=2**26, k=8),
        Problem.of(n=4096, k=8),
        [
            ("winner 11-30", s(workgroup_size=64, items_per_invocation=8, vector_width=1)),
            *(
                (
                    f"select T{t} wg{wg}",
                    s(workgroup_size=wg, items_per_invocation=1, vector_width=4, algorithm=1, threads_per_block=t),
                )
                for wg in (256, 1024)
                for t in (2, 4)
            ),
        ],
    ),
    *(
        (
            "ternary_gemv",
            gpu_problem,
            cpu_problem,
            [
                ("winner 11-30", s(workgroup_size=64, items_per_invocation=1, vector_width=1, threads_per_row=tpr)),
                ("staged tpr32", STAGED_TPR32),
                *((f"lut {label}", s(**knobs, stage_x=2)) for label, knobs in LUT_CANDIDATES),
            ],
        )
        for gpu_problem, cpu_problem, tpr in (
            (Problem.of(m=65536, k=16384), Problem.of(m=256, k=1024), 4),
            (Problem.of(m=16384, k=65536), Problem.of(m=64, k=4096), 8),
        )
    ),
    (
        "gemm",
        Problem.of(m=4096, k=4096, n=4096),
        Problem.of(m=64, k=64, n=64),
        [
            ("winner 11-30", s(**GEMM_WINNER)),
            ("+shared_vec4", s(**GEMM_WINNER, shared_vec4=1)),
            ("+shared_vec4+pad", s(**GEMM_WINNER, shared_vec4=1, pad_shared=1)),
            (
                "128x128 warp8",
                s(
                    **GEMM_WINNER | dict(workgroup_size=256, double_buffer=1, tile_m=128, tile_n=128),
                    shared_vec4=1,
                    pad_shared=1,
                    warp_cols=8,
                ),
            ),
        ],
    ),
    (
        "gemm",
        Problem.of(m=4096, k=4096, n=4096),
        Problem.of(m=64, k=64, n=64),
        [
            ("winner 12-02", s(**GEMM_S14)),
            *((f"big {label}", schedule) for label, schedule in big_gemm()),
        ],
    ),
    # session 15's part-32 winners (trusted modules) with double_buffer 0, 1 and 2 (the unrolled loop)
    *(
        (
            "gemm",
            Problem.of(m=size, k=size, n=size),
            Problem.of(m=64, k=64, n=64),
            [
                (f"{label} db{db}", s(**knobs | dict(double_buffer=db)))
                for label, knobs in GEMM_S15[size]
                for db in (0, 1, 2)
            ],
        )
        for size in (1024, 2048, 4096)
    ),
    # session 16: the best schedules of session 15 with the k steps of a slice in a loop and written out
    *(
        (
            "gemm",
            Problem.of(m=size, k=size, n=size),
            Problem.of(m=64, k=64, n=64),
            [(f"{label} unroll{u}", s(**knobs | dict(unroll_k=u))) for label, knobs in GEMM_S16[size] for u in (0, 1)],
        )
        for size in (1024, 2048, 4096)
    ),
    *(
        (
            "gemm",
            Problem.of(m=size, k=size, n=size),
            Problem.of(m=64, k=64, n=64),
            [(f"s16b {label}", s(**knobs)) for label, knobs in GEMM_S16B[size]],
        )
        for size in (1024, 2048)
    ),
    *(
        ("gemm", Problem.of(m=size, k=size, n=size), Problem.of(m=64, k=64, n=64), cases)
        for size, cases in GEMM_S17.items()
    ),
    (
        "fft",
        Problem.of(n=1024, batch=16384),
        Problem.of(n=256, batch=16),
        [
            ("winner 12-02", s(**FFT_S14)),
            *(
                (
                    f"r32 sw3 wg{wg} T{t}",
                    s(**FFT_S14 | dict(workgroup_size=wg, items_per_invocation=t, stockham=32, swizzle=3)),
                )
                for wg, t in ((32, 1), (64, 2), (128, 2), (128, 4), (256, 4), (256, 8))
            ),
            (
                "r32 sw0 wg128 T4",
                s(**FFT_S14 | dict(workgroup_size=128, items_per_invocation=4, stockham=32, swizzle=0)),
            ),
        ],
    ),
    (
        "fft",
        Problem.of(n=1024, batch=16384),
        Problem.of(n=256, batch=16),
        [
            ("winner 11-30", s(workgroup_size=256, items_per_invocation=1, vector_width=2)),
            ("stockham16 sw1", s(workgroup_size=64, items_per_invocation=1, vector_width=2, stockham=16, swizzle=1)),
            ("stockham4 sw2", s(workgroup_size=256, items_per_invocation=1, vector_width=2, stockham=4, swizzle=2)),
            ("stockham8 sw2", s(workgroup_size=128, items_per_invocation=1, vector_width=2, stockham=8, swizzle=2)),
        ],
    ),
]


# The recurrent winners of 2026-11-30 (sweep E=256 and E=768) against the chunked kernel
# (q/v staged in workgroup memory CT steps at a time) with per-step subgroup (sg) or
# workgroup (wg) reductions, and session 2's deferred per-chunk reduction (reduce=2).
# Subgroup reductions over more than 4 lanes are left out: the NVIDIA driver reports a
# smallest subgroup of 4, so they are invalid there.
CHUNKED = [
    (f"chunk{ct} tpc{tpc} {('wg-reduce', 'sg-reduce', 'deferred')[red]} wg{wg} vw{vw}", s(
        workgroup_size=wg, items_per_invocation=1, vector_width=vw, threads_per_column=tpc, reduce=red, chunk=ct
    ))
    for ct, tpc, red, wg, vw in (
        (32, 4, 1, 64, 4), (32, 2, 1, 32, 2), (16, 8, 0, 64, 4),
        (32, 8, 2, 128, 1), (32, 16, 2, 128, 2), (16, 16, 2, 128, 4),
    )
]  # fmt: skip
RECURRENT_WINNERS = {  # E -> the 2026-11-30 winner
    256: s(workgroup_size=64, items_per_invocation=1, vector_width=2, threads_per_column=16, reduce=0),
    768: s(workgroup_size=32, items_per_invocation=2, vector_width=1, threads_per_column=4, reduce=0),
}
CASES += [
    (
        "recurrent",
        Problem.of(B=1, H=8, VH=1, T=64, L=64, E=e),
        Problem.of(B=1, H=2, VH=1, T=8, L=16, E=32),
        [("winner 11-30", winner), *CHUNKED],
    )
    for e, winner in RECURRENT_WINNERS.items()
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--kernels", default="", help="comma-separated: only these kernels' cases")
    parser.add_argument("--match", default="", help="only the cases with a variant whose label holds this text")
    args = parser.parse_args(argv)
    only = {k for k in args.kernels.split(",") if k}
    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    bench = TrialRunner(device, "variants")
    rows = []
    print(f"{'kernel':<13} {'variant':<18} {'status':<16} {'median_us':>10} {'vs winner':>9}  (kernel-only, "
          "TrialRunner: GPU timestamps on GPUs; each row's method in variants.json)")  # fmt: skip
    for kernel, gpu_problem, cpu_problem, variants in CASES:
        if (only and kernel not in only) or not any(args.match in label for label, _ in variants):
            continue
        problem = cpu_problem if device.profile.is_cpu else gpu_problem
        catalog.get(kernel)  # fail early on an unknown kernel
        results = bench.evaluate([Job(kernel, problem, schedule, 0, 2, args.reps) for _, schedule in variants])
        base = results[0].median_ns
        for (label, schedule), result in zip(variants, results, strict=True):
            ratio = base / result.median_ns if base and result.median_ns else None
            rows.append(
                {
                    "kernel": kernel,
                    "problem": problem.key(),
                    "variant": label,
                    "schedule": schedule.key(),
                    "status": result.status.value,
                    "message": result.message[:200],
                    "median_ns": result.median_ns,
                    "method": result.timing.method if result.timing else None,
                    "speedup_vs_winner": ratio,
                }
            )
            median = f"{result.median_ns / 1e3:10.1f}" if result.median_ns else f"{'-':>10}"
            speed = f"{ratio:8.2f}x" if ratio else f"{'-':>9}"
            print(f"{kernel:<13} {label:<18} {result.status.value:<16} {median} {speed}")
    bench.close()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "variants.json"
        path.write_text(json.dumps({"device": device.profile.summary, "rows": rows}, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
