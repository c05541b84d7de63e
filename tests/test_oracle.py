"""Error metrics and the differential oracle's verdicts."""

import numpy as np
import pytest

from farm import catalog
from farm.oracle import compare as oracle
from farm.oracle.compare import error_metrics
from farm.schedule import InvalidSchedule, Schedule, Status


def test_error_metrics_hand_checked():
    m = error_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.5, 2.0]))
    assert m.max_abs == 1.0
    assert m.mean_abs == pytest.approx(0.5)
    assert m.rmse == pytest.approx(np.sqrt((0.25 + 1.0) / 3))
    assert m.max_rel == pytest.approx(0.5)


def test_error_metrics_float32_path_matches_float64():
    rng = np.random.default_rng(0)
    b = rng.standard_normal(10_000).astype(np.float32)
    a = (b + rng.standard_normal(10_000).astype(np.float32) * 1e-4).astype(np.float32)
    fast = error_metrics(a, b)
    slow = error_metrics(a.astype(np.float64), b.astype(np.float64))
    for field in ("max_abs", "mean_abs", "rmse"):
        assert getattr(fast, field) == pytest.approx(getattr(slow, field), rel=1e-6)


def test_matching_nan_and_inf_are_equal_and_mismatches_are_infinite():
    same = error_metrics(np.array([np.nan, np.inf, -np.inf, 1.0]), np.array([np.nan, np.inf, -np.inf, 1.0]))
    assert same.max_abs == 0.0 and same.max_rel == 0.0
    bad = error_metrics(np.array([np.nan, 1.0], np.float32), np.array([1.0, 1.0], np.float32))
    assert bad.max_abs == np.inf
    assert error_metrics(np.array([np.inf]), np.array([-np.inf])).max_abs == np.inf


def _noisy_pair(n: int, seed: int, specials: bool):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(n).astype(np.float32)
    a = (b + rng.standard_normal(n).astype(np.float32) * np.float32(1e-5)).astype(np.float32)
    if specials:
        picks = rng.choice(n, 40, replace=False)
        values = np.array([np.nan, np.inf, -np.inf, 0.0], np.float32)
        b[picks] = values[np.arange(40) % 4]
        a[picks[:30]] = b[picks[:30]]  # 30 matching specials, 10 mismatches
        a[picks[30:]] = np.float32(1.0)
    return a, b


@pytest.mark.parametrize("specials", [False, True], ids=["finite", "nan_inf"])
@pytest.mark.parametrize("atol", [1e-6, 1e-4])
def test_one_pass_tolerance_agrees_with_allclose(specials, atol):
    """compare() decides tolerance from the metrics pass; it must agree with np.allclose."""
    for seed in range(3):
        a, b = _noisy_pair(5000, seed, specials)
        want = bool(np.allclose(a, b, rtol=1e-4, atol=atol, equal_nan=True))
        _, close = oracle._measure(a, b, atol, 1e-4)
        assert close == want


def test_large_outputs_are_measured_in_parallel_chunks_with_the_same_result(monkeypatch):
    a, b = _noisy_pair(3 * 1000 + 17, 7, True)
    a[5], b[5] = np.float32(2.0), np.float32(1.0)  # one finite outlier
    whole, whole_close = oracle._measure(a, b, 1e-3, 1e-4)
    monkeypatch.setattr(oracle, "CHUNK", 1000)
    monkeypatch.setattr(oracle, "PARALLEL_MIN", 1000)
    chunked, chunked_close = oracle._measure(a, b, 1e-3, 1e-4)
    assert chunked_close == whole_close is False
    assert chunked.max_abs == whole.max_abs == np.inf and chunked.max_rel == whole.max_rel
    finite_a, finite_b = _noisy_pair(3 * 1000 + 17, 8, False)
    monkeypatch.setattr(oracle, "PARALLEL_MIN", 10**9)
    whole = oracle.error_metrics(finite_a, finite_b)
    monkeypatch.setattr(oracle, "PARALLEL_MIN", 1000)
    chunked = oracle.error_metrics(finite_a, finite_b)
    assert chunked.max_abs == whole.max_abs and chunked.max_rel == whole.max_rel
    assert chunked.mean_abs == pytest.approx(whole.mean_abs, rel=1e-9)
    assert chunked.rmse == pytest.approx(whole.rmse, rel=1e-9)


