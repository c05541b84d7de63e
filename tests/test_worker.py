"""TrialRunner keeps the GPU busy: comparisons with the reference run behind the timing of
later trials and pipelines compile ahead, yet every result is the one its job earned."""

from __future__ import annotations

import faulty_kernels  # noqa: F401  (registers the fault_* kernels)
import pytest

import farm.tuning.runner as runner_module
from farm import catalog
from farm.schedule import Schedule, Status
from farm.tuning.job import Job
from farm.tuning.runner import TrialRunner


@pytest.fixture
def runner(device):
    b = TrialRunner(device, "test")
    yield b
    b.close()


def _gemv_jobs(kernel: str, count: int) -> list[Job]:
    spec = catalog.get(kernel)
    problem = spec.problem(m=64, n=48)
    schedules = [Schedule.of(workgroup_size=wg, threads_per_row=t) for wg in (32, 64) for t in (1, 4)]
    return [Job(kernel, problem, schedules[i % len(schedules)], 0, 0, 2) for i in range(count)]


@pytest.mark.parametrize("limits", [(4, 2 << 30), (64, 0)], ids=["count", "bytes"])
def test_results_keep_job_order_across_more_trials_than_pending_comparisons(runner, monkeypatch, limits):
    # past MAX_PENDING trials, or PENDING_BYTES of held outputs (0: every trial waits for
    # the oldest comparison still running), the loop waits; order and verdicts are kept
    monkeypatch.setattr(runner_module, "MAX_PENDING", limits[0])
    monkeypatch.setattr(runner_module, "PENDING_BYTES", limits[1])
    good = _gemv_jobs("gemv", 4 + 3)
    wrong = _gemv_jobs("fault_wrong", 2)
    invalid = Job("gemv", good[0].problem, Schedule.of(workgroup_size=48, threads_per_row=5), 0, 0, 2)
    jobs = good[:3] + [wrong[0], invalid] + good[3:] + [wrong[1]]
    results = runner.evaluate(jobs)
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


def test_compile_errors_ahead_of_time_land_on_their_own_trial(runner):
    ok = _gemv_jobs("gemv", 2)
    broken = _gemv_jobs("fault_compile", 1)
    results = runner.evaluate([ok[0], broken[0], ok[1]])
    assert [r.status for r in results] == [Status.OK, Status.COMPILE_ERROR, Status.OK]


@pytest.mark.parametrize("together", [True, False], ids=["reference_set", "one_key_at_a_time"])
def test_references_are_computed_once_per_reference_key(runner, monkeypatch, together):
    """topk's reference depends on the block size alone: every block size from one
    reference_set on the problem's first reference (or, for a spec without one, one
    reference per block size), each right."""
    spec = catalog.get("topk")
    calls, sets = [], []
    real, real_set = type(spec).reference, type(spec).reference_set
    monkeypatch.setattr(type(spec), "reference", lambda self, *a: calls.append(a[1].workgroup_size) or real(self, *a))

    def reference_set(self, *args):
        sets.append(1)
        return real_set(self, *args) if together else {}

    monkeypatch.setattr(type(spec), "reference_set", reference_set)
    problem = spec.problem(n=1000, k=4)
    schedules = [Schedule.of(workgroup_size=wg, items_per_invocation=ipi) for wg in (32, 64) for ipi in (1, 2)]
    results = runner.evaluate([Job("topk", problem, s, 0, 0, 1) for s in schedules])
    assert [r.status for r in results] == [Status.OK] * 4
    assert sets == [1] and calls == ([] if together else [32, 64])


def _summary(results):
    return [(r.key, r.status, r.timing is not None, r.metrics.max_abs) for r in results]


