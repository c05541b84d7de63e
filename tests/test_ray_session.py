"""Never join a Ray cluster by accident: a local tune starts its own Ray whatever
`ray_current_cluster` names, joining happens only with --ray-address / $RAY_ADDRESS and is
bounded, and `farm cluster stop` removes the address file of the head it stops."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from farm.cli import cluster
from farm.cli.main import main
from farm.tuning import ray_session
from farm.tuning.ray_session import RayUnreachable, probe

REPO = Path(__file__).resolve().parents[1]
TUNE = ["tune", "gemv", "--sizes", "gemv:m=64,n=64", "--budget", "2", "--reps", "2", "--allow-cpu"]


def dead_address() -> str:
    """127.0.0.1:PORT with nothing listening (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def default_address_file() -> Path:
    """Where a bare `ray.init()` looks for a cluster to join (the suite's own Ray temp dir)."""
    return Path(os.environ["RAY_TMPDIR"]) / "ray" / "ray_current_cluster"


def test_the_suite_runs_on_a_ray_temp_dir_of_its_own():
    assert os.environ["RAY_TMPDIR"].startswith("/tmp/farm-ray-") and "RAY_ADDRESS" not in os.environ
    from ray._common.utils import get_ray_address_file

    assert Path(get_ray_address_file(None)) == default_address_file()


def test_probe_of_a_dead_address_gives_up_after_its_timeout_naming_the_address_and_the_fix():
    address = dead_address()
    start = time.monotonic()
    with pytest.raises(RayUnreachable) as caught:
        probe(address, 1.5)
    elapsed = time.monotonic() - start
    assert 1.0 <= elapsed < 5.0  # refusals are retried until the timeout, then it stops
    assert str(caught.value) == (
        f"cannot reach the Ray cluster at {address} (--ray-address): no answer within 1.5 s (Connection refused); "
        "start it with `farm cluster start`, or drop --ray-address to tune on a local Ray"
    )
    assert isinstance(caught.value, ValueError)  # the CLI's one-line user error


def test_probe_returns_at_once_when_the_address_listens():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        start = time.monotonic()
        probe(f"127.0.0.1:{server.getsockname()[1]}", 5.0)
        assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("address", ["nohost", "host:port", ":6379", "host:99999", "host:0", "http://host:1", "a b:1"])
def test_probe_refuses_an_address_without_host_and_port(address):
    with pytest.raises(RayUnreachable, match=f"bad Ray address '{address}' .*expected HOST:PORT"):
        probe(address, 1.0)


def test_connect_timeout_comes_from_the_environment_and_must_be_positive(monkeypatch):
    monkeypatch.delenv(ray_session.CONNECT_TIMEOUT_ENV, raising=False)
    assert ray_session.connect_timeout(None) == ray_session.CONNECT_TIMEOUT_S == 30.0
    monkeypatch.setenv(ray_session.CONNECT_TIMEOUT_ENV, "4.5")
    assert ray_session.connect_timeout(None) == 4.5
    assert ray_session.connect_timeout(2) == 2.0  # an explicit value wins
    monkeypatch.setenv(ray_session.CONNECT_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=r"\$FARM_RAY_CONNECT_TIMEOUT_S must be a number of seconds, got 'soon'"):
        ray_session.connect_timeout(None)
    with pytest.raises(ValueError, match="must be a finite number of seconds > 0, got 0"):
        ray_session.connect_timeout(0)
    for raw in ("inf", "nan", "-1", "0"):
        monkeypatch.setenv(ray_session.CONNECT_TIMEOUT_ENV, raw)
        with pytest.raises(ValueError, match=f"must be a finite number of seconds > 0, got '{raw}'"):
            ray_session.connect_timeout(None)


@pytest.mark.parametrize("via", ["flag", "env"])
def test_tune_with_an_unreachable_address_fails_in_bounded_time_with_one_line(via, tmp_path):
    address = dead_address()
    argv = [sys.executable, "-m", "farm", *TUNE, "--db", f"sqlite:///{tmp_path / 'farm.db'}"]
    env = os.environ | {ray_session.CONNECT_TIMEOUT_ENV: "2", "FARM_HOME": str(tmp_path)}
    if via == "flag":
        argv += ["--ray-address", address]
    else:
        env["RAY_ADDRESS"] = address
    start = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 20.0
    assert done.returncode == 2
    source, fix = ("--ray-address", "drop --ray-address") if via == "flag" else ("$RAY_ADDRESS", "unset RAY_ADDRESS")
    assert done.stderr.splitlines() == [  # the whole output: Ray was never asked to connect
        f"farm: error: cannot reach the Ray cluster at {address} ({source}): no answer within 2 s "
        f"(Connection refused); start it with `farm cluster start`, or {fix} to tune on a local Ray"
    ]


def test_forget_address_removes_the_file_only_when_it_names_the_head(tmp_path):
    recorded = tmp_path / "ray_current_cluster"
    assert cluster.forget_address(tmp_path, {"10.0.0.1:6379"}) is False  # no file: nothing to do
    recorded.write_text("10.0.0.2:6379")
    assert cluster.forget_address(tmp_path, {"10.0.0.1:6379"}) is False
    assert recorded.read_text() == "10.0.0.2:6379"  # another head's: kept
    recorded.write_text("10.0.0.1:6379\n")
    assert cluster.forget_address(tmp_path, {"10.0.0.1:6379", "10.0.0.1:7000"}) is True
    assert not recorded.exists()


def test_gcs_addresses_are_read_from_the_processes_command_lines():
    script = "import time; time.sleep(60)"
    with_flag = subprocess.Popen([sys.executable, "-c", script, "--gcs-address=10.1.2.3:6379", "--gcs-address="])
    without = subprocess.Popen([sys.executable, "-c", script, "--port=6379"])
    try:
        assert cluster.gcs_addresses([with_flag.pid, without.pid, 2**22 + 7]) == {"10.1.2.3:6379"}
    finally:
        for proc in (with_flag, without):
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_local_tune_starts_its_own_ray_beside_a_stale_ray_current_cluster(tmp_path):
    """What `farm cluster start` + a stop that left the file behind did to every later local
    tune: a bare ray.init() retried the dead address for minutes. Now it starts a local Ray."""
    stale = default_address_file()
    stale.parent.mkdir(parents=True, exist_ok=True)
    address = dead_address()
    stale.write_text(address)
    db = tmp_path / "farm.db"
    env = {k: v for k, v in os.environ.items() if k != "FARM_DATABASE_URL"} | {"FARM_HOME": str(tmp_path)}
    try:
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "farm", *TUNE, "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out")],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        elapsed = time.monotonic() - start
    finally:
        stale.unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert address not in done.stderr and "Failed to connect" not in done.stderr
    assert elapsed < 180
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT kernel, problem FROM winners").fetchall() == [("gemv", "m=64,n=64")]
        assert conn.execute("SELECT status FROM campaigns").fetchall() == [("done",)]


