"""`farm db`, `farm winners`, `farm export`, `farm compact`: the commands over the store.

`winners`, `export` and `db current` only read: they open the database read-only and
create nothing (no directory, no SQLite file, no -wal/-shm). URLs are shown with their
password masked (farm.store.engine.mask_url), whether they came from `--db` or
$FARM_DATABASE_URL.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from farm import catalog, paths
from farm.cli.errors import file_in_the_way

DB_HELP = "SQLAlchemy URL (default: $FARM_DATABASE_URL or $FARM_HOME/farm.db)"


def cmd_db(args: argparse.Namespace) -> int:
    from farm.store import database_url
    from farm.store.engine import mask_url, normalize_url, sqlite_file_exists, sqlite_path
    from farm.store.migrate import current, downgrade, upgrade

    url = database_url(args.db)
    path = sqlite_path(normalize_url(url))
    if path is not None and not sqlite_file_exists(path) and args.db_command != "upgrade":
        if args.db_command == "downgrade":
            raise FileNotFoundError(f"no database at {path}: nothing to downgrade")
        print(f"(no database yet: no migrations applied)  {mask_url(url)}")
        return 0
    if args.db_command == "upgrade":
        upgrade(url, args.revision)
    elif args.db_command == "downgrade":
        downgrade(url, args.revision)
    print(f"{current(url) or '(empty: no migrations applied)'}  {mask_url(url)}")
    return 0


def cmd_winners(args: argparse.Namespace) -> int:
    from farm.store import format_winners, open_existing, resolve_topology, topologies, winners, winners_json

    def current_hash(kernel: str) -> str | None:
        return catalog.get(kernel).source_hash() if kernel in catalog.names() else None

    store = open_existing(args.db)
    if store is None:
        if args.kernel is not None:
            catalog.get(args.kernel)  # an unknown kernel is an error even with nothing stored
        print("[]" if args.json else format_winners([], current_hash))
        return 0
    try:
        topology = args.topology and resolve_topology(args.topology, (t["hash"] for t in topologies(store)))
        records = winners(store, kernel=args.kernel, topology=topology)
        others = [] if records or args.kernel is None else winners(store, topology=topology)
    finally:
        store.engine.dispose()
    if not records and args.kernel is not None and args.kernel not in catalog.names():
        catalog.get(args.kernel)  # raises with the known names; a removed kernel's winners still list
    if args.json:
        print(winners_json(records, current_hash))
        return 0
    if others:  # winners, but none of the kernel asked for
        where = f" on topology {topology[:12]}" if topology else ""
        stored = ", ".join(sorted({r.kernel for r in others}))
        print(f"no winners for kernel {args.kernel}{where} (winners stored for: {stored}); `farm tune {args.kernel}`")
        return 0
    print(format_winners(records, current_hash, wide=args.wide))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from farm.store import database_url, open_existing, resolve_topology, topologies, write_schedules_file
    from farm.store.engine import mask_url

    out = export_path(Path(args.out))
    store = open_existing(args.db)
    if store is None:
        raise FileNotFoundError(f"no farm database at {mask_url(database_url(args.db))}: run `farm tune` first")
    try:
        topology = resolve_topology(args.topology, (t["hash"] for t in topologies(store)))
        count = write_schedules_file(store, topology, out)
    finally:
        store.engine.dispose()
    print(f"wrote {count} winner(s) for topology {topology} to {args.out}")
    return 0


def export_path(out: Path) -> Path:
    """`out`, checked before anything is read or made: NotADirectoryError naming the file that
    stands where one of its directories belongs, IsADirectoryError when it is a directory."""
    if out.is_dir():
        raise IsADirectoryError(f"--out {out} is a directory; name the FILE.json to write")
    if (blocking := file_in_the_way(out)) is not None:
        raise NotADirectoryError(f"--out {out}: {blocking} is not a directory")
    return paths.file_target(out, "--out")  # a FIFO or a device: refused, not written into


def cmd_compact(args: argparse.Namespace) -> int:
    from farm.store import farm_home, open_existing
    from farm.store.compaction import finish_artifacts, partitions

    out = Path(args.out) if args.out else farm_home() / "artifacts"
    if not (out / "trials").is_dir():
        raise FileNotFoundError(f"no trials dataset at {out / 'trials'}")
    db = None if args.no_restore else open_existing(args.db)
    try:
        done = finish_artifacts(db, out, None, partitions(out), full=True)
    finally:
        if db is not None:
            db.engine.dispose()
    restored = "not checked against SQL" if db is None else f"{done['restored']} trial(s) restored from SQL"
    print(f"{out / 'trials'}: {done['compacted']} partition(s) compacted, {restored}")
    return 0


def add_parsers(sub) -> None:
    db = sub.add_parser("db", help="database migrations (Alembic)").add_subparsers(dest="db_command", required=True)
    for name, help_text, default in (
        ("upgrade", "migrate up (default: to the newest revision)", "head"),
        ("downgrade", "migrate down to REVISION ('base' drops every farm table)", None),
        ("current", "print the revision the database is at", None),
    ):
        p = db.add_parser(name, help=help_text)
        if name == "upgrade":
            p.add_argument("revision", nargs="?", default=default, help="the Alembic revision to migrate to")
        elif name == "downgrade":
            p.add_argument("revision", help="the Alembic revision to migrate to, or 'base'")
        p.add_argument("--db", default=None, help=DB_HELP)
        p.set_defaults(func=cmd_db)

    p = sub.add_parser("winners", help="list the stored winners")
    p.add_argument("--kernel", default=None, help="only this kernel's winners (default: every kernel)")
    p.add_argument(
        "--topology", default=None, help="topology hash, or a unique prefix of it (as listed; default: every topology)"
    )
    p.add_argument("--db", default=None, help=DB_HELP)
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--wide", action="store_true", help="every column: full schedule, default time, runner-up, vendor, device"
    )
    shown.add_argument("--json", action="store_true", help="every field of every winner as JSON")
    p.set_defaults(func=cmd_winners)

    p = sub.add_parser("export", help="write one topology's winners as JSON for ForgeRuntime(schedules=...)")
    p.add_argument("--topology", required=True, help="topology hash or a unique prefix (`farm adapters`/`winners`)")
    p.add_argument("--out", required=True, help="FILE.json")
    p.add_argument("--db", default=None, help=DB_HELP)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "compact",
        help="merge each Parquet trials partition into one file, writing back from SQL what the files lack",
    )
    p.add_argument("--out", default=None, help="artifacts directory (default: $FARM_HOME/artifacts)")
    p.add_argument("--db", default=None, help=DB_HELP)
    p.add_argument("--no-restore", action="store_true", help="only merge files; do not compare with SQL")
    p.set_defaults(func=cmd_compact)