def test_two_batches_from_two_threads_overlap_but_never_share_the_gpu(runner, monkeypatch):
    """Batch B compiles ahead while batch A holds the GPU lock; their trial loops never
    interleave; every result is the one the job earns run alone; comparisons are awaited
    after the lock is released."""
    import threading

    spec = catalog.get("gemv")
    other = spec.problem(m=40, n=72)  # batch B also needs inputs batch A doesn't
    batch_a = _gemv_jobs("gemv", 5) + _gemv_jobs("fault_wrong", 1)
    batch_b = [Job("gemv", other, j.schedule, 0, 0, 2) for j in _gemv_jobs("gemv", 3)] + _gemv_jobs("gemv", 2)
    expected_a, expected_b = runner.evaluate(batch_a), runner.evaluate(batch_b)

    fresh = TrialRunner(runner.device, "test")
    a_on_gpu, b_compiled = threading.Event(), threading.Event()
    order: list[str] = []  # batch of each trial, in the order the trials ran
    b_compiled_while_a_on_gpu: list[bool] = []
    drained_under_lock: list[bool] = []
    real_trial, real_ahead, real_result = fresh._trial, fresh._compile_ahead, runner_module.PendingTrial.result

    def trial(job, ahead):
        assert fresh._gpu.locked()
        name = threading.current_thread().name
        if name == "A" and not a_on_gpu.is_set():
            a_on_gpu.set()
            b_compiled_while_a_on_gpu.append(b_compiled.wait(timeout=5))  # not behind the GPU lock
        order.append(name)
        return real_trial(job, ahead)

    def compile_ahead(job):
        out = real_ahead(job)
        if threading.current_thread().name == "B":
            b_compiled.set()
        return out

    def result(pending):
        drained_under_lock.append(fresh._gpu.locked())
        return real_result(pending)

    monkeypatch.setattr(fresh, "_trial", trial)
    monkeypatch.setattr(fresh, "_compile_ahead", compile_ahead)
    monkeypatch.setattr(runner_module.PendingTrial, "result", result)
    got: dict[str, list] = {}
    thread_a = threading.Thread(target=lambda: got.update(A=fresh.evaluate(batch_a)), name="A")
    thread_b = threading.Thread(target=lambda: got.update(B=fresh.evaluate(batch_b)), name="B")
    try:
        thread_a.start()
        assert a_on_gpu.wait(timeout=10)
        thread_b.start()
        thread_a.join(timeout=60)
        thread_b.join(timeout=60)
    finally:
        fresh.close()
    assert b_compiled_while_a_on_gpu == [True]
    assert order == ["A"] * len(batch_a) + ["B"] * len(batch_b)  # one loop at a time, whole
    assert _summary(got["A"]) == _summary(expected_a) and _summary(got["B"]) == _summary(expected_b)
    assert drained_under_lock and not any(drained_under_lock)
    stages = fresh.stage_times()
    assert stages["trials"] == len(batch_a) + len(batch_b)
    assert {"gpu_wait", "certify_drain", "time"} <= set(stages["seconds"])


