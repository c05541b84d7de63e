"""Replay `farm tune`'s model search on a measured landscape: every schedule of a kernel's
space measured once for one problem (`farm tune KERNEL --strategy exhaustive --sizes ...`
writes one into its database), the search run on it as a campaign runs it (the default
budget, its cap grown with the space, the adaptive stop, the extension and the polish; one
worker; no stored trials or sibling problems' winners to start from), once per seed. A
CPU benchmark on GPU numbers: no device, the landscape's median times stand in for the
trials (so measurement noise is left out: the stored numbers are the same at every visit).

Prints, per problem, how often the search ends within 1% / 3% of the landscape's best and
the trials it spent, and writes <out>/<date>-<label>-search-replay.json:

    python benchmarks/search_replay.py --db gemm2048.db --seeds 40 --label h200

A landscape is a database's trials or a `.json.gz` written by `--export DIR` (a few tens of
KB, so a replay needs no database; tests/data/landscapes/ holds two measured on an H200).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import random
import sqlite3
import statistics
import sys
from pathlib import Path

from farm import catalog
from farm.gpu import Timing
from farm.schedule import Problem, Schedule, Status
from farm.trial import TrialKey, TrialResult
from farm.tuning.recording import result_from_row
from farm.tuning.search import POLISH_ROUNDS, Budget, model_based
from farm.tuning.tasks import DEFAULT_BUDGET, SPACE_SHARE, TuneConfig, scaled_budget

FIELDS = ("median_ns", "p20_ns", "p80_ns", "min_ns", "reps", "method")  # Timing's


def landscapes(db: Path, kernel: str | None) -> dict[tuple[str, str], dict[str, TrialResult]]:
    """{(kernel, problem key): {schedule key: result}} of `kernel`'s trials in `db` (every
    kernel's when None; the latest per schedule), a database or an exported `.json.gz`."""
    if db.name.endswith(".json.gz"):
        data = json.loads(gzip.decompress(db.read_bytes()))
        problem = Problem.from_key(data["problem"])
        results = {}
        for schedule, status, *timing in data["trials"]:
            key = TrialKey(data["topology"], data["kernel"], data["source"], problem, Schedule.from_key(schedule))
            results[schedule] = TrialResult(key, Status(status), timing=Timing(*timing) if timing[0] else None)
        return {(data["kernel"], data["problem"]): results} if kernel in (None, data["kernel"]) else {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    out: dict[tuple[str, str], dict[str, TrialResult]] = {}
    for row in con.execute("SELECT * FROM trials WHERE ? IS NULL OR kernel = ? ORDER BY id", (kernel, kernel)):
        problem = Problem.from_key(row["problem"])
        out.setdefault((row["kernel"], row["problem"]), {})[row["schedule"]] = result_from_row(dict(row), problem)
    con.close()
    return out


def export(measured: dict[str, TrialResult], path: Path) -> None:
    """One problem's landscape as gzipped JSON: [schedule key, status, *FIELDS] a trial."""
    first = next(iter(measured.values())).key
    trials = [
        [k, r.status.value, *([getattr(r.timing, f) for f in FIELDS] if r.timing else [None] * len(FIELDS))]
        for k, r in sorted(measured.items())
    ]
    head = {"kernel": first.kernel, "problem": first.problem.key(), "topology": first.topology_hash}
    data = head | {"source": first.source_hash, "fields": ["schedule", "status", *FIELDS], "trials": trials}
    path.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0))


def replay(space: list[Schedule], measured: dict[str, TrialResult], seed: int, budget: int) -> tuple[float, int]:
    """(best time found, trials spent) by one campaign-like search of `space` on `measured`."""
    cap, extend_after = scaled_budget(budget, len(space), SPACE_SHARE)
    results = model_based(
        space,
        lambda batch: [measured[s.key()] for s in batch],
        Budget(cap),
        random.Random(seed),
        workers=1,
        noise=TuneConfig.noise,
        extend_after=extend_after,
        polish=POLISH_ROUNDS,
    )
    return min(r.median_ns for r in results if r.ok and r.median_ns), len(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--db", type=Path, action="append", required=True, help="a landscape: sqlite or an exported .json.gz (repeat)"
    )
    parser.add_argument("--kernel", default=None, help="replay only this kernel's landscapes (default: every one)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--label", default="h200")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--export", type=Path, default=None, help="write each landscape as .json.gz here and stop")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'landscape':<40} {'kernel problem':<30} {'space':>5} {'<=1%':>5} {'<=3%':>5} {'worst':>7} {'trials':>7}")
    for db in args.db:
        for (kernel, problem), measured in landscapes(db, args.kernel).items():
            if args.export is not None:
                args.export.mkdir(parents=True, exist_ok=True)
                path = args.export / f"{args.label}-{db.parent.name}-{kernel}-{problem.replace(',', '-')}.json.gz"
                export(measured, path)
                print(f"wrote {path} ({path.stat().st_size} bytes, {len(measured)} trials)")
                continue
            spec = catalog.get(kernel)
            space = [s for s in spec.schedules() if s != spec.default and s.key() in measured]
            if len(space) < len(spec.schedules()) - 1:  # an older space, or schedules invalid for the problem
                print(
                    f"note: {db}: {kernel} {problem}: {len(space)} of the space's {len(spec.schedules()) - 1} "
                    "in the landscape (the rest fail its checks there, or are newer than it)"
                )
            if len(space) < 2:
                continue
            best = min(r.median_ns for r in measured.values() if r.ok and r.median_ns)
            runs = [replay(space, measured, seed, args.budget) for seed in range(args.seeds)]
            gaps = [found / best - 1 for found, _ in runs]
            row = {
                "landscape": str(db),
                "kernel": kernel,
                "problem": problem,
                "space": len(space),
                "best_ns": best,
                "seeds": args.seeds,
                "within_1pct": sum(g <= 0.01 for g in gaps),
                "within_3pct": sum(g <= 0.03 for g in gaps),
                "worst_gap": max(gaps),
                "mean_trials": statistics.mean(t for _, t in runs),
                "gaps": gaps,
            }
            rows.append(row)
            print(
                f"{str(db)[-40:]:<40} {kernel + ' ' + problem:<30} {len(space):>5} "
                f"{row['within_1pct']:>3}/{args.seeds} {row['within_3pct']:>3}/{args.seeds} "
                f"{row['worst_gap']:>+7.1%} {row['mean_trials']:>7.1f}"
            )
    if args.export is not None:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{datetime.date.today()}-{args.label}-search-replay.json"
    path.write_text(json.dumps({"method": "replay of stored GPU-timestamp medians", "rows": rows}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
