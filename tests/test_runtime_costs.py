"""What a repeated ForgeRuntime call costs the host beyond the GPU, counted, not
timed: a call on DeviceArrays with a sync makes exactly the wgpu-native calls plain
wgpu-py makes for the same passes (farm.runtime.costs.plain_dispatch), and a call from
numpy makes fewer than plain wgpu-py doing its transfers (plain_transfer): one submission
and one map, whatever the number of outputs. The stub the benchmark times the runtime's
own Python with reaches no wgpu at all and leaves the runtime as it was."""

from collections import Counter

import numpy as np
import pytest
from runtime_cases import f32, method_cases

from farm import ForgeRuntime
from farm.runtime.arrays import DeviceArray
from farm.runtime.costs import count_wgpu_calls, no_gpu, plain_dispatch, plain_transfer

CALLS = 8  # repeated calls counted (after two that plan and fill the pool)


def _cases():
    """method -> (numpy args, kwargs): recurrent with rho and decay (4 in, 2 out)."""
    return method_cases(recurrent_state=True)


@pytest.fixture
def rt(device, tmp_path):
    runtime = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    yield runtime
    runtime.close()


def _counted(fn) -> Counter:
    fn()
    fn()
    with count_wgpu_calls() as counts:
        for _ in range(CALLS):
            fn()
    return counts


def _only_plan(rt):
    (plan,) = rt._caller._plans.values()
    return plan


@pytest.mark.parametrize("method", sorted(_cases()))
def test_a_repeated_device_array_call_makes_the_plain_floors_wgpu_calls(rt, method):
    args, kwargs = _cases()[method]
    on_device = [rt.asarray(a) for a in args]

    def call():
        getattr(rt, method)(*on_device, **kwargs)
        rt.synchronize()

    runtime = _counted(call)
    passes = _only_plan(rt).last[1]  # the (pipeline, bind group, grid) of each pass it encoded
    floor = _counted(lambda: plain_dispatch(rt.device.device, passes))
    assert runtime == floor
    assert runtime["wgpuQueueSubmit"] == CALLS and runtime["wgpuDeviceCreateBindGroup"] == 0


def test_out_and_a_chain_make_no_wgpu_calls_beyond_the_floor(rt):
    a, x = rt.asarray(f32(7, 33)), rt.asarray(f32(33, seed=1))
    y = rt.empty(7)

    def call():
        rt.gemv(a, x, out=y)
        rt.synchronize()

    runtime = _counted(call)
    floor = _counted(lambda: plain_dispatch(rt.device.device, _only_plan(rt).last[1]))
    assert runtime == floor

    def chain():  # two calls, one wait: recorded into one submission (the floor makes two), one poll
        top = rt.topk(rt.gemv(a, x), k=2)
        rt.synchronize()
        return top

    chained = _counted(chain)
    assert chained["wgpuQueueSubmit"] == CALLS and chained["wgpuDevicePoll"] == CALLS
    assert chained["wgpuDeviceCreateCommandEncoder"] == CALLS
    assert chained["wgpuDeviceCreateBindGroup"] == 0 and chained["wgpuDeviceCreateBuffer"] == 0


@pytest.mark.parametrize("method", ["gemv", "recurrent_attention", "fft"])
def test_a_repeated_numpy_call_makes_fewer_wgpu_calls_than_plain_wgpu_py(rt, method):
    args, kwargs = _cases()[method]
    runtime = _counted(lambda: getattr(rt, method)(*args, **kwargs))
    plan = _only_plan(rt)
    gpu, use = rt.device.device, rt.device._wgpu.BufferUsage
    inputs = [np.ascontiguousarray(a) for a in args if isinstance(a, np.ndarray)]
    sizes = [slot.nbytes for slot in plan.outputs]
    writes = [(gpu.create_buffer(size=a.nbytes, usage=use.STORAGE | use.COPY_DST), a) for a in inputs]
    outs = [gpu.create_buffer(size=n, usage=use.STORAGE | use.COPY_SRC) for n in sizes]
    stages = [gpu.create_buffer(size=n, usage=use.MAP_READ | use.COPY_DST) for n in sizes]
    floor = _counted(lambda: plain_transfer(gpu, writes, plan.last[1], list(zip(outs, stages, sizes, strict=True))))
    fewer = {name: (n, floor[name]) for name, n in runtime.items() if n > floor[name] and name != "wgpuDevicePoll"}
    assert fewer == {}  # the runtime's one poll is the wait the floor's maps do on wgpu-py's poller thread
    assert runtime["wgpuQueueWriteBuffer"] == floor["wgpuQueueWriteBuffer"] == len(inputs) * CALLS
    assert runtime["wgpuQueueSubmit"] == runtime["wgpuBufferMapAsync"] == CALLS  # one of each, whatever the outputs
    assert floor["wgpuQueueSubmit"] == (1 + len(sizes)) * CALLS  # plain "READ" maps submit once more each
    assert sum(runtime.values()) < sum(floor.values())
    for b in [b for b, _ in writes] + outs + stages:
        b.destroy()


def test_the_benchmarks_stub_reaches_no_wgpu_and_leaves_the_runtime_as_it_was(rt):
    a, x = f32(7, 33), f32(33, seed=1)
    on_device = rt.asarray(a)
    want = a.astype(np.float64) @ x
    np.testing.assert_allclose(rt.gemv(a, x), want, rtol=1e-5, atol=1e-5)
    rt.gemv(on_device, x)
    memory, in_use = rt.memory(), rt.device.memory()

    def calls():
        rt.gemv(a, x)
        assert isinstance(rt.gemv(on_device, x), DeviceArray)
        rt.synchronize()

    with no_gpu(rt) as stub:
        for _ in range(4):  # bind the stub's buffers (wgpu-py fetches the pipelines' bind group layouts)
            calls()
        with count_wgpu_calls() as counts:
            for _ in range(3):
                calls()
                plain_dispatch(stub, [(None, None, (1, 1, 1))])
    assert counts == Counter()
    assert rt.memory() == memory and rt.device.memory() == in_use
    np.testing.assert_allclose(rt.gemv(a, x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rt.gemv(on_device, x).numpy(), want, rtol=1e-5, atol=1e-5)
