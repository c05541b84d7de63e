"""A Ray head node for `ray job submit`, with Ray 2.60's token authentication handled.

Ray 2.60 decides token auth per process from `RAY_AUTH_MODE`:

* `ray.init()` starting a *new local* cluster turns token auth on and writes a token to
  `~/.ray/auth_token` when none exists (so any earlier local `farm tune` leaves one behind);
* `ray start --head` turns it on when `RAY_AUTH_MODE` is unset *and* a token exists
  (`RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH` or `~/.ray/auth_token`), otherwise it runs open;
* `ray job submit` / `JobSubmissionClient` only send the token when `RAY_AUTH_MODE=token`
  is set in *their* environment; otherwise the dashboard answers 401 "Missing authentication token".

`start_head` therefore always starts the head with token auth on (generating the token when
missing) and `submission_env` is what the submitting shell must export. Jobs inherit the
head's environment, so a `farm tune` entrypoint connects to the cluster with the token.

The dashboard (job API) binds to 127.0.0.1 unless a host is given. Ray's own gRPC servers
(GCS, raylet, object manager) always listen on every interface; the token is what guards them.
Ray 2.60 binds its metrics endpoints to the node IP, which `ray start` never lets be loopback
(127.0.0.1 is replaced by the machine's address), and they answer without the token: the
per-node exporter is turned off (`head_env`); the dashboard's and the autoscaler's
Prometheus endpoints (ports $DASHBOARD_METRIC_PORT=44227, $AUTOSCALER_METRIC_PORT=44217)
can't be, so firewall them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.job_submission import JobStatus, JobSubmissionClient

DEFAULT_TOKEN_PATH = Path.home() / ".ray" / "auth_token"
RAY_ADDRESS_FILE = "ray_current_cluster"  # what `ray start` writes into its temp dir
TERMINAL_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)
# `ray start` flags for the ports a head opens besides the GCS and the dashboard.
EXTRA_PORT_FLAGS = (
    "ray_client_server_port",
    "dashboard_agent_listen_port",
    "dashboard_agent_grpc_port",
    "runtime_env_agent_port",
    "metrics_export_port",
    "node_manager_port",
    "object_manager_port",
)


@dataclass(frozen=True)
class HeadNode:
    """A running head: where its job API answers and which token guards it."""

    dashboard_url: str
    gcs_port: int
    temp_dir: Path
    token_path: Path


def token_path(path: str | os.PathLike | None = None) -> Path:
    """The token file Ray reads: `path` → `$RAY_AUTH_TOKEN_PATH` → `~/.ray/auth_token`."""
    if path is not None:
        return Path(path)
    env = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(env) if env else DEFAULT_TOKEN_PATH


def ensure_token(path: str | os.PathLike | None = None) -> Path:
    """Return the token file, creating it (64 hex chars, like Ray's) when missing or empty;
    always mode 0600, also when Ray's `ray.init()` wrote it 0644 or an empty file is refilled."""
    target = token_path(path)
    if target.exists() and target.read_text().strip():
        if target.stat().st_mode & 0o077:
            target.chmod(0o600)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)  # O_CREAT's mode only applies to a file it creates
        handle.write(secrets.token_hex(32))
    return target


def read_token(path: str | os.PathLike | None = None) -> str:
    """The token text; raises FileNotFoundError naming the file when there is none."""
    target = token_path(path)
    text = target.read_text().strip() if target.exists() else ""
    if not text:
        raise FileNotFoundError(f"no Ray auth token in {target}; start the head with `farm cluster start`")
    return text


