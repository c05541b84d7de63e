"""Ray job submission against a real head node on 127.0.0.1 with token auth (farm.cli.cluster)."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ray.job_submission import JobStatus
from sqlalchemy import create_engine, text

from farm.cli import cluster as jobs

REPO = Path(__file__).resolve().parents[1]
TUNE = "tune gemv --sizes gemv:m=64,n=64 --budget 4 --allow-cpu"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture(scope="module")
def head():
    # Short path: Ray's unix sockets live under it and must stay below ~100 characters.
    temp_dir = Path(tempfile.mkdtemp(prefix="fj", dir="/tmp"))
    port, dashboard_port, *extra = free_ports(2 + len(jobs.EXTRA_PORT_FLAGS))
    saved_home = os.environ.get("FARM_HOME")
    os.environ["FARM_HOME"] = str(temp_dir / "farm_home")  # jobs inherit the head's environment
    try:
        node = jobs.start_head(
            port=port,
            dashboard_port=dashboard_port,
            num_cpus=2,
            temp_dir=temp_dir / "ray",
            extra_ports=dict(zip(jobs.EXTRA_PORT_FLAGS, extra, strict=True)),
            token_file=temp_dir / "auth_token",
        )
        yield node
    finally:
        if saved_home is None:
            os.environ.pop("FARM_HOME", None)
        else:
            os.environ["FARM_HOME"] = saved_home
        jobs.stop_head(temp_dir / "ray")
        shutil.rmtree(temp_dir, ignore_errors=True)


def listening_addresses(port: int) -> set[str]:
    """Local addresses in LISTEN state on `port`, from /proc/net/tcp{,6} (hex, little-endian for IPv4)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]) if len(address) == 8 else address)
    return found


def rows(db_url: str, sql: str) -> list[tuple]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(sql)))
    finally:
        engine.dispose()


def test_token_file_is_created_private_and_kept(tmp_path):
    path = jobs.ensure_token(tmp_path / "t" / "auth_token")
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert jobs.ensure_token(path).read_text() == token


def test_missing_token_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "none")):
        jobs.read_token(tmp_path / "none")


def test_head_command_binds_loopback_and_rejects_unknown_ports():
    argv = jobs.head_command(port=7000, dashboard_port=7001, num_cpus=2, extra_ports={"ray_client_server_port": 7002})
    joined = " ".join(argv)
    assert "--head --node-ip-address 127.0.0.1 --dashboard-host 127.0.0.1" in joined
    assert "--port 7000 --dashboard-port 7001" in joined and "--ray-client-server-port 7002" in joined
    with pytest.raises(ValueError, match="gcs_prot"):
        jobs.head_command(extra_ports={"gcs_prot": 1})


def test_job_api_listens_on_loopback_only(head):
    port = int(head.dashboard_url.rsplit(":", 1)[1])
    assert listening_addresses(port) == {"127.0.0.1"}


def test_submitted_tune_job_succeeds_and_records_trials(head, tmp_path):
    db = f"sqlite:///{tmp_path / 'farm.db'}"
    client = jobs.job_client(head.dashboard_url, head.token_path)
    job_id = client.submit_job(
        entrypoint=f"python -m farm {TUNE} --db {db}",
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "FARM_HOME": str(tmp_path)}},
    )
    status = jobs.wait_for_job(client, job_id, timeout_s=150)
    assert status == JobStatus.SUCCEEDED, client.get_job_logs(job_id)[-3000:]
    (trials,) = rows(db, "SELECT count(*) FROM trials WHERE kernel = 'gemv' AND problem = 'm=64,n=64'")[0]
    assert trials >= 1
    assert rows(db, "SELECT status FROM campaigns") == [("done",)]
    assert rows(db, "SELECT kernel, problem FROM winners") == [("gemv", "m=64,n=64")]


def test_failing_job_is_failed_with_the_error_in_its_logs(head, tmp_path):
    client = jobs.job_client(head.dashboard_url, head.token_path)
    job_id = client.submit_job(
        entrypoint=f"python -m farm tune nosuchkernel --allow-cpu --db sqlite:///{tmp_path / 'x.db'}",
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
    )
    assert jobs.wait_for_job(client, job_id, timeout_s=90) == JobStatus.FAILED
    assert "nosuchkernel" in client.get_job_logs(job_id)


def test_ray_job_submit_cli_works_with_the_printed_exports(head, tmp_path):
    """What a user types after `farm cluster start`: the exports, then the `ray job submit` line it
    printed (on a smaller problem, into a database of the test's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    exports = jobs.submission_env(head)
    assert all(f"export {k}={v}" in jobs.instructions(head) for k, v in exports.items())
    without_token = subprocess.run(
        [jobs.ray_executable(), "job", "list", "--address", head.dashboard_url], env=env, capture_output=True, text=True
    )
    assert without_token.returncode != 0 and "authentication" in (without_token.stdout + without_token.stderr).lower()
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    printed = next(line for line in jobs.instructions(head).splitlines() if line.startswith("ray job submit"))
    assert printed.split("  # ")[0] == jobs.submit_line(head)
    assert ("--allow-cpu" in printed) == (not head.gpus)  # this head's GPUs as Ray sees them
    argv = [jobs.ray_executable(), *jobs.submit_line(head).split()[1:], "--sizes", "gemv:m=64,n=64", "--db", db]
    done = subprocess.run(argv, cwd=REPO, env=env | exports, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "succeeded" in done.stdout
    assert rows(db, "SELECT count(*) FROM winners")[0][0] == 1


def test_stop_head_stops_only_that_heads_processes(tmp_path):
    marker = tmp_path / "ray"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # a stand-in Ray daemon: argv[0] names a Ray component and it carries the head's temp dir
    # as Ray passes it (a process that only mentions the path is not the head's)
    mine = subprocess.Popen(["raylet", "-c", "import time; time.sleep(60)", f"--temp-dir={marker}"],
                            executable=sys.executable)  # fmt: skip
    try:
        assert jobs.stop_head(marker, grace_s=5) == [mine.pid]
        assert mine.wait(timeout=5) is not None and other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_driver_leaves_env_vars_the_job_already_sets_to_the_job(monkeypatch):
    import json

    from farm.tuning import ray_session

    job = {"runtime_env": {"env_vars": {"XDG_RUNTIME_DIR": "/run/x", "FARM_ADAPTER": "0"}}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    assert ray_session.job_env_keys() == {"XDG_RUNTIME_DIR", "FARM_ADAPTER"}
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR")
    assert ray_session.job_env_keys() == set()


@pytest.mark.parametrize("gpus, allow_cpu", [(0, True), (None, True), (2, False)])
def test_the_printed_submission_allows_a_cpu_only_on_a_head_that_may_have_no_gpu(gpus, allow_cpu):
    head = jobs.HeadNode("http://127.0.0.1:8265", 6379, Path("/tmp/fj-head"), Path("/tmp/fj-token"), gpus)
    lines = jobs.instructions(head).splitlines()
    submit = next(line for line in lines if line.startswith("ray job submit"))
    assert submit.startswith(jobs.submit_line(head)) and ("--allow-cpu" in submit) == allow_cpu
    assert lines[-1] == "Stop it with: farm cluster stop --temp-dir /tmp/fj-head"
