import numpy as np
import pytest

from farm import catalog
from farm.catalog.p64_project import P64Project, project_records
from farm.oracle import compare as oracle
from farm.oracle.launch import run
from farm.schedule import Schedule, Status

SPEC = catalog.get("p64_project")
SCHEDULES = [
    SPEC.default,
    Schedule.of(workgroup_size=32, items_per_invocation=8, vector_width=4),
    Schedule.of(workgroup_size=512, items_per_invocation=1, vector_width=1),
    Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=4),
]


def project(device, records, weights, schedule=SPEC.default) -> np.ndarray:
    records = np.asarray(records, np.uint32).reshape(-1, 16)
    inputs = {"records": records, "weights": np.asarray(weights, np.float32)}
    return run(device, SPEC, schedule, SPEC.problem(n=records.shape[0]), inputs)["out"]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_p64_project_matches_numpy_on_full_range_words(device, schedule, n):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=n), device)
    assert result.status is Status.OK, result.message
    # f32 rounding of ~2**34-sized sums: a few ulps, far inside the bound-based tolerance.
    assert result.metrics.max_abs <= 2**13


def test_p64_project_hand_checked_first_word(device):
    record = np.zeros(16, np.uint32)
    record[0] = 1
    np.testing.assert_array_equal(project(device, record, np.ones(16)), [1.0])


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
def test_p64_project_exact_on_small_words_and_dyadic_weights(device, schedule):
    records = np.arange(37 * 16, dtype=np.uint32).reshape(37, 16)
    weights = np.exp2(np.arange(16) % 8 - 4).astype(np.float32) * np.where(np.arange(16) % 2, -1, 1)
    out = project(device, records, weights, schedule)
    np.testing.assert_array_equal(out, records.astype(np.float64) @ weights.astype(np.float64))


def test_p64_project_converts_words_as_unsigned(device):
    record = np.zeros(16, np.uint32)
    record[15] = 0xFFFFFFFF  # f32(4294967295u) rounds to 2**32; a signed read would give -1
    weights = np.zeros(16, np.float32)
    weights[15] = 1.0
    np.testing.assert_array_equal(project(device, record, weights), [np.float32(2.0**32)])


@pytest.mark.parametrize(
    "schedule,reason",
    [
        (Schedule.of(workgroup_size=64, vector_width=2), "vector_width 2 not in (1, 4)"),
        (Schedule.of(workgroup_size=64, items_per_invocation=0), "items_per_invocation must be an integer >= 1, got 0"),
        (Schedule.of(workgroup_size=4096), "workgroup_size 4096 exceeds max-compute-invocations-per-workgroup"),
    ],
)
def test_p64_project_rejects_impossible_schedules_naming_the_knob(device, schedule, reason):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=100), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert reason in result.message


def test_p64_project_rejects_records_of_the_wrong_size(device):
    inputs = {"records": np.zeros(17, np.uint32), "weights": np.ones(16, np.float32)}
    with pytest.raises(ValueError, match=r"records must be n\*16 = 16 u32 words \(64 bytes\); got 17"):
        run(device, SPEC, SPEC.default, SPEC.problem(n=1), inputs)


class SignedWordsP64(P64Project):
    """A wrong reference: words read as signed i32 (a classic conversion bug)."""

    def reference(self, problem, schedule, inputs):
        signed = inputs["records"].view(np.int32).astype(np.float32).astype(np.float64)
        return {"out": (signed @ inputs["weights"].astype(np.float64)).astype(np.float32)}


class DroppedWordP64(P64Project):
    """A wrong reference: the last word of every record is left out."""

    def reference(self, problem, schedule, inputs):
        weights = inputs["weights"].copy()
        weights[15] = 0.0
        return {"out": project_records(inputs["records"], weights)}


@pytest.mark.parametrize("wrong", [SignedWordsP64(), DroppedWordP64()], ids=lambda s: type(s).__name__)
def test_p64_project_wrong_reference_does_not_certify(device, wrong):
    result = oracle.certify(wrong, SPEC.default, SPEC.problem(n=1000), device)
    assert result.status is Status.WRONG_RESULT
    assert result.metrics.max_abs > SPEC.tolerance(SPEC.problem(n=1000))[0]


def test_p64_project_default_problems_are_256_mib_on_gpus_and_small_on_cpu(device):
    problems = SPEC.default_problems(device.profile)
    limit = device.profile.limit("max-storage-buffer-binding-size")
    assert all(p["n"] * 64 <= limit for p in problems)
    if device.profile.is_cpu:
        assert problems == [SPEC.problem(n=4096)]
    assert SPEC.work(SPEC.problem(n=10)) == (320.0, 64.0 * 10 + 64 + 40)
