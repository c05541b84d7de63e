"""A campaign's trial log over the database: a task's trials read once, kept up to date with
this run's, and read again once the task is forgotten."""

from __future__ import annotations

from test_store_support import profile, trial

from farm import catalog
from farm.schedule import Problem
from farm.store import open_store, record_trials, upsert_topology
from farm.tuning.tasks import Task
from farm.tuning.trial_logs import StoreLog


def test_a_store_log_reads_a_task_once_and_keeps_this_runs_trials(tmp_path):
    db = open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    topology = upsert_topology(db, profile())
    source, problem = catalog.get("gemv").source_hash(), Problem.of(m=37, n=129)

    def made(workgroup_size: int):
        return trial(topology, workgroup_size, problem=problem, source_hash=source)

    keys = {size: made(size).key.schedule.key() for size in (64, 128, 256)}
    record_trials(db, None, [made(64)])
    log, task = StoreLog(db, None), Task(topology, "gemv", problem, [], None)
    assert set(log.recorded(task)) == {keys[64]}
    record_trials(db, None, [made(128)])  # another driver's, while this task is held: not read again
    log.add(made(256))  # buffered: no recorder, written when the search ends
    assert set(log.recorded(task)) == {keys[64], keys[256]}
    log.searched(task, 1)
    other = Task(topology, "gemv", Problem.of(m=8, n=8), [], None)
    assert log.recorded(other) == {}
    log.forget(task)
    assert set(log.recorded(task)) == {keys[64], keys[128], keys[256]}  # read again, the database's
    db.engine.dispose()
