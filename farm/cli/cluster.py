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
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ray.job_submission import JobStatus, JobSubmissionClient

from farm.cli.ray_processes import (  # noqa: F401 - `farm cluster stop`'s half, and its public names
    RAY_ADDRESS_FILE,
    forget_address,
    gcs_addresses,
    head_pids,
    is_ray_component,
    ray_temp_dir_argument,
    stop_head,
)

DEFAULT_TOKEN_PATH = Path.home() / ".ray" / "auth_token"
AGENT_PORT = 52365  # `ray start`'s --dashboard-agent-listen-port unless extra_ports names one
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
    gpus: int | None = None  # what it offers Ray; None: not known


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
    deadline = time.monotonic() + timeout_s
    _ray_start(argv, head_env(token), timeout_s)
    _wait_for_agent(host, (extra_ports or {}).get("dashboard_agent_listen_port", AGENT_PORT), deadline)
    home = Path(temp_dir) if temp_dir is not None else Path("/tmp/ray")
    gpus = num_gpus if num_gpus is not None else detected_gpus()
    return HeadNode(f"http://{host}:{dashboard_port}", port, home, token, gpus)


def _wait_for_agent(host: str, port: int, deadline: float) -> None:
    """Until the head's dashboard agent listens (it registers for job submissions right
    after), or `deadline`: `ray start` returns before it, and Ray's job API waits only 10 s
    for it ("No available agent to submit job"), which a loaded machine's start can exceed."""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.2)


def detected_gpus() -> int | None:
    """The GPUs `ray start` finds on this machine when not told (Ray's own detection, which
    honours CUDA_VISIBLE_DEVICES); None when it can't be asked."""
    try:
        from ray._private.accelerators import get_accelerator_manager_for_resource

        manager = get_accelerator_manager_for_resource("GPU")
        count = manager.get_current_node_num_accelerators()
        visible = manager.get_current_process_visible_accelerator_ids()
    except Exception:  # noqa: BLE001 - a private Ray API: unknown rather than a failed start
        return None
    return count if visible is None else min(count, len(visible))


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
    """The exact lines a user types next, printed by `farm cluster start`: the exports, a
    submission that works on this head (--allow-cpu when it has no GPU) and how to stop it."""
    exports = "\n".join(f"export {k}={v}" for k, v in submission_env(head).items())
    why = {
        0: "  # --allow-cpu: this head offers Ray no GPU; its workers tune on the CPU adapter",
        None: "  # --allow-cpu: in case this head offers Ray no GPU (GPUs, where there are, are used)",
    }.get(head.gpus, "")
    return (
        f"Ray head running; job API at {head.dashboard_url} (token auth, token in {head.token_path}).\n"
        f"In the shell you submit from:\n\n{exports}\n"
        f"{submit_line(head)}{why}\n\n"
        f"Stop it with: farm cluster stop --temp-dir {head.temp_dir}"
    )


def submit_line(head: HeadNode) -> str:
    """A `ray job submit` of a short tune that runs on `head` as typed (from the repository's root)."""
    return "ray job submit --working-dir . -- farm tune gemv --budget 8" + (" --allow-cpu" if not head.gpus else "")


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
