import numpy as np
import pytest

from farm import catalog
from farm.oracle import compare as oracle
from farm.oracle.launch import run
from farm.schedule import Schedule, Status

SPEC = catalog.get("gemv")
SCHEDULES = [
    SPEC.default,
    Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=1, threads_per_row=32),
    Schedule.of(workgroup_size=32, items_per_invocation=4, vector_width=1, threads_per_row=4),
    Schedule.of(workgroup_size=256, items_per_invocation=1, vector_width=1, threads_per_row=8),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
@pytest.mark.parametrize("m,n", [(1, 1), (1000, 777), (3, 4097)])
def test_gemv_matches_numpy(device, schedule, m, n):
    problem = SPEC.problem(m=m, n=n)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs < 1e-3


def test_gemv_vec4_schedule_on_multiple_of_four(device):
    schedule = Schedule.of(workgroup_size=64, items_per_invocation=2, vector_width=4, threads_per_row=8)
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=333, n=516), device)
    assert result.status is Status.OK, result.message


def test_gemv_hand_checked(device):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    x = np.array([1, 1, 1], np.float32)
    out = run(device, SPEC, SPEC.default, SPEC.problem(m=2, n=3), {"a": a, "x": x})
    np.testing.assert_array_equal(out["y"], [6.0, 15.0])


def test_gemv_folds_more_than_65535_workgroups(device):
    # 70,000 rows at one row per workgroup: the grid must fold into 2-D.
    schedule = Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=1, threads_per_row=32)
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=70_000, n=8), device)
    assert result.status is Status.OK, result.message
