"""Faults injected into a real local Ray (num_cpus=2) with lavapipe workers: each one
becomes a typed trial result and the pool keeps going."""

from __future__ import annotations

import faulty_kernels
import numpy as np
import pytest

from farm import catalog
from farm.cluster import CpuAdapterRefused, WorkerPool
from farm.schedule import Schedule, Status
from farm.worker import Job

pytestmark = pytest.mark.slow

GEMV = catalog.get("gemv")
SMALL = GEMV.problem(m=32, n=32)


def job(kernel: str, schedule: Schedule | None = None, **dims: int) -> Job:
    spec = catalog.get(kernel)
    problem = spec.problem(**dims) if dims else spec.problem(m=32, n=32)
    return Job(kernel, problem, schedule or spec.default, seed=0, warmup=1, reps=3)


@pytest.fixture(scope="module")
def pool():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FARM_EXTRA_KERNELS", faulty_kernels.PATH)
        patch.setenv("XDG_RUNTIME_DIR", "/tmp")
        pool = WorkerPool(allow_cpu=True, trial_timeout_s=5.0, max_retries=1, num_cpus=2)
        try:
            yield pool
        finally:
            pool.shutdown()


def test_pool_reports_one_cpu_worker_with_its_topology(pool):
    ((slot, profile),) = pool.profiles().items()
    report = pool.reports()[slot]
    assert profile.is_cpu
    assert pool.topologies() == {profile.topology_hash(): [slot]}
    assert report["mapping"]["ray_gpu_ids"] == []
    assert "llvmpipe" in report["mapping"]["adapter"]


def test_each_fault_becomes_its_typed_status(pool):
    jobs = [
        job("gemv"),
        job("gemv", Schedule.of(workgroup_size=2048)),
        job("fault_compile"),
        job("fault_wrong"),
        job("fault_runtime"),
    ]
    slot = next(iter(pool.profiles()))
    results = pool.evaluate(slot, jobs)
    assert [r.status for r in results] == [
        Status.OK,
        Status.INVALID_SCHEDULE,
        Status.COMPILE_ERROR,
        Status.WRONG_RESULT,
        Status.RUNTIME_ERROR,
    ]
    assert "max-compute-invocations-per-workgroup" in results[1].message
    assert results[3].metrics.max_abs == pytest.approx(1.0, abs=1e-3)
    assert "65535" in results[4].message
    ok = results[0]
    assert ok.timing is not None and ok.timing.reps == 3 and ok.timing.median_ns > 0
    assert ok.worker_id == pool.worker_id(slot) and ok.host
    assert ok.key.topology_hash == pool.profiles()[slot].topology_hash()


def test_hanging_dispatch_times_out_and_the_worker_is_replaced(pool):
    slot = next(iter(pool.profiles()))
    before = pool.worker_id(slot)
    hang = Schedule.of(workgroup_size=1, spin=1)
    results = pool.evaluate(slot, [job("fault_hang", hang), job("gemv")], batch_size=1)
    assert [r.status for r in results] == [Status.TIMEOUT, Status.OK]
    assert "exceeded 5.0 s" in results[0].message
    assert pool.worker_id(slot) != before
    assert results[1].worker_id == pool.worker_id(slot)


def test_worker_killed_mid_trial_is_lost_after_bounded_retries(pool):
    slot = next(iter(pool.profiles()))
    replacements = pool.replacements
    crash = Schedule.of(workgroup_size=64, crash=1)
    results = pool.evaluate(slot, [job("gemv"), job("fault_crash", crash)], batch_size=2)
    assert [r.status for r in results] == [Status.OK, Status.WORKER_LOST]
    assert "died on this trial 2 times" in results[1].message
    # the two-job batch died once, then the crash job alone once more, then its one retry
    assert pool.replacements - replacements == 3


def test_results_stream_in_as_they_arrive_and_cover_every_job(pool):
    schedules = GEMV.schedules()[:6]
    jobs = [Job("gemv", SMALL, s, 0, 1, 3) for s in schedules]
    results = list(pool.stream(jobs))
    assert sorted(r.key.schedule.key() for r in results) == sorted(s.key() for s in schedules)
    assert all(r.status is Status.OK for r in results)


def test_remeasure_times_finalists_interleaved_on_one_worker(pool):
    slot = next(iter(pool.profiles()))
    finalists = [GEMV.default, GEMV.schedules()[0], Schedule.of(workgroup_size=2048)]
    timings = pool.remeasure(slot, "gemv", SMALL, finalists, reps=3, rounds=2)
    assert timings[finalists[2].key()] is None
    for schedule in finalists[:2]:
        assert timings[schedule.key()].reps == 2 and timings[schedule.key()].median_ns > 0


def test_map_runs_a_function_on_the_worker_devices(pool):
    def row_sums(device, rows):  # nested, so Ray pickles it by value
        from farm.launch import run

        a, x = np.ones((rows, 8), np.float32), np.ones(8, np.float32)
        return float(run(device, GEMV, GEMV.default, GEMV.problem(m=rows, n=8), {"a": a, "x": x})["y"].sum())

    assert sorted(pool.map(row_sums, [1, 2, 3])) == [8.0, 16.0, 24.0]


def test_a_cluster_without_gpus_is_refused_without_allow_cpu(pool):
    with pytest.raises(CpuAdapterRefused, match="no GPUs .*CPU=2.*pass --allow-cpu"):
        WorkerPool(allow_cpu=False)


def test_guided_batches_shrink_towards_the_end_and_never_merge_retried_trials():
    from collections import deque

    from farm.cluster import MAX_BATCH, WorkerPool, _Batch

    pool = WorkerPool.__new__(WorkerPool)  # _take needs no Ray
    pool.max_in_flight = 2
    pending = deque(_Batch([(i, None)]) for i in range(40))
    sizes = []
    while pending:
        sizes.append(len(pool._take(pending, workers=2).items))
    assert sizes[0] == MAX_BATCH and sum(sizes) == 40
    assert sizes == sorted(sizes, reverse=True) and sizes[-3:] == [1, 1, 1]
    pending = deque([_Batch([(0, None)]), _Batch([(1, None)], alone=True), _Batch([(2, None)], retries=1)])
    pending += deque(_Batch([(i, None)]) for i in range(3, 6))
    taken = [[i for i, _ in pool._take(pending, workers=1).items] for _ in range(5)]
    assert taken == [[0], [1], [2], [3, 4], [5]]  # 3 left for 1 worker x 2 in flight: 2, then 1
