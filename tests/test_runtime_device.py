"""Device-resident arrays through ForgeRuntime: every method takes DeviceArrays (alone or
mixed with numpy) and gives what the numpy path gives, chains stay on the GPU, `out=`
writes in place, and misuse is a ValueError naming the argument."""

import gc
import re
import time

import numpy as np
import pytest
from runtime_cases import errors_of_threads, f32, method_cases, rng

from farm import ForgeRuntime
from farm.catalog.recurrent import reference_recurrent
from farm.gpu.waits import SpinWait
from farm.runtime.arrays import DeviceArray


@pytest.fixture
def rt(device, tmp_path):
    runtime = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    yield runtime
    runtime.close()


def _cases():
    """method, numpy args, kwargs; each array arg is tried as a DeviceArray too."""
    return method_cases()


def _call(rt, method, args, kwargs):
    args = [a.astype(np.complex64) if isinstance(a, np.ndarray) and a.dtype == np.complex128 else a for a in args]
    return getattr(rt, method)(*args, **kwargs)


def _host(result):
    if isinstance(result, tuple):
        return tuple(_host(r) for r in result)
    return result.numpy() if isinstance(result, DeviceArray) else result


def _device_args(rt, args, which):
    return [rt.asarray(a) if i in which and isinstance(a, np.ndarray) else a for i, a in enumerate(args)]


@pytest.mark.parametrize("method", sorted(_cases()))
def test_every_method_gives_the_numpy_paths_answer_from_device_arrays(rt, method):
    args, kwargs = _cases()[method]
    args = [a.astype(np.complex64) if isinstance(a, np.ndarray) and a.dtype == np.complex128 else a for a in args]
    want = _call(rt, method, args, kwargs)
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    for which in [set(arrays), {arrays[0]}, set(arrays[1:])]:  # all on the device, then mixed
        if not which:
            continue
        got = _call(rt, method, _device_args(rt, args, which), kwargs)
        got_all, want_all = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        pairs = zip(got_all, want_all, strict=True)
        for g, w in pairs:
            assert isinstance(g, DeviceArray), (method, which)
            assert (g.shape, g.dtype) == (w.shape, w.dtype)
            np.testing.assert_array_equal(g.numpy(), w)
            np.testing.assert_array_equal(np.asarray(g), w)


def test_p64_records_as_a_uint64_device_array(rt):
    words = rng(1).integers(0, 1 << 20, size=(6, 16)).astype(np.uint32)
    weights = f32(16)
    want = rt.p64_project(words, weights)
    as_u64 = words.view(np.uint64)  # (6, 8): each u64 is two little-endian u32 words
    np.testing.assert_array_equal(rt.p64_project(rt.asarray(as_u64), weights).numpy(), want)


def test_fft_of_interleaved_float32_on_the_device(rt):
    signal = f32(2, 32)
    want = rt.fft(signal)
    got = rt.fft(rt.asarray(signal))
    assert got.shape == (2, 32) and got.dtype == np.float32
    np.testing.assert_array_equal(got.numpy(), want)


def test_a_chain_stays_on_the_device_and_matches_the_numpy_chain(rt):
    a, b = f32(16, 24), f32(24, 32, seed=1)
    want = rt.topk(rt.gemm(a, b).reshape(-1), 5)
    c = rt.gemm(rt.asarray(a), rt.asarray(b))
    top = rt.topk(c.reshape(-1), 5)
    assert isinstance(c, DeviceArray) and isinstance(top, DeviceArray)
    np.testing.assert_array_equal(top.numpy(), want)


def test_stepwise_recurrence_with_rho_on_the_device_equals_one_call(rt):
    b, h, t, l_dim, e = 1, 2, 8, 6, 5
    query, value = f32(b, h, t, l_dim), f32(b, 1, t, e, seed=1)
    decay = np.array([0.9, 0.8], np.float32)
    context, rho = rt.recurrent_attention(query, value, decay=decay)
    state = rt.asarray(np.zeros((b, h, l_dim, e), np.float32))
    steps = []
    for step in range(t):
        q = rt.asarray(np.ascontiguousarray(query[:, :, step : step + 1]))
        v = rt.asarray(np.ascontiguousarray(value[:, :, step : step + 1]))
        ctx, state = rt.recurrent_attention(q, v, state, decay)
        steps.append(ctx)
    np.testing.assert_allclose(np.concatenate([s.numpy() for s in steps], axis=2), context, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.numpy(), rho, rtol=1e-5, atol=1e-6)
    _, want_rho = reference_recurrent(query, value, np.zeros_like(rho), decay)
    np.testing.assert_allclose(state.numpy(), want_rho, rtol=1e-4, atol=1e-5)


