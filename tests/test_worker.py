"""TrialBench keeps the GPU busy: comparisons with the reference run behind the timing of
later trials and pipelines compile ahead, yet every result is the one its job earned."""

from __future__ import annotations

import faulty_kernels  # noqa: F401  (registers the fault_* kernels)
import pytest

import farm.worker as worker_module
from farm import catalog
from farm.schedule import Schedule, Status
from farm.worker import Job, TrialBench


@pytest.fixture
def bench(device):
    b = TrialBench(device, "test")
    yield b
    b.close()


def _gemv_jobs(kernel: str, count: int) -> list[Job]:
    spec = catalog.get(kernel)
    problem = spec.problem(m=64, n=48)
    schedules = [Schedule.of(workgroup_size=wg, threads_per_row=t) for wg in (32, 64) for t in (1, 4)]
    return [Job(kernel, problem, schedules[i % len(schedules)], 0, 0, 2) for i in range(count)]


def test_results_keep_job_order_across_more_trials_than_pending_comparisons(bench):
    good = _gemv_jobs("gemv", worker_module.MAX_PENDING + 3)
    wrong = _gemv_jobs("fault_wrong", 2)
    invalid = Job("gemv", good[0].problem, Schedule.of(workgroup_size=48, threads_per_row=5), 0, 0, 2)
    jobs = good[:3] + [wrong[0], invalid] + good[3:] + [wrong[1]]
    results = bench.evaluate(jobs)
    assert [r.key.kernel for r in results] == [j.kernel for j in jobs]
    assert [r.key.schedule for r in results] == [j.schedule for j in jobs]
    for job, result in zip(jobs, results, strict=True):
        if job.kernel == "fault_wrong":
            assert result.status is Status.WRONG_RESULT and result.timing is None  # timing discarded
            assert result.metrics.max_abs == pytest.approx(1.0, abs=1e-4)
        elif job is invalid:
            assert result.status is Status.INVALID_SCHEDULE
        else:
            assert result.status is Status.OK, result.message
            assert result.timing is not None and result.timing.reps == 2
            assert result.metrics.max_abs <= 1e-5


def test_compile_errors_ahead_of_time_land_on_their_own_trial(bench):
    ok = _gemv_jobs("gemv", 2)
    broken = _gemv_jobs("fault_compile", 1)
    results = bench.evaluate([ok[0], broken[0], ok[1]])
    assert [r.status for r in results] == [Status.OK, Status.COMPILE_ERROR, Status.OK]


def test_references_are_computed_once_per_reference_key(bench, monkeypatch):
    """topk's reference depends on the block size alone: one per block size, each right."""
    spec = catalog.get("topk")
    calls = []
    real = type(spec).reference
    monkeypatch.setattr(type(spec), "reference", lambda self, *a: calls.append(a[1].workgroup_size) or real(self, *a))
    problem = spec.problem(n=1000, k=4)
    schedules = [Schedule.of(workgroup_size=wg, items_per_invocation=ipi) for wg in (32, 64) for ipi in (1, 2)]
    results = bench.evaluate([Job("topk", problem, s, 0, 0, 1) for s in schedules])
    assert [r.status for r in results] == [Status.OK] * 4
    assert calls == [32, 64]
