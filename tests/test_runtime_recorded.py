"""DeviceArray-only calls are recorded and submitted together (farm.runtime.calls): every
FLUSH_CALLS calls, or as soon as anything needs the GPU. The results are the ones of one
submission a call, whatever is released, collected, uploaded or evicted while calls wait
to be submitted; the slabs they bind are neither reused nor destroyed until then."""

import gc

import numpy as np
import pytest
from runtime_cases import errors_of_threads, f32

from farm import ForgeRuntime
from farm.runtime import calls as calls_module
from farm.runtime.costs import count_wgpu_calls


@pytest.fixture
def rt(device, tmp_path):
    runtime = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    yield runtime
    runtime.close()


def test_a_chain_is_submitted_every_flush_calls_calls_and_equals_the_one_call_results(rt):
    a, x = f32(16, 16) * np.float32(0.25), f32(16, seed=1)  # a's norm about 1: the chain stays finite
    da, y = rt.asarray(a), rt.asarray(x)
    rt.synchronize()
    steps = 2 * calls_module.FLUSH_CALLS + 3
    with count_wgpu_calls() as counts:
        for _ in range(steps):
            y = rt.gemv(da, y)
        submitted = counts["wgpuQueueSubmit"]
    assert submitted == 2  # the first 2 x FLUSH_CALLS calls; the last 3 wait for the read
    ref = x.astype(np.float64)
    for _ in range(steps):
        ref = a.astype(np.float64) @ ref
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-3, atol=1e-4 * np.abs(ref).max())


def test_inputs_released_or_collected_while_recorded_are_not_reused_before_the_submission(rt):
    a, x = f32(32, 32), f32(32, seed=2)
    da, dx = rt.asarray(a), rt.asarray(x)
    rt.synchronize()
    y = rt.gemv(da, dx)  # recorded, not submitted
    da.release()
    del dx
    gc.collect()
    fresh = [rt.empty((32, 32)) for _ in range(4)]  # may only get slabs no recorded pass binds
    z = rt.gemv(fresh[0], rt.empty(32), out=rt.empty(32))  # another recorded call on other slabs
    np.testing.assert_allclose(y.numpy(), a @ x, rtol=1e-5, atol=1e-4)
    assert z.shape == (32,)


