"""Recurrent attention: the fused catalog kernel and the op-by-op baseline against the
float64 reference, on lavapipe-sized problems."""

import numpy as np
import pytest

from farm import catalog
from farm.catalog.recurrent import reference_recurrent, sweep_decay
from farm.oracle import compare as oracle
from farm.oracle.launch import run
from farm.recurrent.paths import BaselinePlan, baseline_recurrent, fused_recurrent
from farm.recurrent.stepwise import stepwise_consistency, strict_summary
from farm.schedule import InvalidSchedule, Schedule, Status

SPEC = catalog.get("recurrent")
SCHEDULES = [
    SPEC.default,
    Schedule.of(workgroup_size=32, items_per_invocation=2, vector_width=4, threads_per_column=4, reduce=1),
    Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=2, threads_per_column=1, reduce=0),
    Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=1, threads_per_column=16, reduce=0),
    # chunked: q rows and value columns staged in workgroup memory CT steps at a time
    # (certify problems have T = 1, 5, 7: partial and single chunks).
    Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=4, threads_per_column=4, reduce=1, chunk=8),
    Schedule.of(workgroup_size=64, items_per_invocation=2, vector_width=1, threads_per_column=8, reduce=0, chunk=16),
    Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=1, threads_per_column=1, reduce=0, chunk=32),
    # deferred: the chunk's partial sums reduced once per chunk
    Schedule.of(workgroup_size=64, items_per_invocation=2, vector_width=2, threads_per_column=8, reduce=2, chunk=16),
    Schedule.of(workgroup_size=128, items_per_invocation=1, vector_width=4, threads_per_column=16, reduce=2, chunk=8),
    # prefetch: each chunk loaded into registers while the chunk before runs its steps
    Schedule.of(
        workgroup_size=32, items_per_invocation=1, vector_width=2, threads_per_column=4, reduce=2, chunk=8, prefetch=1
    ),  # fmt: skip
    Schedule.of(
        workgroup_size=64, items_per_invocation=1, vector_width=1, threads_per_column=1, reduce=0, chunk=16, prefetch=1
    ),  # fmt: skip
]


def test_chunked_kernel_over_many_chunks_matches_reference(device):
    """T = 37 with CT = 8: four full chunks and a partial one, VH = H, odd L."""
    problem = SPEC.problem(B=2, H=3, VH=3, T=37, L=19, E=36)
    for schedule in (
        Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=4, threads_per_column=2, reduce=1, chunk=8),
        Schedule.of(workgroup_size=32, items_per_invocation=2, vector_width=2, threads_per_column=4, reduce=0, chunk=8),
        Schedule.of(
            workgroup_size=64, items_per_invocation=1, vector_width=1, threads_per_column=16, reduce=2, chunk=8
        ),
        # prefetch: chunk c+1's loads in flight during chunk c's steps, the last chunk partial
        Schedule.of(workgroup_size=64, vector_width=4, threads_per_column=2, reduce=1, chunk=8, prefetch=1),
        Schedule.of(
            workgroup_size=32,
            items_per_invocation=2,
            vector_width=2,
            threads_per_column=4,
            reduce=2,
            chunk=8,
            prefetch=1,
        ),  # fmt: skip
        Schedule.of(workgroup_size=128, vector_width=1, threads_per_column=16, reduce=0, chunk=16, prefetch=1),
    ):
        result = oracle.certify(SPEC, schedule, problem, device)
        assert result.status is Status.OK, f"{schedule}: {result.message}"


def test_chunk_staging_counts_against_workgroup_storage(device):
    problem = SPEC.problem(B=1, H=8, VH=1, T=64, L=64, E=768)
    plain = Schedule.of(workgroup_size=256, vector_width=4, threads_per_column=1, reduce=0)
    chunked = Schedule.of(workgroup_size=256, vector_width=4, threads_per_column=1, reduce=0, chunk=32)
    assert SPEC.workgroup_bytes(plain, problem) == 0
    assert SPEC.workgroup_bytes(chunked, problem) == 4 * 32 * (64 + 256 * 4)
    deferred = Schedule.of(workgroup_size=128, vector_width=2, threads_per_column=8, reduce=2, chunk=16)
    assert SPEC.workgroup_bytes(deferred, problem) == 4 * 16 * (64 + 16 * 2) + 4 * 2 * 16 * 8 * (16 + 1)
    for bad in (dict(chunk=0, threads_per_column=8), dict(chunk=16, threads_per_column=1)):
        with pytest.raises(InvalidSchedule, match="deferred"):
            SPEC.check(Schedule.of(workgroup_size=64, reduce=2, **bad), problem, device.profile)
    assert not any(
        s.get("reduce", 0) == 2 and s.get("chunk", 0) == 0 or s.get("threads_per_column", 1) == 1 and s.get("reduce", 0)
        for s in SPEC.schedules()
    )
    with pytest.raises(InvalidSchedule, match="chunk 12"):
        SPEC.check(Schedule.of(workgroup_size=64, threads_per_column=1, reduce=0, chunk=12), problem, device.profile)