def test_out_writes_into_an_existing_device_array(rt):
    a, x = f32(9, 20), f32(20, seed=1)
    out = rt.empty(9, np.float32)
    got = rt.gemv(a, x, out=out)
    assert got is out
    np.testing.assert_array_equal(out.numpy(), rt.gemv(a, x))
    spectrum = rt.empty((2, 8), np.complex64)
    signal = (f32(2, 8) + 1j * f32(2, 8, seed=2)).astype(np.complex64)
    assert rt.fft(signal, out=spectrum) is spectrum
    np.testing.assert_array_equal(spectrum.numpy(), rt.fft(signal))


@pytest.mark.parametrize(
    "out, message",
    [
        (
            lambda rt: rt.empty(8, np.float32),
            r"out: expected a DeviceArray of shape \(9,\) and dtype float32, got \(8,\) ",
        ),
        (lambda rt: rt.empty(9, np.uint32), r"out: expected .* dtype float32, got \(9,\) uint32"),
    ],
)
def test_out_of_the_wrong_shape_or_dtype_is_refused(rt, out, message):
    with pytest.raises(ValueError, match=message):
        rt.gemv(f32(9, 4), f32(4), out=out(rt))


def test_out_sharing_an_inputs_buffer_is_refused(rt):
    x = rt.asarray(f32(4))
    with pytest.raises(ValueError, match="out: must not share its buffer with x"):
        rt.gemv(f32(4, 4), x, out=x)


def test_released_arrays_and_other_runtimes_arrays_are_refused(rt, device, tmp_path):
    x = rt.asarray(f32(4))
    x.release()
    assert x.released
    with pytest.raises(ValueError, match=r"x: DeviceArray \(4,\) float32 was released"):
        rt.gemv(f32(3, 4), x)
    with pytest.raises(ValueError, match="was released"):
        x.numpy()
    other = ForgeRuntime(db=f"sqlite:///{tmp_path / 'other.db'}", device=device)
    with pytest.raises(ValueError, match="a: DeviceArray .* belongs to another ForgeRuntime"):
        rt.gemv(other.asarray(f32(3, 4)), f32(4))
    with rt.asarray(f32(2)) as y:
        assert not y.released
    assert y.released


def test_wrong_dtype_or_rank_on_the_device_is_the_same_error_as_for_numpy(rt):
    with pytest.raises(TypeError, match="x: expected dtype float32, got int32"):
        rt.gemv(f32(3, 4), rt.asarray(np.ones(4, np.int32)))
    with pytest.raises(ValueError, match=r"a: expected a 2-D array, got shape \(12,\)"):
        rt.gemv(rt.asarray(f32(12)), f32(4))
    with pytest.raises(ValueError, match=r"x: expected shape \(4,\) \(a has 4 columns\), got \(5,\)"):
        rt.gemv(f32(3, 4), rt.asarray(f32(5)))
    with pytest.raises(TypeError, match="array: expected a numeric numpy array, got list"):
        rt.asarray([1.0, 2.0])


def test_garbage_collected_arrays_give_their_buffers_back(rt):
    held = rt.memory()["held"]
    x = rt.asarray(f32(1000))
    view = x.reshape(10, 100)
    del x
    gc.collect()
    assert rt.memory()["held"] > held  # the view keeps the buffer
    del view
    gc.collect()
    assert rt.memory()["held"] == held


