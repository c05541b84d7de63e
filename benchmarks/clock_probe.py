"""Do our timings run at the GPU's full clocks? nvidia-smi's SM clock next to our timestamps.

Short kernels (the recurrent T=64 winners, 30-60 us) read 1.2-2.4x FLA's CUDA-graph
replay, and 5-10x what their latency chains predict; a trial's timestamps can be exact
and still measure a GPU running below its boost clock. This runs one short kernel (the
recurrent walked form on B1 H8 T64 L64 E256, the part 11 winner's schedule) in phases of
PHASE_S seconds each while a thread samples nvidia-smi (`clocks.sm`, `clocks.mem`,
`pstate`, `power.draw`, the clock event reasons) every SAMPLE_S:
- `idle`: nothing submitted;
- `trials`: timed the way a worker times a trial (`time_calls`, warm-up rules, 10 reps in
  one submission), with HOST_GAP_S of host-side idling between timings (a worker's
  checking, recording and next compile);
- `continuous`: BACK_TO_BACK dispatches a submission, submissions back to back (what
  FLA's graph replay looks like to the GPU);
- `trials_after`: `trials` again, right after the GPU was kept busy.
Per phase: the kernel's median GPU time per dispatch (timestamps), the clock canary's time
(farm.gpu.clocks: a dependent loop whose time is set by the SM clock alone) and the
sampled clocks. If `trials` reads slower than `continuous` while nvidia-smi shows a lower
SM clock, our timings measure the clock, and the lead-in before a timing must be longer.

    python3 benchmarks/clock_probe.py --out DIR [--allow-cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from farm import catalog
from farm.gpu import Device
from farm.gpu.clocks import ClockCheck
from farm.gpu.nvidia import query_gpus
from farm.oracle.launch import prepare
from farm.schedule import Schedule

PHASE_S = 3.0
SAMPLE_S = 0.1
HOST_GAP_S = 0.002
BACK_TO_BACK = 400
FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "pstate", "power.draw", "clocks_event_reasons.active")
PROBLEM = {"B": 1, "H": 8, "VH": 1, "T": 64, "L": 64, "E": 256}
SCHEDULE = Schedule.of(workgroup_size=256, form=2, chunk_size=64, block_e=16)


class Sampler:
    """nvidia-smi's clocks every SAMPLE_S on a thread (the subprocess wait holds no GIL),
    each sample tagged with the phase running when it was taken."""

    def __init__(self) -> None:
        self.phase = "start"
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.available = query_gpus(FIELDS[:1], timeout_s=5.0) is not None

    def __enter__(self) -> Sampler:
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.available:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            rows = query_gpus(FIELDS, timeout_s=5.0)
            if rows:
                self.samples.append({"phase": self.phase, "t": start} | rows[0])
            self._stop.wait(max(0.0, SAMPLE_S - (time.perf_counter() - start)))

    def clocks(self, phase: str) -> dict:
        sm = [float(s["clocks.sm"]) for s in self.samples if s["phase"] == phase and _number(s["clocks.sm"])]
        mem = [float(s["clocks.mem"]) for s in self.samples if s["phase"] == phase and _number(s["clocks.mem"])]
        reasons = sorted({s["clocks_event_reasons.active"] for s in self.samples if s["phase"] == phase})
        if not sm:
            return {"samples": 0}
        return {"samples": len(sm), "sm_mhz_median": statistics.median(sm), "sm_mhz_min": min(sm),
                "sm_mhz_max": max(sm), "mem_mhz_median": statistics.median(mem) if mem else None,
                "event_reasons": reasons}  # fmt: skip


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def run_phase(name: str, seconds: float, device: Device, calls: list, canary: ClockCheck, sampler: Sampler) -> dict:
    sampler.phase = name
    kernel_us: list[float] = []
    canary_us: list[float] = []
    methods: set[str] = set()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if name == "idle":
            time.sleep(0.05)
        elif name == "continuous":
            timing = device.time_calls(calls, warmup=0, reps=BACK_TO_BACK)
            kernel_us.append(timing.median_ns / 1e3)
            methods.add(timing.method)
        else:
            timing = device.time_calls(calls, warmup=2, reps=10)
            kernel_us.append(timing.median_ns / 1e3)
            methods.add(timing.method)
            time.sleep(HOST_GAP_S)
        canary_us.append(canary.read_ns() / 1e3)
    row = {"phase": name, "timings": len(kernel_us), "canary_us_median": statistics.median(canary_us)}
    if kernel_us:
        row |= {"kernel_us_median": statistics.median(kernel_us), "kernel_us_min": min(kernel_us),
                "kernel_method": ",".join(sorted(methods)), "canary_method": "timestamp"}  # fmt: skip
    return row | {"clocks": sampler.clocks(name)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--phase-s", type=float, default=PHASE_S)
    args = parser.parse_args()
    device = Device()
    if device.profile.is_cpu and not args.allow_cpu:
        print(f"refusing to time on CPU adapter {device.profile.summary}; pass --allow-cpu", file=sys.stderr)
        return 2
    spec = catalog.get("recurrent")
    problem = spec.problem(**PROBLEM) if not device.profile.is_cpu else spec.problem(B=1, H=2, VH=1, T=16, L=8, E=32)
    inputs = spec.generate(problem, seed=0)
    device.check_clocks = False  # the probe reads the canary itself, every timing
    canary = ClockCheck(device)
    rows = []
    with prepare(device, spec, SCHEDULE, problem, inputs) as prepared, Sampler() as sampler:
        calls = prepared.calls()
        for name in ("idle", "trials", "continuous", "trials_after"):
            rows.append(run_phase(name, args.phase_s, device, calls, canary, sampler))
            print(json.dumps(rows[-1]), flush=True)
    canary.close()
    result = {"adapter": device.profile.summary, "date": time.strftime("%Y-%m-%d"), "problem": problem.key(),
              "schedule": SCHEDULE.key(), "method": "GPU timestamps (time_calls medians); clocks: nvidia-smi "
              f"every {SAMPLE_S} s", "nvidia_smi": sampler.available, "rows": rows,
              "samples": sampler.samples}  # fmt: skip
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "clock-probe.json").write_text(json.dumps(result, indent=1))
    print(f"\n{result['adapter']}, {problem.key()} {SCHEDULE.key()}")
    print("| phase | timings | kernel us (median) | canary us | SM MHz (median, min-max) | reasons |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        clocks = row["clocks"]
        sm = (f"{clocks['sm_mhz_median']:.0f} ({clocks['sm_mhz_min']:.0f}-{clocks['sm_mhz_max']:.0f})"
              if clocks.get("samples") else "-")  # fmt: skip
        kernel = f"{row['kernel_us_median']:.1f}" if "kernel_us_median" in row else "-"
        print(f"| {row['phase']} | {row['timings']} | {kernel} | {row['canary_us_median']:.1f} | {sm} | "
              f"{','.join(clocks.get('event_reasons', [])) or '-'} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