def test_error_metrics_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match=r"shape mismatch: actual \(3,\) vs expected \(2,\)"):
        error_metrics(np.zeros(3), np.zeros(2))


def test_certify_rejects_an_over_limit_schedule_before_compiling(device):
    spec = catalog.get("gemv")
    too_big = Schedule.of(workgroup_size=4096, items_per_invocation=1, vector_width=1, threads_per_row=1)
    result = oracle.certify(spec, too_big, spec.problem(m=8, n=8), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert "max-compute-invocations-per-workgroup" in result.message


def test_unknown_knob_is_an_invalid_schedule(device):
    spec = catalog.get("gemv")
    with pytest.raises(InvalidSchedule, match="unknown knob 'tile_q'"):
        spec.check(Schedule.of(workgroup_size=64, tile_q=2), spec.problem(m=4, n=4), device.profile)


def test_a_wrong_reference_does_not_certify(device):
    class Off(type(catalog.get("gemv"))):
        def reference(self, problem, schedule, inputs):
            out = super().reference(problem, schedule, inputs)
            out["y"][0] += 1.0
            return out

    result = oracle.certify(Off(), Off().default, Off().problem(m=5, n=7), device)
    assert result.status is Status.WRONG_RESULT and result.metrics.max_abs >= 0.99


def test_generated_inputs_are_deterministic_bytes():
    for spec in map(catalog.get, catalog.KERNEL_MODULES):
        problem = spec.certify_problems()[-1]
        first, again = spec.generate(problem, 7), spec.generate(problem, 7)
        other = spec.generate(problem, 8)
        assert all(first[k].tobytes() == again[k].tobytes() for k in first), spec.name
        assert any(first[k].tobytes() != other[k].tobytes() for k in first), spec.name


def test_every_default_schedule_is_workgroup_size_64():
    builtin = catalog.KERNEL_MODULES  # other tests may register test-only kernels
    assert {name: catalog.get(name).default.workgroup_size for name in builtin} == {name: 64 for name in builtin}


def _sized() -> list[str]:
    """The built-in kernels that name their buffers (not the tests' faulty ones: their
    launches hang or kill the process on purpose)."""
    built_in = [n for n in catalog.names() if type(catalog.get(n)).__module__.startswith("farm.catalog.")]
    return [n for n in built_in if catalog.get(n).buffer_bytes(catalog.get(n).certify_problems()[0])]


@pytest.mark.parametrize("name", _sized())
def test_buffer_bytes_are_each_named_bindings_least_size_over_schedules(name, device):
    """What `farm tune` checks sizes against before Ray starts (farm.tuning.problems): each
    named buffer is bound by every schedule at that size or more, and some schedule binds
    exactly that (so the check refuses only what no schedule can run)."""
    spec = catalog.get(name)
    for problem in spec.certify_problems()[:2]:
        named = spec.buffer_bytes(problem)
        inputs = spec.generate(problem, 0)
        schedules = [spec.default, *spec.sample_schedules(12, seed=1)]
        seen: dict[str, set[int]] = {key: set() for key in named}
        for schedule in schedules:
            if spec.invalid_reason(schedule, problem, device.profile):
                continue
            args = {arg.name: arg.nbytes for arg in spec.launch(schedule, problem, inputs).args}
            for key, nbytes in named.items():
                assert key in args, f"{name} {schedule}: no binding {key!r}"
                assert args[key] >= nbytes, f"{name} {schedule} {key}: {args[key]} < {nbytes}"
                seen[key].add(args[key])
        assert all(nbytes in seen[key] for key, nbytes in named.items()), (name, problem, named, seen)