def test_the_pool_is_bounded_by_capacity_bytes(device, tmp_path):
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device, capacity_bytes=8192)
    keep = rt.asarray(f32(1024))  # 4096 bytes
    with pytest.raises(ValueError, match=r"capacity_bytes=8192: a request of 8192 bytes does not fit, 4096 bytes free"):
        rt.asarray(f32(2048))
    np.testing.assert_array_equal(keep.numpy(), f32(1024))  # the runtime still works
    keep.release()
    rt.asarray(f32(2048)).release()  # fits once the first is back
    with pytest.raises(ValueError, match="capacity_bytes: expected a positive integer or None, got 0"):
        ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device, capacity_bytes=0)


def test_reshape_and_view_follow_numpy(rt):
    x = rt.asarray(np.arange(12, dtype=np.float32))
    assert x.reshape(3, -1).shape == (3, 4)
    assert x.reshape((2, 6)).shape == (2, 6)
    assert x.view(np.complex64).shape == (6,)
    np.testing.assert_array_equal(x.view(np.uint32).numpy(), np.arange(12, dtype=np.float32).view(np.uint32))
    with pytest.raises(ValueError, match=r"reshape: cannot reshape \(12,\) \(12 elements\) into \(5, -1\)"):
        x.reshape(5, -1)
    with pytest.raises(ValueError, match="view: a last axis of 3 float32 is not a whole number of complex64"):
        x.reshape(4, 3).view(np.complex64)
    assert (x.nbytes, x.ndim, x.size, len(x)) == (48, 1, 12, 12)


