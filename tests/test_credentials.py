"""Database passwords never leave the URL they came in: masked in every
message, stored command line and artifact, and never on a process's argv the farm starts.
The end-to-end test tunes into a real PostgreSQL with a password in the URL and looks for it
in every table, every artifact byte, every output and the dashboard server's argv."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from sqlalchemy import MetaData, create_engine, select
from streamlit.testing.v1 import AppTest

from farm import store
from farm.dashboard import data, serve
from farm.runtime.winners import load_candidates
from farm.store import parquet
from farm.store.engine import mask_command, mask_secrets, mask_url

PASSWORD = "Pw-s3cret-9f2"


@pytest.mark.parametrize(
    "url, shown",
    [
        (f"postgresql+psycopg://farm:{PASSWORD}@db:5432/farm", "postgresql+psycopg://farm:***@db:5432/farm"),
        (f"postgresql://farm:{PASSWORD}@db/farm?sslmode=require", "postgresql://farm:***@db/farm?sslmode=require"),
        (f"postgresql://farm@db/farm?password={PASSWORD}", "postgresql://farm@db/farm?password=***"),
        (f"postgresql://farm@db/farm?sslmode=require&PassWord={PASSWORD}", "sslmode=require&PassWord=***"),
        (f"postgresql://farm:{PASSWORD}@db:notaport/farm", "postgresql://farm:***@db:notaport/farm"),
        (f"mysql://farm:{PASSWORD}@db/farm", "mysql://farm:***@db/farm"),
        (f"farm:{PASSWORD}@db/farm", "farm:***@db/farm"),
        ("sqlite:////tmp/a:b@c.db", "sqlite:////tmp/a:b@c.db"),
        ("postgresql+psycopg://farm@db/farm", "postgresql+psycopg://farm@db/farm"),
    ],
)
def test_mask_url_hides_the_password_however_the_url_is_written(url, shown):
    assert shown in mask_url(url) and PASSWORD not in mask_url(url)


def test_mask_command_and_mask_secrets_cover_flags_and_messages():
    argv = ["farm", "tune", "--db", f"postgresql://u:{PASSWORD}@h/db", f"--db=postgresql://u@h/db?password={PASSWORD}"]
    shown = mask_command(argv)
    assert PASSWORD not in shown and shown.startswith("farm tune --db 'postgresql://u:***@h/db'")
    message = f"could not connect to 'postgresql+psycopg://u:{PASSWORD}@h/db' (refused)"
    assert mask_secrets(message) == "could not connect to 'postgresql+psycopg://u:***@h/db' (refused)"


def test_stored_and_shown_commands_are_masked_even_when_stored_raw(tmp_path):
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    db = store.open_store(url)
    raw = f"farm tune --db postgresql://u:{PASSWORD}@h/db"
    cid = store.start_campaign(db, raw, "model", 4, 2, total=3)
    assert store.campaign(db, cid)["command"] == "farm tune --db postgresql://u:***@h/db"
    with db.engine.begin() as conn:  # a row written before commands were masked
        conn.exec_driver_sql("UPDATE campaigns SET command = ?", (raw,))
    ro = data.open_readonly(url)
    assert data.campaign_table(ro)[0]["command"] == "farm tune --db postgresql://u:***@h/db"
    paths = parquet.write_campaign_summary(tmp_path / "out", store.campaign(db, cid), [], {})
    assert PASSWORD not in paths["summary.json"].read_text()
    assert repr(db).count(PASSWORD) == 0  # Store's repr leaves the URL out


def test_runtime_warning_for_an_unreachable_database_is_masked():
    records, problem = load_candidates(f"postgresql+psycopg://farm:{PASSWORD}@127.0.0.1:1/farm", None)
    assert records == [] and "farm:***@127.0.0.1:1" in problem and PASSWORD not in problem
    records, problem = load_candidates(f"mysql://farm:{PASSWORD}@db/farm", None)
    assert "mysql://farm:***@db/farm" in problem and PASSWORD not in problem


def test_dashboard_passes_the_url_in_the_environment_not_on_argv(monkeypatch):
    url = f"postgresql+psycopg://farm:{PASSWORD}@db/farm"
    argv = serve.streamlit_argv(port=8600)
    assert PASSWORD not in " ".join(argv) and "--db" not in argv
    assert serve.streamlit_env(url, base={"PATH": "/bin"}) == {"PATH": "/bin", "FARM_DATABASE_URL": url}
    monkeypatch.setenv("FARM_DATABASE_URL", url)
    assert serve.streamlit_env()["FARM_DATABASE_URL"] == url


@pytest.mark.filterwarnings("ignore:Query string argument")  # pysqlite ignores ?password=: fine here
def test_db_commands_print_the_url_masked_also_from_the_environment(tmp_path, capsys, monkeypatch):
    from farm.cli.main import main

    # SQLite ignores a password, so a URL with one still opens a file: enough to check what is printed.
    url = f"sqlite:///{tmp_path / 'farm.db'}?password={PASSWORD}"
    assert main(["db", "upgrade", "--db", url]) == 0
    monkeypatch.setenv("FARM_DATABASE_URL", url)
    for argv in (["db", "current"], ["db", "downgrade", "base"], ["db", "upgrade"]):
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert PASSWORD not in out and out.count("password=***") == 4


def test_ray_token_is_always_0600(tmp_path):
    from farm.cli.cluster import ensure_token

    written_by_ray = tmp_path / "auth_token"
    written_by_ray.write_text("a" * 64)
    written_by_ray.chmod(0o644)  # what ray.init() leaves
    assert ensure_token(written_by_ray).stat().st_mode & 0o777 == 0o600
    assert written_by_ray.read_text() == "a" * 64
    empty = tmp_path / "empty_token"
    empty.write_text("")
    empty.chmod(0o644)
    assert ensure_token(empty).stat().st_mode & 0o777 == 0o600 and len(empty.read_text()) == 64
    assert ensure_token(tmp_path / "new" / "token").stat().st_mode & 0o777 == 0o600


def test_a_head_starts_without_the_per_node_metrics_exporter():
    from farm.cli.cluster import head_env

    env = head_env(Path("/tmp/token"), base={"PATH": "/bin"})
    assert env["RAY_enable_metrics_collection"] == "0" and env["RAY_AUTH_MODE"] == "token"
    assert head_env(Path("/t"), base={"RAY_enable_metrics_collection": "1"})["RAY_enable_metrics_collection"] == "1"


# ------------------------------------------------------------------ end to end, real PostgreSQL


@pytest.fixture
def pg_password_url(pg_server):
    """A database owned by a role with a password, reached with the password in the URL."""
    name, role = f"farm_{uuid.uuid4().hex[:10]}", f"farmer_{uuid.uuid4().hex[:6]}"
    pg_server.admin(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
    pg_server.admin(f"CREATE DATABASE {name} OWNER {role}")
    yield f"postgresql+psycopg://{role}:{PASSWORD}@127.0.0.1:{pg_server.port}/{name}"
    pg_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    pg_server.admin(f"DROP ROLE IF EXISTS {role}")


def _farm(argv: list[str], env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    full = os.environ | {"XDG_RUNTIME_DIR": "/tmp"} | env
    done = subprocess.run(
        [sys.executable, "-m", "farm", *argv], env=full, capture_output=True, text=True, timeout=timeout
    )
    assert PASSWORD not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def _every_row(url: str) -> str:
    engine = create_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        with engine.connect() as conn:
            return "\n".join(repr(row) for table in meta.sorted_tables for row in conn.execute(select(table)))
    finally:
        engine.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cmdlines(pid: int) -> list[str]:
    """The argv of `pid` and of every descendant."""
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        try:
            found.append(Path(f"/proc/{current}/cmdline").read_bytes().replace(b"\0", b" ").decode())
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        frontier += [int(c) for c in children]
    return found


@pytest.mark.postgres
@pytest.mark.slow
def test_a_postgres_password_appears_in_no_table_artifact_output_or_argv(pg_password_url, tmp_path):
    url = pg_password_url
    home, out = tmp_path / "home", tmp_path / "artifacts"
    env = {"FARM_HOME": str(home)}
    tune = ["tune", "gemv", "--sizes", "gemv:m=32,n=32", "--budget", "2", "--allow-cpu", "--out", str(out)]
    done = _farm([*tune, "--db", url], env)
    assert done.returncode == 0, done.stdout + done.stderr
    for argv in (["db", "current", "--db", url], ["winners", "--db", url]):
        assert _farm(argv, env).returncode == 0
    shown = _farm(["db", "current"], env | {"FARM_DATABASE_URL": url})
    assert ":***@127.0.0.1" in shown.stdout

    rows = _every_row(url)
    assert "gemv" in rows and PASSWORD not in rows
    reader = store.open_store(url, read_only=True)
    assert ":***@127.0.0.1" in store.campaigns(reader)[0]["command"]
    reader.engine.dispose()
    artifacts = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "summary.json" for p in artifacts) and any(p.suffix == ".parquet" for p in artifacts)
    assert [p for p in artifacts if PASSWORD.encode() in p.read_bytes()] == []

    port = _free_port()
    dashboard = subprocess.Popen(
        [sys.executable, "-m", "farm", "dashboard", "--port", str(port), "--db", url],
        env=os.environ | {"XDG_RUNTIME_DIR": "/tmp"} | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert dashboard.poll() is None, dashboard.stdout.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, "dashboard never became healthy"
                time.sleep(0.5)
        cmdlines = _cmdlines(dashboard.pid)
        assert any("streamlit" in c for c in cmdlines) and not any(PASSWORD in c for c in cmdlines)
        assert PASSWORD.encode() in Path(f"/proc/{dashboard.pid}/environ").read_bytes()  # the owner's eyes only
    finally:
        dashboard.terminate()
        printed = dashboard.communicate(timeout=30)[0]
    assert PASSWORD not in printed and ":***@127.0.0.1" in printed

    os.environ["FARM_DATABASE_URL"] = url
    try:
        at = AppTest.from_file(str(serve.app_path()), default_timeout=60).run()
    finally:
        del os.environ["FARM_DATABASE_URL"]
    assert not at.exception
    shown = " ".join(frame.value.to_csv() for frame in at.dataframe)
    assert "farm tune gemv" in shown and PASSWORD not in shown
