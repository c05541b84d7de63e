"""Faults injected into a real local Ray (num_cpus=2) with lavapipe workers: each one
becomes a typed trial result and the pool keeps going."""

from __future__ import annotations

import faulty_kernels
import numpy as np
import pytest

from farm import catalog
from farm.gpu import CpuAdapterRefused
from farm.schedule import Schedule, Status
from farm.tuning.job import Job
from farm.tuning.workers import WorkerPool

pytestmark = pytest.mark.slow

GEMV = catalog.get("gemv")
SMALL = GEMV.problem(m=32, n=32)


def job(kernel: str, schedule: Schedule | None = None, **dims: int) -> Job:
    spec = catalog.get(kernel)
    problem = spec.problem(**dims) if dims else spec.problem(m=32, n=32)
    return Job(kernel, problem, schedule or spec.default, seed=0, warmup=1, reps=3)


@pytest.fixture(scope="module")
def slow_log(tmp_path_factory):
    return tmp_path_factory.mktemp("slow") / "generate.log"


@pytest.fixture(scope="module")
def pool(slow_log):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FARM_EXTRA_KERNELS", faulty_kernels.PATH)
        patch.setenv("FARM_TEST_SLOW_LOG", str(slow_log))  # the workers inherit it
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
    before, replacements = pool.worker_id(slot), pool.replacements
    hang = Schedule.of(workgroup_size=1, spin=1)
    results = pool.evaluate(slot, [job("fault_hang", hang), job("gemv")], batch_size=1)
    assert [r.status for r in results] == [Status.TIMEOUT, Status.OK]
    assert "exceeded 5.0 s" in results[0].message
    assert pool.worker_id(slot) != before
    # The threaded worker runs whichever batch takes the GPU first. gemv first: it finishes
    # on the first worker and the hang then has the worker to itself, one replacement.
    # The hang first: gemv is still under way beside it when the hang times out, so both
    # are re-sent alone on a fresh worker and the hang's verdict costs a second one.
    if results[1].worker_id == before:
        assert pool.replacements - replacements == 1
    else:
        assert pool.replacements - replacements == 2
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


def test_batches_overlap_on_the_threaded_worker_and_results_keep_job_order(pool, slow_log):
    slot = next(iter(pool.profiles()))
    schedules = GEMV.schedules()[:5]
    jobs = [Job("gemv", SMALL, s, 0, 1, 3) for s in schedules]
    jobs[1:1] = [job("gemv", Schedule.of(workgroup_size=2048)), job("fault_wrong")]
    for batch_size in (2, None):  # fixed batches, then guided ones
        results = pool.evaluate(slot, jobs, batch_size=batch_size)
        assert [(r.key.kernel, r.key.schedule) for r in results] == [(j.kernel, j.schedule) for j in jobs]
        assert [r.status for r in results[:4]] == [Status.OK, Status.INVALID_SCHEDULE, Status.WRONG_RESULT, Status.OK]
        assert all(r.status is Status.OK for r in results[4:])
    stages = pool.stage_times()[slot]["seconds"]
    assert {"gpu_wait", "certify_drain"} <= set(stages)
    # slow_inputs' inputs (0.3 s each) are generated while compiling ahead, outside the GPU
    # lock: two one-job batches in flight generate theirs at the same time on a threaded
    # actor (the kernel logs when each generation ran: no wall-clock bound to miss under load)
    pool.evaluate(slot, [job("slow_inputs", m=8, n=8)])  # the pipeline, compiled once
    slow = [job("slow_inputs", m=64, n=8), job("slow_inputs", m=72, n=8)]
    results = pool.evaluate(slot, slow, batch_size=1)
    assert [r.status for r in results] == [Status.OK, Status.OK]
    ran = {key: (float(a), float(b)) for key, a, b in (line.split() for line in slow_log.read_text().splitlines())}
    (s1, e1), (s2, e2) = ran["m=64,n=8"], ran["m=72,n=8"]
    assert max(s1, s2) < min(e1, e2), f"generations did not overlap: {ran}"


