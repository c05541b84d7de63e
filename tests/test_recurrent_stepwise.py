"""Stepwise consistency recorded a chunk of steps per submission (farm.recurrent.stepwise):
the same numbers as stepping both paths from the host one step at a time, through the
caller's runtime or one of its own, a read per chunk and side rather than per step, and the
baseline plan's parameters in one uniform buffer."""

import numpy as np
import pytest
from recurrent_cases import host_stepped

from farm import ForgeRuntime, catalog
from farm.catalog.recurrent import sweep_decay
from farm.gpu import PendingRead
from farm.recurrent.paths import BaselinePlan
from farm.recurrent.stepwise import (
    CHUNK_BYTES,
    MAX_CHUNK_STEPS,
    chunk_steps,
    stepwise_consistency,
    strict_summary,
)
from farm.runtime.arrays import DeviceArray

SPEC = catalog.get("recurrent")


def _inputs(b=2, h=3, vh=3, t=7, l_dim=5, e=12, seed=11):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, h, t, l_dim), dtype=np.float32)
    v = rng.standard_normal((b, vh, t, e), dtype=np.float32)
    rho = (0.1 * rng.standard_normal((b, h, l_dim, e))).astype(np.float32)
    return q, v, rho, sweep_decay(h)


@pytest.mark.parametrize("with_rho", [True, False])
def test_chunked_steps_equal_the_host_stepped_ones(device, tmp_path, with_rho):
    q, v, rho, decay = _inputs()
    rho = rho if with_rho else None
    want = host_stepped(device, SPEC.default, q, v, rho, decay)
    in_use = device.memory()["in_use"]
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    for chunk in (None, 1, 3, 7):  # one chunk, a step each, a partial last chunk, exactly T
        for runtime in (None, rt):  # None: stepwise_consistency opens (and closes) a runtime itself
            got = stepwise_consistency(device, SPEC.default, q, v, rho, decay, runtime=runtime, chunk=chunk)
            assert [s.as_dict() for s in got] == want, (chunk, runtime)
    rt.close()
    assert device.memory()["in_use"] == in_use


def test_the_chain_reads_once_per_chunk_and_side_not_per_step(device, tmp_path, monkeypatch):
    q, v, rho, decay = _inputs(1, 2, 1, 12, 8, 16)
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    maps, numpy_reads = [], []
    real_map = PendingRead.map
    monkeypatch.setattr(PendingRead, "map", lambda self: (maps.append(1), real_map(self))[1])
    monkeypatch.setattr(DeviceArray, "numpy", lambda self, out=None: numpy_reads.append(1))
    steps = stepwise_consistency(device, SPEC.default, q, v, rho, decay, runtime=rt, chunk=4)
    rt.close()
    assert [s.step for s in steps] == list(range(12))
    assert len(maps) == 2 * 3  # 3 chunks, one read each for the baseline and the fused side
    assert numpy_reads == []  # the state never leaves the GPU between steps
    assert strict_summary(steps)["strict_pass"] is True


def test_chunk_steps_hold_a_bounded_number_of_states():
    long_e768 = 4 * 1 * 8 * 64 * 768  # B1 H8 L64 E768
    long_b8 = 4 * 8 * 8 * 64 * 256  # B8 H8 L64 E256
    assert chunk_steps(long_e768) == CHUNK_BYTES // long_e768 == 42
    assert chunk_steps(long_b8) == 16
    assert chunk_steps(4 * 2 * 8 * 12) == MAX_CHUNK_STEPS
    assert chunk_steps(CHUNK_BYTES + 4) == 1


def test_baseline_plan_parameters_share_one_uniform_buffer(device):
    """A buffer per op (7 a step) made wgpu-core's per-pass cost grow with T; the plan now
    holds one, whatever T, and computes the same as the float64 reference."""
    from farm.catalog.recurrent import reference_recurrent

    align = max(64, int(device.device.limits.get("min-uniform-buffer-offset-alignment", 256)))
    for t in (1, 9):
        q, v, rho, decay = _inputs(t=t)
        with BaselinePlan.build(device, q, v, rho, decay) as plan:
            assert len(plan.uniforms) == 1 and len(plan.calls) == 8 * t
            assert plan.uniforms[0].nbytes == (1 + 7 * t) * align  # a row per op, but the sums share one
            plan.run()
            ctx, state = plan.outputs()
        want_ctx, want_state = reference_recurrent(q, v, rho, decay)
        np.testing.assert_allclose(ctx, want_ctx, atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(state, want_state, atol=1e-4, rtol=1e-4)


def test_retired_encoders_leave_the_device_usable(device):
    q, v, rho, decay = _inputs(t=3)
    with BaselinePlan.build(device, q, v, rho, decay) as plan:
        plan.run()
        first = plan.outputs()
        device.retire_encoders()
        plan.run()
        again = plan.outputs()
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_a_chunk_below_one_step_is_refused_and_one_past_t_is_cut_to_t(device):
    from farm.recurrent.stepwise import stepwise_consistency

    g = np.random.default_rng(3)
    q = g.standard_normal((1, 2, 3, 4)).astype(np.float32)
    v = g.standard_normal((1, 1, 3, 5)).astype(np.float32)
    schedule = catalog.get("recurrent").default
    with pytest.raises(ValueError, match="stepwise chunk must be >= 1 steps, got 0"):
        stepwise_consistency(device, schedule, q, v, chunk=0)
    assert [s.step for s in stepwise_consistency(device, schedule, q, v, chunk=256)] == [0, 1, 2]
