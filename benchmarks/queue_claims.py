"""The tuning queue under many drainers: claims/s with N claimer processes draining Q queued
requests, on SQLite and a throwaway PostgreSQL, each claim checked (none lost, none twice).

    .venv/bin/python benchmarks/queue_claims.py [--queued 10000] [--claimers 1,4,8] [--no-postgres] [--json out.json]

Two modes per claimer count, each on a fresh database holding `--queued` requests for one
topology: `claim`, a bare loop of farm.store.queue.claim + complete (`--batch` requests a
call), and `round`, `farm serve`'s round (farm.tuning.serve.Drainer.drain_once, its
sweeps included) with the tuning replaced by an instant completion, so what it measures is
the round's own store work. Claims/s is the requests claimed over the host wall time from
the start signal to the last claimer's end. PostgreSQL runs with fsync on unless
`--no-fsync`. The machine's load average is printed with the table (claimers share its
cores with the database server).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from farm import store  # noqa: E402
from farm.store import queue  # noqa: E402
from farm.store.models import TuningRequestRow, utcnow  # noqa: E402
from farm.tuning.serve import Drainer  # noqa: E402
from farm.tuning.tasks import TuneConfig  # noqa: E402

TOPOLOGY = "b" * 64
MODES = ("claim", "round")


def fill(url: str, queued: int) -> None:
    """A fresh queue of `queued` requests for TOPOLOGY, inserted in one transaction."""
    db = store.open_store(url)
    now = utcnow()
    rows = [
        {"topology_hash": TOPOLOGY, "kernel": "gemv", "problem": f"m={i + 1},n=64", "source_hash": "src",
         "priority": i % 3, "status": "queued", "requested_by": "bench", "attempts": 0, "last_error": "",
         "note": "", "created_at": now, "updated_at": now}
        for i in range(queued)
    ]  # fmt: skip
    with db.engine.begin() as conn:
        conn.execute(TuningRequestRow.__table__.delete())
        conn.execute(TuningRequestRow.__table__.insert(), rows)
    if db.dialect == "postgresql":
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            from sqlalchemy import text

            conn.execute(text("VACUUM ANALYZE tuning_requests"))
    db.engine.dispose()


class InstantPool:
    """One worker of TOPOLOGY; the drainer below never asks it to tune."""

    def topologies(self):
        return {TOPOLOGY: ["w0"]}


class InstantDrainer(Drainer):
    """`farm serve`'s round with the tuning replaced by completing the claimed requests (noted in `seen`)."""

    seen: list[int]

    def _drain_group(self, topology, rows, tally):
        ids = [r["id"] for r in rows]
        self.seen.extend(ids)
        tally.done += queue.complete(self.db, self.name, ids, None, "bench")


def claimer(url: str, mode: str, name: str, batch: int, start, results) -> None:
    db = store.open_store(url)
    with db.engine.connect():  # a connection in the pool before the clock starts
        pass
    out = Path(tempfile.gettempdir())
    drainer = InstantDrainer(InstantPool(), db, TuneConfig(kernels=()), out, name=name, batch=batch)
    drainer.seen = []
    start.wait()
    while True:
        if mode == "claim":
            ids = [r["id"] for r in queue.claim(db, name, [TOPOLOGY], limit=batch)]
            queue.complete(db, name, ids, None, "bench")
            drainer.seen.extend(ids)
        elif not drainer.drain_once().claimed:
            break
        if mode == "claim" and not ids:
            break
    results.put((name, drainer.seen, time.monotonic()))
    db.engine.dispose()


def run(url: str, mode: str, claimers: int, queued: int, batch: int) -> dict:
    fill(url, queued)
    ctx = mp.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=claimer, args=(url, mode, f"bench:{n}", batch, start, results)) for n in range(claimers)
    ]
    for proc in procs:
        proc.start()
    time.sleep(1.0)  # every claimer connected
    began = time.monotonic()
    start.set()
    got = []
    while len(got) < len(procs):
        try:
            got.append(results.get(timeout=1.0))
        except Empty:
            if sum(p.exitcode not in (None, 0) for p in procs):
                raise SystemExit(f"a claimer failed ({mode}, {claimers} claimers): see its traceback above") from None
    for proc in procs:
        proc.join()
    wall = max(end for _, _, end in got) - began
    claimed = [i for _, ids, _ in got for i in ids]
    db = store.open_store(url)
    done = queue.requests(db, "done")
    db.engine.dispose()
    return {
        "mode": mode, "claimers": claimers, "queued": queued, "batch": batch, "claimed": len(claimed),
        "wall_s": round(wall, 3), "claims_per_s": round(len(claimed) / wall),
        "lost": queued - len(set(claimed) & {r["id"] for r in done}), "twice": len(claimed) - len(set(claimed)),
        "attempts_max": max((r["attempts"] for r in done), default=0),
    }  # fmt: skip


def table(rows: list[dict]) -> str:
    head = ("backend", "mode", "claimers", "claims/s", "wall s", "lost", "twice")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = (r["backend"], r["mode"], r["claimers"], r["claims_per_s"], r["wall_s"], r["lost"], r["twice"])
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--claimers", default="1,4,8", help="claimer process counts, comma-separated")
    parser.add_argument("--batch", type=int, default=16, help="requests per claim (farm serve's default)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-fsync", action="store_true", help="PostgreSQL with fsync off")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(c) for c in args.claimers.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES for m in modes) or min(counts) < 1 or args.queued < 1 or args.batch < 1:
        parser.error(f"modes are {', '.join(MODES)}; claimers, --queued and --batch must be >= 1")
    rows: list[dict] = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        urls = {} if args.no_sqlite else {"sqlite": f"sqlite:///{tmp}/queue.db"}
        server = None
        if not args.no_postgres:
            from pg import PostgresServer, find_pg_bin

            server = PostgresServer(find_pg_bin(), fsync=not args.no_fsync)
            server.start()
            server.admin("CREATE DATABASE farm_queue")
            urls["postgresql"] = server.url("farm_queue")
        try:
            for backend, url in urls.items():
                for mode in modes:
                    for n in counts:
                        row = {"backend": backend} | run(url, mode, n, args.queued, args.batch)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            if server is not None:
                server.stop()
    load = {"before": load_before, "after": os.getloadavg(), "cpus": os.cpu_count()}
    print(table(rows))
    fsync = "off" if args.no_fsync else "on"
    print(f"\nqueued {args.queued}, batch {args.batch}; PostgreSQL fsync {fsync}; load average (1, 5, 15 min) "
          f"before {load['before']}, after {load['after']} on {load['cpus']} CPUs")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "load": load}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