def test_workers_generate_a_problems_inputs_ahead_and_forget_them_when_told(pool, slow_log):
    import time

    slot = next(iter(pool.profiles()))
    spec = catalog.get("slow_inputs")
    problem = spec.problem(m=48, n=8)
    held = ("slow_inputs", problem.key(), 0)
    pool.prefetch("slow_inputs", problem, 0)  # returns at once; the worker generates in the background
    deadline = time.monotonic() + 60
    while held not in pool.inputs_held(slot) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held in pool.inputs_held(slot)
    assert [r.status for r in pool.evaluate(slot, [job("slow_inputs", m=48, n=8)])] == [Status.OK]
    generations = [line for line in slow_log.read_text().splitlines() if line.startswith(problem.key() + " ")]
    assert len(generations) == 1  # the trial used the prefetched inputs
    pool.forget("slow_inputs", problem, 0)
    while held in pool.inputs_held(slot) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held not in pool.inputs_held(slot)


def test_workers_compile_hinted_schedules_ahead_through_the_pool(pool):
    import time

    slot = next(iter(pool.profiles()))
    spec = catalog.get("gemv")
    problem = spec.problem(m=24, n=16)
    hinted = [s for s in spec.schedules() if s.workgroup_size == 32][:2]
    pool.precompile("gemv", problem, hinted, 0)  # returns at once
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if pool.stage_times()[slot]["seconds"].get("precompile", 0) > 0:
            break
        time.sleep(0.05)
    assert pool.stage_times()[slot]["seconds"].get("precompile", 0) > 0
    assert all(r.status is Status.OK for r in pool.evaluate(slot, [job("gemv", m=24, n=16)]))


def test_a_fault_beside_another_batch_is_rerun_alone_before_any_verdict():
    """Two batches may be under way on a worker at once, so a timeout or a death is only
    charged to a single job that had the worker to itself; retried/split-off batches are
    never sent beside another batch."""
    from collections import deque

    from farm.tuning.workers import _Batch, _Slot

    class Actor:
        class evaluate:  # noqa: N801 - stands in for a Ray actor method
            @staticmethod
            def remote(jobs):
                return object()

    pool = WorkerPool.__new__(WorkerPool)  # no Ray
    pool.max_in_flight, pool.trial_timeout_s, pool.max_retries = 2, 1.0, 1
    pool._replace = lambda slot: None
    slot = _Slot("w0", actor=Actor(), report={"topology_hash": "t", "host": "h"})
    a, b = job("gemv"), job("fault_wrong")
    pending, owner = deque([_Batch([(0, a)]), _Batch([(1, b)])]), {}
    pool._fill([slot], pending, owner)
    assert len(slot.fifo) == 2 and not pending
    assert list(pool._on_timeout(slot, pending, owner)) == []  # no verdict: b may have hung
    assert [(bt.items, bt.alone, bt.retries) for bt in pending] == [([(0, a)], True, 0), ([(1, b)], True, 0)]
    assert not slot.fifo and not owner
    pool._fill([slot], pending, owner)
    assert len(slot.fifo) == 1 and len(pending) == 1  # alone: nothing beside it
    ((index, timed_out),) = pool._on_timeout(slot, pending, owner)  # alone: its own fault
    assert index == 0 and timed_out.status is Status.TIMEOUT
    pool._fill([slot], pending, owner)
    assert len(slot.fifo) == 1 and not pending
    fresh = _Batch([(2, a)])
    pending.append(fresh)
    pool._fill([slot], pending, owner)
    assert list(pending) == [fresh]  # nothing joins an alone batch either


def test_remeasure_times_finalists_interleaved_on_one_worker(pool):
    slot = next(iter(pool.profiles()))
    finalists = [GEMV.default, GEMV.schedules()[0], Schedule.of(workgroup_size=2048)]
    rounds = pool.remeasure_rounds(slot, "gemv", SMALL, finalists, reps=3, rounds=2)
    assert rounds[finalists[2].key()] is None
    for schedule in finalists[:2]:
        medians = rounds[schedule.key()]
        assert len(medians) == 2 and all(m > 0 for m in medians)


def test_map_runs_a_function_on_the_worker_devices(pool):
    def row_sums(device, rows):  # nested, so Ray pickles it by value
        from farm.oracle.launch import run

        a, x = np.ones((rows, 8), np.float32), np.ones(8, np.float32)
        return float(run(device, GEMV, GEMV.default, GEMV.problem(m=rows, n=8), {"a": a, "x": x})["y"].sum())

    assert sorted(pool.map(row_sums, [1, 2, 3])) == [8.0, 16.0, 24.0]


