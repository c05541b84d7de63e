"""Where a task's trials are remembered (`TrialLog`, the tuning engine's interface): read back
for resume, warm start and the finalists, written as they arrive. `StoreLog` is a database
(a campaign's `CampaignLog` is one, farm.tuning.campaign), `MemoryLog` this run only."""

from __future__ import annotations

from typing import Protocol

from farm import catalog, store
from farm.store import WinnerRecord
from farm.trial import TrialResult
from farm.tuning.recording import result_from_row
from farm.tuning.tasks import Task


class TrialLog(Protocol):
    """What a task's trials are remembered in: read back for resume, warm start and the
    finalists, written as they arrive; `campaign_id` is stamped on the winner."""

    campaign_id: int | None

    def recorded(self, task: Task) -> dict[str, TrialResult]:
        """The task's recorded trials (this topology, kernel, source and problem) by schedule key."""

    def stored_winner(self, task: Task) -> str | None:
        """The schedule key of the winner stored for the task's problem and source, if any."""

    def replayed(self, result: TrialResult) -> None:
        """A recorded trial was used instead of running it (counts as done)."""

    def add(self, result: TrialResult) -> None:
        """A trial that just ran."""

    def searched(self, task: Task, spent: int) -> None:
        """The task's search is over, after `spent` trials: what was added must now be recorded."""

    def save_winner(self, winner: WinnerRecord) -> None:
        """The task's winner, with its decision."""

    def forget(self, task: Task) -> None:
        """The task is decided: nothing of it will be read back in this run."""


class MemoryLog:
    """A TrialLog without a database (`tune_kernel` without `db=`): the trials and winners of
    this run only, so nothing is resumed and no stored winner breaks a tie."""

    campaign_id = None

    def __init__(self) -> None:
        self.trials: dict[tuple[str, str, str, str], dict[str, TrialResult]] = {}
        self.winners: dict[tuple[str, str, str, str], str] = {}

    def recorded(self, task: Task) -> dict[str, TrialResult]:
        return dict(self.trials.get(_task_key(task), {}))

    def stored_winner(self, task: Task) -> str | None:
        return self.winners.get(_task_key(task))

    def forget(self, task: Task) -> None:
        pass  # a run without a database keeps its trials: they are all it has

    def replayed(self, result: TrialResult) -> None:
        pass

    def add(self, result: TrialResult) -> None:
        key = result.key
        partition = (key.topology_hash, key.kernel, key.source_hash, key.problem.key())
        self.trials.setdefault(partition, {}).setdefault(key.schedule.key(), result)  # the first stays, as in SQL

    def searched(self, task: Task, spent: int) -> None:
        pass

    def save_winner(self, winner: WinnerRecord) -> None:
        key = (winner.topology_hash, winner.kernel, winner.source_hash, winner.problem_key)
        self.winners[key] = winner.schedule_key


class StoreLog:
    """A TrialLog over a database: trials recorded by any run (resume, warm start, finalists)
    and the stored winner read from it; new trials go to `recorder` (anything with `add` and
    `flush`: a campaign's TrialRecorder, SQL and Parquet as they arrive), or without one are
    written in SQL when the search is over; either way before the finalists are read back.
    `done` and `failures` count the trials run or replayed (a campaign row's counters)."""

    def __init__(self, db: store.Store, campaign_id: int | None, recorder=None) -> None:
        self.db, self.campaign_id, self.recorder = db, campaign_id, recorder
        self.buffer: list[TrialResult] = []
        self.done = self.failures = 0
        # A task's trials read once and kept up to date with this run's: reading them back for the
        # finalists cost a query and a decode per trial, a sixth of a driver's CPU. Dropped with its winner.
        self._known: dict[tuple[str, str, str, str], dict[str, TrialResult]] = {}

    def recorded(self, task: Task) -> dict[str, TrialResult]:
        key = _task_key(task)
        known = self._known.get(key)
        if known is None:
            rows = store.recorded_schedules(self.db, task.topology, task.kernel, key[2], key[3])
            known = self._known[key] = {k: result_from_row(row, task.problem) for k, row in rows.items()}
        return dict(known)

    def forget(self, task: Task) -> None:
        """The task is decided: its trials need not be kept."""
        self._known.pop(_task_key(task), None)

    def _remember(self, result: TrialResult) -> None:
        k = result.key
        known = self._known.get((k.topology_hash, k.kernel, k.source_hash, k.problem.key()))
        if known is not None:
            known.setdefault(k.schedule.key(), result)  # the first recorded stays, as the insert keeps it

    def stored_winner(self, task: Task) -> str | None:
        source_hash = catalog.get(task.kernel).source_hash()
        for w in store.winners(self.db, kernel=task.kernel, topology=task.topology):
            if w.problem_key == task.problem.key() and w.source_hash == source_hash:
                return w.schedule_key
        return None

    def replayed(self, result: TrialResult) -> None:
        self.done += 1
        self.failures += not result.ok

    def add(self, result: TrialResult) -> None:
        self.done += 1
        self.failures += not result.ok
        self._remember(result)
        if self.recorder is not None:
            self.recorder.add(result)
        else:
            self.buffer.append(result)

    def searched(self, task: Task, spent: int) -> None:
        if self.recorder is not None:
            self.recorder.flush()
        batch, self.buffer = self.buffer, []
        if batch:
            store.record_trials(self.db, self.campaign_id, batch)

    def save_winner(self, winner: WinnerRecord) -> None:
        store.save_winner(self.db, winner)


def _task_key(task: Task) -> tuple[str, str, str, str]:
    return (task.topology, task.kernel, catalog.get(task.kernel).source_hash(), task.problem.key())
