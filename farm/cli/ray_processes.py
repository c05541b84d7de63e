"""Which local processes belong to the Ray head (or node) started with a temp dir, and
stopping only those (`farm cluster stop --temp-dir D`; farm.cli.cluster starts them).

A process is the head's when it is a Ray component (`is_ray_component`: a native daemon, a
`ray::` worker, the `ray` CLI or a Python running a file of the ray package) carrying the
temp dir as Ray passes it (`ray_temp_dir_argument`), a descendant of one, or the head's Ray
client server; never a process that merely mentions the path, nor this one or its ancestors.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import ray

RAY_ADDRESS_FILE = "ray_current_cluster"  # what `ray start` writes into its temp dir


def head_pids(temp_dir: str | os.PathLike) -> list[int]:
    """Live processes of the head (or node) started with `temp_dir` and their descendants (the
    `ray::` workers and agents, whose command lines Ray rewrites): Ray components
    (`is_ray_component`) that carry `temp_dir` as Ray passes it (`ray_temp_dir_argument`), and
    a head's Ray client server (`--address=` its GCS, no temp dir). Not a process that merely
    mentions it (a shell, a database whose data lives there), nor this one or its ancestors."""
    marker = os.path.abspath(temp_dir)  # Ray takes only an absolute --temp-dir: a relative one names it from here
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
    signalled: dict[int, str] = {}  # pid -> its start time, so a reused pid is never signalled
    deadline = time.monotonic() + grace_s
    # Re-scan while waiting: a head that is shutting down may still start a process (a
    # worker, a log monitor) that the first scan didn't see, and it must not outlive the stop.
    while (alive := [pid for pid in head_pids(temp_dir) if _alive(pid)]) and time.monotonic() < deadline:
        _signal_all([pid for pid in alive if pid not in signalled], signal.SIGTERM)
        signalled |= {pid: _started(pid) for pid in alive if pid not in signalled}
        time.sleep(0.2)
    kill_deadline = time.monotonic() + 5.0
    # What was signalled and lives on is killed too, though a scan may no longer find it (a
    # worker whose raylet exited first is reparented and carries no temp dir of its own).
    while (alive := _still(signalled) | set(p for p in head_pids(temp_dir) if _alive(p))) and (
        time.monotonic() < kill_deadline
    ):
        _signal_all(sorted(alive), signal.SIGKILL)
        signalled |= {pid: _started(pid) for pid in alive if pid not in signalled}
        time.sleep(0.1)
    pids = sorted(set(pids) | set(signalled))
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


def _started(pid: int) -> str:
    """The process's start time (field 22 of /proc/PID/stat; "" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _still(signalled: dict[int, str]) -> set[int]:
    """The signalled processes still alive as themselves (same pid and start time)."""
    return {pid for pid, started in signalled.items() if started and _started(pid) == started and _alive(pid)}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
