"""A real, throwaway PostgreSQL server for the test session.

`initdb` into a fresh temp dir, `pg_ctl start` on a free port (unix socket in the same
dir + 127.0.0.1), one database, URL yielded, server stopped and deleted at the end.
Running as root, the server runs as the `postgres` OS user (runuser), which owns the
dir. Missing binaries fail the tests with a clear message; set FARM_SKIP_POSTGRES=1 to
skip them instead.

Fixtures: `pg_url` (session; the shared database) and `pg_fresh_url` (a new empty
database per test, dropped afterwards).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_BIN_CANDIDATES = ("/usr/lib/postgresql/{v}/bin",)
PG_VERSIONS = ("17", "16", "15", "14", "13")


def find_pg_bin() -> Path:
    """The directory holding initdb and pg_ctl (FARM_PG_BIN, then PATH, then Debian's layout)."""
    env = os.environ.get("FARM_PG_BIN")
    candidates = [Path(env)] if env else []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    candidates += [Path(t.format(v=v)) for t in PG_BIN_CANDIDATES for v in PG_VERSIONS]
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH, in $FARM_PG_BIN or in "
        "/usr/lib/postgresql/<version>/bin: install Debian's `postgresql` package "
        "(scripts/install-system-deps does), or set FARM_SKIP_POSTGRES=1 to skip PostgreSQL tests"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """One initdb'd cluster in `root`, started by `start()` and removed by `stop()`."""

    def __init__(self, bin_dir: Path, fsync: bool = False):
        self.bin_dir, self.fsync = bin_dir, fsync  # off for tests; benchmarks of write rates turn it on
        self.root = Path(tempfile.mkdtemp(prefix="farm-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_postgres = os.geteuid() == 0

    def _cmd(self, *args: str) -> list[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        return [*prefix, str(self.bin_dir / args[0]), *args[1:]]

    def _run(self, *args: str) -> None:
        result = subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed ({result.returncode}): {result.stderr}{tail}")

    def start(self) -> None:
        if self.as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=60"
        options += "" if self.fsync else " -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w", "start")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres") as conn:
            conn.autocommit = True
            conn.execute(sql)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    if os.environ.get("FARM_SKIP_POSTGRES") == "1":
        pytest.skip("FARM_SKIP_POSTGRES=1")
    server = PostgresServer(find_pg_bin())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_url(pg_server: PostgresServer) -> str:
    """SQLAlchemy URL of a database on the session's throwaway PostgreSQL server."""
    pg_server.admin("CREATE DATABASE farm_test")
    return pg_server.url("farm_test")


@pytest.fixture
def pg_fresh_url(pg_server: PostgresServer) -> Iterator[str]:
    """A new, empty database for one test, dropped when it ends."""
    name = f"farm_{uuid.uuid4().hex[:12]}"
    pg_server.admin(f"CREATE DATABASE {name}")
    yield pg_server.url(name)
    pg_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
