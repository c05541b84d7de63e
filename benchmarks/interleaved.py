"""Interleaved timing, shared by the A/B benchmark scripts (trusted_modules, fft_twiddles,
trial_repeat, copy_widths, fft_slots, gemm_guards, ternary_hooks, ternary_parts): the options
they take (and the type of a list-of-arms option), the loop that times several ways of running
a kernel in rounds, the order rotated each round, so that clock drift and a fresh machine's
first seconds fall on every arm alike, and the certify-then-time step. Each timing is `reps`
dispatches (GPU timestamps on a GPU) after a fifth of `farm bench`'s clock warm-up on that arm."""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np

from farm.gpu import Device, Timing, benchmark_device
from farm.gpu.device import REPORT_WARM_MAX_S, REPORT_WARM_S
from farm.oracle import compare as oracle


def options(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the shared options: --reps (20), --rounds (5), --out, --allow-cpu."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20, help="dispatches a timing")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--allow-cpu", action="store_true")
    return parser


def arm_list(choices, least: int = 1, first: str | None = None) -> Callable[[str], list[str]]:
    """An argparse `type` for a comma-separated list of arms: distinct names of `choices`, at
    least `least` of them, `first` (when given) first; otherwise one line naming the value."""
    rule = f"{least} or more distinct names of {', '.join(choices)}" + (f", {first} first" if first else "")

    def parse(text: str) -> list[str]:
        names = text.split(",")
        if (any(n not in choices for n in names) or len(set(names)) != len(names) or len(names) < least
                or (first is not None and names[0] != first)):  # fmt: skip
            raise argparse.ArgumentTypeError(f"{text!r}: needs {rule}")
        return names

    return parse


def start(doc: str | None, parser: argparse.ArgumentParser | None = None) -> tuple[argparse.Namespace, Device]:
    """The shared options (or `parser`'s: options(doc) with a script's own added) parsed and
    the benchmark's device; exits 2 on a CPU adapter without --allow-cpu
    (`farm.gpu.benchmark_device` has said why)."""
    args = (parser or options(doc)).parse_args()
    device = benchmark_device(args.allow_cpu)
    if device is None:
        raise SystemExit(2)
    return args, device


class Calls:
    """Raw (pipeline, bind_group, groups) passes on `device`, timed like a Prepared."""

    def __init__(self, device: Device, calls: list):
        self.device, self.calls = device, calls

    def warm_until_clocks(self, least_s: float, most_s: float) -> float:
        return self.device.warm_until_clocks(self.calls, least_s, most_s)

    def time(self, warmup: int, reps: int):
        return self.device.time_calls(self.calls, warmup=warmup, reps=reps)


def rounds_us(
    arms: dict, reps: int, rounds: int, after: Callable[[str, Timing], None] | None = None
) -> dict[str, list[float]]:
    """{name: its median in us in each round} of the arms (Prepared or Calls), timed
    interleaved; `after(name, timing)` runs after each timing (to record its method or a
    clock reading)."""
    medians: dict[str, list[float]] = {name: [] for name in arms}
    order = list(arms)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)] if order else []:
            arms[name].warm_until_clocks(REPORT_WARM_S / 5, REPORT_WARM_MAX_S / 4)
            timing = arms[name].time(warmup=3, reps=reps)
            medians[name].append(timing.median_ns / 1e3)
            if after is not None:
                after(name, timing)
    return medians


def certify_and_time(row: dict, prepared: dict, expected: dict, output: str, reps: int, rounds: int) -> dict:
    """Each arm (a Prepared) certified against `expected`, as `{name}_certified` in `row`,
    then, if every one is, timed interleaved into `row` (`time_interleaved`; `{name}_us`
    absent otherwise). Returns each arm's `output` array (to compare the arms bit for bit)."""
    outputs: dict[str, np.ndarray] = {}
    for name, arm in prepared.items():
        row[f"{name}_certified"] = oracle.certify_prepared(arm, expected).ok
        outputs[name] = arm.outputs()[output]
    if all(row[f"{name}_certified"] for name in prepared):
        time_interleaved(row, prepared, reps, rounds)
    return outputs


def time_interleaved(row: dict, prepared: dict, reps: int, rounds: int) -> None:
    """Into `row`: each arm's median in us over the rounds (`rounds_us`) as `{name}_us`, the
    rounds' medians as `{name}_rounds_us`, and `method`: the timings' own, interleaved."""

    def record(name: str, timing: Timing) -> None:
        row["method"] = f"{timing.method}, interleaved"

    for name, values in rounds_us(prepared, reps, rounds, after=record).items():
        row[f"{name}_us"], row[f"{name}_rounds_us"] = statistics.median(values), values


def write_result(out: Path, name: str, device: Device, **fields) -> None:
    """out/name: {"date" (UTC, today), "device" (the adapter's summary), **fields} as JSON."""
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps({"date": date, "device": device.profile.summary, **fields}, indent=2) + "\n")
