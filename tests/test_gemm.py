import numpy as np
import pytest

from farm import catalog, oracle
from farm.catalog.gemm import workgroup_bytes
from farm.launch import run
from farm.schedule import InvalidSchedule, Problem, Schedule, Status

SPEC = catalog.get("gemm")


def gemm_schedule(bm, bn, tm, tn, bk=8, db=0, vw=1, threads=None, items=None) -> Schedule:
    return Schedule.of(
        workgroup_size=threads if threads is not None else (bm // tm) * (bn // tn),
        items_per_invocation=items if items is not None else tm * tn,
        vector_width=vw,
        tile_m=bm,
        tile_n=bn,
        reg_m=tm,
        reg_n=tn,
        tile_k=bk,
        double_buffer=db,
    )


SCHEDULES = [
    SPEC.default,
    gemm_schedule(64, 64, 4, 4, bk=16, db=1, vw=4),
    gemm_schedule(128, 64, 8, 4, bk=8, db=1, vw=4),
    gemm_schedule(32, 64, 2, 4, bk=32, db=0, vw=1),
    gemm_schedule(16, 32, 1, 2, bk=16, db=1, vw=1),
    gemm_schedule(64, 32, 4, 2, bk=8, db=0, vw=4),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
def test_gemm_matches_numpy_on_sizes_that_are_not_tile_multiples(device, schedule):
    problem = SPEC.problem(m=37, k=129, n=65)
    SPEC.check(schedule, problem, device.profile)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs < 1e-4


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (64, 64, 64), (3, 5, 130)])
def test_gemm_register_tiled_vec4_schedule_matches_numpy(device, m, k, n):
    schedule = gemm_schedule(64, 64, 4, 4, bk=16, db=1, vw=4)
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=m, k=k, n=n), device)
    assert result.status is Status.OK, result.message


@pytest.mark.parametrize("schedule", [SPEC.default, gemm_schedule(64, 64, 4, 4, bk=16, db=1, vw=4)], ids=str)
def test_gemm_hand_checked_2x3_times_3x2(device, schedule):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    b = np.array([[7, 8], [9, 10], [11, 12]], np.float32)
    out = run(device, SPEC, schedule, SPEC.problem(m=2, k=3, n=2), {"a": a, "b": b})
    np.testing.assert_array_equal(out["c"], [[58.0, 64.0], [139.0, 154.0]])


def test_gemm_folds_more_than_65535_workgroups(device):
    # 8×8 tiles over 4100×1100 outputs: 513 × 138 = 70,794 workgroups, folded into 2-D.
    problem = SPEC.problem(m=4100, k=3, n=1100)
    result = oracle.certify(SPEC, SPEC.default, problem, device)
    assert result.status is Status.OK, result.message


def test_gemm_rejects_workgroup_storage_over_the_adapter_limit(device):
    schedule = gemm_schedule(128, 128, 8, 8, bk=32, db=1, vw=4)
    need = workgroup_bytes(128, 128, 32, 1)
    assert need == 2 * 32 * 256 * 4
    limit = device.profile.limit("max-compute-workgroup-storage-size")
    assert need > limit
    problem = SPEC.problem(m=64, k=64, n=64)
    with pytest.raises(InvalidSchedule, match="max-compute-workgroup-storage-size"):
        SPEC.check(schedule, problem, device.profile)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.INVALID_SCHEDULE
    assert f"needs {need} bytes" in result.message


@pytest.mark.parametrize(
    "schedule,reason",
    [
        (gemm_schedule(64, 64, 3, 4, threads=256, items=12), "reg_m 3 does not divide tile_m 64"),
        (gemm_schedule(64, 60, 4, 8, threads=128, items=32), "reg_n 8 does not divide tile_n 60"),
        (gemm_schedule(64, 64, 4, 4, threads=128), "workgroup_size 128 != (tile_m/reg_m)*(tile_n/reg_n) = 256"),
        (gemm_schedule(64, 64, 4, 4, items=4), "items_per_invocation 4 != reg_m*reg_n = 16"),
        (gemm_schedule(64, 64, 4, 4, vw=2), "vector_width 2 not in (1, 4)"),
        (gemm_schedule(64, 6, 4, 1, vw=4), "vector_width 4 does not divide tile_n 6"),
    ],
    ids=["reg_m", "reg_n", "threads", "items", "vector_width", "vec4_tile_n"],
)
def test_gemm_rejects_inconsistent_knobs_naming_the_knob(device, schedule, reason):
    with pytest.raises(InvalidSchedule) as info:
        SPEC.check(schedule, SPEC.problem(m=37, k=129, n=65), device.profile)
    assert info.value.reason == reason


def test_gemm_space_holds_only_consistent_schedules(device):
    schedules = SPEC.schedules()
    assert 200 <= len(schedules) <= 1000
    assert SPEC.default in schedules
    problem = SPEC.problem(m=37, k=129, n=65)
    storage_limit = device.profile.limit("max-compute-workgroup-storage-size")
    for schedule in schedules:
        assert schedule.items_per_invocation == schedule["reg_m"] * schedule["reg_n"]
        need = workgroup_bytes(schedule["tile_m"], schedule["tile_n"], schedule["tile_k"], schedule["double_buffer"])
        if need <= storage_limit:
            SPEC.check(schedule, problem, device.profile)
        else:
            with pytest.raises(InvalidSchedule, match="workgroup storage"):
                SPEC.check(schedule, problem, device.profile)


def test_gemm_problem_rejects_empty_dimensions():
    with pytest.raises(ValueError, match="'k': 0"):
        SPEC.problem(m=4, k=0, n=4)


def test_gemm_launch_rejects_input_of_the_wrong_shape(device):
    a = np.ones((3, 4), np.float32)
    b = np.ones((5, 2), np.float32)
    with pytest.raises(ValueError, match=r"input b has shape \(5, 2\); expected \(4, 2\)"):
        SPEC.launch(SPEC.default, SPEC.problem(m=3, k=4, n=2), {"a": a, "b": b})


def test_gemm_wrong_reference_does_not_certify(device, monkeypatch):
    problem = Problem.of(m=37, k=129, n=65)
    real = SPEC.reference

    def off_by_one_term(problem, schedule, inputs):
        c = real(problem, schedule, inputs)["c"].copy()
        c[5, 7] += inputs["a"][5, 0] * inputs["b"][0, 7] + 1e-2
        return {"c": c}

    monkeypatch.setattr(SPEC, "reference", off_by_one_term)
    result = oracle.certify(SPEC, SPEC.default, problem, device)
    assert result.status is Status.WRONG_RESULT
