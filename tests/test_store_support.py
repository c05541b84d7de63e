"""Builders shared by the store tests (no tests here): a fake adapter profile, trial results, a
SQLite database holding one winner (`one_winner_db`), the trial summaries as stored and as
recounted (`snapshot`, `recounted`), and a `store_url` fixture parametrized
over SQLite and the session's PostgreSQL server."""

from __future__ import annotations

import pytest

from farm.gpu import HardwareProfile, Timing
from farm.schedule import Problem, Schedule, Status
from farm.trial import ErrorMetrics, TrialKey, TrialResult


def profile(name: str = "llvmpipe (LLVM 15)", device_id: int = 0) -> HardwareProfile:
    return HardwareProfile(
        backend="Vulkan",
        adapter_type="CPU",
        vendor_id=0x10005,
        device_id=device_id,
        device_name=name,
        driver_description="Mesa 22.3.6",
        limits=(("max-compute-workgroup-size-x", 256), ("max-buffer-size", 1 << 28)),
        features=("timestamp-query",),
    )


def trial(
    topology_hash: str,
    workgroup_size: int,
    status: Status = Status.OK,
    kernel: str = "gemv",
    problem: Problem = Problem.of(m=37, k=129),
    source_hash: str = "src-1",
    median_ns: float = 1000.0,
) -> TrialResult:
    key = TrialKey(topology_hash, kernel, source_hash, problem, Schedule.of(workgroup_size=workgroup_size))
    timing = None
    if status == Status.OK:
        timing = Timing(median_ns, median_ns * 0.9, median_ns * 1.2, median_ns * 0.8, 7, "timestamp")
    return TrialResult(
        key=key,
        status=status,
        message="" if status == "ok" else f"{status.value} at wg={workgroup_size}",
        timing=timing,
        metrics=ErrorMetrics(1e-6, 2e-7, 3e-7, 4e-6),
        host="node-a",
        worker_id="gpu-0",
        finished_at=1_790_000_000.25,
    )


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request, tmp_path) -> str:
    """A URL for an empty database of each dialect."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'farm.db'}"
    return request.getfixturevalue("pg_fresh_url")


def _summary_rows(conn) -> tuple[list, list]:
    from sqlalchemy import select

    from farm.store.models import TrialCountRow, TrialFailureRow

    counts = sorted(tuple(r) for r in conn.execute(select(TrialCountRow.__table__)))
    return counts, sorted(tuple(r) for r in conn.execute(select(TrialFailureRow.__table__)))


def snapshot(db) -> tuple[list, list]:
    """The trial summaries' rows (trial_counts, trial_failures), sorted."""
    with db.engine.connect() as conn:
        return _summary_rows(conn)


def recounted(db) -> tuple[list, list]:
    """The summaries rebuilt from the trials table (rolled back: the stored ones stay)."""
    from farm.store import summaries

    with db.engine.connect() as conn, conn.begin() as transaction:
        summaries.rebuild_summaries(conn)
        rows = _summary_rows(conn)
        transaction.rollback()
    return rows


def one_winner_db(directory) -> tuple[str, str]:
    """A SQLite database in `directory` holding one gemv winner: (url, topology hash)."""
    from farm.store import WinnerRecord, open_store, save_winner, upsert_topology

    url = f"sqlite:///{directory / 'farm.db'}"
    store = open_store(url)
    topo = upsert_topology(store, profile())
    schedule = Schedule.of(workgroup_size=64).key()
    save_winner(store, WinnerRecord(topo, "gemv", "m=8,n=8", "src", schedule, 1000.0, 2000.0, 2.0, None, "llvmpipe"))
    store.engine.dispose()
    return url, topo