def test_threads_sharing_a_runtime_get_correct_answers(rt):
    a = f32(17, 9)

    def work(seed):
        for i in range(25):
            x = f32(9, seed=seed * 100 + i)
            np.testing.assert_allclose(rt.gemv(a, x), a @ x, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(rt.gemv(rt.asarray(a), x).numpy(), a @ x, rtol=1e-5, atol=1e-5)

    assert errors_of_threads(work) == []


def test_large_uploads_go_through_mapped_staging_and_arrive_intact(rt):
    from farm.runtime.transfers import MAPPED_UPLOAD_MIN

    a = f32(800, 800)  # 2.5 MB: above MAPPED_UPLOAD_MIN, so through a staging buffer
    x = f32(800, seed=1)
    assert a.nbytes >= MAPPED_UPLOAD_MIN > x.nbytes
    staging_before = sum(1 for use, _ in rt._pool._by_class if use == "upload")
    np.testing.assert_array_equal(rt.asarray(a).numpy(), a)
    want = a.astype(np.float64) @ x.astype(np.float64)
    for _ in range(3):  # the staging buffer is reused, and what it held before doesn't leak in
        np.testing.assert_allclose(rt.gemv(a, x), want, rtol=1e-4, atol=1e-4)
        a = a[::-1].copy()
        want = want[::-1]
    assert sum(1 for use, _ in rt._pool._by_class if use == "upload") == staging_before + 1


def test_a_gemm_the_host_pads_reads_device_inputs_back_and_is_still_right(rt):
    from farm import catalog

    spec = catalog.get("gemm")
    problem = spec.problem(m=5, k=7, n=9)  # k and n not multiples of 4: the host pads a and b
    schedule = next(
        s for s in spec.schedules() if s.vector_width == 4 and not spec.invalid_reason(s, problem, rt.profile)
    )
    a, b = f32(5, 7), f32(7, 9, seed=1)
    got = rt.run("gemm", problem.as_dict(), {"a": rt.asarray(a), "b": rt.asarray(b)}, schedule=schedule)["c"]
    assert isinstance(got, DeviceArray)
    np.testing.assert_allclose(got.numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    plan = next(iter(rt._caller._plans.values()))
    assert [s.role for s in plan.slots] == ["transformed", "transformed", "output", "constant"]


def test_a_spinning_synchronize_waits_for_the_chain_like_a_blocking_one(device, tmp_path):
    """`spin_wait_us` polls without sleeping before it blocks (a blocking wait's wake-up is
    most of a short call's submit+wait): the synchronized results are the blocking runtime's, whether the
    GPU finishes within the spin or after it (0.001 us: it always falls back to blocking)."""
    a, x = f32(256, 192), f32(192)
    expected = None
    for spin in (0.0, 0.001, 1e5):
        runtime = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device, spin_wait_us=spin)
        d = runtime.asarray(a)
        y = runtime.gemv(d, runtime.asarray(x))
        for _ in range(3):  # a chain of dependent calls, one sync
            y = runtime.gemv(d, runtime.gemv(runtime.asarray(a.T.copy()), y))
        runtime.synchronize()
        assert SpinWait(device.device).wait(0.0)  # nothing left in flight (one poll runs its callback)
        got = y.numpy()
        expected = got if expected is None else expected
        np.testing.assert_array_equal(got, expected)
        runtime.close()


def test_synchronize_spins_by_default_on_a_gpu_and_never_on_a_cpu_adapter(device, tmp_path):
    """spin_wait_us=None (the default): DEFAULT_SPIN_US on a GPU adapter, 0 on a CPU one,
    where a spinning core is one the adapter computes on; a number given is kept."""
    from farm.runtime.forge import DEFAULT_SPIN_US

    db = f"sqlite:///{tmp_path / 'absent.db'}"
    runtime = ForgeRuntime(db=db, device=device)
    assert runtime.spin_wait_s == (0.0 if device.profile.is_cpu else DEFAULT_SPIN_US / 1e6)
    runtime.close()
    runtime = ForgeRuntime(db=db, device=device, spin_wait_us=40)
    assert runtime.spin_wait_s == pytest.approx(40e-6)
    runtime.close()


# Each invocation runs `params.x` xorshift steps (lavapipe ends a loop after 65535 of them).
LONG_LOOP = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> params: vec4<u32>;
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    var acc = (gid.x & 63u) + 1u;  // every invocation that writes a slot writes the same value
    for (var i = 0u; i < params.x; i = i + 1u) { acc ^= acc << 13u; acc ^= acc >> 17u; acc ^= acc << 5u; }
    out[gid.x & 63u] = acc;
}
"""


def test_a_spinning_wait_idle_returns_only_once_a_long_kernel_is_done(device):
    """wgpuDevicePoll's result is no "queue empty" (a one-byte Rust bool read as 32 bits:
    true while busy, on lavapipe and discrete GPUs alike), so a spinning wait that trusted it
    would return at once. On a kernel of >= 60 ms (more workgroups until it is): after
    wait_idle(spin_s=1.0) a blocking wait finds nothing left, and the results are the
    blocking wait's."""
    pipeline = device.pipeline(LONG_LOOP, label="long_loop")
    out, params = device.empty(4 * 64), device.upload(np.array([10_000, 0, 0, 0], np.uint32), "uniform")
    groups, kernel_s = 512, 0.0
    while kernel_s < 0.06 and groups < 2**30:
        groups *= 2
        start = time.perf_counter()
        device.dispatch(pipeline, [out, params], groups)
        kernel_s = time.perf_counter() - start
    blocking = device.read(out, np.uint32)
    device.release(out)
    out = device.empty(4 * 64)
    device.dispatch(pipeline, [out, params], groups, wait=False)
    device.wait_idle(spin_s=1.0)
    start = time.perf_counter()
    device.wait_idle()
    left_s = time.perf_counter() - start
    assert left_s < 0.2 * kernel_s, f"{left_s * 1e3:.1f} ms still to wait for a {kernel_s * 1e3:.0f} ms kernel"
    np.testing.assert_array_equal(device.read(out, np.uint32), blocking)
    device.release(out, params)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), 2e6, "fast", True])
def test_spin_wait_us_takes_microseconds_from_0_to_a_second(device, bad):
    with pytest.raises(ValueError, match=r"spin_wait_us must be .*" + re.escape(repr(bad))):
        ForgeRuntime(db="sqlite:///:memory:", device=device, spin_wait_us=bad)


def test_a_read_that_spins_first_gives_the_blocking_reads_answers(rt):
    a, x = f32(64, 64), f32(64, seed=1)
    want = rt.gemv(a, x)
    rt._caller.read_spin_s = 0.05
    np.testing.assert_array_equal(rt.gemv(a, x), want)
    np.testing.assert_array_equal(rt.gemv(rt.asarray(a), rt.asarray(x)).numpy(), want)
    rt._caller.read_spin_s = 1e-9  # over before the GPU is done: the poller thread resolves the map
    np.testing.assert_array_equal(rt.gemv(a, x), want)
