"""`farm cluster stop --temp-dir D` stops only the Ray processes of the head started with D
(never a process that merely mentions D, nor itself and its wrappers), and a failing
`ray start` is one `farm: error:` line. No Ray is started: Ray's processes are played by
harmless Pythons whose argv[0] names a Ray daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from farm.cli import cluster
from farm.cli.main import main

REPO = Path(__file__).resolve().parents[1]
D = "/tmp/x"
SITE = "/venv/lib/python3.11/site-packages/ray"
RAY_LINES = [
    [f"{SITE}/core/src/ray/raylet/raylet", f"--raylet_socket_name={D}/session_1/sockets/raylet", f"--temp_dir={D}"],
    [f"{SITE}/core/src/ray/gcs/gcs_server", f"--log_dir={D}/session_2026_1/logs", "--config_list=e30="],
    ["/venv/bin/python", "-u", f"{SITE}/dashboard/dashboard.py", "--host=127.0.0.1", f"--temp-dir={D}"],
    ["/venv/bin/python", "-u", f"{SITE}/_private/log_monitor.py", f"--session-dir={D}/session_latest"],
    ["/venv/bin/python", "/venv/bin/ray", "start", "--head", "--temp-dir", D, "--block"],
    ["python3", "-m", "ray.util.client.server", f"--temp-dir={D}/"],
]
NOT_RAY_LINES = [
    ["timeout", "120", "/venv/bin/python", "-m", "farm", "cluster", "stop", "--temp-dir", D],
    ["/venv/bin/python", "-m", "farm", "cluster", "stop", f"--temp-dir={D}"],
    ["sudo", "-E", "/venv/bin/python", "-m", "farm", "cluster", "stop", "--temp-dir", D],
    ["bash", "-c", f"sleep 90; echo {D}/x"],
    ["/usr/lib/postgresql/15/bin/postgres", "-D", f"{D}/pgdata"],
    ["/venv/bin/python", "-c", "import time; time.sleep(30)", f"{D}/session_foo"],
    ["/venv/bin/python", "-c", "import time; time.sleep(30)", f"--temp-dir={D}"],
    [f"{SITE}/core/src/ray/raylet/raylet", "--temp_dir=/tmp/xy", "--log_dir=/tmp/xy/session_1/logs"],  # another head
    [f"{SITE}/core/src/ray/raylet/raylet", f"--temp_dir={D}/sub"],
    ["ray::IDLE"],  # a worker: Ray rewrote its command line; it goes with its raylet (a descendant)
    [],
]


@pytest.mark.parametrize("argv", RAY_LINES, ids=lambda a: Path(a[0]).name + " " + a[-1][:30])
def test_ray_processes_of_the_head_match(argv):
    assert cluster.is_ray_component(argv)
    assert cluster.ray_temp_dir_argument(argv, D)


@pytest.mark.parametrize("argv", NOT_RAY_LINES, ids=lambda a: " ".join(a)[:50] or "empty")
def test_processes_that_merely_mention_the_temp_dir_do_not_match(argv):
    assert not (cluster.is_ray_component(argv) and cluster.ray_temp_dir_argument(argv, D))


def test_what_is_a_ray_component():
    assert cluster.is_ray_component(["ray::DashboardAgent"])
    assert cluster.is_ray_component(["/venv/bin/python3.11", "-u", "-X", f"{SITE}/autoscaler/_private/monitor.py"])
    assert not cluster.is_ray_component(["/venv/bin/python", "-m", "farm", "tune"])
    assert not cluster.is_ray_component(["/venv/bin/python", "-m", "rayleigh"])
    assert not cluster.is_ray_component(["bash", "-c", f"{SITE}/dashboard/dashboard.py"])
    assert not cluster.is_ray_component(["/venv/bin/python", "-c", f"import ray  # {SITE}/x.py"])


def _sleeper(argv0: str, *args: str) -> subprocess.Popen:
    """A Python sleeping 30 s whose /proc cmdline is `argv0 -c ... args`."""
    return subprocess.Popen([argv0, "-c", "import time; time.sleep(30)", *args], executable=sys.executable)


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_stop_head_stops_the_heads_processes_and_nothing_that_mentions_its_dir(tmp_path, procs):
    temp_dir = tmp_path / "ray"
    harmless = [
        subprocess.Popen(["bash", "-c", f"sleep 30 # {temp_dir}"]),
        _sleeper(sys.executable, f"{temp_dir}/session_foo"),
        _sleeper("postgres", "-D", f"{temp_dir}/pgdata"),
        _sleeper(sys.executable, f"--temp-dir={temp_dir}"),  # a Python, not Ray's
    ]
    spawn_worker = (  # sys.executable is '' under a made-up argv[0]: name the interpreter
        "import subprocess, time; "
        f"subprocess.Popen(['ray::IDLE', '-c', 'import time; time.sleep(30)'], executable={sys.executable!r}); "
        "time.sleep(30)"
    )
    raylet = subprocess.Popen(["raylet", "-c", spawn_worker, f"--temp_dir={temp_dir}"], executable=sys.executable)
    procs.extend([*harmless, raylet])
    worker = _wait_for_child(raylet.pid)
    assert cluster.head_pids(temp_dir) == sorted([raylet.pid, worker])
    assert cluster.stop_head(temp_dir, grace_s=5) == sorted([raylet.pid, worker])
    assert raylet.wait(timeout=5) is not None
    assert all(proc.poll() is None for proc in harmless), [p.args for p in harmless if p.poll() is not None]


def test_a_heads_client_server_goes_with_it_but_not_with_a_node_joined_to_it(tmp_path, procs):
    """The Ray client server carries the head's GCS address, not its temp dir (and `ray start`
    leaves it an orphan): stopping the head stops it, stopping a node joined to the head doesn't."""
    head, node, gcs = tmp_path / "head", tmp_path / "node", "127.0.0.1:7777"
    gcs_server = _sleeper("gcs_server", f"--log_dir={head}/session_1/logs")
    raylet = _sleeper("raylet", f"--temp_dir={head}", f"--gcs-address={gcs}")
    client = _sleeper("/x/site-packages/ray/util/client/server.py", f"--address={gcs}", "--port=10001")
    node_raylet = _sleeper("raylet", f"--temp_dir={node}", f"--gcs-address={gcs}")
    procs.extend([gcs_server, raylet, client, node_raylet])
    assert cluster.head_pids(node) == [node_raylet.pid]
    assert cluster.head_pids(head) == sorted([gcs_server.pid, raylet.pid, client.pid])


