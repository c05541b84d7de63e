"""A campaign's trial writer: its recorder's flushes, each one transaction of
`farm.store.repo.write_trial_batch` on a connection held for the campaign."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from farm.store.database import Store
from farm.store.repo import Counts, require_topologies, write_trial_batch
from farm.store.retry import call_retrying
from farm.trial import TrialResult


class TrialWriter:
    """One campaign's trial batches (its recorder's flushes), each one transaction of
    `write_trial_batch` with the campaign's counts: the connection is held between batches
    (no pool checkout, so no PostgreSQL ping, per batch) and each topology is looked up
    once, at its first batch. A failed batch drops the connection (the next one checks out
    a fresh one) and is retried through a database restart like every write (farm.store.retry)."""

    def __init__(self, store: Store, campaign_id: int | None):
        self.store, self.campaign_id = store, campaign_id
        self._conn: Connection | None = None
        self._checked: set[str] = set()

    def write(self, results: Sequence[TrialResult], counts: Counts | None = None) -> list[TrialResult]:
        self.store.require_writable()
        return call_retrying(self._attempt, results, counts)

    def _attempt(self, results: Sequence[TrialResult], counts: Counts | None) -> list[TrialResult]:
        try:
            return self._write(results, counts)
        except Exception:
            self.close()  # a connection a failed transaction leaves may be dead: the next try takes a fresh one
            raise

    def _write(self, results: Sequence[TrialResult], counts: Counts | None) -> list[TrialResult]:
        if self._conn is None:
            self._conn = self.store.engine.connect()
        hashes = {result.key.topology_hash for result in results}
        with self._conn.begin():
            if hashes - self._checked:
                require_topologies(self._conn, hashes - self._checked)
            inserted = write_trial_batch(self._conn, self.campaign_id, results, counts)
        self._checked |= hashes
        return inserted

    def close(self) -> None:
        """Give the connection back (after a failure, or when the campaign's recorder closes)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection is being dropped anyway
                pass
