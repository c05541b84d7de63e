"""ForgeRuntime releases every device buffer after each call and compiles each
(kernel, schedule) pipeline once: nothing grows over 10,000 calls."""

import time

import numpy as np
import pytest

from farm import ForgeRuntime


@pytest.mark.slow
def test_ten_thousand_calls_leave_no_buffers_or_pipelines_behind(device, tmp_path):
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    a = np.array([[2.0, 3.0]], np.float32)
    x = np.array([5.0, 7.0], np.float32)
    rt.gemv(a, x)  # compiles the pipeline
    in_use, pipelines = device.memory()["in_use"], device.cached_pipelines
    start = time.perf_counter()
    for i in range(10_000):
        x[0] = i
        y = rt.gemv(a, x)
    elapsed = time.perf_counter() - start
    assert y[0] == 2.0 * 9_999 + 21.0
    assert device.memory()["in_use"] == in_use
    assert device.cached_pipelines == pipelines
    assert elapsed < 60, f"10,000 calls took {elapsed:.1f} s"


def test_each_kernel_call_releases_its_buffers(device, tmp_path):
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    in_use = device.memory()["in_use"]
    rt.topk(np.arange(100, dtype=np.float32), 2)
    rt.gemm(np.ones((3, 4), np.float32), np.ones((4, 5), np.float32))
    rt.ternary_gemv(np.ones(4, np.float32), np.array([0x55], np.uint32), np.ones(1, np.float32), 1, 4)
    rt.p64_project(np.ones((2, 16), np.uint32), np.ones(16, np.float32))
    rt.fft(np.ones((2, 8), np.complex64))
    rt.recurrent_attention(np.ones((1, 2, 3, 4), np.float32), np.ones((1, 1, 3, 5), np.float32))
    assert device.memory()["in_use"] == in_use


def test_pipeline_is_compiled_once_per_kernel_and_schedule(device, tmp_path):
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    rt.topk(np.arange(50, dtype=np.float32), 3)
    before = device.cached_pipelines
    for n in (7, 100, 1000):  # other problems, the same default schedule and source
        rt.topk(np.arange(n, dtype=np.float32), 3)
    assert device.cached_pipelines == before