def test_inputs_are_generated_once_when_threads_ask_together(runner, monkeypatch):
    import threading
    import time

    spec = catalog.get("gemv")
    calls = []
    real = type(spec).generate

    def slow(self, problem, seed):
        calls.append(problem)
        time.sleep(0.05)
        return real(self, problem, seed)

    monkeypatch.setattr(type(spec), "generate", slow)
    job = _gemv_jobs("gemv", 1)[0]
    entries = []
    threads = [threading.Thread(target=lambda: entries.append(runner.inputs.entry(spec, job))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len({id(e) for e in entries}) == 1


def test_multi_pass_launches_run_certify_and_time_through_the_worker(runner):
    # ternary_gemv stage_x=4: a planes pass, the loop and a split sum over scratch buffers
    spec = catalog.get("ternary_gemv")
    problem = spec.problem(m=100, k=5000)
    schedules = [
        Schedule.of(workgroup_size=64, items_per_invocation=2, vector_width=1, threads_per_row=4, stage_x=4, splits=s)
        for s in (1, 2)
    ]
    results = runner.evaluate([Job("ternary_gemv", problem, s, 0, 0, 2) for s in schedules])
    assert [r.status for r in results] == [Status.OK, Status.OK], [r.message for r in results]
    assert all(r.metrics.max_abs == 0.0 and r.timing.reps == 2 for r in results)
    timings = runner.remeasure("ternary_gemv", problem, schedules, reps=2, rounds=1)
    assert all(t is not None for t in timings.values())


def test_remeasure_and_exclusive_work_hold_the_gpu_lock(runner, monkeypatch):
    job = _gemv_jobs("gemv", 1)[0]
    held = []
    real = runner._prepare
    monkeypatch.setattr(runner, "_prepare", lambda *a, **k: held.append(runner._gpu.locked()) or real(*a, **k))
    timings = runner.remeasure("gemv", job.problem, [job.schedule], reps=2, rounds=1)
    assert timings[job.schedule.key()] is not None and held == [True]
    with runner.exclusive() as device:
        assert device is runner.device and runner._gpu.locked()
    assert not runner._gpu.locked()


def test_held_bytes_count_only_comparisons_still_running():
    from concurrent.futures import Future

    done, running = Future(), Future()
    done.set_result(None)
    pending = [
        runner_module.PendingTrial(None, None, done, None, 100),
        runner_module.PendingTrial(None, None, running, None, 7),
    ]
    assert runner_module.held_bytes(pending) == 7


def test_remeasure_rounds_returns_paired_rounds_and_adds_them_only_for_close_finalists(runner):
    # per-round medians, rounds past `rounds` only for finalists not yet separated
    # (a noise of 1e9 makes every pair a tie at once: no extra rounds), None for a failure
    jobs = _gemv_jobs("gemv", 2)
    bad = Schedule.of(workgroup_size=48, threads_per_row=5)
    schedules = [jobs[0].schedule, jobs[1].schedule, bad]
    samples = runner.remeasure_rounds("gemv", jobs[0].problem, schedules, reps=2, rounds=2, max_rounds=4, noise=1e9)
    assert [len(samples[s.key()]) for s in schedules[:2]] == [2, 2] and samples[bad.key()] is None
    capped = runner.remeasure_rounds("gemv", jobs[0].problem, schedules[:2], reps=2, rounds=2, max_rounds=3, noise=0)
    assert 2 <= len(capped[schedules[0].key()]) <= 3 and all(v > 0 for v in capped[schedules[0].key()])


def test_the_re_measurement_warms_the_first_finalist_then_the_heater_unless_the_gpu_is_hot(runner, monkeypatch):
    """Its rounds decide between close finalists, so they run at the clocks: REMEASURE_LEAST_S
    of the first finalist, then the canary's heater while it reads slow (a few-workgroup
    kernel's own dispatches may leave the clocks low)."""
    from farm.oracle.launch import Prepared

    warms = []
    monkeypatch.setattr(Prepared, "warm_until_clocks", lambda self, *a, **kw: warms.append((a, kw)) or 0.0)
    jobs = _gemv_jobs("gemv", 2)
    runner.remeasure_rounds("gemv", jobs[0].problem, [j.schedule for j in jobs], reps=2, rounds=1)
    least, most = runner_module.REMEASURE_LEAST_S, runner_module.REMEASURE_WARM_S
    assert warms == [((least, most), {"unless_hot": True})] and 0 < least <= most


def _settled(runner: TrialRunner) -> None:
    runner.inputs.settled()  # prefetch and forget return at once


def _counting(monkeypatch, spec, method: str) -> list[str]:
    """Patch `spec`'s class `method` to log the thread each call ran on."""
    calls = []
    real = getattr(type(spec), method)

    def counted(self, *args):
        import threading

        calls.append(threading.current_thread().name)
        return real(self, *args)

    monkeypatch.setattr(type(spec), method, counted)
    return calls


def test_prefetch_generates_inputs_and_reference_off_the_gpu_and_the_trial_reuses_them(runner, monkeypatch):
    """A campaign asks for its next problem's inputs while this one's trials hold the GPU:
    they are generated (and the reference queued) without waiting for the GPU lock, and the
    problem's first trial generates nothing."""
    spec = catalog.get("gemv")
    generated = _counting(monkeypatch, spec, "generate")
    referenced = _counting(monkeypatch, spec, "reference")
    job = _gemv_jobs("gemv", 1)[0]
    with runner._gpu:  # another batch's trials hold the GPU meanwhile
        runner.prefetch("gemv", job.problem, job.seed)
        _settled(runner)
        assert runner.inputs_held() == [("gemv", job.problem.key(), 0)]
    assert [r.status for r in runner.evaluate([job])] == [Status.OK]
    assert len(generated) == 1 and generated[0].startswith("farm-prefetch")
    assert len(referenced) == 1 and referenced[0].startswith("farm-reference")
    assert runner.stage_times()["seconds"]["prefetch"] > 0


def test_forget_drops_a_problems_inputs_and_buffers_and_a_later_trial_generates_them_again(runner, monkeypatch):
    spec = catalog.get("gemv")
    generated = _counting(monkeypatch, spec, "generate")
    released = []
    real_release = runner.device.release
    monkeypatch.setattr(runner.device, "release", lambda *b: released.extend(b) or real_release(*b))
    jobs = _gemv_jobs("gemv", 2)
    other = Job("gemv", spec.problem(m=32, n=16), jobs[0].schedule, 0, 0, 2)
    assert [r.status for r in runner.evaluate([*jobs, other])] == [Status.OK] * 3
    entry = runner.inputs._inputs[("gemv", jobs[0].problem.key(), 0)]
    kept = [*entry.uploaded.values(), *entry.outputs.values()]
    released.clear()
    runner.forget("gemv", jobs[0].problem, 0)
    _settled(runner)
    assert runner.inputs_held() == [("gemv", other.problem.key(), 0)]  # the other problem's stay
    assert kept and all(any(b is k for b in released) for k in kept)
    assert [r.status for r in runner.evaluate(jobs[:1])] == [Status.OK]
    assert len(generated) == 3  # two problems, then the forgotten one again


def test_a_prefetch_that_fails_leaves_the_error_to_the_trial(runner, monkeypatch):
    spec = catalog.get("gemv")

    def broken(self, problem, seed):
        raise RuntimeError("generate bug")

    monkeypatch.setattr(type(spec), "generate", broken)
    job = _gemv_jobs("gemv", 1)[0]
    runner.prefetch("gemv", job.problem, job.seed)
    _settled(runner)
    assert runner.inputs_held() == []
    with pytest.raises(RuntimeError, match="generate bug"):  # a spec bug propagates, as without prefetch
        runner.evaluate([job])


def test_a_prefetch_never_waits_behind_a_forget_that_waits_for_the_gpu(runner):
    jobs = _gemv_jobs("gemv", 1)
    assert [r.status for r in runner.evaluate(jobs)] == [Status.OK]
    other = catalog.get("gemv").problem(m=16, n=8)
    with runner._gpu:  # a batch holds the GPU: the forget waits for it
        runner.forget("gemv", jobs[0].problem, 0)
        runner.prefetch("gemv", other, 0)
        runner.inputs._prefetcher.submit(lambda: None).result(timeout=60)
        assert ("gemv", other.key(), 0) in runner.inputs_held()  # generated meanwhile
        assert ("gemv", jobs[0].problem.key(), 0) in runner.inputs_held()  # not yet forgotten
    _settled(runner)
    assert runner.inputs_held() == [("gemv", other.key(), 0)]


def test_each_trial_is_timed_against_the_best_certified_median_of_its_problem(runner, monkeypatch):
    # the bar for re-timing a competitive trial measured at a slightly low clock
    # (farm.gpu.device.RECHECK_TOLERANCE): the problem's best certified median x RECHECK_BAR;
    # a wrong result's timing never sets it, and another problem has its own
    from farm.oracle.launch import Prepared

    bars = []
    real = Prepared.time
    monkeypatch.setattr(Prepared, "time", lambda self, **kw: bars.append(kw.get("beat_ns")) or real(self, **kw))
    for job in _gemv_jobs("fault_wrong", 2):  # one batch each: the first's verdict is in before the second
        assert runner.evaluate([job])[0].status is Status.WRONG_RESULT
    first = runner.evaluate(_gemv_jobs("gemv", 1))[0]
    runner.evaluate(_gemv_jobs("gemv", 1))
    other = Job("gemv", catalog.get("gemv").problem(m=32, n=32), first.key.schedule, 0, 0, 2)
    runner.evaluate([other])
    assert bars == [None, None, None, pytest.approx(first.median_ns * runner_module.RECHECK_BAR), None]