def _inputs(heads: int, value_heads: int, with_state: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, heads, 5, 8)).astype(np.float32)
    v = rng.standard_normal((1, value_heads, 5, 12)).astype(np.float32)
    rho = rng.standard_normal((1, heads, 8, 12)).astype(np.float32) if with_state else None
    decay = sweep_decay(heads) if with_state else None
    return q, v, rho, decay


def test_reference_hand_checked_single_step():
    q = np.array([[[[1.0, 2.0]]]])  # B1 H1 T1 L2
    v = np.array([[[[3.0]]]])  # E1
    rho = np.array([[[[10.0], [20.0]]]])
    context, state = reference_recurrent(q, v, rho, np.array([0.5]))
    assert context[0, 0, 0, 0] == 50.0  # 10·1 + 20·2, the state before the update
    np.testing.assert_array_equal(state[0, 0, :, 0], [(10 + 3) * 0.5, (20 + 6) * 0.5])


@pytest.mark.parametrize("value_heads", [1, 2], ids=["vh1", "vhH"])
@pytest.mark.parametrize("with_state", [False, True], ids=["plain", "rho_decay"])
def test_fused_and_baseline_match_float64_reference(device, value_heads, with_state):
    q, v, rho, decay = _inputs(2, value_heads, with_state)
    want_ctx, want_rho = reference_recurrent(q, v, rho, decay)
    for got_ctx, got_rho in (
        fused_recurrent(device, SPEC.default, q, v, rho, decay),
        baseline_recurrent(device, q, v, rho, decay),
    ):
        assert got_ctx.shape == (1, 2, 5, 12) and got_rho.shape == (1, 2, 8, 12)
        np.testing.assert_allclose(got_ctx, want_ctx, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(got_rho, want_rho, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
def test_fused_schedules_certify(device, schedule):
    for problem in SPEC.certify_problems():
        result = oracle.certify(SPEC, schedule, problem, device)
        assert result.status is Status.OK, f"{problem}: {result.message}"


def test_decay_without_rho_starts_from_zero_state(device):
    q, v, _, _ = _inputs(3, 1, False)
    decay = sweep_decay(3)
    ctx, rho = fused_recurrent(device, SPEC.default, q, v, None, decay)
    want_ctx, want_rho = reference_recurrent(q, v, None, decay)
    assert np.all(ctx[:, :, 0] == 0.0)  # nothing accumulated before the first step
    np.testing.assert_allclose(rho, want_rho, atol=1e-5)
    np.testing.assert_allclose(ctx, want_ctx, atol=1e-5)


def test_baseline_is_one_dispatch_per_op_per_step(device):
    q, v, rho, decay = _inputs(2, 1, True)
    with BaselinePlan.build(device, q, v, rho, decay) as plan:
        assert len(plan.calls) == 8 * 5
    with BaselinePlan.build(device, q, v, rho, None) as plan:
        assert len(plan.calls) == 7 * 5


def test_baseline_pipelines_are_cached(device):
    q, v, rho, decay = _inputs(2, 2, True)
    baseline_recurrent(device, q, v, rho, decay)
    before = device.cached_pipelines
    baseline_recurrent(device, q, v, rho, decay)
    assert device.cached_pipelines == before


def test_paths_release_their_buffers(device):
    q, v, rho, decay = _inputs(2, 1, True)
    in_use = device.memory()["in_use"]
    baseline_recurrent(device, q, v, rho, decay)
    fused_recurrent(device, SPEC.default, q, v, rho, decay)
    assert device.memory()["in_use"] == in_use


def test_one_baseline_plan_reloaded_each_step_matches_a_fresh_plan_per_step(device):
    """stepwise_consistency builds one T=1 baseline plan and loads each step into it (a plan
    per step would make and free a dozen buffers a step: minutes at T=4096)."""
    q, v, rho, decay = _inputs(2, 1, True)
    in_use = device.memory()["in_use"]
    with BaselinePlan.build(device, q[:, :, :1], v[:, :, :1], rho, decay) as plan:
        state = rho
        for step in range(q.shape[2]):
            q_t, v_t = q[:, :, step : step + 1], v[:, :, step : step + 1]
            plan.load(q_t, v_t, state)
            plan.run()
            ctx, new_state = plan.outputs()
            want_ctx, want_state = baseline_recurrent(device, q_t, v_t, state, decay)
            np.testing.assert_array_equal(ctx, want_ctx)
            np.testing.assert_array_equal(new_state, want_state)
            state = new_state
        with pytest.raises(ValueError, match=r"BaselinePlan.load: expected shape \(1, 2, 1, 8\)"):
            plan.load(q, v[:, :, :1], rho)
    assert device.memory()["in_use"] == in_use
    steps = stepwise_consistency(device, SPEC.default, q, v, rho, decay)
    assert len(steps) == q.shape[2] and device.memory()["in_use"] == in_use


def test_strict_pass_on_small_case(device):
    q, v, rho, decay = _inputs(2, 1, True, seed=3)
    steps = stepwise_consistency(device, SPEC.default, q, v, rho, decay)
    assert [s.step for s in steps] == [0, 1, 2, 3, 4]
    summary = strict_summary(steps)
    assert summary["strict_pass"] is True
    assert summary["context_max_abs"] <= 1e-3 and summary["rho_rmse_max"] <= 2e-4


def test_strict_summary_fails_when_one_step_exceeds_a_threshold():
    from farm.recurrent.stepwise import StepMetrics
    from farm.trial import ErrorMetrics

    ok = ErrorMetrics(1e-6, 1e-7, 1e-7, 1e-6)
    bad_rmse = ErrorMetrics(5e-4, 3e-4, 3e-4, 1e-3)  # max_abs fine, rmse above 2e-4
    summary = strict_summary([StepMetrics(0, ok, ok), StepMetrics(1, ok, bad_rmse)])
    assert summary["rho_rmse_max"] == 3e-4
    assert summary["strict_pass"] is False


def test_bad_shapes_name_the_offending_input(device):
    q, v, rho, _ = _inputs(2, 1, True)
    with pytest.raises(ValueError, match=r"value shape \(1, 3, 5, 12\)"):
        fused_recurrent(device, SPEC.default, q, np.zeros((1, 3, 5, 12), np.float32))
    with pytest.raises(ValueError, match=r"rho must be \[B,H,L,E\].*\(1, 2, 8, 13\)"):
        baseline_recurrent(device, q, v, np.zeros((1, 2, 8, 13), np.float32))
    with pytest.raises(ValueError, match=r"decay must be \[H\].*\(3,\)"):
        reference_recurrent(q, v, rho, np.ones(3))


def test_invalid_schedules_say_which_knob(device):
    problem = SPEC.problem(B=1, H=2, VH=1, T=5, L=8, E=12)
    cases = {
        "threads_per_column 3": Schedule.of(workgroup_size=64, threads_per_column=3, reduce=0),
        "vector_width 4 must": Schedule.of(workgroup_size=64, vector_width=4, threads_per_column=1, reduce=0),
        "subgroup reduce": Schedule.of(
            workgroup_size=64, threads_per_column=2 * max(4, device.profile.subgroup_lanes()), reduce=1
        ),
    }
    for reason, schedule in cases.items():
        problem_e = SPEC.problem(B=1, H=2, VH=1, T=5, L=8, E=10) if "vector" in reason else problem
        with pytest.raises(InvalidSchedule, match=reason):
            SPEC.check(schedule, problem_e, device.profile)
    prefetch_cases = ((dict(prefetch=1), "prefetch 1 must be 0, or 1"), (dict(prefetch=2, chunk=8), "prefetch 2 must"))
    for knobs, why in prefetch_cases:
        with pytest.raises(InvalidSchedule, match=why):
            SPEC.check(Schedule.of(workgroup_size=64, threads_per_column=4, reduce=0, **knobs), problem, device.profile)
    wide = SPEC.problem(B=1, H=1, VH=1, T=64, L=64, E=64)
    with pytest.raises(InvalidSchedule, match="prefetch holds 96 floats per thread > 32"):  # 32·64/32 + 32·8/32·4
        SPEC.check(Schedule.of(workgroup_size=32, vector_width=4, threads_per_column=4, reduce=0, chunk=32, prefetch=1),
                   wide, device.profile)  # fmt: skip
    assert all(s.get("chunk", 0) for s in SPEC.schedules() if s.get("prefetch", 0))
    big_l = SPEC.problem(B=1, H=1, VH=1, T=1, L=1024, E=4)
    with pytest.raises(InvalidSchedule, match="state floats per thread"):
        SPEC.check(Schedule.of(workgroup_size=64, threads_per_column=1, reduce=0), big_l, device.profile)


def _nonfinite_cases(rng):
    """(name, query, value, rho, decay) with ±Inf/NaN inputs and L = 7, a multiple of no
    threads_per_column > 1, so every schedule has padding rows. Positive data keeps the
    Infs of one sign, so numpy's contexts are +Inf (not NaN) where they reach."""
    b, h, t, l_dim, e = 1, 2, 5, 7, 8
    q = rng.uniform(0.5, 1.5, (b, h, t, l_dim)).astype(np.float32)
    v = rng.uniform(0.5, 1.5, (b, 1, t, e)).astype(np.float32)
    rho = rng.uniform(0.05, 0.15, (b, h, l_dim, e)).astype(np.float32)
    inf_v = v.copy()
    inf_v[0, 0, 1, 3], inf_v[0, 0, 3, 5] = np.inf, -np.inf
    inf_q = q.copy()
    inf_q[0, 1, 2, 6] = np.inf
    nan_rho = rho.copy()
    nan_rho[0, 0, 4, 2] = np.nan
    mixed = rng.standard_normal((b, h, t, l_dim)).astype(np.float32)  # ±Inf terms meet: NaN
    return [
        ("value_inf", q, inf_v, None, None),
        ("decay_inf", q, v, rho, np.array([np.inf, 0.9], np.float32)),
        ("decay_inf_no_rho", q, v, None, np.array([0.9, np.inf], np.float32)),
        ("query_inf", inf_q, v, rho, sweep_decay(h)),
        ("rho_nan_value_inf", q, inf_v, nan_rho, sweep_decay(h)),
        ("mixed_signs", mixed, inf_v, rho, np.array([np.inf, 0.5], np.float32)),
    ]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
def test_inf_and_nan_propagate_as_in_numpy_with_padding_rows(device, schedule):
    """Padding rows must not compute (0 + 0·v)·d, which turns an Inf in value or decay into NaN
    in every context of its column where numpy has ±Inf."""
    problem = SPEC.problem(B=1, H=2, VH=1, T=5, L=7, E=8)
    for name, q, v, rho, decay in _nonfinite_cases(np.random.default_rng(16)):
        inputs = {"query": q, "value": v}
        inputs |= {} if rho is None else {"rho": rho}
        inputs |= {} if decay is None else {"decay": decay}
        got = run(device, SPEC, schedule, problem, inputs)
        with np.errstate(invalid="ignore", over="ignore"):
            want_ctx, want_rho = reference_recurrent(q, v, rho, decay)
        assert np.isinf(want_ctx).any(), name  # the case does put ±Inf in numpy's contexts
        for out, want in (("context", want_ctx), ("rho", want_rho)):
            np.testing.assert_allclose(
                got[out], want.astype(np.float32), atol=1e-4, rtol=1e-4, equal_nan=True, err_msg=f"{name} {out}"
            )


def test_largest_l_any_schedule_runs_is_max_l(device):
    from farm.catalog.recurrent import MAX_L

    for l_dim, runnable in ((MAX_L, True), (MAX_L + 1, False)):
        problem = SPEC.problem(B=1, H=1, VH=1, T=1, L=l_dim, E=4)
        valid = [s for s in SPEC.schedules() if not SPEC.invalid_reason(s, problem, device.profile)]
        assert bool(valid) is runnable


def test_a_sample_of_prefetch_schedules_certifies_over_many_chunks_and_chunked_forms_refuse_it(device):
    """The certify problems have T <= 7, under every chunk: these run the in-loop next-chunk
    loads (T = 37: four full chunks of 8 and a partial one; T = 33 with chunk 16 or 32)."""
    import random

    prefetch = [s for s in SPEC.schedules() if s.get("prefetch", 0)]
    problems = (SPEC.problem(B=1, H=2, VH=1, T=37, L=19, E=36), SPEC.problem(B=2, H=1, VH=1, T=33, L=9, E=8))
    certified = 0
    for schedule in random.Random(11).sample(prefetch, 24):
        for problem in problems:
            result = oracle.certify(SPEC, schedule, problem, device)
            assert result.status in (Status.OK, Status.INVALID_SCHEDULE), f"{schedule} {problem}: {result.message}"
            certified += result.status is Status.OK
    assert certified >= 20
    for form in (1, 2):
        chunked = Schedule.of(workgroup_size=64, form=form, chunk_size=16, block_e=16, prefetch=1)
        with pytest.raises(InvalidSchedule, match="takes workgroup_size, chunk_size, block_e and attention_pass only"):
            SPEC.check(chunked, SPEC.problem(B=1, H=2, VH=1, T=37, L=16, E=32), device.profile)
