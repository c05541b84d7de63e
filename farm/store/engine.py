"""Where the database is and how to connect: the URL (`database_url`: argument,
$FARM_DATABASE_URL, or SQLite under $FARM_HOME), its checks, and the engine for it:
SQLite (WAL, busy timeout) or PostgreSQL (psycopg 3). Migrations (farm.store.migrate)
and the store (farm.store.database) both build on this.

URLs carry passwords: anything that shows or stores one (messages, logs, the campaign's
command line) goes through `mask_url` / `mask_secrets` first.
"""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import stat
import urllib.parse
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from farm import paths

SQLITE_BUSY_TIMEOUT_MS = 30_000
# Page cache per connection (KiB; SQLite's default is 2 MiB): at a million trials the trial
# table's five indexes are hundreds of MiB, and inserts and dashboard reads that miss the
# cache pay a read per page. Memory is taken as pages are used, not up front.
SQLITE_CACHE_KIB = 64 * 1024
PG_CONNECT_TIMEOUT_S = 10  # an unreachable host fails in seconds, not after the OS's TCP timeout
MASK = "***"
URL_FORM = "expected DRIVER://USER:PASSWORD@HOST:PORT/NAME, with '@', ':' and '/' in a password percent-encoded"
# Query parameters that carry secrets (libpq's `password`, psycopg's `passfile` is a path: harmless).
_SECRET_PARAMS = ("password", "passwd", "pwd", "secret", "token", "sslpassword")
# userinfo with a password in anything URL-shaped: scheme://user:PASSWORD@host
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):(?P<password>[^\s'\"]*)@")
# user:password@ without a scheme, for strings that are not URLs at all
_BARE_USERINFO = re.compile(r"(?P<user>[^\s:/@'\"]+):[^\s/'\"]*@")
# The drivers the farm installs, per backend: what a URL with another driver should use.
_USE = {"sqlite": "use sqlite:///PATH", "postgresql": "use postgresql://... (psycopg 3, installed with the farm)"}
_SECRET_QUERY = re.compile(r"(?P<head>[?&;](?:" + "|".join(_SECRET_PARAMS) + r")=)[^&\s'\"]*", re.IGNORECASE)


def mask_url(url: str | URL) -> str:
    """`url` fit to show: the password replaced by ***, also in `?password=` query parameters,
    and also when `url` does not parse as a database URL."""
    text = url.render_as_string(hide_password=False) if isinstance(url, URL) else str(url)
    try:
        parsed = make_url(text)
    except Exception:  # noqa: BLE001 - unparsable: whatever looks like user:password@ goes
        masked = mask_secrets(text)
        return masked if masked != text else _BARE_USERINFO.sub(lambda m: f"{m['user']}:{MASK}@", text)
    if parsed.password is None:
        return mask_secrets(text)  # as given (no re-quoting of the path), query secrets masked
    return mask_secrets(parsed.render_as_string(hide_password=True))


def mask_secrets(text: str) -> str:
    """`text` (a message, a command line) with every password in it masked: URL userinfo
    `scheme://user:***@host` and `password=***` query parameters."""
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _SECRET_QUERY.sub(lambda m: m["head"] + MASK, text)


def mask_command(argv: list[str]) -> str:
    """A command line to store or show (shell-quoted), each argument with its secrets masked."""
    return shlex.join(mask_secrets(arg) for arg in argv)


def farm_home() -> Path:
    """`$FARM_HOME` (default ~/.farm); NotADirectoryError when it names a file."""
    home = Path(os.environ.get("FARM_HOME") or Path.home() / ".farm")
    found = paths.existing(home, "FARM_HOME")  # a symlink loop or a dangling link: UnusablePath naming it
    if found is not None and not stat.S_ISDIR(found.st_mode):
        raise NotADirectoryError(f"FARM_HOME {home} is a file, not a directory")
    return home


def database_url(url: str | None = None) -> str:
    """`url` if given, else `$FARM_DATABASE_URL`, else `sqlite:///$FARM_HOME/farm.db` (FARM_HOME: ~/.farm)."""
    if url:
        return url
    env = os.environ.get("FARM_DATABASE_URL")
    if env:
        return env
    return f"sqlite:///{farm_home() / 'farm.db'}"


def normalize_url(url: str) -> URL:
    """Parse and check a database URL; plain `postgresql://` means psycopg 3. ValueErrors
    name the URL with its password masked."""
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018 - a bad port only fails when read
    except Exception:  # sqlalchemy's reason may quote a piece of a password (`p@ss:w@rd` splits oddly)
        raise ValueError(f"not a database URL: {mask_url(url)!r} ({URL_FORM})") from None
    if parsed.host and any(c in parsed.host for c in "@/ "):  # the tail of a password with an unescaped '@'
        raise ValueError(f"not a database URL: {mask_url(url)!r}: its user or password holds an unescaped '@' "
                         f"({URL_FORM})")  # fmt: skip
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database {backend!r} in {mask_url(url)!r}: use sqlite or postgresql")
    _check_driver(parsed, url)
    return parsed


def _check_driver(parsed: URL, url: str) -> None:
    """ValueError naming the URL (masked) when its driver (`+psycopg2`, `+asyncpg`...) is unknown,
    asyncio-only, or its Python module is not installed: not a ModuleNotFoundError traceback later."""
    where, use = f"database URL {mask_url(url)!r}", _USE[parsed.get_backend_name()]
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        raise ValueError(f"{where}: unknown driver {parsed.drivername!r}; {use}") from None
    if getattr(dialect, "is_async", False):
        raise ValueError(f"{where}: {parsed.drivername!r} is an asyncio driver, the farm needs a blocking one; {use}")
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        module = exc.name or mask_secrets(str(exc))
        raise ValueError(
            f"{where}: driver {parsed.drivername!r} needs the Python module {module!r}, which is not installed: "
            f"`pip install {module.split('.')[0]}` into the farm's environment, or {use}"
        ) from None


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for an in-memory database."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def create_store_engine(url: str, read_only: bool = False) -> Engine:
    """An engine for `url`; SQLite gets WAL + busy timeout (or a read-only open that creates
    no file), PostgreSQL a connect timeout and, read-only, read-only sessions."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "postgresql":
        connect_args: dict[str, object] = {}
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
        if read_only:
            connect_args["options"] = "-c default_transaction_read_only=on"
        return create_engine(parsed, connect_args=connect_args, pool_pre_ping=True)
    return _sqlite_engine(parsed, read_only)


def _sqlite_engine(parsed: URL, read_only: bool) -> Engine:
    path = sqlite_path(parsed)
    if path is None:
        if read_only:
            raise ValueError(f"read-only store needs a database file, got {mask_url(parsed)}")
        return create_engine(parsed)
    if read_only:
        engine = _sqlite_read_only_engine(path)
    else:
        _check_creatable(path)
        engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
        cursor.execute("PRAGMA temp_store = MEMORY")  # GROUP BY / ORDER BY temporary B-trees
        if not read_only:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    return engine


def sqlite_file_exists(path: Path) -> bool:
    """Whether the database file exists; IsADirectoryError or UnusablePath (farm.paths) when `path`
    is not one SQLite could use: a directory, a FIFO (opening it would block), a device, a loop."""
    found = paths.existing(path, "the database")
    if found is None:
        return False
    if stat.S_ISDIR(found.st_mode):
        raise IsADirectoryError(f"the database {path} is a directory, not a SQLite file")
    paths.regular_file(path, "the database")
    return True


def _check_creatable(path: Path) -> None:
    """Create the database's directory; PermissionError/NotADirectoryError naming the path when it can't be."""
    for parent in (path.parent, *path.parent.parents):
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(f"cannot create the database {path}: {parent} is a file, not a directory")
            break
    sqlite_file_exists(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() and not os.access(path.parent, os.W_OK):
        raise PermissionError(f"cannot create the database {path}: {path.parent} is not writable")


def _sqlite_read_only_engine(path: Path) -> Engine:
    """Reads that create nothing: no directory, no database, no -wal/-shm beside it.

    SQLite's `mode=ro` on a WAL database creates the -wal and -shm files when they are
    missing (and fails in a directory it can't write). They are missing exactly when no
    connection has the database open, so then nothing can change it under us and
    `immutable=1` reads the file alone; while a writer is there (-wal present) `mode=ro`
    shares its files. Each connection decides afresh (NullPool): a campaign may start or
    end while the dashboard reads.
    """
    if not sqlite_file_exists(path):
        raise FileNotFoundError(f"no database at {path}: run `farm tune` (or `farm db upgrade`) first")
    resolved = path.resolve()
    uri = "file:" + urllib.parse.quote(str(resolved))

    def connect() -> sqlite3.Connection:
        wal = resolved.with_name(resolved.name + "-wal")
        immutable = not wal.exists() and _is_wal_file(resolved)
        mode = "?mode=ro&immutable=1" if immutable else "?mode=ro"
        return sqlite3.connect(uri + mode, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, check_same_thread=False)

    return create_engine("sqlite://", creator=connect, poolclass=NullPool)


def _is_wal_file(path: Path) -> bool:
    """True when the SQLite header says WAL mode (file format versions 2 at bytes 18-19)."""
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 2 and header[19] == 2


def describe_error(exc: BaseException) -> str:
    """One line saying what went wrong, fit to show (secrets masked): the driver's own first
    line for a database error (not SQLAlchemy's SQL dump and link), "strerror: path" for a
    file error, the message otherwise."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        text = str(exc.orig)
    elif isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}"
    else:
        text = str(exc).split("\n(Background on this error at:")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return mask_secrets(lines[0] if lines else type(exc).__name__)
