"""What a command checks before it creates or starts anything: the environment settings and
addresses it will use. A bad value is found here, as one `farm: error:` line naming it,
instead of after a database, `artifacts/` or a Ray cluster were made (and left behind).

`check(args)` runs in `farm.cli.main.main` before the command: each check reads what the
command's own code reads later (`lock_mode`, `connect_timeout`, `parse_address`,
`choose_adapter`, `normalize_url`, the catalog's extra-kernel entries), so the rule is
said once, where it is used.
"""

from __future__ import annotations

import argparse
import os

# Commands that run tuning on a Ray cluster (local unless an address is given).
RAY_COMMANDS = ("tune", "serve")
# Commands that open this machine's adapter whatever else they do.
ADAPTER_COMMANDS = ("adapters", "certify", "bench", "sweep")


def check(args: argparse.Namespace) -> None:
    """Every environment setting and address `args.command` will use; ValueError (or the
    setting's own error type) naming the first bad one."""
    _check_flags(args)
    _check_catalog_settings()
    if hasattr(args, "db"):
        _check_database(args.db)
    if args.command in RAY_COMMANDS:
        _check_ray(args)
    if args.command in ADAPTER_COMMANDS or (args.command in RAY_COMMANDS and _local(args)):
        _check_adapter()


def _check_flags(args: argparse.Namespace) -> None:
    """What argparse can't say: a flag that only means something with another, an empty revision."""
    if args.command == "request" and not args.list and args.status is not None:
        raise ValueError(f"request: --status {args.status} only filters --list; add --list to show the queue")
    revision = getattr(args, "revision", None)
    if args.command == "db" and revision is not None and not revision.strip():
        raise ValueError(f"db {args.db_command}: the revision is empty; name one (`farm db current` shows it), "
                         "'head' or 'base'")  # fmt: skip


def _check_catalog_settings() -> None:
    from farm.catalog import files as kernel_files
    from farm.catalog.extra import EXTRA_ENV, extra_kernel_entries
    from farm.paths import MAX_TEXT_BYTES, regular_file

    extra_kernel_entries(os.environ.get(EXTRA_ENV, ""))
    if not os.environ.get(kernel_files.BUNDLE_ENV):
        for path in kernel_files.configured():
            regular_file(path, f"${kernel_files.FILES_ENV} entry", MAX_TEXT_BYTES)


def _check_database(db: str | None) -> None:
    """The URL parses and names a driver the farm has ($FARM_DATABASE_URL too), $FARM_HOME, where
    the default database lives, is not a file, and a SQLite file, if there is one, is a regular
    file; nothing is opened or made."""
    from farm.store.engine import database_url, normalize_url, sqlite_file_exists, sqlite_path
    from farm.store.retry import retry_window_s

    retry_window_s()

    path = sqlite_path(normalize_url(database_url(db)))
    if path is not None:
        sqlite_file_exists(path)  # a FIFO, a device, a directory or a symlink loop: refused before anything is made


def _check_ray(args: argparse.Namespace) -> None:
    from farm.tuning.device_lock import lock_mode
    from farm.tuning.ray_session import check_address, connect_timeout

    lock_mode()
    if args.ray_address:
        check_address(args.ray_address, "--ray-address")
    elif os.environ.get("RAY_ADDRESS"):
        check_address(os.environ["RAY_ADDRESS"], "$RAY_ADDRESS")
    connect_timeout(None)  # read only to join a cluster, but a bad value is refused whatever the address


def _local(args: argparse.Namespace) -> bool:
    """Whether the workers will be this machine's (no address, or "local", as init_ray reads it)."""
    return (args.ray_address or os.environ.get("RAY_ADDRESS") or "local") == "local"


def _check_adapter() -> None:
    """$FARM_ADAPTER names one of this machine's adapters (NoAdapterError naming it otherwise)."""
    if os.environ.get("FARM_ADAPTER"):
        from farm.gpu import choose_adapter

        choose_adapter()
