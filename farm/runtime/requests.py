"""The runtime's cache of the stored winners, and what it does about a miss.

`WinnerCache` reads the winners once (farm.runtime.winners.load_candidates). A lookup that is
not "tuned" (nearest, same-device, default) is a miss: with request tuning on
(`ForgeRuntime(request_tuning=True)` or `$FARM_REQUEST_TUNING=1`) the (kernel, problem) is
queued for `farm serve` (farm.store.queue.enqueue: deduplicated there too), at most once
per runtime; and once WINNERS_TTL_S (`$FARM_WINNERS_TTL_S`) passed since the last read the
winners are read again, so a winner tuned meanwhile serves without a restart. Both happen
on one background thread: a call never waits for the database. The enqueue never raises:
the first failure (an unreachable or read-only database) is one warning, then this
runtime stops trying. A re-read that fails keeps the winners already read.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from farm.catalog import KernelSpec
from farm.runtime.winners import Candidate, load_candidates
from farm.schedule import Problem

log = logging.getLogger("farm.runtime")
WINNERS_TTL_S = 60.0


def request_tuning_wanted(flag: bool | None) -> bool:
    """`flag`, or `$FARM_REQUEST_TUNING` (1/true/yes/on) when it is None."""
    if flag is not None:
        return bool(flag)
    return os.environ.get("FARM_REQUEST_TUNING", "").strip().lower() in ("1", "true", "yes", "on")


def winners_ttl_s() -> float:
    try:
        return max(0.0, float(os.environ.get("FARM_WINNERS_TTL_S", WINNERS_TTL_S)))
    except ValueError:
        return WINNERS_TTL_S


class Background:
    """One daemon thread that runs submitted jobs in order; started on the first job."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="farm-runtime-requests", daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def wait(self, timeout: float = 10.0) -> bool:
        """Wait until every job submitted so far ran (tests, shutdown); False on timeout."""
        done = threading.Event()
        self.submit(done.set)
        return done.wait(timeout)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # noqa: BLE001 - jobs handle their own errors; never let the thread die
                log.debug("runtime background job failed", exc_info=True)


class WinnerCache:
    """The winners a runtime serves (read once, re-read after a miss), its misses and its tuning
    requests (module docstring)."""

    def __init__(
        self,
        db: str | None,
        schedules: Path | None,
        topology_hash: str,
        request_tuning: bool | None,
        warn: Callable[[tuple[str, ...], str], None],
    ):
        self.db, self.schedules, self.topology_hash, self.warn = db, schedules, topology_hash, warn
        self.request_tuning = request_tuning_wanted(request_tuning)
        self.ttl_s = winners_ttl_s()
        self.requested: set[tuple[str, str]] = set()  # (kernel, problem key) queued by this runtime
        self.background = Background()
        self._candidates: list[Candidate] | None = None
        self._fresh: list[Candidate] | None = None
        self._read_at = 0.0
        self._missed = self._reading = self._broken = False

    def get(self) -> list[Candidate]:
        """The winners: read on first use, then cached (replaced only by `refreshed`)."""
        if self._candidates is None:
            records, problem = load_candidates(self.db, self.schedules)
            if problem:
                self.warn(("source",), f"{problem}; every kernel uses its default schedule")
            self._candidates, self._read_at = records, time.monotonic()
        return self._candidates

    def missed(self, spec: KernelSpec, problem: Problem, source: str) -> None:
        """A lookup served `source`; anything but "tuned" is a miss (see the module docstring)."""
        if source == "tuned":
            return
        self._missed = True
        key = (spec.name, problem.key())
        if self.request_tuning and not self._broken and key not in self.requested:
            self.requested.add(key)
            self.background.submit(lambda: self._enqueue(spec, problem))

    def refreshed(self) -> bool:
        """On the call path, cheap: True once when winners read again after a miss replaced the
        old ones (the caller drops its lookups); starts that read when a miss is WINNERS_TTL_S old."""
        if self._fresh is not None:
            self._candidates, self._fresh = self._fresh, None
            return True
        if self._missed and not self._reading and self.schedules is None:
            if time.monotonic() - self._read_at >= self.ttl_s:
                self._missed, self._reading = False, True
                self.background.submit(self._reread)
        return False

    def _reread(self) -> None:
        try:
            records, problem = load_candidates(self.db, None)
            if records or not problem:
                self._fresh = records
        finally:
            self._read_at, self._reading = time.monotonic(), False

    def _enqueue(self, spec: KernelSpec, problem: Problem) -> None:
        if self._broken:
            return
        try:
            from farm.store import open_store
            from farm.store.engine import mask_secrets
            from farm.store.queue import enqueue
            from farm.store.retry import no_retry

            if not hasattr(self, "_store"):
                self._store = open_store(self.db)
            who = f"runtime pid {os.getpid()} on {_host()}"
            with no_retry():  # a courtesy: one try, then this runtime stops asking
                enqueue(self._store, self.topology_hash, spec.name, problem.key(), spec.source_hash(), 0, who)
        except Exception as exc:  # noqa: BLE001 - a request is a courtesy: never the caller's error
            self._broken = True
            detail = mask_secrets(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            log.warning(f"tuning requests: could not queue {spec.name} {problem.key()} ({type(exc).__name__}: "
                        f"{detail}); this runtime queues no more")  # fmt: skip


def _host() -> str:
    import socket

    return socket.gethostname()
