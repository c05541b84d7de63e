"""Storage at scale: N realistic trials through the store API into SQLite and
PostgreSQL, then inserts, every dashboard data function and Parquet write/read timed.

    .venv/bin/python benchmarks/store_scale.py --trials 200000 [--no-postgres] [--json out.json]

Trials: 7 kernels, 49 problems, 3 topologies, 92 campaigns, ~12% failures whose messages
embed values (as the certifier's do), a few source hashes per kernel (the newest the
catalog's). Inserted through record_trials in 256-trial batches (a recorder flush of a
busy campaign). Parquet: each campaign writes one file per partition and compacts, as
TrialRecorder.close() does. PostgreSQL: a throwaway server (tests/pg.py), VACUUM ANALYZEd.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from farm import catalog, store  # noqa: E402
from farm.dashboard import data  # noqa: E402
from farm.gpu import HardwareProfile, Timing  # noqa: E402
from farm.schedule import Problem, Schedule, Status  # noqa: E402
from farm.store import compaction  # noqa: E402
from farm.store import parquet as artifacts  # noqa: E402
from farm.trial import ErrorMetrics, TrialKey, TrialResult  # noqa: E402

KERNELS = ("gemm", "gemv", "fft", "topk", "recurrent", "ternary_gemv", "conv2d")
BATCH = 256
FAILURES = (
    (Status.WRONG_RESULT, "max_abs {a:.6g} > atol {t:g} at index {i}"),
    (Status.INVALID_SCHEDULE, "workgroup size {i} exceeds the adapter limit of 256"),
    (Status.TIMEOUT, "timed out after {s:.1f} s"),
    (Status.COMPILE_ERROR, "shader compilation failed: line {i}: unknown identifier"),
)


def profiles() -> list[HardwareProfile]:
    from test_store_support import profile

    return [profile(f"GPU {n}", device_id=n) for n in range(3)]


def source_hashes() -> dict[str, list[str]]:
    names = set(catalog.names())
    current = {k: catalog.get(k).source_hash() if k in names else f"{k}-current" for k in KERNELS}
    return {k: [f"{k}-old-{n}" for n in range(3)] + [current[k]] for k in KERNELS}


def generate(n: int, topologies: list[str], seed: int = 0) -> list[tuple[int, list[TrialResult]]]:
    """(campaign number, its trials) for 92 campaigns; unique trial keys, realistic spread."""
    rng = random.Random(seed)
    sources = source_hashes()
    problems = {k: [Problem.of(m=64 << (i % 7), n=32 << (i // 7)) for i in range(7)] for k in KERNELS}
    campaigns: list[tuple[int, list[TrialResult]]] = []
    per = n // 92 + 1
    made = 0
    for c in range(92):
        kernel = KERNELS[c % 7]
        source = sources[kernel][min(3, c * 4 // 92)]
        topo = topologies[c % 3]
        trials = []
        for j in range(min(per, n - made)):
            problem = problems[kernel][j % 7]
            schedule = Schedule.of(workgroup_size=c * 100_000 + j, vector_width=1 << (j % 3))
            key = TrialKey(topo, kernel, source, problem, schedule)
            if rng.random() < 0.12:
                status, text = FAILURES[rng.randrange(4)]
                msg = text.format(a=rng.random(), t=1e-4, i=rng.randrange(1 << 16), s=rng.uniform(1, 30))
                trials.append(TrialResult(key, status, msg, None, ErrorMetrics(), "host", "gpu-0"))
            else:
                ns = rng.uniform(1e3, 1e7)
                timing = Timing(ns, ns * 0.95, ns * 1.05, ns * 0.9, 20, "timestamp")
                trials.append(TrialResult(key, Status.OK, "", timing, ErrorMetrics(1e-6, 1e-7, 1e-7, 1e-5), "h", "g"))
        made += len(trials)
        campaigns.append((c, trials))
    return campaigns


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return time.perf_counter() - start, value


def load(url: str, campaigns, hw) -> dict:
    db = store.open_store(url)
    for p in hw:
        store.upsert_topology(db, p)
    seconds, rows = 0.0, 0
    for _, trials in campaigns:
        cid = store.start_campaign(db, "farm tune", "random", None, 20, len(trials))
        for start in range(0, len(trials), BATCH):
            batch = [replace(t) for t in trials[start : start + BATCH]]
            s, k = timed(store.record_trials, db, cid, batch)
            seconds, rows = seconds + s, rows + k
        store.finish_campaign(db, cid, "done")
    db.engine.dispose()
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}


def dashboard(url: str, repeat: int = 3) -> dict:
    db = data.open_readonly(url)
    kernel, topo = "gemm", data.topology_choices(db)
    topology = next(iter(topo))
    problem = data.problem_keys(db, kernel)[0]
    campaign = data.campaign_table(db, limit=1)[0]["id"]
    older = data.trial_page(db, 100).older
    calls = {
        "require_data": lambda: data.require_data(db),
        "topology_table": lambda: data.topology_table(db),
        "campaign_table": lambda: data.campaign_table(db),
        "status_counts": lambda: data.status_counts(db),
        "kernel_names": lambda: data.kernel_names(db),
        "topology_choices": lambda: data.topology_choices(db),
        "problem_keys": lambda: data.problem_keys(db, kernel),
        "winner_table": lambda: data.winner_table(db),
        "trial_count": lambda: data.trial_count(db),
        "trial_count_campaign": lambda: data.trial_count(db, campaign=campaign),
        "trial_page": lambda: data.trial_page(db, 100),
        "trial_page_older": lambda: data.trial_page(db, 100, before=older),
        "trial_page_campaign": lambda: data.trial_page(db, 100, campaign=campaign),
        "trial_page_kernel_status": lambda: data.trial_page(db, 100, kernel=kernel, status="timeout"),
        "knob_timings": lambda: data.knob_timings(db, kernel, problem=problem, topology=topology),
        "failure_summary": lambda: data.failure_summary(db),
        "failure_summary_kernel": lambda: data.failure_summary(db, kernel=kernel),
        "trials_by_topology": lambda: data.trials_by_topology(db, kernel, problem),
        "compared_problems": lambda: data.compared_problems(db),
        "recorded_schedules": lambda: store.recorded_schedules(
            db, topology, kernel, source_hashes()[kernel][-1], problem
        ),
    }
    out = {}
    for name, call in calls.items():
        call()  # warm
        out[name] = round(min(timed(call)[0] for _ in range(repeat)), 4)
    out["failure_groups"] = len(data.failure_summary(db, limit=10**9))
    db.engine.dispose()
    return out


def parquet(campaigns, hw_hashes, out: Path) -> dict:
    write_s = 0.0
    for c, trials in campaigns:
        s, _ = timed(artifacts.write_trials, out, c, trials)
        write_s += s
    s, done = timed(compaction.finish_artifacts, None, out, None, compaction.partitions(out))
    files = {p: len(compaction.partition_files(out, *p)) for p in compaction.partitions(out)}
    read_s, frame = timed(artifacts.read_trials, out)
    result = {
        "write_s": round(write_s, 2),
        "compact_s": round(s, 2),
        "partitions": len(files),
        "max_files_per_partition": max(files.values()),
        "rows": len(frame),
        "read_pandas_s": round(min(read_s, *(timed(artifacts.read_trials, out)[0] for _ in range(2))), 3),
    }
    try:
        import duckdb

        glob = str(out / "trials" / "**" / "*.parquet")
        query = f"SELECT kernel, status, count(*) FROM read_parquet('{glob}', hive_partitioning=true) GROUP BY 1, 2"
        duckdb.sql(query).fetchall()
        result["duckdb_group_by_s"] = round(min(timed(lambda: duckdb.sql(query).fetchall())[0] for _ in range(3)), 3)
    except ImportError:
        result["duckdb_group_by_s"] = None
    return result


def vacuum(server) -> None:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=server.port, user="postgres", dbname="farm_scale") as conn:
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")  # autovacuum may not have run yet


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200_000)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    hw = profiles()
    campaigns = generate(args.trials, [p.topology_hash() for p in hw])
    results: dict = {"trials": args.trials, "batch": BATCH}
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"sqlite": f"sqlite:///{tmp}/farm.db"}
        server = None
        if not args.no_postgres:
            from pg import PostgresServer, find_pg_bin

            server = PostgresServer(find_pg_bin())
            server.start()
            server.admin("CREATE DATABASE farm_scale")
            urls["postgresql"] = server.url("farm_scale")
        try:
            for name, url in urls.items():
                results[name] = {"insert": load(url, campaigns, hw)}
                print(name, "insert", results[name]["insert"], flush=True)
                if name == "postgresql":
                    vacuum(server)
                results[name]["dashboard"] = dashboard(url)
                print(name, "dashboard", results[name]["dashboard"], flush=True)
            results["parquet"] = parquet(campaigns, None, Path(tmp) / "artifacts")
            print("parquet", results["parquet"], flush=True)
        finally:
            if server is not None:
                server.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
