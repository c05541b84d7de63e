"""The hot path through wgpu-native's C API (farm.gpu.native): bit for bit what wgpu-py's
objects give on every kernel and layout, kept bind groups never bind a buffer that was
released, destroyed or handed to another shape, a long chain grows neither device nor host
memory, and without the C API the runtime falls back to wgpu-py's objects, saying so once."""

import logging
import tracemalloc

import numpy as np
import pytest
from runtime_cases import f32, method_cases

from farm import ForgeRuntime
from farm.catalog.ternary_gemv import pack_codes
from farm.gpu import native, waits
from farm.runtime import calls as calls_module
from farm.runtime.arrays import DeviceArray

pytestmark = pytest.mark.skipif(not native.available(), reason=f"no wgpu-native C API: {native.unavailable_reason()}")


def _runtime(device, tmp_path, name: str) -> ForgeRuntime:
    return ForgeRuntime(db=f"sqlite:///{tmp_path / (name + '.db')}", device=device)


@pytest.fixture
def runtimes(device, tmp_path):
    """(fast, slow): the C API's path, and the same runtime recording through wgpu-py's objects."""
    fast, slow = _runtime(device, tmp_path, "fast"), _runtime(device, tmp_path, "slow")
    slow._caller._native = None
    assert fast._caller._native is not None
    yield fast, slow
    fast.close()
    slow.close()


def _layouts() -> dict:
    """name -> (method, numpy args, kwargs): every kernel, both recurrent layouts, ternary's
    2-D packed words, fft's interleaved float32 form, p64's uint64 records."""
    out = {f"{m} state": (m, a, k) for m, (a, k) in method_cases(recurrent_state=True).items()}
    out.update({m: (m, a, k) for m, (a, k) in method_cases().items()})
    codes = np.random.default_rng(7).integers(0, 3, size=(6, 50))
    out["ternary_gemv 2-D"] = ("ternary_gemv", (f32(50), pack_codes(codes).reshape(6, -1), f32(6)), {"m": 6, "k": 50})
    out["fft interleaved"] = ("fft", (f32(4, 64),), {})
    records = np.random.default_rng(8).integers(0, 1 << 40, size=(5, 8)).astype(np.uint64)
    out["p64 uint64"] = ("p64_project", (records, f32(16)), {})
    out["gemm square"] = ("gemm", (f32(16, 16), f32(16, 16, seed=1)), {})
    return out


def _host(result):
    if isinstance(result, tuple):
        return tuple(_host(r) for r in result)
    return result.numpy() if isinstance(result, DeviceArray) else result