def test_an_upload_after_recorded_calls_leaves_their_inputs_as_they_were(rt):
    a, x = f32(8, 8), f32(8, seed=3)
    dx = rt.asarray(x)
    y = rt.gemv(rt.asarray(a), dx)  # asarray(a) submitted; the call recorded
    dx.release()
    other = rt.asarray(np.full(8, 7, np.float32))  # flushes first: may take dx's slab once y's pass is in
    np.testing.assert_allclose(y.numpy(), a @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(other.numpy(), np.full(8, 7, np.float32))


def test_a_numpy_call_after_recorded_calls_runs_after_them(rt):
    a, x = f32(8, 8), f32(8, seed=4)
    y = rt.gemv(rt.asarray(a), rt.asarray(x))
    z = rt.gemv(a, x)  # numpy path: flushes the recorded call first, then its own submission
    np.testing.assert_allclose(z, a @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y.numpy(), z, rtol=1e-6, atol=1e-6)


def test_evicting_a_plan_submits_the_calls_that_bind_its_buffers_first(rt, monkeypatch):
    monkeypatch.setattr(calls_module, "MAX_PLANS", 1)
    ins = [(f32(n, n), f32(n, seed=n)) for n in (4, 5, 6)]
    outs = [rt.gemv(rt.asarray(a), rt.asarray(x)) for a, x in ins]  # each shape a plan; each evicts the last
    for (a, x), y in zip(ins, outs, strict=True):
        np.testing.assert_allclose(y.numpy(), a @ x, rtol=1e-5, atol=1e-5)


def test_a_pinned_slab_given_back_is_parked_until_unpinned(rt):
    pool = rt._pool
    slab = pool.take(4096)
    pool.pin([slab])
    pool.give(slab)
    pool.give(slab)  # twice: parked once
    assert pool.trim() == 0 and slab.live  # neither idle nor destroyed while pinned
    assert pool.take(4096) is not slab
    pool.unpin()
    assert pool.idle >= slab.capacity and pool.take(4096) is slab


def test_synchronize_and_close_submit_what_is_recorded(rt, device):
    a, x = f32(8, 8), f32(8, seed=5)
    da, dx = rt.asarray(a), rt.asarray(x)
    y = rt.gemv(da, dx)
    assert rt._caller.pending_calls == 1
    rt.synchronize()
    assert rt._caller.pending_calls == 0
    np.testing.assert_allclose(y.numpy(), a @ x, rtol=1e-5, atol=1e-5)
    rt.gemv(da, dx)
    rt.close()
    assert rt._caller.pending_calls == 0


def test_threads_recording_chains_on_one_runtime_get_their_own_answers(rt):
    a = f32(12, 12) * np.float32(0.25)
    da = rt.asarray(a)
    steps = calls_module.FLUSH_CALLS + 3  # past a flush, interleaved with the other threads' calls

    def work(seed):
        for i in range(6):
            x = f32(12, seed=seed * 10 + i)
            y = rt.asarray(x)
            for _ in range(steps):
                step = rt.gemv(da, y)
                y.release()  # released while its pass may still be recorded
                y = step
            ref = x.astype(np.float64)
            for _ in range(steps):
                ref = a.astype(np.float64) @ ref
            np.testing.assert_allclose(y.numpy(), ref, rtol=1e-3, atol=1e-4 * np.abs(ref).max())

    assert errors_of_threads(work) == []
    rt.synchronize()
    assert rt._caller.pending_calls == 0


def _tuned_runtime(device, tmp_path, problem, median_ns):
    """A runtime whose gemv winner for `problem` is stored with a kernel time of `median_ns`."""
    from farm import catalog
    from farm.store import WinnerRecord, open_store, save_winner, upsert_topology

    spec = catalog.get("gemv")
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    store = open_store(url)
    upsert_topology(store, device.profile)
    save_winner(store, WinnerRecord(topology_hash=device.profile.topology_hash(), kernel="gemv",
                                    problem_key=problem.key(), source_hash=spec.source_hash(),
                                    schedule_key=spec.default.key(), median_ns=median_ns,
                                    device_name=device.profile.device_name))  # fmt: skip
    store.engine.dispose()
    return ForgeRuntime(db=url, device=device)


def test_calls_of_a_long_tuned_kernel_start_on_the_gpu_at_once_and_the_next_waits_for_it(device, tmp_path):
    from farm import catalog

    a, x = f32(16, 16) * np.float32(0.25), f32(16, seed=5)
    rt = _tuned_runtime(device, tmp_path, catalog.get("gemv").problem(m=16, n=16), median_ns=1e9)  # 1 s a call
    try:
        da, y = rt.asarray(a), rt.asarray(x)
        rt.synchronize()
        with count_wgpu_calls() as counts:
            y = rt.gemv(da, y)  # its known GPU time is worth a submission of its own, and the GPU is idle
            assert (counts["wgpuQueueSubmit"], rt._caller.pending_calls) == (1, 0)
            y = rt.gemv(da, y)  # the GPU has a second's work queued: this one waits to go with later calls
            assert (counts["wgpuQueueSubmit"], rt._caller.pending_calls) == (1, 1)
        np.testing.assert_allclose(y.numpy(), a @ (a @ x), rtol=1e-4, atol=1e-5)
    finally:
        rt.close()


def test_calls_of_a_short_or_untimed_kernel_are_batched_and_every_batching_gives_the_same_bits(device, tmp_path):
    from farm import catalog

    a, x = f32(16, 16) * np.float32(0.25), f32(16, seed=6)
    problem = catalog.get("gemv").problem(m=16, n=16)
    results = []
    for median_ns in (1.0, 1e9, None):  # 1 ns: never worth a submission of its own; None: no winner stored
        rt = _tuned_runtime(device, tmp_path / str(median_ns), problem, median_ns) if median_ns else ForgeRuntime(
            db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)  # fmt: skip
        try:
            da, y = rt.asarray(a), rt.asarray(x)
            rt.synchronize()
            with count_wgpu_calls() as counts:
                for _ in range(calls_module.FLUSH_CALLS - 1):
                    y = rt.gemv(da, y)
                submitted = counts["wgpuQueueSubmit"]
            if median_ns != 1e9:
                assert submitted == 0  # batched: FLUSH_CALLS - 1 calls wait for the next
            results.append(y.numpy())
        finally:
            rt.close()
    assert all(np.array_equal(results[0], r) for r in results[1:])
