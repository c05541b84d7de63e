"""`farm request` (queue tuning requests, `--list` the queue) and `farm serve` (drain it:
farm.tuning.serve). The queue itself is farm.store.queue."""

from __future__ import annotations

import argparse
import getpass
import os
import re
import signal
import socket
from datetime import datetime
from pathlib import Path

from farm import catalog
from farm.cli.errors import budget, count, positive_int, priority, seconds, small_nonnegative_int
from farm.tuning.tasks import DEFAULT_BUDGET

DB_HELP = "SQLAlchemy URL (default: $FARM_DATABASE_URL or $FARM_HOME/farm.db)"
SHORT = 12
_FULL_HASH = re.compile(r"[0-9a-f]{64}")


def add_parsers(sub) -> None:
    from farm.store.models import REQUEST_STATUSES

    p = sub.add_parser("request", help="queue kernels and problems for `farm serve` to tune; --list shows the queue")
    p.add_argument("kernels", nargs="*", help="kernel names (default: those named in --sizes)")
    p.add_argument(
        "--sizes",
        default=None,
        help="problems, e.g. 'gemm:m=64,k=64,n=64;gemv:m=256,n=256' (no default: needed unless --list)",
    )
    p.add_argument("--priority", type=priority, default=0, help="higher is drained first (default 0; a 32-bit integer)")
    p.add_argument(
        "--topology",
        default="any",
        help="a topology hash (or a unique prefix of a stored one); 'any' (default): whichever topology a drainer "
        "has; 'all': every stored topology",
    )
    p.add_argument("--list", action="store_true", help="show the queue instead")
    p.add_argument(
        "--status", choices=REQUEST_STATUSES, default=None, help="with --list: only this status (default: all)"
    )
    p.add_argument("--limit", type=count, default=100, help="with --list: at most this many rows")
    p.add_argument("--db", default=None, help=DB_HELP)
    p.set_defaults(func=cmd_request)

    p = sub.add_parser("serve", help="drain the tuning queue on a Ray cluster's workers (long-running; --once)")
    p.add_argument("--once", action="store_true", help="drain what is queued, then exit")
    p.add_argument("--poll", type=seconds, default=30.0, help="seconds between looks at an empty queue")
    p.add_argument("--allow-cpu", action="store_true", help="tune on a CPU adapter (lavapipe) when there is no GPU")
    p.add_argument("--db", default=None, help=DB_HELP)
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: $RAY_ADDRESS or a local Ray)")
    p.add_argument("--lease", type=seconds, default=300.0, help="seconds a claim lasts unless renewed")
    p.add_argument("--max-attempts", type=count, default=3, help="attempts before a request is failed")
    p.add_argument("--strategy", choices=("exhaustive", "random", "model"), default="model", help="as farm tune")
    p.add_argument("--budget", type=budget, default=DEFAULT_BUDGET, help=f"as farm tune (default {DEFAULT_BUDGET})")
    p.add_argument("--reps", type=count, default=10, help="timed repetitions per trial")
    p.add_argument("--warmup", type=small_nonnegative_int, default=2, help="untimed runs before timing")
    p.add_argument("--trial-timeout", type=seconds, default=60.0, help="seconds per trial")
    p.add_argument(
        "--gpus", type=positive_int, default=None, help="use at most this many of the cluster's GPUs (default: all)"
    )
    p.add_argument("--out", default=None, help="artifacts directory (default: $FARM_HOME/artifacts)")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs and of the search's random choices")
    p.set_defaults(func=cmd_serve)


def cmd_request(args: argparse.Namespace) -> int:
    from farm.store import open_existing, open_store
    from farm.store import queue as q
    from farm.tuning.tasks import parse_sizes, sizes_among

    if args.list:
        if args.kernels or args.sizes is not None:
            raise ValueError("request --list takes no kernels or --sizes")
        db = open_existing(args.db)
        rows = q.requests(db, args.status, args.limit) if db is not None and q.has_queue(db) else []
        print(format_requests(rows))
        return 0
    if args.sizes is None:
        raise ValueError("request needs --sizes, e.g. --sizes 'gemv:m=256,n=256' (or --list to show the queue)")
    sizes = parse_sizes(args.sizes)
    for name in args.kernels:
        catalog.get(name)  # an unknown kernel: ValueError naming the known ones
    if args.kernels:
        sizes_among(sizes, args.kernels, "the kernels")
    unsized = [k for k in args.kernels if catalog.get(k).name not in sizes]
    if unsized:
        raise ValueError(f"no problem in --sizes for {', '.join(unsized)}")
    _stored_first(args.db, args.topology)
    db = open_store(args.db)
    who = requester()
    for topology in _topologies(db, args.topology):
        for kernel, problems in sizes.items():
            source = catalog.get(kernel).source_hash()
            for problem in problems:
                rid, new = q.enqueue(db, topology, kernel, problem.key(), source, args.priority, who)
                state = "queued" if new else "already open"
                print(f"request {rid}: {kernel} {problem.key()} on topology {topology[:SHORT]}: {state}")
    return 0


