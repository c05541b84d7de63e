"""The value objects that cross Ray on every trial (a job's Schedule and Problem, a
TrialResult) survive pickling exactly, and arrive interned with their memoized keys."""

from __future__ import annotations

import pickle

import pytest
import ray.cloudpickle as cloudpickle

from farm import catalog
from farm.gpu import Timing
from farm.schedule import Problem, Schedule, Status
from farm.trial import ErrorMetrics, TrialKey, TrialResult
from farm.tuning.job import Job, JobBatch


def _result(schedule: Schedule, timing: Timing | None = Timing(1.5, 1.0, 2.0, 0.5, 20, "timestamp")) -> TrialResult:
    key = TrialKey("topo", "gemm", "src", Problem.of(m=64, k=32, n=16), schedule)
    return TrialResult(key, Status.OK if timing else Status.WRONG_RESULT, "" if timing else "off by 2",
                       timing, ErrorMetrics(1e-6, 2e-7, 3e-7, 4e-5), "host-a", "gpu-3", 1.7e9)  # fmt: skip


def test_a_trial_result_round_trips_field_for_field():
    schedule = catalog.get("gemm").schedules()[7]
    for dumps in (pickle.dumps, cloudpickle.dumps):
        for original in (_result(schedule), _result(schedule, timing=None)):
            back = pickle.loads(dumps(original))
            assert back == original
            assert back.finished_at == original.finished_at and back.status is original.status
            assert back.key.schedule.key() == schedule.key() and back.key.problem.key() == "m=64,k=32,n=16"


def test_unpickled_schedules_are_interned_and_keep_their_key():
    schedule = Schedule.of(workgroup_size=128, tile=4, unroll=2)
    key = schedule.key()
    first, second = pickle.loads(pickle.dumps(schedule)), pickle.loads(pickle.dumps(schedule))
    assert first is second and first == schedule and hash(first) == hash(schedule)
    assert first.__dict__.get("_key") == key  # carried, not recomputed
    problem = Problem.of(n=1024, batch=8)
    assert pickle.loads(pickle.dumps(problem)) is pickle.loads(pickle.dumps(problem)) == problem


def test_declared_and_hand_built_schedules_survive_pickling():
    declared = Schedule.declared(workgroup_size=64, rows=2)
    back = pickle.loads(pickle.dumps(declared))
    assert back == declared and back.base == ("workgroup_size",) and back.as_dict() == {"workgroup_size": 64, "rows": 2}
    odd = Schedule(knobs=(("rows", [2]),))  # unhashable: interning is skipped, the value kept
    assert pickle.loads(pickle.dumps(odd)).knobs == (("rows", [2]),)


def test_a_job_round_trips():
    job = Job("gemm", Problem.of(m=64, k=32, n=16), catalog.get("gemm").default, seed=3, warmup=1, reps=5)
    assert cloudpickle.loads(cloudpickle.dumps(job)) == job


def test_a_job_batch_arrives_as_a_plain_list_of_its_jobs():
    problem = Problem.of(m=64, k=32, n=16)
    jobs = [Job("gemm", problem, s, seed=2) for s in catalog.get("gemm").schedules()[:5]]
    back = cloudpickle.loads(cloudpickle.dumps(JobBatch(jobs)))
    assert type(back) is list and back == jobs


def test_a_problem_reads_the_first_of_a_repeated_dimension_and_names_a_missing_one():
    problem = Problem((("m", 4), ("n", 8), ("m", 16)))  # hand-built: of() can't repeat a name
    assert (problem["m"], problem["n"]) == (4, 8)
    with pytest.raises(KeyError, match="no dimension 'k'"):
        problem["k"]
    assert Schedule.of(workgroup_size=32, tile=2).get("tile", 0) == 2 and dict(Schedule.of(tile=2).items())["tile"] == 2