def _wait_for_child(pid: int, timeout_s: float = 10.0) -> int:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                        return int(entry.name)
                except (OSError, IndexError, ValueError):
                    continue
        time.sleep(0.05)
    raise AssertionError(f"process {pid} started no child")


def test_cluster_stop_spares_itself_and_its_wrappers(tmp_path, procs):
    """`timeout 60 farm cluster stop --temp-dir D` run under a (fake) Ray process of D: the
    stop, `timeout` and that ancestor live on; a Ray process of D beside them is stopped."""
    temp_dir = str(tmp_path / "ray")
    beside = _sleeper("raylet", f"--temp_dir={temp_dir}")
    procs.append(beside)
    stop = ["timeout", "60", sys.executable, "-m", "farm", "cluster", "stop", "--temp-dir", temp_dir]
    wrapper = f"import subprocess, sys; sys.exit(subprocess.run({stop!r}).returncode)"
    env = os.environ | {"FARM_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        ["raylet", "-c", wrapper, f"--temp_dir={temp_dir}"], executable=sys.executable, cwd=REPO, env=env,
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stdout.strip() == f"stopped 1 Ray process(es) under {temp_dir}"
    assert beside.wait(timeout=5) is not None


# -- a failing `ray start` ---------------------------------------------------------------

RAY_OUTPUT = """Usage stats collection is disabled.

Local node IP: 127.0.0.1
Traceback (most recent call last):
  File "/venv/bin/ray", line 8, in <module>
    sys.exit(main())
  File "/venv/lib/python3.11/site-packages/ray/_common/utils.py", line 615, in try_to_create_directory
    os.makedirs(directory_path, exist_ok=True)
PermissionError: [Errno 13] Permission denied: '/ro/ray/session_x' (redis://:Pw-s3cret-9f2@10.0.0.1:6379)

"""


def test_a_failing_ray_start_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "token"))
    calls = []

    def failing(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 1, stdout=RAY_OUTPUT[:40], stderr=RAY_OUTPUT[40:])

    monkeypatch.setattr(cluster.subprocess, "run", failing)
    code = main(["cluster", "start", "--temp-dir", "/ro/ray", "--port", "6399"])
    err = capsys.readouterr().err
    assert code == 2 and len(calls) == 1 and calls[0][1:3] == ["start", "--head"]
    assert err.splitlines() == [
        "farm: error: `ray start --head` failed with exit code 1: PermissionError: [Errno 13] Permission denied: "
        "'/ro/ray/session_x' (redis://:***@10.0.0.1:6379)"
    ]
    with pytest.raises(RuntimeError, match="failed with exit code 1"):  # RayStartError is still a RuntimeError
        cluster.start_head(temp_dir="/ro/ray", token_file=tmp_path / "token")


