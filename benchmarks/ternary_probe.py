"""Where the time of ternary_gemv goes: a diagnostic that splits the kernel into parts.

For each of the two GPU shapes (m=16384,k=65536 and m=65536,k=16384: 256 MiB of packed
weights each) it times, on the same resident inputs (the kernels other than the
catalog's are built in ternary_probe_kernels.py, which says how):

- copy: farm bench's vec4 WGSL copy of as many bytes as the packed weights (its GB/s
  counts read + write, like `farm bench`): the bandwidth ceiling every "frac" is over.
- load-only: the catalog kernels' weight read pattern alone, for threads_per_row
  1,2,4,8,32 x vector_width 1,4 x rows per thread 1,2 (workgroup size --load-wg, 128 by
  default), each row's XOR-folded words checked against numpy's: whether the access
  pattern alone reaches the copy bandwidth.
- staged / lut / dp4a: the catalog kernels (stage_x=1, 2, 3) at the best known schedules,
  and next to each its compute-only variant (synthetic weights, no weight traffic); the
  pair table also build-only and lookup-only, dp4a also no-dot.
- decode word / bits / pair / byte / dp4a / dots / alu: the decode alone at the shape's
  m * k codes, from words made in registers: the rate of each way to decode.
- split: the stage_x=4 kernel (x's planes from a pass of their own, k split over 1-8
  workgroups per row block and summed by a third pass) at every schedule of SPLIT_SPACE
  (a smoke run on a CPU adapter: 6 of them), its time spanning all passes; the tuned
  winners also compute-only. `--only split` times just these, the stage_x=3 winner as
  their baseline, and the decode rates of the dot products.

Whether the catalog kernels compute the right result is not measured here: farm tune
certifies every schedule it times on the device, and tests/test_ternary_probe.py
certifies the schedules below on lavapipe.

Every time is the median of --reps GPU-timestamp samples after --warmup dispatches and
farm's warm-up-until-steady. GB/s is effective bandwidth over the nominal bytes of one
GEMV, the same for every variant: packed weights + x + out (4 * (m * ceil(k/16) + k + m));
"frac" is that over the copy's GB/s. Prints one table and writes ternary_probe.json under
--out. Refuses a CPU adapter unless --allow-cpu (then with small shapes: a smoke run, the
numbers mean nothing).

    python benchmarks/ternary_probe.py --out benchmarks/results          # on the H200
    python benchmarks/ternary_probe.py --allow-cpu --out /tmp/probe      # smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from ternary_probe_kernels import (
    DECODE_KINDS,
    DECODE_WORDS,
    LOAD_TILE_WORDS,
    ProbeError,
    compute_only_source,
    decode_source,
    dp4a_no_dot_source,
    load_only_source,
    lut_build_only_source,
    lut_lookup_only_source,
    make_inputs,
)

from farm import catalog
from farm.catalog import Launch, check_launch
from farm.catalog.ternary_gemv import SPLIT_SPACE, row_words, split_schedule
from farm.cli.bench import copy_bandwidth, settle_clocks
from farm.gpu import Buffer, CpuAdapterRefused, Device, GpuError, Timing, benchmark_device, refuse_cpu
from farm.oracle.launch import Prepared, compile_launch
from farm.schedule import InvalidSchedule, Problem, Schedule

SPEC = catalog.get("ternary_gemv")
GPU_SHAPES = ((16384, 65536), (65536, 16384))  # (m, k): 256 MiB of packed weights each
CPU_SHAPES = ((512, 4096), (1024, 2048))  # 512 KiB each: a smoke run on lavapipe
LOAD_LAYOUTS = tuple((tpr, vw, r) for tpr in (1, 2, 4, 8, 32) for vw in (1, 4) for r in (1, 2))


def _schedule(wg: int, rows: int, vw: int, tpr: int, stage: int) -> Schedule:
    return Schedule.of(
        workgroup_size=wg, items_per_invocation=rows, vector_width=vw, threads_per_row=tpr, stage_x=stage
    )


DP4A_TUNED = _schedule(256, 8, 4, 8, 3)  # farm tune's stage_x=3 winner on both shapes (session 4)
# farm tune's stage_x=4 winners (session 5), tall and wide shape: (wg, rows, vw, tpr, splits);
# the probe also times them compute-only
SPLIT_WINNERS = ((256, 4, 4, 8, 1), (128, 4, 4, 8, 8))
# (variant, schedule): the best known staged (stage_x=1) and pair-table (stage_x=2) schedules.
REAL = (
    ("staged", _schedule(128, 1, 4, 1, 1)),
    ("staged", _schedule(256, 4, 4, 32, 1)),
    ("lut", _schedule(128, 2, 4, 1, 2)),
    ("lut", _schedule(256, 2, 4, 2, 2)),
    ("lut", _schedule(512, 2, 4, 4, 2)),
    # the integer dot-product kernel (stage_x=3): 32-128 rows per workgroup, vec4 loads
    ("dp4a", _schedule(256, 2, 4, 8, 3)),
    ("dp4a", _schedule(128, 2, 4, 4, 3)),
    ("dp4a", _schedule(256, 4, 4, 8, 3)),
    ("dp4a", _schedule(256, 1, 4, 4, 3)),
    ("dp4a", _schedule(256, 2, 4, 16, 3)),
    ("dp4a", _schedule(512, 2, 4, 8, 3)),
    ("dp4a", _schedule(256, 8, 4, 16, 3)),
    ("dp4a", _schedule(128, 8, 4, 8, 3)),
)
PARTS = {"lut": ("lut build-only", "lut lookup-only"), "dp4a": ("dp4a no-dot",)}
SPLIT_DECODE_KINDS = ("word", "dp4a", "dots", "alu")  # with --only split


def split_space(cpu: bool) -> tuple:
    """SPLIT_SPACE, or on a CPU adapter (a smoke run) every 17th schedule of it and the winners."""
    return SPLIT_SPACE[::17] + SPLIT_WINNERS if cpu else SPLIT_SPACE


def variant_sources(variant: str, schedule: Schedule, source: str) -> dict[str, str]:
    """The rendered catalog kernel and the derived variants timed next to it, by row name:
    compute-only for every catalog kernel and the split winners, the parts of lut and dp4a."""
    out = {variant: source}
    if variant == "split" and schedule not in {split_schedule(*w) for w in SPLIT_WINNERS}:
        return out
    out[f"{variant} compute-only"] = compute = compute_only_source(source, schedule)
    if variant == "lut":
        out["lut build-only"] = lut_build_only_source(source, schedule)
        out["lut lookup-only"] = lut_lookup_only_source(source, schedule)
    if variant == "dp4a":
        out["dp4a no-dot"] = dp4a_no_dot_source(compute, schedule)
    return out


def _label(schedule: Schedule) -> str:
    splits = f" s{schedule['splits']}" if "splits" in dict(schedule.knobs) else ""
    return (
        f"wg{schedule.workgroup_size} r{schedule.items_per_invocation} "
        f"vw{schedule.vector_width} tpr{schedule.get('threads_per_row', 1)}{splits}"
    )


class Probe:
    """One device, its results, and the resident buffers of the shape being probed."""

    def __init__(self, device: Device, warmup: int, reps: int, load_wg: int, only: str = "all"):
        self.device = device
        self.warmup = warmup
        self.reps = reps
        self.load_wg = load_wg
        self.only = only
        self.rows: list[dict] = []
        self.method = ""

    def run_shape(self, m: int, k: int) -> None:
        device = self.device
        problem = SPEC.problem(m=m, k=k)
        kw = row_words(k)
        inputs = make_inputs(m, k)
        buffers: list[Buffer] = []  # x, w_packed, scale, out: the catalog kernels' bindings 0-3
        try:
            for name in ("x", "w_packed", "scale"):
                buffers.append(device.upload(inputs[name], "read"))
            buffers.append(device.empty(4 * m, "storage"))
            copy = self._copy(problem, 4 * m * kw)
            xor = np.bitwise_xor.reduce(inputs["w_packed"].reshape(m, kw), axis=1)
            ctx = dict(problem=problem, nbytes=4 * (m * kw + k + m), copy=copy, xor=xor)
            if self.only == "all":
                for tpr, vw, rows in LOAD_LAYOUTS:
                    self._load_only(ctx, buffers[1], tpr, vw, rows)
                for variant, schedule in REAL:
                    self._kernel(ctx, variant, schedule, inputs, buffers)
                decodes = DECODE_KINDS
            else:  # the stage_x=3 winner, the split kernel's baseline, and the dot products' rate
                self._kernel(ctx, "dp4a", DP4A_TUNED, inputs, buffers)
                decodes = SPLIT_DECODE_KINDS
            for kind in decodes:
                self._decode(ctx, kind)
            for split in split_space(device.profile.is_cpu):
                self._kernel(ctx, "split", split_schedule(*split), inputs, buffers)
        finally:
            device.release(*buffers)

    # -- variants --------------------------------------------------------------------
    def _copy(self, problem: Problem, weight_bytes: int) -> float:
        limit = self.device.profile.limit("max-storage-buffer-binding-size")
        size = min(weight_bytes, limit) // 16 * 16
        gbps = copy_bandwidth(self.device, size, self.reps)
        self._row(problem, "copy", "vec4 wg256", None, 2 * size / gbps, 2 * size, gbps)
        return gbps

    def _load_only(self, ctx: dict, w: Buffer, tpr: int, vw: int, rows: int) -> None:
        """Time one load-only layout after checking its output: each row's words XOR-folded
        (when whole tiles cover the row; a clamped tail re-reads its last vector)."""
        device, problem = self.device, ctx["problem"]
        m, kw = problem["m"], row_words(problem["k"])
        wg = self.load_wg
        label = f"wg{wg} r{rows} vw{vw} tpr{tpr}"
        if kw % vw or wg % tpr:
            self._error(problem, "load-only", label, f"kw={kw} or wg={wg} does not fit vw={vw} tpr={tpr}")
            return
        groups = -(-m // (wg // tpr * rows))
        params = device.upload(np.array([m, kw, groups, 0], np.uint32), "uniform")
        out = device.upload(~ctx["xor"], "storage")  # every row wrong until written
        try:
            pipeline = device.pipeline(load_only_source(wg, tpr, vw, rows), label=f"ternary_probe load-only {label}")
            device.dispatch(pipeline, [w, out, params], groups)
            if kw % max(LOAD_TILE_WORDS, tpr * vw):
                note = "xor not checked (clamped tail)"
            else:
                bad = int((device.read(out, np.uint32, m) != ctx["xor"]).sum())
                if bad:
                    self._error(problem, "load-only", label, f"{bad} of {m} rows' XOR differ from numpy's")
                    return
                note = "xor of every row checked"
            timing = self._time(pipeline, [w, out, params], groups)
            self._row(problem, "load-only", label, None, timing, ctx["nbytes"], ctx["copy"], note)
        except GpuError as exc:
            self._error(problem, "load-only", label, str(exc))
        finally:
            device.release(params, out)

    def _decode(self, ctx: dict, kind: str) -> None:
        """Decode the shape's m * k codes (rounded up to whole threads) in registers and
        tables only; GB/s is over the shape's GEMV bytes, as for every variant."""
        device, problem = self.device, ctx["problem"]
        threads = -(-problem["m"] * problem["k"] // (16 * DECODE_WORDS))
        groups = -(-threads // 256)
        label = f"wg256 words{DECODE_WORDS}"
        params = device.upload(np.array([12345, threads, 0, 0], np.uint32), "uniform")
        out = device.empty(4 * threads, "storage")
        try:
            pipeline = device.pipeline(decode_source(kind), label=f"ternary_probe decode {kind}")
            timing = self._time(pipeline, [out, params], groups)
            values = device.read(out, np.float32, threads)
            if not np.isfinite(values).all():
                self._error(problem, f"decode {kind}", label, "non-finite sums")
                return
            note = f"{threads * 16 * DECODE_WORDS} codes, no weight loads, no table build"
            self._row(problem, f"decode {kind}", label, None, timing, ctx["nbytes"], ctx["copy"], note)
        except GpuError as exc:
            self._error(problem, f"decode {kind}", label, str(exc))
        finally:
            device.release(params, out)

    def _kernel(self, ctx: dict, variant: str, schedule: Schedule, inputs, buffers: list[Buffer]) -> None:
        """A catalog kernel (every pass of its launch) on the resident x, weights, scales and
        output with its own params and scratch buffers, then its derived variants."""
        device, problem = self.device, ctx["problem"]
        label = _label(schedule)
        try:
            SPEC.check(schedule, problem, device.profile)
            launch = SPEC.launch(schedule, problem, inputs)
            check_launch(SPEC, schedule, launch, device.profile)
        except InvalidSchedule as exc:
            self._error(problem, variant, label, exc.reason, schedule)
            return
        own = self._own_buffers(launch)
        try:
            for name, source in variant_sources(variant, schedule, launch.source).items():
                self._timed(ctx, name, schedule, replace(launch, source=source), [*buffers, *own])
        finally:
            device.release(*own)

    def _own_buffers(self, launch: Launch) -> list[Buffer]:
        """A catalog launch's params and scratch buffers (bindings 4 on); bindings 0-3, x,
        weights, scales and output, are the probe's resident buffers."""
        names = [arg.name for arg in launch.args[:5]]
        if names != ["x", "w_packed", "scale", "out", "params"]:
            raise ProbeError(f"ternary_gemv bindings changed: {names}")
        device = self.device
        return [
            device.upload(a.data, a.kind) if a.data is not None else device.empty(a.nbytes, a.kind)
            for a in launch.args[4:]
        ]

    def _timed(self, ctx: dict, variant: str, schedule: Schedule, launch: Launch, bound: list[Buffer]) -> None:
        problem, label = ctx["problem"], _label(schedule)
        try:
            pipelines = compile_launch(self.device, SPEC, schedule, launch)
            prepared = Prepared(SPEC, schedule, problem, launch, pipelines, bound, self.device)
            timing = prepared.time(self.warmup, self.reps)
        except GpuError as exc:
            self._error(problem, variant, label, str(exc), schedule)
            return
        self.method = timing.method
        self._row(problem, variant, label, schedule, timing, ctx["nbytes"], ctx["copy"])

    def _time(self, pipeline, buffers: list[Buffer], groups) -> Timing:
        calls = [(pipeline, self.device.bind(pipeline, buffers), groups)]
        timing = self.device.time_calls(calls, self.warmup, self.reps)
        self.method = timing.method
        return timing

    # -- rows ------------------------------------------------------------------------
    def _row(self, problem, variant, label, schedule, timing, nbytes, copy, message="") -> None:
        """Record and print one timed row; `timing` is a Timing, or the copy's ns."""
        median = timing if isinstance(timing, float) else timing.median_ns
        gbps = nbytes / median
        timed = {
            "p20_ns": None if isinstance(timing, float) else timing.p20_ns,
            "p80_ns": None if isinstance(timing, float) else timing.p80_ns,
            "us": median / 1e3,
            "bytes": nbytes,
            "gbps": gbps,
            "fraction_of_copy": gbps / copy,
        }
        self._record(problem, variant, label, schedule, median, message[:200], timed)

    def _error(self, problem, variant, label, message, schedule=None) -> None:
        self._record(problem, variant, label, schedule, None, message[:500], {})

    def _record(self, problem, variant, label, schedule, median, message, timed: dict) -> None:
        row = {
            "shape": problem.key(),
            "m": problem["m"],
            "k": problem["k"],
            "variant": variant,
            "schedule": label,
            "schedule_key": schedule.key() if schedule is not None else None,
            "median_ns": median,
            **timed,
            "message": message,
        }
        self.rows.append(row)
        print(_line(row), flush=True)


HEADER = f"{'shape':<17} {'variant':<20} {'schedule':<24} {'us':>10} {'GB/s':>8} {'frac':>6}"


def _line(row: dict) -> str:
    head = f"{row['shape']:<17} {row['variant']:<20} {row['schedule']:<24}"
    if row["median_ns"] is None:
        return f"{head} {'-':>10} {'-':>8} {'-':>6}  {row['message'][:120]}"
    return f"{head} {row['us']:10.1f} {row['gbps']:8.1f} {row['fraction_of_copy']:6.3f}"


def _shape(text: str) -> tuple[int, int]:
    m, k = text.lower().split("x")
    return int(m), int(k)


def main(argv: list[str] | None = None, device: Device | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--load-wg", type=int, default=128, help="workgroup size of the load-only kernels")
    parser.add_argument("--shape", type=_shape, action="append", help="MxK, repeatable (default: per adapter)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--only", choices=("all", "split"), default="all", help="split: only the stage_x=4 rows")
    parser.add_argument("--settle-s", type=float, default=2.0, help="seconds of copies before the first shape")
    args = parser.parse_args(argv)
    if device is None:
        device = benchmark_device(args.allow_cpu)
        if device is None:
            return 2
    else:
        try:
            refuse_cpu(device.profile, args.allow_cpu, "benchmark")
        except CpuAdapterRefused as exc:
            print(exc, file=sys.stderr)
            return 2
    shapes = args.shape or (CPU_SHAPES if device.profile.is_cpu else GPU_SHAPES)
    start = time.perf_counter()
    probe = Probe(device, args.warmup, args.reps, args.load_wg, args.only)
    print(f"adapter: {device.profile.summary}")
    settle_clocks(device, args.settle_s)  # a machine just started: its first shape read 3x slow without it
    print(HEADER)
    for m, k in shapes:
        probe.run_shape(m, k)
    elapsed = time.perf_counter() - start
    failed = [r for r in probe.rows if r["median_ns"] is None]
    print(f"{len(probe.rows)} rows, {len(failed)} failed, {elapsed:.1f} s, timing: {probe.method}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "ternary_probe.json"
        payload = {
            "device": device.profile.summary,
            "adapter_type": device.profile.adapter_type,
            "timing": probe.method,
            "warmup": args.warmup,
            "reps": args.reps,
            "load_workgroup_size": args.load_wg,
            "bytes": "gbps counts 4 * (m * ceil(k/16) + k + m) bytes (weights + x + out) for every kernel "
            "variant and read + write bytes for the copy",
            "elapsed_s": elapsed,
            "rows": probe.rows,
        }
        path.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