def ray_executable() -> str:
    """The `ray` script next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise FileNotFoundError("the `ray` command is not installed next to this Python nor on PATH")
    return found


def head_command(
    host: str = "127.0.0.1",
    port: int = 6379,
    dashboard_port: int = 8265,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    temp_dir: str | os.PathLike | None = None,
    extra_ports: dict[str, int] | None = None,
) -> list[str]:
    """The `ray start --head` argv; `extra_ports` maps names in EXTRA_PORT_FLAGS to ports."""
    _check_ports(extra_ports, EXTRA_PORT_FLAGS, "")
    argv = [ray_executable(), "start", "--head", "--node-ip-address", host, "--dashboard-host", host]
    argv += ["--port", str(port), "--dashboard-port", str(dashboard_port), "--disable-usage-stats"]
    return argv + _node_flags(num_cpus, num_gpus, temp_dir, extra_ports)


def _check_ports(extra_ports: dict[str, int] | None, known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(extra_ports or {}) - set(known))
    if unknown:
        raise ValueError(f"unknown ray start port(s) {unknown}{where}; known: {list(known)}")


def _node_flags(num_cpus, num_gpus, temp_dir, extra_ports) -> list[str]:
    """The `ray start` flags a head and a joining node share."""
    flags = []
    if num_cpus is not None:
        flags += ["--num-cpus", str(num_cpus)]
    if num_gpus is not None:
        flags += ["--num-gpus", str(num_gpus)]
    if temp_dir is not None:
        flags += ["--temp-dir", str(temp_dir)]
    for name, value in sorted((extra_ports or {}).items()):
        flags += ["--" + name.replace("_", "-"), str(value)]
    return flags


class RayStartError(RuntimeError):
    """`ray start` failed (a port taken, a temp dir it can't write): `farm cluster start` says so in one line."""


def _ray_start(argv: list[str], env: dict[str, str], timeout_s: float) -> None:
    """Run a `ray start` (it daemonizes); RayStartError with the last line of its output when it fails
    (the traceback Ray prints ends with the exception that says why), secrets masked."""
    from farm.store.engine import mask_secrets

    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stdout + "\n" + proc.stderr).splitlines()]
        meaningful = [line for line in lines if any(c.isalnum() for c in line)] or ["(no output)"]
        what = " ".join(["ray", *argv[1:3]])  # `ray start --head` / `ray start --address=...`
        raise RayStartError(f"`{what}` failed with exit code {proc.returncode}: {mask_secrets(meaningful[-1])}")