def test_a_relative_temp_dir_names_the_head_from_here(tmp_path, procs, monkeypatch):
    """Ray takes only an absolute --temp-dir, so `stop --temp-dir ./ray` resolves it from
    here; matching it as given would find nothing and leave the head running."""
    raylet = _sleeper("raylet", f"--temp-dir={tmp_path / 'ray'}")
    procs.append(raylet)
    monkeypatch.chdir(tmp_path)
    assert cluster.head_pids("ray") == [raylet.pid] == cluster.head_pids("./ray/")


def test_a_process_that_outlives_sigterm_is_killed_though_no_scan_finds_it_again(tmp_path, procs, monkeypatch):
    """The SIGKILL pass kills what was signalled, not only what a new scan finds: a worker
    whose raylet has exited (reparented, no temp dir of its own) must not outlive the stop."""
    from farm.cli import ray_processes

    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
    procs.append(stubborn)
    assert stubborn.stdout.readline() == "ready\n"  # its SIGTERM handler is in place
    scans = iter([[stubborn.pid]] * 2)  # found by stop_head's first scan and the SIGTERM pass's, then no more
    monkeypatch.setattr(ray_processes, "head_pids", lambda temp_dir: next(scans, []))
    assert ray_processes.stop_head(tmp_path / "ray", grace_s=0.5) == [stubborn.pid]
    assert stubborn.wait(timeout=5) == -9


def test_start_head_returns_once_the_job_agent_listens(tmp_path, monkeypatch):
    """`ray start` returns before the head's dashboard agent is up, and Ray's job API waits
    only 10 s for it: a `ray job submit` typed at once on a loaded machine was refused ("No
    available agent to submit job"). start_head waits for the agent's port, up to its timeout."""
    import socket
    import threading
    import time

    monkeypatch.setattr(cluster, "_ray_start", lambda argv, env, timeout_s: None)  # the head "started"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agent = socket.socket()
    agent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later():
        time.sleep(0.8)
        agent.bind(("127.0.0.1", port))
        agent.listen()

    threading.Thread(target=listen_later, daemon=True).start()
    started = time.monotonic()
    try:
        cluster.start_head(extra_ports={"dashboard_agent_listen_port": port}, token_file=tmp_path / "token",
                           timeout_s=20)  # fmt: skip
        assert 0.7 < time.monotonic() - started < 10
    finally:
        agent.close()
    started = time.monotonic()  # an agent that never comes: the head is returned at the timeout, as before
    cluster.start_head(extra_ports={"dashboard_agent_listen_port": port}, token_file=tmp_path / "token", timeout_s=1)
    assert 0.9 < time.monotonic() - started < 5
