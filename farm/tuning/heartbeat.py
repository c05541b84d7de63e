"""A heartbeat thread: a write (a campaign's row, a request's lease) every so often while
the work runs, and a periodic sweep; `farm.tuning.campaign` and `farm.tuning.serve` use it."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Heartbeat:
    """Runs `write` (the campaign row's counters and heartbeat_at) on `beat()`, and from a daemon
    thread whenever nothing did (nor a write under `writing()`) for `every_s`; one write at a
    time. The thread also runs `sweep` every `sweep_s` (the campaign marks dead ones
    interrupted: a re-run right after a kill marks the killed campaign once its heartbeat
    goes stale). A failure on the thread is one
    line on stderr (the next tick retries); `beat()`'s errors are the caller's."""

    def __init__(
        self, write: Callable[[], None], every_s: float, sweep: Callable[[], None] | None = None, sweep_s: float = 0
    ):
        self.write, self.every_s, self.sweep, self.sweep_s = write, every_s, sweep, sweep_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last = self._swept = time.monotonic()
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="campaign-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def beat(self) -> None:
        with self.writing():
            self.write()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the write lock around another write that beats too (a campaign's trial flush
        carries its counters and heartbeat): the thread then waits every_s from it."""
        with self._lock:
            yield
            self._last = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _next_s(self) -> float:
        due = self._last + self.every_s
        if self.sweep is not None:
            due = min(due, self._swept + self.sweep_s)
        return max(0.05, due - time.monotonic())

    def _run(self) -> None:
        while not self._stop.wait(self._next_s()):
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self._safely(self.beat, "heartbeat")
                self._last = max(self._last, now)  # a failed beat retries after every_s, not in a tight loop
            if self.sweep is not None and now - self._swept >= self.sweep_s:
                self._swept = now
                self._safely(self.sweep, "check for dead campaigns")

    def _safely(self, fn: Callable[[], None], what: str) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a missed beat must not end the campaign
            if not self._warned:
                print(f"campaign {what} failed ({exc}); retrying every {self.every_s:.0f} s", file=sys.stderr)
                self._warned = True