def test_a_cluster_without_gpus_is_refused_without_allow_cpu(pool):
    with pytest.raises(CpuAdapterRefused, match="no GPUs .*CPU=2.*pass --allow-cpu"):
        WorkerPool(allow_cpu=False)


def test_guided_batches_shrink_towards_the_end_and_never_merge_retried_trials():
    from farm.tuning.workers import MAX_BATCH, _Batch, _Pending

    pool = WorkerPool.__new__(WorkerPool)  # _take needs no Ray
    pool.max_in_flight = 2
    jobs = 5 * MAX_BATCH * 2 * 2
    pending = _Pending(_Batch([(i, None)]) for i in range(jobs))
    sizes = []
    while pending:
        sizes.append(len(pool._take(pending, workers=2).items))
        assert pending.trials == sum(len(b.items) for b in pending)
    assert sizes[0] == MAX_BATCH and sum(sizes) == jobs
    assert sizes == sorted(sizes, reverse=True) and sizes[-3:] == [1, 1, 1]
    retried = [_Batch([(0, None)]), _Batch([(1, None)], alone=True), _Batch([(2, None)], retries=1)]
    pending = _Pending(retried + [_Batch([(i, None)]) for i in range(3, 6)])
    taken = [[i for i, _ in pool._take(pending, workers=1).items] for _ in range(5)]
    assert taken == [[0], [1], [2], [3, 4], [5]]  # 3 left for 1 worker x 2 in flight: 2, then 1


def test_a_wide_round_goes_as_one_batch_per_worker_sized_by_the_whole_round():
    from farm.tuning.workers import SHARE_WORKERS, _Batch, _Pending

    pool = WorkerPool.__new__(WorkerPool)
    pool.max_in_flight = 2
    workers = 2 * SHARE_WORKERS
    pending = _Pending(_Batch([(i, None)]) for i in range(2 * workers))  # a round of two trials a worker
    batches = [pool._take(pending, workers) for _ in range(workers)]
    assert [len(b.items) for b in batches] == [2] * workers and all(b.share for b in batches)
    assert not pending and pending.round == 0
    pending = _Pending(_Batch([(i, None)]) for i in range(workers // 2))  # fewer trials than workers: one each
    assert {len(pool._take(pending, workers).items) for _ in range(workers // 2)} == {1}
    pending = _Pending(_Batch([(i, None)]) for i in range(8 * workers))  # a large round: guided, not shares
    first = pool._take(pending, workers)
    assert len(first.items) == 4 and not first.share
    narrow = _Pending(_Batch([(i, None)]) for i in range(2 * (SHARE_WORKERS - 1)))
    assert len(pool._take(narrow, SHARE_WORKERS - 1).items) == 1  # below SHARE_WORKERS: as before


def test_a_worker_takes_one_share_batch_a_fill_so_a_wide_round_reaches_every_worker():
    from farm.tuning.workers import SHARE_WORKERS, _Batch, _Pending, _Slot

    class Actor:
        class evaluate:
            @staticmethod
            def remote(jobs):
                return object()

    pool = WorkerPool.__new__(WorkerPool)
    pool.max_in_flight = 2
    slots = [_Slot(f"w{n}", Actor) for n in range(SHARE_WORKERS)]
    pending = _Pending(_Batch([(i, None)]) for i in range(2 * SHARE_WORKERS))
    pool._fill(slots, pending, {}, guided=True)
    assert [sum(len(b.items) for b in slot.fifo) for slot in slots] == [2] * SHARE_WORKERS



def test_a_farm_adapter_naming_no_adapter_is_one_line_not_a_dead_actor(tmp_path):
    """FARM_ADAPTER naming no adapter must not kill the worker in __init__ (Ray's
    ActorDiedError traceback): the worker keeps the NoAdapterError for its first call, the
    pool raises it as itself, and the CLI says one line."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "RAY_"))}
    env |= {"FARM_ADAPTER": "no-such-gpu", "FARM_HOME": str(tmp_path), "XDG_RUNTIME_DIR": "/tmp"}
    run = subprocess.run([sys.executable, "-m", "farm", "tune", "--sizes", "gemv:m=32,n=32", "--allow-cpu",
                          "--budget", "2", "--db", f"sqlite:///{tmp_path}/t.db"], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.splitlines()[-1].startswith("farm: error: no adapter matches FARM_ADAPTER='no-such-gpu'; have: ")
