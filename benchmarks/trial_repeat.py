"""Do a landscape's readings repeat? Two campaigns that measured the same schedules of one
problem on one machine (an exhaustive landscape and a search, `farm tune --db A` and
`--db B`) can disagree on some of them, both ways, each with a tight p20-p80. This script
takes the schedules whose readings disagree by more than `--threshold` and the `--best`
fastest of the first database, prepares each on one Device, certifies it, and times them
interleaved (`--rounds`, the order rotated each round, `--reps` dispatches a timing after a
fifth of `farm bench`'s clock warm-up, GPU timestamps with the clock check), reading the
clock canary after each timing. Prints one table (each schedule's two stored readings, the
rounds' median, its spread over rounds, the worst canary ratio) and writes trial-repeat.json
under --out:

    python3 benchmarks/trial_repeat.py --db fft-landscape.db --db fft-search.db --out DIR

If every schedule repeats at the lower of its two readings, the slow ones were the trial's
conditions (clocks, what ran before it), not the schedule; if a schedule's rounds spread as
far, its time itself is bimodal. A benchmark, not a test: numbers mean something on GPUs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from search_replay import landscapes  # benchmarks/, on the path as the script's folder

from farm import catalog
from farm.gpu import Timing, benchmark_device
from farm.gpu.device import REPORT_WARM_MAX_S, REPORT_WARM_S
from farm.oracle import compare as oracle
from farm.oracle.launch import prepare
from farm.schedule import Problem, Schedule


def rounds_us(
    arms: dict, reps: int, rounds: int, after: Callable[[str, Timing], None] | None = None
) -> dict[str, list[float]]:
    """{name: its median in us in each round} of the arms (Prepared), timed interleaved: the
    order rotated each round, so clock drift and a fresh machine's first seconds fall on
    every arm alike; `after(name, timing)` runs after each timing."""
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


def disagreeing(first: dict, second: dict, threshold: float, best: int) -> list[tuple[str, float, float | None]]:
    """(schedule key, first reading ns, second reading ns or None) for the `best` fastest of
    `first` and every schedule both measured whose readings differ by more than `threshold`."""
    ok = {k: r.median_ns for k, r in first.items() if r.ok and r.median_ns}
    other = {k: r.median_ns for k, r in second.items() if r.ok and r.median_ns}
    picked = sorted(ok, key=ok.get)[:best]
    picked += [k for k in sorted(ok, key=ok.get) if k in other and k not in picked
               and max(ok[k], other[k]) / min(ok[k], other[k]) > 1 + threshold]  # fmt: skip
    return [(k, ok[k], other.get(k)) for k in picked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20, help="dispatches a timing")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--db", type=Path, action="append", required=True, help="a landscape (twice: two to compare)")
    parser.add_argument("--kernel", default="fft")
    parser.add_argument("--threshold", type=float, default=0.1, help="relative disagreement that picks a schedule")
    parser.add_argument("--best", type=int, default=4, help="the first database's fastest, picked too")
    args = parser.parse_args(argv)
    if len(args.db) > 2:
        parser.error(f"--db: one or two landscapes, got {len(args.db)}")
    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    spec = catalog.get(args.kernel)
    found = [landscapes(db, args.kernel) for db in args.db]
    if not found[0]:
        print(f"{args.db[0]}: no {args.kernel} trials", file=sys.stderr)
        return 2
    problem_key = next(iter(found[0]))  # (kernel, problem): the first database's first problem
    first = found[0][problem_key]
    second = found[1].get(problem_key, {}) if len(found) > 1 else {}
    picks = disagreeing(first, second, args.threshold, args.best)
    problem = Problem.from_key(problem_key[1])
    inputs = spec.generate(problem, 0)
    rows, arms = {}, {}
    with ExitStack() as stack:
        for key, a_ns, b_ns in picks:
            schedule = Schedule.from_key(key)
            arm = stack.enter_context(prepare(device, spec, schedule, problem, inputs))
            cert = oracle.certify_prepared(arm, spec.reference(problem, schedule, inputs))
            stored = first[key].timing.method  # how the campaigns read both (one database's method)
            rows[key] = {"schedule": key, "first_us": a_ns / 1e3, "second_us": b_ns / 1e3 if b_ns else None,
                         "stored_method": stored, "certified": cert.ok, "rounds_us": [], "clock_ratios": [],
                         "method": None}  # fmt: skip
            if cert.ok:
                arms[key] = arm

        def record(key: str, timing) -> None:
            rows[key]["method"] = f"{timing.method}, interleaved"
            rows[key]["clock_ratios"].append(device.clock_ratio())

        for key, values in rounds_us(arms, args.reps, args.rounds, after=record).items():
            rows[key]["rounds_us"] = values
    rows = list(rows.values())
    print(f"problem {problem_key[1]}; {args.rounds} interleaved rounds of {args.reps}")
    print("| schedule | first db us | second db us | stored by | repeated us | rounds' spread | repeated by "
          "| worst canary | certified |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if row["rounds_us"]:
            row["repeat_us"] = statistics.median(row["rounds_us"])
            row["spread"] = max(row["rounds_us"]) / min(row["rounds_us"]) - 1
        ratios = [c for c in row["clock_ratios"] if c is not None]
        second = f"{row['second_us']:.1f}" if row["second_us"] else "-"
        repeat = f"{row['repeat_us']:.1f} | {row['spread']:+.1%}" if "repeat_us" in row else "- | -"
        worst = max(ratios) if ratios else float("nan")
        print(f"| {row['schedule']} | {row['first_us']:.1f} | {second} | {row['stored_method']} | {repeat} "
              f"| {row['method'] or '-'} | {worst:.2f} | {row['certified']} |")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    result = {"date": date, "device": device.profile.summary, "kernel": args.kernel, "problem": problem_key[1],
              "landscapes": [str(db) for db in args.db], "rows": rows}  # fmt: skip
    (args.out / "trial-repeat.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
