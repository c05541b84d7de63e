"""ForgeRuntime's device memory: a call whose shapes repeat allocates nothing (its buffers
come back from the pool), each (kernel, schedule) pipeline compiles once, nothing grows
over 10,000 calls, and `close()` gives the device back what the runtime took."""

import time

import numpy as np
import pytest

from farm import ForgeRuntime


@pytest.mark.slow
def test_ten_thousand_calls_allocate_nothing_after_the_first(device, tmp_path):
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    a = np.array([[2.0, 3.0]], np.float32)
    x = np.array([5.0, 7.0], np.float32)
    on_device = rt.asarray(a)

    def calls(count):
        z = None
        for i in range(count):
            x[0] = i
            y = rt.gemv(a, x)
            z = rt.gemv(on_device, x)  # the last z is given back once this one replaces it
        return y, z

    calls(3)  # plans both layouts, fills the pool
    in_use, pipelines, created = device.memory()["in_use"], device.cached_pipelines, rt._pool.created
    start = time.perf_counter()
    y, z = calls(5_000)
    elapsed = time.perf_counter() - start
    assert y[0] == 2.0 * 4_999 + 21.0
    assert z.numpy()[0] == y[0]
    assert device.memory()["in_use"] == in_use
    assert device.cached_pipelines == pipelines
    assert rt._pool.created == created
    del z
    on_device.release()
    assert rt.memory()["held"] == 0
    assert elapsed < 60, f"10,000 calls took {elapsed:.1f} s"
    rt.close()


def test_each_kernel_call_gives_its_buffers_back_and_close_frees_the_rest(device, tmp_path):
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    in_use = device.memory()["in_use"]
    rt.topk(np.arange(100, dtype=np.float32), 2)
    rt.gemm(np.ones((3, 4), np.float32), np.ones((4, 5), np.float32))
    rt.ternary_gemv(np.ones(4, np.float32), np.array([0x55], np.uint32), np.ones(1, np.float32), 1, 4)
    rt.p64_project(np.ones((2, 16), np.uint32), np.ones(16, np.float32))
    rt.fft(np.ones((2, 8), np.complex64))
    rt.recurrent_attention(np.ones((1, 2, 3, 4), np.float32), np.ones((1, 1, 3, 5), np.float32))
    assert rt.memory()["held"] == 0  # every call's buffers are back in the pool
    assert rt.memory()["idle"] > 0
    rt.close()
    assert device.memory()["in_use"] == in_use
    assert rt.memory() == {"held": 0, "idle": 0, "capacity": None}


def test_pipeline_is_compiled_once_per_kernel_and_schedule(device, tmp_path):
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    rt.topk(np.arange(50, dtype=np.float32), 3)
    before = device.cached_pipelines
    for n in (7, 100, 1000):  # other problems, the same default schedule and source
        rt.topk(np.arange(n, dtype=np.float32), 3)
    assert device.cached_pipelines == before
    rt.close()


def test_a_slab_whose_buffer_the_garbage_collector_released_never_comes_back(device, tmp_path):
    """A DeviceArray caught in a reference cycle is collected with its buffer, and the
    cycle's finalizers run in no fixed order: the array may give its slab back after the
    buffer's finalizer released it, or before. Either way the pool drops that slab, and
    the next call gets a live buffer (CI once bound a dead one: 'must be a cdata pointer')."""
    from farm.runtime.pool import BufferPool

    pool = BufferPool(device)
    before = device.bytes_in_use
    first = pool.take(4096)
    first.handle._release()  # finalized while held, then given back
    pool.give(first)
    assert not first.live and pool.held == 0 and pool.idle == 0
    second = pool.take(4096)
    assert second is not first
    pool.give(second)
    second.handle._release()  # finalized after it was given back
    third = pool.take(4096)
    assert third is not second and not second.live and third.handle._internal is not None
    pool.give(third)
    pool.close()
    assert device.bytes_in_use == before

    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    x = rt.asarray(np.ones(8, np.float32))
    x._storage.slab.handle._release()
    del x
    a = np.ones((8, 8), np.float32)
    np.testing.assert_array_equal(rt.gemv(a, np.ones(8, np.float32)), np.full(8, 8, np.float32))
    rt.close()