def head_env(token_file: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for `ray start`: token auth on, this venv's bin first on PATH (jobs find `farm`),
    and no per-node metrics exporter (RAY_enable_metrics_collection=0 unless set): it would answer
    on 0.0.0.0 without the token, and the farm reads no Ray metrics."""
    env = dict(os.environ if base is None else base)
    env.setdefault("RAY_enable_metrics_collection", "0")
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_AUTH_TOKEN_PATH"] = str(token_file)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def start_head(
    host: str = "127.0.0.1",
    port: int = 6379,
    dashboard_port: int = 8265,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    temp_dir: str | os.PathLike | None = None,
    extra_ports: dict[str, int] | None = None,
    token_file: str | os.PathLike | None = None,
    timeout_s: float = 120.0,
) -> HeadNode:
    """Start a token-authenticated Ray head node (daemonized by `ray start`).

    Raises RayStartError with the last line of Ray's output when `ray start` fails.
    """
    token = ensure_token(token_file)
    argv = head_command(host, port, dashboard_port, num_cpus, num_gpus, temp_dir, extra_ports)
    _ray_start(argv, head_env(token), timeout_s)
    home = Path(temp_dir) if temp_dir is not None else Path("/tmp/ray")
    return HeadNode(dashboard_url=f"http://{host}:{dashboard_port}", gcs_port=port, temp_dir=home, token_path=token)


def node_command(
    head: HeadNode,
    host: str = "127.0.0.1",
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    temp_dir: str | os.PathLike | None = None,
    extra_ports: dict[str, int] | None = None,
) -> list[str]:
    """The `ray start --address` argv that joins another node to `head` (on `host`, with its own
    `temp_dir` when several nodes share a machine); `extra_ports` as for `head_command`, less
    the head-only ray_client_server_port."""
    _check_ports(extra_ports, EXTRA_PORT_FLAGS[1:], " for a worker node")
    head_host = head.dashboard_url.split("://", 1)[-1].rsplit(":", 1)[0]
    argv = [ray_executable(), "start", f"--address={head_host}:{head.gcs_port}", "--node-ip-address", host]
    argv += ["--disable-usage-stats"]
    return argv + _node_flags(num_cpus, num_gpus, temp_dir, extra_ports)


def start_node(head: HeadNode, *args, timeout_s: float = 120.0, **kwargs) -> list[str]:
    """Join a node to `head` (`node_command`'s arguments) with the head's token; returns the argv.
    Stop it with `stop_head(its temp_dir)`: only that node's Ray processes (`head_pids`)."""
    argv = node_command(head, *args, **kwargs)
    _ray_start(argv, head_env(head.token_path), timeout_s)
    return argv


def submission_env(head: HeadNode) -> dict[str, str]:
    """What a shell exports so that `ray job submit` reaches this head and sends its token."""
    env = {"RAY_AUTH_MODE": "token", "RAY_API_SERVER_ADDRESS": head.dashboard_url}
    if head.token_path != DEFAULT_TOKEN_PATH:
        env["RAY_AUTH_TOKEN_PATH"] = str(head.token_path)
    return env


def instructions(head: HeadNode) -> str:
    """The exact lines a user types next, printed by `farm cluster start`."""
    exports = "\n".join(f"export {k}={v}" for k, v in submission_env(head).items())
    return (
        f"Ray head running; job API at {head.dashboard_url} (token auth, token in {head.token_path}).\n"
        f"In the shell you submit from:\n\n{exports}\n"
        "ray job submit --working-dir . -- farm tune gemv --budget 8\n\n"
        f"Stop it with: farm cluster stop --temp-dir {head.temp_dir}"
    )


def job_client(dashboard_url: str, token_file: str | os.PathLike | None = None) -> JobSubmissionClient:
    """A JobSubmissionClient that sends the head's token whatever this process's RAY_AUTH_MODE."""
    headers = {"Authorization": f"Bearer {read_token(token_file)}"}
    return JobSubmissionClient(dashboard_url, headers=headers)


def wait_for_job(client: JobSubmissionClient, job_id: str, timeout_s: float = 300.0) -> JobStatus:
    """Poll until the job reaches SUCCEEDED/FAILED/STOPPED; TimeoutError names the job and its last status."""
    deadline = time.monotonic() + timeout_s
    status = client.get_job_status(job_id)
    while status not in TERMINAL_STATUSES:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {status} after {timeout_s:.0f}s")
        time.sleep(1.0)
        status = client.get_job_status(job_id)
    return status


def head_pids(temp_dir: str | os.PathLike) -> list[int]:
    """Live processes of the head (or node) started with `temp_dir` and their descendants (the
    `ray::` workers and agents, whose command lines Ray rewrites): Ray components
    (`is_ray_component`) that carry `temp_dir` as Ray passes it (`ray_temp_dir_argument`), and
    a head's Ray client server (`--address=` its GCS, no temp dir). Not a process that merely
    mentions it (a shell, a database whose data lives there), nor this one or its ancestors."""
    marker = str(Path(temp_dir))
    parents: dict[int, int] = {}
    ray_argvs: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if is_ray_component(argv):
            ray_argvs[int(entry.name)] = argv
    roots = {pid for pid, argv in ray_argvs.items() if ray_temp_dir_argument(argv, marker)}
    if any(Path(ray_argvs[pid][0]).name == "gcs_server" for pid in roots):  # a head (a node joined to it has none)
        client = {f"--address={address}" for address in gcs_addresses(sorted(roots))}
        roots |= {pid for pid, argv in ray_argvs.items() if client & set(argv)}
    spared, pid = {os.getpid()}, os.getppid()
    while pid > 0 and pid not in spared:  # this process and every one above it
        spared.add(pid)
        pid = parents.get(pid, 0)
    found = roots - spared
    frontier = list(found)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in found | spared]
        found.update(children)
        frontier.extend(children)
    return sorted(pid for pid in found if _alive(pid))  # a zombie has exited: only its reaping is left


RAY_BINARIES = frozenset({"raylet", "gcs_server", "plasma_store_server", "ray"})  # argv[0]'s name
_TEMP_DIR_FLAGS = ("--temp-dir", "--temp_dir")


def is_ray_component(argv: list[str]) -> bool:
    """Whether a command line (`/proc/PID/cmdline` split at NULs) is Ray's: a `ray::` worker or
    agent, a native daemon (raylet, gcs_server), the `ray` CLI, or a Python running a file or
    module of the ray package (dashboard.py, log_monitor.py, monitor.py); not `python -c`."""
    argv = [arg for arg in argv if arg] or [""]
    if argv[0].startswith("ray::") or Path(argv[0]).name in RAY_BINARIES or _in_ray(argv[0]):
        return True
    rest = argv[1:] if Path(argv[0]).name.startswith("python") else []
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        rest = rest[1:]  # interpreter options: -u, -O, -X...
    if rest[:1] == ["-m"]:
        return len(rest) > 1 and rest[1].split(".")[0] == "ray"
    return bool(rest) and rest[0] != "-c" and (Path(rest[0]).name == "ray" or _in_ray(rest[0]))


def _in_ray(path: str) -> bool:
    """Whether `path` is a file of the installed ray package (or of any ray in site-packages)."""
    package = str(Path(ray.__file__).resolve().parent) + os.sep
    return path.startswith(package) or any(f"{d}/ray/" in path for d in ("site-packages", "dist-packages"))


def ray_temp_dir_argument(argv: list[str], temp_dir: str) -> bool:
    """Whether `argv` passes `temp_dir` as Ray does: `--temp-dir=D` / `--temp_dir=D` (or flag and
    D as two arguments, as `ray start` takes it), or a `--flag=D/session_...` path."""
    session = os.path.join(temp_dir, "session_")
    for flag, value in zip(argv, argv[1:] + [""], strict=True):
        flag, sep, joined = flag.partition("=")
        value = joined if sep else value
        if flag in _TEMP_DIR_FLAGS and value and os.path.normpath(value) == os.path.normpath(temp_dir):
            return True
        if sep and flag.startswith("--") and value.startswith(session):
            return True
    return False


def stop_head(temp_dir: str | os.PathLike, grace_s: float = 10.0) -> list[int]:
    """Stop only the head node that uses `temp_dir` (unlike `ray stop`, which kills every Ray process
    on the machine): SIGTERM, then SIGKILL after `grace_s`. Then, as `ray stop` does for its head,
    remove `temp_dir/ray_current_cluster` when it names this head's GCS (a bare `ray.init()`
    would otherwise go on joining the dead address). Returns the pids signalled."""
    pids = head_pids(temp_dir)
    addresses = gcs_addresses(pids)
    signalled: set[int] = set()
    deadline = time.monotonic() + grace_s
    # Re-scan while waiting: a head that is shutting down may still start a process (a
    # worker, a log monitor) that the first scan didn't see, and it must not outlive the stop.
    while (alive := [pid for pid in head_pids(temp_dir) if _alive(pid)]) and time.monotonic() < deadline:
        _signal_all([pid for pid in alive if pid not in signalled], signal.SIGTERM)
        signalled.update(alive)
        time.sleep(0.2)
    kill_deadline = time.monotonic() + 5.0
    while (alive := [pid for pid in head_pids(temp_dir) if _alive(pid)]) and time.monotonic() < kill_deadline:
        _signal_all(alive, signal.SIGKILL)
        signalled.update(alive)
        time.sleep(0.1)
    pids = sorted(set(pids) | signalled)
    forget_address(temp_dir, addresses)
    return pids


def gcs_addresses(pids: list[int]) -> set[str]:
    """The GCS addresses (`--gcs-address=HOST:PORT`, what `ray start` records) on the command lines of `pids`."""
    found = set()
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        found.update(arg.removeprefix("--gcs-address=") for arg in argv if arg.startswith("--gcs-address="))
    return found - {""}


def forget_address(temp_dir: str | os.PathLike, addresses: set[str]) -> bool:
    """Remove `temp_dir/ray_current_cluster` if it names one of `addresses`; True when removed."""
    recorded = Path(temp_dir) / RAY_ADDRESS_FILE
    try:
        named = recorded.read_text().strip()
    except OSError:
        return False
    if named not in addresses:
        return False
    recorded.unlink(missing_ok=True)
    return True


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
