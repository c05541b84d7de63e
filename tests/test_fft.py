import numpy as np
import pytest

from farm import catalog, oracle
from farm.launch import run
from farm.schedule import InvalidSchedule, Problem, Schedule, Status

SPEC = catalog.get("fft")
LENGTHS = [2**p for p in range(1, 11)]
VEC2_TWO_PER_GROUP = Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=2)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("schedule", [SPEC.default, VEC2_TWO_PER_GROUP], ids=str)
def test_fft_matches_numpy_for_every_power_of_two_length(device, schedule, n):
    x = np.random.default_rng(n).standard_normal((3, n, 2)).astype(np.float32)
    out = run(device, SPEC, schedule, SPEC.problem(n=n, batch=3), {"x": x})["y"]
    want = np.fft.fft(x[..., 0].astype(np.float64) + 1j * x[..., 1], axis=-1)
    atol = 2e-6 * np.sqrt(n) * np.log2(n)
    np.testing.assert_allclose(out[..., 0], want.real, atol=atol, rtol=1e-4)
    np.testing.assert_allclose(out[..., 1], want.imag, atol=atol, rtol=1e-4)


@pytest.mark.parametrize("n", [2, 64, 1024])
@pytest.mark.parametrize(
    "schedule",
    [
        Schedule.of(workgroup_size=32),
        Schedule.of(workgroup_size=1024),
        Schedule.of(workgroup_size=256, items_per_invocation=4, vector_width=2),
    ],
    ids=str,
)
def test_fft_certifies_across_schedules(device, schedule, n):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=n, batch=5), device)
    assert result.status is Status.OK, result.message


@pytest.mark.parametrize("n", [2, 16, 1024])
def test_fft_of_an_impulse_is_all_ones(device, n):
    x = np.zeros((1, n, 2), np.float32)
    x[0, 0, 0] = 1.0
    out = run(device, SPEC, SPEC.default, SPEC.problem(n=n, batch=1), {"x": x})["y"]
    np.testing.assert_array_equal(out[0, :, 0], np.ones(n))
    np.testing.assert_array_equal(out[0, :, 1], np.zeros(n))


@pytest.mark.parametrize("schedule", [SPEC.default, Schedule.of(workgroup_size=64, items_per_invocation=4)], ids=str)
def test_fft_batch_keeps_each_transform_separate(device, schedule):
    # Transform b holds an impulse at t = b, whose spectrum is exp(-2πi·f·b/n): any mix-up
    # between transforms (or a partial last workgroup of 4) shows as a wrong phase.
    n, batch = 32, 6
    x = np.zeros((batch, n, 2), np.float32)
    x[np.arange(batch), np.arange(batch), 0] = 1.0
    out = run(device, SPEC, schedule, SPEC.problem(n=n, batch=batch), {"x": x})["y"]
    f = np.arange(n)
    for b in range(batch):
        want = np.exp(-2j * np.pi * f * b / n)
        np.testing.assert_allclose(out[b, :, 0], want.real, atol=1e-6)
        np.testing.assert_allclose(out[b, :, 1], want.imag, atol=1e-6)


def test_fft_accepts_flat_interleaved_input(device):
    x = np.arange(16, dtype=np.float32)
    out = run(device, SPEC, SPEC.default, SPEC.problem(n=4, batch=2), {"x": x})["y"]
    signals = x.reshape(2, 4, 2)
    want = np.fft.fft(signals[..., 0] + 1j * signals[..., 1], axis=-1)
    np.testing.assert_allclose(out[..., 0] + 1j * out[..., 1], want, atol=1e-5)


def test_fft_folds_more_than_65535_workgroups(device):
    result = oracle.certify(SPEC, SPEC.default, SPEC.problem(n=2, batch=70_000), device)
    assert result.status is Status.OK, result.message


def test_fft_corrupted_reference_does_not_certify(device, monkeypatch):
    problem = SPEC.problem(n=256, batch=4)
    real = SPEC.reference

    def nudged(problem, schedule, inputs):
        y = real(problem, schedule, inputs)["y"].copy()
        y[2, 100, 1] += 1e-2
        return {"y": y}

    monkeypatch.setattr(SPEC, "reference", nudged)
    result = oracle.certify(SPEC, SPEC.default, problem, device)
    assert result.status is Status.WRONG_RESULT
    assert result.metrics.max_abs == pytest.approx(1e-2, rel=0.1)


def test_fft_inverse_direction_reference_does_not_certify(device, monkeypatch):
    def inverse(problem, schedule, inputs):
        x = inputs["x"].astype(np.float64)
        z = np.fft.ifft(x[..., 0] + 1j * x[..., 1], axis=-1) * problem["n"]
        return {"y": np.stack([z.real, z.imag], axis=-1).astype(np.float32)}

    monkeypatch.setattr(SPEC, "reference", inverse)
    result = oracle.certify(SPEC, SPEC.default, SPEC.problem(n=64, batch=2), device)
    assert result.status is Status.WRONG_RESULT


@pytest.mark.parametrize("n", [1, 0, 3, 96, 2048])
def test_fft_problem_rejects_lengths_that_are_not_powers_of_two_in_range(n):
    with pytest.raises(ValueError, match=f"n={n} must be a power of two"):
        SPEC.problem(n=n, batch=1)


def test_fft_check_rejects_length_one_built_without_validation(device):
    with pytest.raises(InvalidSchedule, match="n=1 must be a power of two"):
        SPEC.check(SPEC.default, Problem.of(n=1, batch=1), device.profile)


def test_fft_rejects_vector_width_four(device):
    schedule = Schedule.of(workgroup_size=64, vector_width=4)
    with pytest.raises(InvalidSchedule, match=r"vector_width 4 not in \(1, 2\)"):
        SPEC.check(schedule, SPEC.problem(n=64, batch=1), device.profile)


def test_fft_rejects_workgroup_storage_over_the_adapter_limit(device):
    schedule = Schedule.of(workgroup_size=256, items_per_invocation=8)
    limit = device.profile.limit("max-compute-workgroup-storage-size")
    assert 8 * 1024 * 8 > limit
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=1024, batch=8), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert "needs 65536 bytes of workgroup storage" in result.message