@pytest.fixture
def head():
    """A token-auth head on free ports with a temp dir of its own; stopped at the end."""
    temp_dir = Path(tempfile.mkdtemp(prefix="fh", dir="/tmp"))
    ports = []
    for _ in range(2 + len(cluster.EXTRA_PORT_FLAGS)):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        ports.append(sock)
    port, dashboard_port, *extra = [sock.getsockname()[1] for sock in ports]
    for sock in ports:
        sock.close()
    try:
        node = cluster.start_head(
            port=port,
            dashboard_port=dashboard_port,
            num_cpus=2,
            temp_dir=temp_dir / "ray",
            extra_ports=dict(zip(cluster.EXTRA_PORT_FLAGS, extra, strict=True)),
            token_file=temp_dir / "auth_token",
        )
        yield node
    finally:
        cluster.stop_head(temp_dir / "ray")
        shutil.rmtree(temp_dir, ignore_errors=True)


JOIN = """
import sys, ray
from farm.tuning.workers import WorkerPool
with WorkerPool(ray_address=sys.argv[1], allow_cpu=True, connect_timeout_s=10) as pool:
    print(ray.get_runtime_context().gcs_address, len(pool.profiles()))
"""


@pytest.mark.slow
def test_a_running_head_is_joined_only_when_named_and_cluster_stop_forgets_it(head, capsys):
    import ray

    from farm.tuning.workers import WorkerPool

    recorded = head.temp_dir / "ray_current_cluster"
    gcs = recorded.read_text().strip()  # what `ray start` wrote: the head's GCS address
    assert gcs.endswith(f":{head.gcs_port}")
    default = default_address_file()
    default.parent.mkdir(parents=True, exist_ok=True)
    default.write_text(gcs)  # as after `farm cluster start --temp-dir <the default>`
    try:
        with WorkerPool(allow_cpu=True, num_cpus=2) as pool:  # local: a Ray of its own
            assert ray.get_runtime_context().gcs_address != gcs
            assert len(pool.profiles()) == 1
        assert not ray.is_initialized()
    finally:
        default.unlink(missing_ok=True)
    named = f"127.0.0.1:{head.gcs_port}"
    # Ray reads RAY_AUTH_MODE when the process starts: joins run in processes of their own.
    token_env = os.environ | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(head.token_path)}
    joined = subprocess.run(
        [sys.executable, "-c", JOIN, named], cwd=REPO, env=token_env, capture_output=True, text=True, timeout=120
    )
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert joined.stdout.split() == [gcs, "1"]  # named: joined, one CPU worker on the head
    no_token = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    refused = subprocess.run(
        [sys.executable, "-m", "farm", *TUNE, "--ray-address", named, "--db", "sqlite:///:memory:"],
        cwd=REPO,
        env=no_token,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        f"farm: error: the Ray cluster at {named} (--ray-address) refused this process's auth token; "
        "export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH as `farm cluster start` printed"
    )
    assert main(["cluster", "stop", "--temp-dir", str(head.temp_dir)]) == 0
    assert capsys.readouterr().out.startswith("stopped ")
    assert not recorded.exists()  # removed, as `ray stop` removes it for its head
    assert cluster.head_pids(head.temp_dir) == []


def test_only_rays_notice_that_token_auth_is_on_is_kept_off_a_local_run():
    import logging

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord(ray_session._TOKEN_LOGGER, logging.WARNING, __file__, 1, message, None, None)

    on = record("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.")
    off = record("Token authentication is disabled for this Ray cluster. Anyone with network access ...")
    assert not ray_session._not_token_notice(on) and ray_session._not_token_notice(off)
