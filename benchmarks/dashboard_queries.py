"""Every dashboard query at millions of trials, on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/dashboard_queries.py --trials 1000000 3000000 [--no-postgres] [--counting]

Trials are bulk loaded (SQLite: one executemany transaction; PostgreSQL: COPY) in steps up
to each size, the summaries rebuilt from them (farm.store.summaries.rebuild_summaries, what
revision 0006's backfill runs), then every query of farm.dashboard.data is timed: the best
of 3 calls after a first (warming) call. `--counting` also times the same queries with the
summaries hidden (the queries a database without them runs, counting trials), for
comparison. Data: 7 kernels x 7 problems, 3 topologies, 4 source hashes per kernel (the
newest the catalog's), campaigns of 10,000 trials of one kernel on one topology, ~12%
failures whose messages embed values, one winner per (topology, kernel, problem).
PostgreSQL: a throwaway server (tests/pg.py, fsync off), VACUUM ANALYZEd after each load.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from farm import catalog, store  # noqa: E402
from farm.dashboard import data, trial_data  # noqa: E402
from farm.store import compaction, summaries  # noqa: E402
from farm.store import parquet as artifacts  # noqa: E402
from farm.store.models import WinnerRow  # noqa: E402

KERNELS = ("gemm", "gemv", "fft", "topk", "recurrent", "ternary_gemv", "conv2d")  # conv2d: not in the catalog
PER_CAMPAIGN = 10_000
FAILURES = (
    ("wrong_result", "max_abs {a:.6g} > atol {t:g} at index {i}"),
    ("invalid_schedule", "workgroup size {i} exceeds the adapter limit of 256"),
    ("timeout", "timed out after {s:.1f} s"),
    ("compile_error", "shader compilation failed: line {i}: unknown identifier"),
)
COLUMNS = (
    "campaign_id topology_hash kernel source_hash problem schedule status message median_ns p20_ns p80_ns"
    " min_ns reps timing_method max_abs mean_abs rmse max_rel host worker_id finished_at".split()
)
FINISHED = datetime(2026, 12, 1, tzinfo=UTC)


def source_hashes() -> dict[str, list[str]]:
    names = set(catalog.names())
    current = {k: catalog.get(k).source_hash() if k in names else f"{k}-current" for k in KERNELS}
    return {k: [f"{k}-old-{n}" for n in range(3)] + [current[k]] for k in KERNELS}


def problems(kernel: str) -> list[str]:
    return [json.dumps({"m": 64 << i, "n": 32 << i}, sort_keys=True, separators=(",", ":")) for i in range(7)]


def campaign_rows(
    c: int, campaign_id: int, topology: str, rng: random.Random, count: int = PER_CAMPAIGN
) -> Iterator[tuple]:
    """Campaign number c's trials as tuples in COLUMNS order; unique trial keys."""
    kernel = KERNELS[c % len(KERNELS)]
    source = source_hashes()[kernel][min(3, c % 9 // 2)]
    keys = problems(kernel)
    for j in range(count):
        schedule = json.dumps({"vector_width": 1 << (j % 3), "workgroup_size": c * 100_000 + j}, sort_keys=True)
        head = (campaign_id, topology, kernel, source, keys[j % 7], schedule)
        if rng.random() < 0.12:
            status, text = FAILURES[rng.randrange(4)]
            msg = text.format(a=rng.random(), t=1e-4, i=rng.randrange(1 << 16), s=rng.uniform(1, 30))
            yield (*head, status, msg, None, None, None, None, None, None, None, None, None, None, "h", "g", FINISHED)
        else:
            ns = rng.uniform(1e3, 1e7)
            timing = (ns, ns * 0.95, ns * 1.05, ns * 0.9, 20, "timestamp")
            yield (*head, "ok", "", *timing, 1e-6, 1e-7, 1e-7, 1e-5, "h", "g", FINISHED)


def setup(url: str) -> list[str]:
    from test_store_support import profile

    db = store.open_store(url)
    hashes = [store.upsert_topology(db, profile(f"GPU {n}", device_id=n)) for n in range(3)]
    rows = [
        {"topology_hash": t, "kernel": k, "problem": p, "schedule": "{}", "source_hash": source_hashes()[k][-1]}
        | {"median_ns": 1000.0 + i, "default_median_ns": 2000.0, "speedup": 2.0, "device_name": f"GPU {n}"}
        for n, t in enumerate(hashes)
        for i, (k, p) in enumerate((k, p) for k in KERNELS for p in problems(k))
    ]
    with db.engine.begin() as conn:
        conn.execute(WinnerRow.__table__.insert(), rows)
    db.engine.dispose()
    return hashes


def load(url: str, start: int, stop: int, topologies: list[str]) -> float:
    """Add campaigns start..stop-1 (PER_CAMPAIGN trials each) in bulk, then rebuild the summaries; returns seconds."""
    began = time.perf_counter()
    db = store.open_store(url)
    ids = [store.start_campaign(db, "farm tune", "random", None, 20, PER_CAMPAIGN) for _ in range(start, stop)]
    for cid in ids:
        store.finish_campaign(db, cid, "done")
    rng = random.Random(start)
    rows = (
        row
        for c, cid in zip(range(start, stop), ids, strict=True)
        for row in campaign_rows(c, cid, topologies[c % 3], rng)
    )
    if db.dialect == "sqlite":
        _sqlite_bulk(url.removeprefix("sqlite:///"), rows)
    else:
        _copy(db, rows)
    with db.engine.begin() as conn:
        summaries.rebuild_summaries(conn)
    db.engine.dispose()
    return time.perf_counter() - began


def _sqlite_bulk(path: str, rows) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    marks = ", ".join("?" * len(COLUMNS))
    conn.executemany(f"INSERT INTO trials ({', '.join(COLUMNS)}) VALUES ({marks})", rows)
    conn.commit()
    conn.execute("ANALYZE")
    conn.close()


def _copy(db, rows) -> None:
    raw = db.engine.raw_connection()
    try:
        with raw.cursor() as cur, cur.copy(f"COPY trials ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        raw.commit()
    finally:
        raw.close()
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


def calls(db) -> dict[str, Callable]:
    kernel, problem = "gemm", problems("gemm")[3]
    topology = next(iter(data.topology_choices(db)))
    campaign = data.campaign_table(db, limit=1)[0]["id"]
    older = data.trial_page(db, 100).older
    return {
        "require_data": lambda: data.require_data(db),
        "topology_table": lambda: data.topology_table(db),
        "campaign_table": lambda: data.campaign_table(db),
        "running_campaigns": lambda: data.running_campaigns(db),
        "status_counts": lambda: data.status_counts(db),
        "status_counts(kernel)": lambda: data.status_counts(db, kernel=kernel),
        "status_counts(topology)": lambda: data.status_counts(db, topology=topology),
        "status_counts(campaign)": lambda: data.status_counts(db, campaign=campaign),
        "kernel_names": lambda: data.kernel_names(db),
        "topology_choices": lambda: data.topology_choices(db),
        "problem_keys": lambda: data.problem_keys(db, kernel),
        "winner_table": lambda: data.winner_table(db),
        "trial_count": lambda: data.trial_count(db),
        "trial_count(kernel,status)": lambda: data.trial_count(db, kernel=kernel, status="timeout"),
        "trial_count(topology)": lambda: data.trial_count(db, topology=topology),
        "trial_count(campaign)": lambda: data.trial_count(db, campaign=campaign),
        "trial_page": lambda: data.trial_page(db, 100),
        "trial_page(older)": lambda: data.trial_page(db, 100, before=older),
        "trial_page(campaign)": lambda: data.trial_page(db, 100, campaign=campaign),
        "trial_page(kernel)": lambda: data.trial_page(db, 100, kernel=kernel),
        "trial_page(topology)": lambda: data.trial_page(db, 100, topology=topology),
        "trial_page(status)": lambda: data.trial_page(db, 100, status="timeout"),
        "trial_page(kernel,status)": lambda: data.trial_page(db, 100, kernel=kernel, status="timeout"),
        "knob_timings(kernel)": lambda: data.knob_timings(db, kernel),
        "knob_timings(kernel,problem)": lambda: data.knob_timings(db, kernel, problem=problem),
        "knob_timings(kernel,problem,topology)": lambda: data.knob_timings(db, kernel, problem, topology),
        "knob_timings(not in catalog)": lambda: data.knob_timings(db, "conv2d"),
        "failure_summary": lambda: data.failure_summary(db),
        "failure_summary(kernel)": lambda: data.failure_summary(db, kernel=kernel),
        "failure_summary(topology)": lambda: data.failure_summary(db, topology=topology),
        "failure_summary(campaign)": lambda: data.failure_summary(db, campaign=campaign),
        "trials_by_topology": lambda: data.trials_by_topology(db, kernel, problem),
        "compared_problems": lambda: data.compared_problems(db),
        "topology_comparison": lambda: data.topology_comparison(db, kernel, problem),
        "sweep_table": lambda: data.sweep_table(db),
        "queue_table": lambda: data.queue_table(db),
        "queue_counts": lambda: data.queue_counts(db),
        "campaign end: SQL rows per partition": lambda: compaction.sql_partition_counts(db),
    }


@contextmanager
def counting() -> Iterator[None]:
    """The queries as a database without summaries runs them (counting trials)."""
    saved = summaries.has_summaries
    modules = (summaries, store.repo, data, trial_data, compaction)
    for module in modules:
        module.has_summaries = lambda _store: False
    try:
        yield
    finally:
        for module in modules:
            module.has_summaries = saved


def timed(url: str) -> dict[str, float]:
    db = data.open_readonly(url)
    out = {}
    for name, call in calls(db).items():
        call()  # warm
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - start)
        out[name] = best
    db.engine.dispose()
    return out


def campaign_end(rows: int, directory: Path) -> dict[str, float]:
    """A campaign's end on one partition holding `rows` trials in one file, 50,000 in another
    and a new campaign's 10,000: finish_artifacts as a campaign runs it, and merging every file."""
    topology, rng = "t" * 64, random.Random(0)
    names = [c for c in COLUMNS if c not in ("topology_hash", "kernel")]

    def write(campaign: int, count: int) -> None:
        made = [dict(zip(COLUMNS, row, strict=True)) for row in _rows(campaign, count, topology, rng)]
        artifacts.write_trials(
            directory,
            campaign,
            [{k: r[k] for k in names} | {"topology_hash": topology, "kernel": "gemm"} for r in made],
        )

    out = {}
    for label, full in (("campaign end (small files only)", False), ("farm compact (every file)", True)):
        write(1, rows)
        compaction.compact_partition(directory, topology, "gemm")
        write(3, 5 * PER_CAMPAIGN)  # earlier campaigns' files, merged once, still small
        write(2, PER_CAMPAIGN)
        start = time.perf_counter()
        compaction.finish_artifacts(None, directory, None, [(topology, "gemm")], full=full)
        out[label] = time.perf_counter() - start
        for path in compaction.partition_files(directory, topology, "gemm"):
            path.unlink()
    return out


def _rows(campaign: int, count: int, topology: str, rng: random.Random) -> Iterator[tuple]:
    for row in campaign_rows(campaign, campaign, topology, rng, count):
        yield row[:5] + (row[5].replace("}", f',"c":{campaign}}}'),) + row[6:]


def table(results: dict[str, dict[str, float]]) -> str:
    columns = list(results)
    names = list(next(iter(results.values())))
    width = max(len(n) for n in names)
    lines = [f"{'query':<{width}}  " + "  ".join(f"{c:>16}" for c in columns)]
    for name in names:
        cells = "  ".join(f"{1000 * results[c][name]:>14.1f}ms" for c in columns)
        lines.append(f"{name:<{width}}  {cells}")
    worst = "  ".join(f"{1000 * max(results[c].values()):>14.1f}ms" for c in columns)
    lines.append(f"{'slowest':<{width}}  {worst}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[1_000_000, 3_000_000])
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--counting", action="store_true", help="also time the queries without the summaries")
    parser.add_argument(
        "--campaign-end",
        type=int,
        default=0,
        metavar="ROWS",
        help="also time a campaign's end on a Parquet partition of ROWS trials",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"sqlite": f"sqlite:///{tmp}/farm.db"}
        server = None
        if not args.no_postgres:
            from pg import PostgresServer, find_pg_bin

            server = PostgresServer(find_pg_bin())
            server.start()
            server.admin("CREATE DATABASE farm_queries")
            urls["postgresql"] = server.url("farm_queries")
        try:
            for name, url in urls.items():
                topologies, loaded = setup(url), 0
                for size in sorted(args.trials):
                    campaigns = -(-size // PER_CAMPAIGN)
                    seconds = load(url, loaded, campaigns, topologies)
                    print(f"{name}: loaded {campaigns * PER_CAMPAIGN:,} trials (+{seconds:.0f} s)", flush=True)
                    loaded = campaigns
                    label = f"{name} {size / 1e6:g}M"
                    results[label] = timed(url)
                    if args.counting:
                        with counting():
                            results[f"{label} counting"] = timed(url)
        finally:
            if server is not None:
                server.stop()
    print(table(results))
    if args.campaign_end:
        with tempfile.TemporaryDirectory() as tmp:
            for label, seconds in campaign_end(args.campaign_end, Path(tmp)).items():
                print(
                    f"{label}, partition of {args.campaign_end:,} + 50,000 + {PER_CAMPAIGN:,} trials: {seconds:.3f} s"
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
