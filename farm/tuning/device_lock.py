"""One campaign per GPU on a machine: an advisory lock per adapter under $FARM_HOME/locks.

Two campaigns timing on one GPU time each other's load. Before its first trial `farm tune`
takes an exclusive flock on `$FARM_HOME/locks/gpu-<key>.lock` for every worker that runs on
this machine (key: nvidia-smi's GPU UUID, else the topology hash and the adapter index).
A second local campaign that finds one held says so in one line on stderr (who holds it:
pid, start, command) and waits until the first campaign ends, then runs;
`FARM_DEVICE_LOCK=warn` only says so and runs beside it, `FARM_DEVICE_LOCK=off` takes no
lock. The kernel drops a lock when its holder exits, killed or not, so a dead campaign
never blocks the next one.

Only workers on this machine are locked: on a multi-node cluster a lock file here can't
speak for another machine's GPUs (and Ray already gives each GPU of one cluster to one
actor at a time). The lock is per FARM_HOME: campaigns run with different FARM_HOMEs
don't see each other's locks.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from farm.store import farm_home
from farm.store.engine import mask_secrets

MODES = ("wait", "warn", "off")
ENV = "FARM_DEVICE_LOCK"


def lock_mode() -> str:
    """`$FARM_DEVICE_LOCK`: wait (the default), warn or off; ValueError for anything else."""
    mode = os.environ.get(ENV, "").strip().lower() or "wait"
    if mode not in MODES:
        raise ValueError(f"{ENV} must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def local_gpus(reports: dict[str, dict], host: str | None = None) -> dict[str, str]:
    """Lock key -> a name for the GPU, for each worker report (WorkerPool.reports()) from `host`
    (default: this machine). Workers that share an adapter share a key."""
    host = socket.gethostname() if host is None else host
    keys: dict[str, str] = {}
    for slot, report in sorted(reports.items()):
        if report.get("host") != host:
            continue
        mapping = report.get("mapping") or {}
        uuid = (mapping.get("nvidia_smi") or {}).get("uuid")
        index = mapping.get("adapter_index")
        key = uuid or f"{report['topology_hash'][:16]}-{'default' if index is None else index}"
        name = f"GPU {mapping.get('adapter') or report['topology_hash'][:12]}"
        keys.setdefault(re.sub(r"[^A-Za-z0-9._-]", "_", key), f"{name} (worker {slot})")
    return keys


@contextmanager
def device_locks(
    reports: dict[str, dict], command: str, stream: TextIO | None = None, home: Path | None = None
) -> Iterator[list[str]]:
    """Hold the lock of every local worker's GPU for the block (see the module docstring);
    yields the keys held. A lock that can't be taken (no lock directory, a lock file that can't be
    opened) is one warning line, not an error."""
    stream = stream or sys.stderr
    mode = lock_mode()
    keys = {} if mode == "off" else local_gpus(reports)
    held: list[tuple[str, int]] = []
    try:
        if keys:
            try:
                directory = (home or farm_home()) / "locks"
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                print(f"farm: warning: no GPU lock ({exc}): a campaign beside this one would skew its timings",
                      file=stream)  # fmt: skip
                keys = {}
        for key in sorted(keys):  # one order for every campaign: two never wait on each other
            try:
                fd = _acquire(directory / f"gpu-{key}.lock", keys[key], command, mode, stream)
            except OSError as exc:  # e.g. another user's lock file
                print(f"farm: warning: no lock for {keys[key]} ({exc}): a campaign beside this one would skew "
                      "its timings", file=stream)  # fmt: skip
                continue
            if fd is not None:
                held.append((key, fd))
        yield [key for key, _ in held]
    finally:
        for _, fd in held:
            os.close(fd)  # drops the flock


def _acquire(path: Path, name: str, command: str, mode: str, stream: TextIO) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if mode == "warn":
                print(f"farm: warning: {name} is in use by another campaign on this machine ({holder}); running "
                      f"beside it, so both time each other's load ({ENV}=wait waits instead)", file=stream)  # fmt: skip
                os.close(fd)
                return None
            print(f"farm: waiting for {name}: another campaign on this machine is timing on it ({holder}); "
                  f"campaigns on one GPU time each other's load ({ENV}=warn runs beside it)", file=stream)  # fmt: skip
            stream.flush()
            fcntl.flock(fd, fcntl.LOCK_EX)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "command": command}
        data = json.dumps(record | {"command": mask_secrets(command)}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _holder(fd: int) -> str:
    """Who holds the lock, from what it wrote into the file (it may be mid-write: then less)."""
    try:
        record = json.loads(os.pread(fd, 65536, 0) or b"{}")
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(record["since"])))
        return f"pid {record['pid']} since {since}: {record['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