def requester(what: str = "") -> str:
    """`user@host` (and `what`), for requested_by."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}{f' ({what})' if what else ''}"


def _stored_first(db_url: str | None, text: str) -> None:
    """A topology prefix or 'all' names stored topologies: with no farm database yet, say so
    before one is created (a request for 'any' or a whole hash may start a new database)."""
    from farm.store import open_existing
    from farm.store.queue import ANY_TOPOLOGY

    text = text.strip().lower()
    if text == ANY_TOPOLOGY or _FULL_HASH.fullmatch(text):
        return
    existing = open_existing(db_url)
    if existing is None:
        raise ValueError(f"--topology {text}: no topology is stored yet; use 'any' or a whole topology hash "
                         "(`farm adapters` prints this machine's)")  # fmt: skip
    existing.engine.dispose()


def _topologies(db, text: str) -> list[str]:
    from farm.store import resolve_topology, topologies
    from farm.store.queue import ANY_TOPOLOGY

    text = text.strip().lower()
    if text == ANY_TOPOLOGY:
        return [ANY_TOPOLOGY]
    stored = [t["hash"] for t in topologies(db)]
    if text == "all":
        if not stored:
            raise ValueError("--topology all: no topology is stored yet; use 'any' or a topology hash")
        return stored
    if _FULL_HASH.fullmatch(text):
        return [text]  # also one no campaign has seen yet (`farm adapters` prints it)
    return [resolve_topology(text, stored)]


def format_requests(rows: list[dict], now: datetime | None = None) -> str:
    """The queue as a fixed-width table (farm request --list)."""
    from farm.store.models import utcnow

    if not rows:
        return "the queue is empty: `farm request KERNEL --sizes SPEC` adds to it, `farm serve` drains it"
    now = now or utcnow()
    header = ("id", "status", "prio", "kernel", "problem", "topology", "age", "requested_by", "lease", "tries", "why")
    table = [header]
    for r in rows:
        lease = "-"
        if r["status"] == "claimed" and r["lease_expires_at"] is not None:
            left = (r["lease_expires_at"] - now).total_seconds()
            lease = f"{r['claimed_by']} ({'expires in ' + age(left) if left > 0 else 'expired'})"
        elif r["status"] == "done" and r["campaign_id"]:
            lease = f"campaign {r['campaign_id']}"
        table.append((
            str(r["id"]), r["status"], str(r["priority"]), r["kernel"], r["problem"], r["topology_hash"][:SHORT],
            age((now - r["created_at"]).total_seconds()), r["requested_by"] or "-", lease, str(r["attempts"]),
            (r["last_error"] or r["note"] or "")[:100],
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def age(seconds: float) -> str:
    """12s, 5m, 3h, 2d."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:.0f}s"


def cmd_serve(args: argparse.Namespace) -> int:
    from farm.tuning.serve import serve
    from farm.tuning.tasks import TuneConfig

    config = TuneConfig(
        kernels=(),
        strategy=args.strategy,
        budget=args.budget,
        reps=args.reps,
        warmup=args.warmup,
        seed=args.seed,
        out=args.out and Path(args.out),
    )
    if not (args.ray_address or os.environ.get("RAY_ADDRESS")):
        from farm.cli.cluster import ensure_token

        ensure_token()  # the token a new local Ray uses (as farm tune)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `ray job stop`, kill: give the claims back
    try:
        total = serve(
            config, args.db, args.ray_address, args.allow_cpu, args.trial_timeout, args.once, args.poll, args.gpus,
            args.lease, args.max_attempts,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 1 if total.failed else 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
