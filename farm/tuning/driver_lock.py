"""Whether a running campaign's driver is alive, without waiting for its heartbeat to go stale.

While it runs, a campaign's driver holds an exclusive flock on
`<out>/locks/campaign-<database>-<id>.lock` (`<out>`: the campaign's artifacts directory,
where a re-run also finds its Parquet; `<database>`: a hash of the database's identity, its
SQLite file or PostgreSQL host, port and name). The kernel drops the lock when
the driver exits, killed or not, so a campaign that SQL says is running, that was started
on this machine and whose lock file is there but free, has a dead driver:
`dead_campaigns` finds those, and the campaign that starts next (the re-run resuming the
killed one's trials) marks them interrupted at once instead of after
farm.store.repo.STALE_AFTER_S. A campaign of another machine or another artifacts
directory, or one whose lock file is not there yet, is left to its heartbeat.

The lock file appears under its name already locked (created under a dot name, locked,
then renamed), so a reader never takes a starting driver for a dead one. Its driver removes
it when the campaign ends, and so does the campaign that finds it dead.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import uuid
from pathlib import Path

from sqlalchemy import select

from farm.store import Store
from farm.store.engine import normalize_url, sqlite_path
from farm.store.models import CampaignRow
from farm.store.repo import fetch_rows


def _database_key(db: Store) -> str:
    url = normalize_url(db.url)
    path = sqlite_path(url)
    identity = f"sqlite:{path.resolve()}" if path is not None else f"{url.host}:{url.port or 5432}/{url.database}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def lock_path(db: Store, campaign_id: int, out: Path) -> Path:
    return Path(out) / "locks" / f"campaign-{_database_key(db)}-{campaign_id}.lock"


class DriverLock:
    """Held by a campaign's driver from its start to its end (`release`)."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1


def hold(db: Store, campaign_id: int, out: Path) -> DriverLock | None:
    """Take the campaign's lock; None where no lock file can be made (it is then left to its heartbeat)."""
    path = lock_path(db, campaign_id, out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.rename(tmp, path)
    except OSError:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        return None
    return DriverLock(path, fd)


def dead_campaigns(db: Store, out: Path) -> list[int]:
    """Ids of the campaigns running in SQL, started on this machine, whose driver's lock is free
    (the driver is gone); their lock files are removed."""
    columns = (CampaignRow.id, CampaignRow.host)
    rows = fetch_rows(db, select(*columns).where(CampaignRow.status == "running").order_by(CampaignRow.id))
    host = socket.gethostname()
    dead = []
    for row in rows:
        if row["host"] != host:
            continue
        path = lock_path(db, row["id"], out)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:  # no lock file: another artifacts directory, a driver just starting, or found dead
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        dead.append(int(row["id"]))
        path.unlink(missing_ok=True)
        os.close(fd)
    return dead
