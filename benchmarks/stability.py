"""Do two independent campaigns agree on their winners?

Runs `farm tune` twice on fresh databases (same machine, back to back, each its own
process and Ray), then re-times both winners of every (kernel, problem) interleaved on
this machine's adapter (TrialRunner.remeasure_rounds: `--rounds` rounds of `--reps`
dispatches, a rotated order each round, the median over rounds) and reports, per row,
the second winner's time over the first's: how many rows agree within 3% and 5%, and
whether each campaign's wall time stayed within `--wall-target` seconds.

Per campaign it also reports where the time went: the process's wall time, the campaign's
own (`farm tune`'s "campaign wall time" line: after Ray and the workers are up), and from
its summary.json the trials, the problems whose search went past its planned trials, the
search's and the re-measurement's seconds, and the re-measurement's rounds (summed over
problems; "timings" counts finalist-rounds timed, what the rounds cost); per row, each
campaign's rounds, tie, margin and trials.

    python3 benchmarks/stability.py --all --out benchmarks/results          # on a GPU
    python3 benchmarks/stability.py --kernels gemv --budget 4 --out /tmp/s --allow-cpu

Writes <out>/<date>-<label>-stability.json (and each campaign's log and artifacts under
<out>/<date>-<label>-stability/).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from farm import catalog, store
from farm.gpu import benchmark_device
from farm.schedule import Problem, Schedule
from farm.tuning.runner import TrialRunner


def run_campaign(name: str, args: argparse.Namespace, work: Path, seed: int) -> dict:
    db = f"sqlite:///{work / name}.db"
    # -v: the workers' start-up steps and stage times that campaign_cost reads from the log
    command = [sys.executable, "-m", "farm", "tune", "-v", *(["--all"] if args.all else args.kernels)]
    command += ["--db", db, "--out", str(work / f"{name}-artifacts"), "--seed", str(seed), "--gpus", str(args.gpus)]
    command += ["--budget", args.budget] if args.budget else []
    command += ["--sizes", args.sizes] if args.sizes else []
    command += ["--allow-cpu"] if args.allow_cpu else []
    env = campaign_env(name, args.shader_cache, work)
    print(f"campaign {name}: {' '.join(command)}", file=sys.stderr)
    started = time.perf_counter()
    with open(work / f"{name}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"campaign {name} failed (rc {done.returncode}); see {work / name}.log")
    opened = store.open_store(db)
    winners = store.winners(opened)
    cost = campaign_cost(work / f"{name}.log", work / f"{name}-artifacts", winners) | timeline(opened)
    shown = {k: v for k, v in cost.items() if k != "tasks"}
    print(f"campaign {name}: {len(winners)} winners in {wall:.1f} s; {json.dumps(shown)}", file=sys.stderr)
    keyed = {(w.kernel, w.problem_key): w for w in winners}
    return {"db": db, "wall_s": wall, "seed": seed, "winners": keyed, "cost": cost}


def campaign_env(name: str, shader_cache: str, work: Path) -> dict[str, str]:
    """The campaign process's environment: its own FARM_HOME; with shader_cache "fresh" an
    empty NVIDIA shader disk cache of its own (a cold driver cache slows the first campaign on a
    machine, whose compiles then read as slow trials)."""
    env = {**os.environ, "FARM_HOME": str(work / f"{name}-home"), "FARM_DEVICE_LOCK": "warn"}
    if shader_cache == "fresh":
        cache = work / f"{name}-shader-cache"
        cache.mkdir(parents=True, exist_ok=True)
        env |= {"__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": str(cache)}
    return env


def campaign_cost(log: Path, artifacts: Path, winners: list) -> dict:
    """Where a campaign's time went: its own wall time (the log's "campaign wall time" line),
    its start-up (the "startup: ... up in S s" line: database, Ray and workers),
    the totals of its summary.json (trials, search and re-measurement seconds, rounds,
    finalist-rounds timed), the problems that went past their planned trials, and the
    rounds its winners record in SQL."""
    text = log.read_text()
    found = re.findall(r"campaign wall time ([0-9.]+) s", text)
    startup = re.findall(r"^startup: .* up in ([0-9.]+) s$", text, re.MULTILINE)
    steps = re.search(r"^worker .*; up in (.*) s$", text, re.MULTILINE)  # the first worker's start-up steps
    worker_up = {k: float(v) for k, v in (item.rsplit(" ", 1) for item in steps.group(1).split(", "))} if steps else {}
    summaries = sorted((artifacts / "campaigns").glob("*/summary.json"))
    summary = json.loads(summaries[-1].read_text()) if summaries else {}
    tasks = summary.get("tasks", [])
    return {
        "campaign_s": float(found[-1]) if found else None,
        "startup_s": float(startup[-1]) if startup else None,  # database, Ray and the workers up
        "worker_startup_s": worker_up,  # of it, the first worker's steps (adapter, device, placement)
        **{k: summary.get("totals", {}).get(k) for k in ("trials", "search_s", "remeasure_s", "rounds", "timings")},
        "extended_problems": sum(t.get("trials", 0) > t.get("planned", 0) for t in tasks),
        "winner_rounds": sum(w.rounds or 0 for w in winners),
        "ties": sum(bool(w.tie) for w in winners),
        "worker_ms_per_trial": worker_stages(text),
        "tasks": {f"{t['kernel']} {t['problem']}": t for t in tasks},
    }


def worker_stages(text: str) -> dict[str, float]:
    """The first worker's ms per trial by stage, from the log's "worker N: T trials (R re-timed
    at low clocks); stage ms, ..." line (compile_wait: the trial thread waiting for its
    pipeline; a campaign whose trials wait on compiles leaves the GPU idle, and an idle GPU
    drops its clocks), `clock_retimes`: how many timings the clock check re-timed, and
    `clock_rechecks`: how many of them as competitive at a slightly low clock, and
    `clock_retimes_slow`: how many slow ones the canary still read slow after their re-timing."""
    retimed = r"(?: \((\d+) re-timed at low clocks(?:, (\d+) of them competitive)?(?:, (\d+) still slow after)?\))?"
    pattern = r"^  worker [^:]+: \d+ trials" + retimed + r"; (.*)$"
    line = re.search(pattern, text, re.MULTILINE)
    if line is None:
        return {}
    pairs = (item.rsplit(" ", 1) for item in line.group(4).split(", ") if " " in item)
    stages = {stage: float(ms) for stage, ms in pairs}
    counts = {"clock_retimes": line.group(1), "clock_rechecks": line.group(2), "clock_retimes_slow": line.group(3)}
    return stages | {name: float(count or 0) for name, count in counts.items()}


def timeline(db) -> dict:
    """Where the campaign's wall went, from SQL's timestamps, summed over its problems (in
    the order it ran them): `trials_s` from a problem's first trial to its last, `winner_s`
    from its last trial to its winner stored (re-measurement), `gaps_s` from the previous
    winner (or the campaign's start) to the problem's first trial (its inputs, its
    reference, its first compile: what prefetch hides behind the previous problem). Method:
    host wall clock of the driver's SQL writes (finished_at, updated_at), so each span also
    holds the recorder's batching (a few ms), never GPU time."""
    from sqlalchemy import text

    with db.engine.connect() as conn:
        started = conn.execute(text("SELECT MIN(started_at) FROM campaigns")).scalar()
        trials = conn.execute(text("SELECT kernel, problem, finished_at FROM trials ORDER BY id")).all()
        stored = dict(((k, p), u) for k, p, u in conn.execute(text("SELECT kernel, problem, updated_at FROM winners")))
    spans: list[list] = []  # [(kernel, problem), first trial, last trial], in run order
    for kernel, problem, finished in trials:
        at = _stamp(finished)
        if not spans or spans[-1][0] != (kernel, problem):
            spans.append([(kernel, problem), at, at])
        spans[-1][2] = at
    out = {"trials_s": 0.0, "winner_s": 0.0, "gaps_s": 0.0}
    previous = _stamp(started) if started is not None else None
    for key, first, last in spans:
        done = _stamp(stored[key]) if key in stored else last
        out["trials_s"] += (last - first).total_seconds()
        out["winner_s"] += max(0.0, (done - last).total_seconds())
        if previous is not None:
            out["gaps_s"] += max(0.0, (first - previous).total_seconds())
        previous = done
    return {k: round(v, 1) for k, v in out.items()}


def _stamp(value) -> datetime.datetime:
    """A SQL timestamp (a datetime on PostgreSQL, text on SQLite) as a datetime."""
    return value if isinstance(value, datetime.datetime) else datetime.datetime.fromisoformat(str(value))


def retime(bench: TrialRunner, kernel: str, problem_key: str, a: str, b: str, reps: int, rounds: int) -> dict:
    spec = catalog.get(kernel)
    problem = Problem.from_key(problem_key)
    schedules = [Schedule.from_key(a)] if a == b else [Schedule.from_key(a), Schedule.from_key(b)]
    samples = bench.remeasure_rounds(spec.name, problem, schedules, reps, rounds, max_rounds=rounds)
    first, second = samples.get(a), samples.get(b)
    if not first or not second:
        return {"error": "a winner failed to run when re-timed"}
    ratio = statistics.median(second) / statistics.median(first)
    paired = sorted(y / x for x, y in zip(first, second, strict=False)) if a != b else [1.0]
    return {
        "first_ns": statistics.median(first),
        "second_ns": statistics.median(second),
        "ratio": ratio,  # second winner's time over the first's (>1: the second campaign's winner is slower)
        "paired_ratio_median": statistics.median(paired),
        "rounds": len(first),
    }


def decision(campaigns: list[dict], key: tuple[str, str]) -> dict:
    """Each campaign's decision for one row (a list, campaign a's first): its re-measurement's
    rounds, tie, margin, and its search's trials."""
    out: dict[str, list] = {"campaign_rounds": [], "campaign_tie": [], "campaign_margin": [], "campaign_trials": []}
    for c in campaigns:
        w = c["winners"].get(key)
        task = c["cost"]["tasks"].get(f"{key[0]} {key[1]}", {})
        out["campaign_rounds"].append(w and w.rounds)
        out["campaign_tie"].append(w and w.tie)
        out["campaign_margin"].append(w and w.margin)
        out["campaign_trials"].append(task.get("trials"))
    return out


def summarize(rows: list[dict]) -> dict:
    timed = [r for r in rows if "ratio" in r]
    gaps = [abs(r["ratio"] - 1) for r in timed]
    return {
        "rows": len(rows),
        "identical": sum(r["identical"] for r in rows),
        "within_3pct": sum(g <= 0.03 for g in gaps),
        "within_5pct": sum(g <= 0.05 for g in gaps),
        "max_gap": max(gaps, default=None),
        "unmatched_or_failed": len(rows) - len(timed),
        "target_met": bool(timed) and len(timed) == len(rows) and sum(g <= 0.03 for g in gaps) >= len(rows) - 1
        and max(gaps) <= 0.05,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", nargs="*", default=[], help="kernel names (or --all)")
    parser.add_argument("--all", action="store_true", help="every kernel in the catalog (farm tune --all)")
    parser.add_argument("--sizes", default=None, help="farm tune --sizes")
    parser.add_argument("--budget", default=None, help="farm tune --budget (default: farm tune's)")
    parser.add_argument("--seeds", default="0,0", help="the two campaigns' --seed (default 0,0: the same command)")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--reps", type=int, default=10, help="dispatches per round when re-timing")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds when re-timing")
    parser.add_argument("--wall-target", type=float, default=141.0, help="seconds per campaign")
    parser.add_argument("--label", default="h200")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument(
        "--shader-cache", choices=("shared", "fresh"), default="shared",
        help="fresh: each campaign compiles against an empty NVIDIA shader disk cache of its own "
        "(__GL_SHADER_DISK_CACHE_PATH), so the first campaign is no colder than the second",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not args.all and not args.kernels:
        parser.error("name --kernels or --all")
    seeds = [int(s) for s in args.seeds.split(",")]
    if len(seeds) != 2:
        parser.error("--seeds takes two seeds, e.g. 0,0")
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    work = args.out / f"{date}-{args.label}-stability"
    work.mkdir(parents=True, exist_ok=True)
    campaigns = [run_campaign(name, args, work, seed) for name, seed in zip(("a", "b"), seeds, strict=True)]
    device = benchmark_device(args.allow_cpu)
    if device is None:
        return 2
    bench = TrialRunner(device, "stability")
    rows = []
    try:
        for key in sorted(set(campaigns[0]["winners"]) | set(campaigns[1]["winners"])):
            a, b = (c["winners"].get(key) for c in campaigns)
            row = {"kernel": key[0], "problem": key[1], "first": a and a.schedule_key, "second": b and b.schedule_key}
            row["identical"] = a is not None and b is not None and a.schedule_key == b.schedule_key
            row |= decision(campaigns, key)
            if a is None or b is None:
                row["error"] = "only one campaign has a winner"
            else:
                row |= retime(bench, key[0], key[1], a.schedule_key, b.schedule_key, args.reps, args.rounds)
            rows.append(row)
            shown = f"{100 * (row['ratio'] - 1):+.1f}%" if "ratio" in row else row["error"]
            print(f"{key[0]:<14} {key[1]:<28} {'same' if row['identical'] else 'differ':<6} {shown}", file=sys.stderr)
    finally:
        bench.close()
    result = {
        "format": "farm-stability/1",
        "date": date,
        "device": device.profile.summary,
        "command": sys.argv,
        "campaign_wall_s": [c["wall_s"] for c in campaigns],
        "campaign_cost": [{k: v for k, v in c["cost"].items() if k != "tasks"} for c in campaigns],
        "wall_target_s": args.wall_target,
        "wall_target_met": all(c["wall_s"] <= args.wall_target for c in campaigns),
        "seeds": seeds,
        "shader_cache": args.shader_cache,
        "retime": {"reps": args.reps, "rounds": args.rounds, "method": "interleaved, median over rounds"},
        "summary": summarize(rows),
        "rows": rows,
    }
    path = args.out / f"{date}-{args.label}-stability.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    shown = {k: result[k] for k in ("campaign_wall_s", "wall_target_met", "campaign_cost")}
    print(json.dumps(result["summary"] | shown), file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