def _same_bits(a, b) -> None:
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            _same_bits(x, y)
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("case", sorted(_layouts()))
def test_the_c_api_path_gives_wgpu_pys_bits_on_every_kernel_and_layout(runtimes, case):
    method, args, kwargs = _layouts()[case]
    answers = []
    for rt in runtimes:
        on_device = [rt.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        first = getattr(rt, method)(*on_device, **kwargs)  # plans, makes the bind groups
        again = getattr(rt, method)(*on_device, **kwargs)  # the repeat: kept bind groups
        from_numpy = getattr(rt, method)(*args, **kwargs)  # a numpy call's passes
        answers.append((_host(first), _host(again), from_numpy))
    (fast_first, fast_again, fast_numpy), (slow_first, slow_again, slow_numpy) = answers
    for fast, slow in ((fast_first, slow_first), (fast_again, slow_again), (fast_numpy, slow_numpy)):
        _same_bits(fast, slow)
    _same_bits(fast_first, fast_again)


def test_a_chain_on_the_c_api_path_gives_wgpu_pys_bits(runtimes):
    a, x = f32(24, 24) * np.float32(0.2), f32(24, seed=1)
    results = []
    for rt in runtimes:
        da, y = rt.asarray(a), rt.asarray(x)
        for _ in range(3 * calls_module.FLUSH_CALLS + 1):
            y = rt.gemv(da, y)
        results.append(y.numpy())
    _same_bits(*results)


def test_a_chains_recorded_calls_share_one_compute_pass_a_submission(runtimes, monkeypatch):
    """The GPU pays a pass boundary per submission, not per call; a read-back copy ends the pass."""
    fast, _ = runtimes
    begun = []

    real = native.C

    class Counting:
        def __getattr__(self, name):
            if name == "wgpuCommandEncoderBeginComputePass":
                begun.append(name)
            return getattr(real, name)

    a, x = f32(24, 24) * np.float32(0.2), f32(24, seed=1)
    da, y = fast.asarray(a), fast.asarray(x)
    fast.synchronize()
    monkeypatch.setattr(native, "C", Counting())
    for _ in range(2 * calls_module.FLUSH_CALLS):
        y = fast.gemv(da, y)
    fast.synchronize()
    assert len(begun) == 2  # one pass for each flush of FLUSH_CALLS calls
    y.numpy()
    assert len(begun) == 2


@pytest.fixture
def rt(device, tmp_path):
    runtime = _runtime(device, tmp_path, "absent")
    yield runtime
    runtime.close()


def _checking_live_slabs(rt, monkeypatch) -> list:
    """Every call's slabs, checked live as the runtime binds them (recorded by `_bound`)."""
    seen: list = []
    bound = rt._caller._bound

    def checked(plan, slabs):
        assert all(slab.live and slab.handle._internal is not None for slab in slabs)
        seen.append(tuple(slab.serial for slab in slabs))
        return bound(plan, slabs)

    monkeypatch.setattr(rt._caller, "_bound", checked)
    return seen


def test_a_released_array_is_refused_and_its_buffer_not_bound_again_through_a_kept_bind_group(rt, monkeypatch):
    seen = _checking_live_slabs(rt, monkeypatch)
    a, x = f32(16, 16), f32(16, seed=1)
    da, dx = rt.asarray(a), rt.asarray(x)
    y = rt.gemv(da, dx)
    rt.gemv(da, dx)  # the kept bind group, minus the output's
    serial = dx.slab(rt, "x").serial
    dx.release()
    calls_before = len(seen)
    with pytest.raises(ValueError, match="x: DeviceArray .* was released"):
        rt.gemv(da, dx)
    rt.synchronize()
    rt.trim()  # dx's buffer destroyed: a kept bind group naming it must never come back
    fresh = rt.asarray(f32(16, seed=2))
    assert fresh.slab(rt, "x").serial != serial
    np.testing.assert_array_equal(rt.gemv(da, fresh).numpy(), rt.gemv(a, f32(16, seed=2)))
    np.testing.assert_allclose(y.numpy(), a @ x, rtol=1e-5, atol=1e-5)
    assert len(seen) > calls_before and all(serial not in key for key in seen[calls_before:])


def test_out_aliasing_across_calls_binds_each_calls_own_buffers(rt):
    a = f32(12, 12) * np.float32(0.3)
    da = rt.asarray(a)
    u, v = rt.asarray(f32(12, seed=3)), rt.empty(12)
    ref = f32(12, seed=3).astype(np.float64)
    for _ in range(2 * calls_module.FLUSH_CALLS + 1):  # u -> v -> u ...: each buffer in turn input and out
        rt.gemv(da, u, out=v)
        u, v = v, u
        ref = a.astype(np.float64) @ ref
    np.testing.assert_allclose(u.numpy(), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    with pytest.raises(ValueError, match="out: must not share its buffer with x"):
        rt.gemv(da, u, out=u.reshape(12))


def test_a_buffer_reused_for_another_shape_gets_that_shapes_bind_group(rt):
    a16, a10 = f32(16, 16), f32(10, 10, seed=1)
    d16, d10 = rt.asarray(a16), rt.asarray(a10)
    x16, x10 = f32(16, seed=2), f32(10, seed=3)
    y = rt.gemv(d16, rt.asarray(x16))  # a 64-byte output in a 256-byte class slab
    np.testing.assert_allclose(y.numpy(), a16 @ x16, rtol=1e-5, atol=1e-5)
    slab = y.slab(rt, "y")
    y.release()
    x = rt.asarray(x10)  # the same size class: the slab y gave back, bound now as 40 bytes
    assert x.slab(rt, "x") is slab
    np.testing.assert_allclose(rt.gemv(d10, x).numpy(), a10 @ x10, rtol=1e-5, atol=1e-5)
    plans = {p.problem.as_dict()["m"]: p for p in rt._caller._plans.values()}
    kept16 = {group for calls, _ in plans[16].bind_sets.values() for _, group, _ in calls}
    (_, group10, _), = plans[10].last[1]
    assert slab.serial in next(reversed(plans[10].bind_sets)) and group10 not in kept16


def test_trimming_the_pool_mid_chain_keeps_the_chain_right(rt, monkeypatch):
    seen = _checking_live_slabs(rt, monkeypatch)
    a = f32(20, 20) * np.float32(0.25)
    da, y = rt.asarray(a), rt.asarray(f32(20, seed=4))
    ref = f32(20, seed=4).astype(np.float64)
    for step in range(40):
        y = rt.gemv(da, y)
        ref = a.astype(np.float64) @ ref
        if step % 5 == 2:
            rt.trim()  # idle slabs destroyed; those recorded passes bind are parked, not destroyed
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-3, atol=1e-5 * np.abs(ref).max())
    assert len(seen) == 40


@pytest.mark.slow
def test_ten_thousand_chained_calls_grow_no_device_or_host_memory(rt):
    n = 64
    perm = np.random.default_rng(5).permutation(n)
    a = np.eye(n, dtype=np.float32)[perm]  # a permutation: the chain's values stay exact
    x = np.arange(n, dtype=np.float32)
    da, y = rt.asarray(a), rt.asarray(x)

    def chain(count):
        nonlocal y
        for _ in range(count):
            y = rt.gemv(da, y)
        rt.synchronize()

    chain(1_000)  # fills the pool and the kept bind groups
    created, in_use, held = rt._pool.created, rt.device.memory()["in_use"], rt.memory()
    (plan,) = rt._caller._plans.values()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        chain(10_000)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    growth = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert rt._pool.created == created and rt.device.memory()["in_use"] == in_use and rt.memory() == held
    assert len(plan.bind_sets) <= calls_module.MAX_BIND_SETS
    assert growth < 64 * 1024, f"host memory grew by {growth} bytes over 10,000 calls"
    want = x.copy()
    for _ in range(11_000):
        want = a @ want
    np.testing.assert_array_equal(y.numpy(), want)


def test_without_the_c_api_the_runtime_records_through_wgpu_py_and_says_so_once(device, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setattr(native, "_load", lambda: "wgpu-native lacks wgpuQueueSubmit")
    with caplog.at_level(logging.WARNING, logger="farm.gpu"):
        first, second = _runtime(device, tmp_path, "a"), _runtime(device, tmp_path, "b")
    said = [r.getMessage() for r in caplog.records if r.name == "farm.gpu"]
    assert said == ["recording compute passes through wgpu-py's objects (slower): wgpu-native lacks wgpuQueueSubmit"]
    assert first._caller._native is None and second._caller._native is None
    a, x = f32(9, 9), f32(9, seed=1)
    np.testing.assert_allclose(first.gemv(first.asarray(a), first.asarray(x)).numpy(), a @ x, rtol=1e-5, atol=1e-5)
    first.close()
    second.close()


def test_a_numpy_call_goes_through_the_c_api_with_one_submission_and_one_map(rt):
    from farm.runtime.costs import count_wgpu_calls

    a, x = f32(32, 32), f32(32, seed=1)
    want = rt.gemv(a, x)  # plans
    with count_wgpu_calls() as counts:
        got = rt.gemv(a, x)
    np.testing.assert_array_equal(got, want)
    assert counts["wgpuQueueSubmit"] == counts["wgpuBufferMapAsync"] == counts["wgpuBufferUnmap"] == 1
    assert counts["wgpuQueueWriteBuffer"] == 2 and counts["wgpuCommandEncoderCopyBufferToBuffer"] == 1


def test_a_small_asarray_makes_no_submission_of_its_own_and_its_data_is_there_for_the_next_call(rt):
    from farm.runtime.costs import count_wgpu_calls

    a, x = f32(8, 8), f32(8, seed=1)
    with count_wgpu_calls() as counts:
        da, dx = rt.asarray(a), rt.asarray(x)
    assert counts["wgpuQueueSubmit"] == 0 and counts["wgpuQueueWriteBuffer"] == 2
    np.testing.assert_array_equal(rt.gemv(da, dx).numpy(), rt.gemv(a, x))
    np.testing.assert_array_equal(dx.numpy(), x)


@pytest.mark.parametrize("spin_s", [0.0, 1e-9, 0.05])
def test_a_read_gives_the_same_bytes_whether_its_map_is_resolved_by_spinning_or_by_the_poller(rt, spin_s):
    a, x = f32(40, 40), f32(40, seed=2)
    want = a.astype(np.float64) @ x
    rt._caller.read_spin_s = spin_s  # 0: the poller thread at once; 1e-9: after a spin too short; 0.05: spinning
    np.testing.assert_allclose(rt.gemv(a, x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rt.gemv(rt.asarray(a), rt.asarray(x)).numpy(), want, rtol=1e-5, atol=1e-5)
    assert rt.device.device._poller._token_ids == set()  # every token the reads took is given back
    assert waits._MAPS == {}  # every map's slot was resolved and dropped


def test_reads_from_several_threads_each_get_their_own_answer(device, tmp_path):
    import threading

    runtimes = [_runtime(device, tmp_path, f"t{i}") for i in range(3)]
    cases = [(f32(24, 24, seed=i), f32(24, seed=10 + i)) for i in range(3)]
    errors: list = []

    def work(rt, a, x):
        try:
            for _ in range(30):
                np.testing.assert_allclose(rt.gemv(a, x), a.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(rt, *case)) for rt, case in zip(runtimes, cases, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for rt in runtimes:
        rt.close()


def test_a_failed_map_raises_and_leaves_no_staging_buffer_mapped(device):
    usage = device._wgpu.BufferUsage
    staging = device.device.create_buffer(size=64, usage=usage.MAP_READ | usage.COPY_DST)
    staging.destroy()
    with pytest.raises(RuntimeError, match="mapping a staging buffer of 64 bytes for reading failed"):
        device.map_read(staging, 64, 0.0)
    fresh = device.device.create_buffer(size=64, usage=usage.MAP_READ | usage.COPY_DST)
    assert bytes(device.map_read(fresh, 64, 0.0)) == bytes(64)
    device.unmap_read(fresh)
    fresh.destroy()
