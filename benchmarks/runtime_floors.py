"""The floors ForgeRuntime's per-call costs are measured against (benchmarks/runtime_calls.py):
plain wgpu-py doing the same submissions and transfers with no farm code, and torch.

`per_call` is the timer every row uses: the median host wall time of a call that includes
its own sync. `wgpu_floors` and `torch_floors` are the floor rows (an empty submission +
a blocking wait, + a spinning wait, alone; the same with one trivial dispatch; a 4 KB round
trip, 256 MB H2D/D2H; torch op + synchronize, synchronize alone); `c_api_costs` what each
of wgpu-native's C calls on the runtime's hot path costs (farm.gpu.native); `TransferFloor`
is plain wgpu-py doing one call's own transfers around a trivial dispatch.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from farm.gpu.waits import SpinWait
from farm.runtime.costs import plain_dispatch, plain_transfer

COPY = """@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&dst)) { dst[g.x] = src[g.x]; }
}"""


def per_call(fn, seconds: float = 0.4, least: int = 10, most: int = 2000) -> float:
    """Median seconds of `fn()` (which includes its own sync) over repeated calls."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < least or (time.perf_counter() - start < seconds and len(times) < most):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# -- floors: plain wgpu-py and torch ---------------------------------------------------------
def wgpu_floors(big: int) -> dict[str, float]:
    import wgpu

    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    dev = adapter.request_device_sync()
    use = wgpu.BufferUsage
    module = dev.create_shader_module(code=COPY)
    pipe = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    small = np.arange(1024, dtype=np.uint32)  # 4 KB
    src = dev.create_buffer(size=small.nbytes, usage=use.STORAGE | use.COPY_DST)
    dst = dev.create_buffer(size=small.nbytes, usage=use.STORAGE | use.COPY_SRC)
    stage = dev.create_buffer(size=small.nbytes, usage=use.MAP_READ | use.COPY_DST)
    bind = dev.create_bind_group(
        layout=pipe.get_bind_group_layout(0),
        entries=[{"binding": 0, "resource": {"buffer": src}}, {"binding": 1, "resource": {"buffer": dst}}],
    )

    def dispatch(encoder):
        p = encoder.begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(16)
        p.end()

    def submit_wait():
        plain_dispatch(dev, [(pipe, bind, (16, 1, 1))])

    def submit_only():  # the submission's own host cost: no wait (the GPU drains between samples)
        plain_dispatch(dev, [(pipe, bind, (16, 1, 1))], wait=False)

    spin = SpinWait(dev)

    def submit_spin():  # the lever to try on the wait: non-blocking polls until the work-done callback ran
        # (not until wgpuDevicePoll returns true: its WGPUBool's upper bytes are garbage, farm.gpu.waits)
        plain_dispatch(dev, [(pipe, bind, (16, 1, 1))], wait=False)
        if not spin.wait(1.0):
            dev._poll_wait()

    def round_trip():
        dev.queue.write_buffer(src, 0, small)
        encoder = dev.create_command_encoder()
        dispatch(encoder)
        encoder.copy_buffer_to_buffer(dst, 0, stage, 0, small.nbytes)
        dev.queue.submit([encoder.finish()])
        stage.map_sync("READ")
        np.frombuffer(stage.read_mapped(copy=False), np.uint32).copy()
        stage.unmap()

    data = np.ones(big // 4, np.float32)
    target = dev.create_buffer(size=big, usage=use.STORAGE | use.COPY_DST | use.COPY_SRC)
    upload = dev.create_buffer(size=big, usage=use.MAP_WRITE | use.COPY_SRC)
    download = dev.create_buffer(size=big, usage=use.MAP_READ | use.COPY_DST)

    def h2d_write_buffer():
        dev.queue.write_buffer(target, 0, data)
        dev._poll_wait()

    def h2d_mapped():
        upload.map_sync("WRITE")
        upload.write_mapped(data)
        upload.unmap()
        encoder = dev.create_command_encoder()
        encoder.copy_buffer_to_buffer(upload, 0, target, 0, big)
        dev.queue.submit([encoder.finish()])
        dev._poll_wait()

    def d2h():
        encoder = dev.create_command_encoder()
        encoder.copy_buffer_to_buffer(target, 0, download, 0, big)
        dev.queue.submit([encoder.finish()])
        download.map_sync("READ")
        np.frombuffer(download.read_mapped(copy=False), np.float32).copy()
        download.unmap()

    mid = {}
    for size in [s for s in (1 << 18, 1 << 20, 1 << 22, 1 << 24) if s <= big]:  # where mapping pays
        part = data[: size // 4]

        def by_write(part=part):
            dev.queue.write_buffer(target, 0, part)
            dev._poll_wait()

        def by_map(part=part, size=size):
            upload.map_sync("WRITE", 0, size)
            upload.write_mapped(part, 0)
            upload.unmap()
            encoder = dev.create_command_encoder()
            encoder.copy_buffer_to_buffer(upload, 0, target, 0, size)
            dev.queue.submit([encoder.finish()])
            dev._poll_wait()

        mid[f"h2d_{size >> 10}k_write_buffer_us"] = per_call(by_write) * 1e6
        mid[f"h2d_{size >> 10}k_mapped_us"] = per_call(by_map) * 1e6
    def empty_submit(wait: str) -> None:  # a submission of no work: what wgpu-native and the driver cost alone
        dev.queue.submit([dev.create_command_encoder().finish()])
        if wait == "block":
            dev._poll_wait()
        elif wait == "spin" and not spin.wait(1.0):
            dev._poll_wait()

    out = {
        **mid,
        "empty_submit_wait_us": per_call(lambda: empty_submit("block")) * 1e6,
        "empty_submit_spin_us": per_call(lambda: empty_submit("spin")) * 1e6,
        "empty_submit_only_us": per_call(lambda: empty_submit("none")) * 1e6,
        "submit_wait_us": per_call(submit_wait) * 1e6,
        "submit_spin_us": per_call(submit_spin) * 1e6,
        "submit_only_us": per_call(submit_only) * 1e6,
        "roundtrip_4k_us": per_call(round_trip) * 1e6,
        "h2d_write_buffer_gbps": big / per_call(h2d_write_buffer, least=5) / 1e9,
        "h2d_mapped_gbps": big / per_call(h2d_mapped, least=5) / 1e9,
        "d2h_mapped_gbps": big / per_call(d2h, least=5) / 1e9,
    }
    for b in (src, dst, stage, target, upload, download):
        b.destroy()
    return out


class TransferFloor:
    """Plain wgpu-py doing a call's transfers with no kernel of ours: write each input into
    a persistent buffer (write_buffer, or a staging buffer mapped for it: the faster of the
    two for the whole call), one trivial dispatch, copy each output to a persistent staging
    buffer, map it and copy it out. The runtime's overhead is its call minus this floor and
    the kernel's own time."""

    def __init__(self):
        import wgpu

        self.wgpu = wgpu
        self.dev = wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()
        module = self.dev.create_shader_module(code=COPY)
        self.pipe = self.dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        self.buffers: dict = {}

    def _buffer(self, key, size, usage):
        if key not in self.buffers:
            self.buffers[key] = self.dev.create_buffer(size=size, usage=usage)
        return self.buffers[key]

    def seconds(self, inputs: list[np.ndarray], out_sizes: list[int]) -> float:
        use = self.wgpu.BufferUsage
        dev = self.dev
        sizes = [a.nbytes for a in inputs]
        targets = [self._buffer(("in", i, n), n, use.STORAGE | use.COPY_DST) for i, n in enumerate(sizes)]
        stages = [self._buffer(("up", i, n), n, use.MAP_WRITE | use.COPY_SRC) for i, n in enumerate(sizes)]
        outs = [self._buffer(("out", i, n), n, use.STORAGE | use.COPY_SRC) for i, n in enumerate(out_sizes)]
        reads = [self._buffer(("rd", i, n), n, use.MAP_READ | use.COPY_DST) for i, n in enumerate(out_sizes)]
        small = self._buffer("small", 256, use.STORAGE)
        bind = dev.create_bind_group(
            layout=self.pipe.get_bind_group_layout(0),
            entries=[{"binding": 0, "resource": {"buffer": small}}, {"binding": 1, "resource": {"buffer": outs[0]}}],
        )

        passes = [(self.pipe, bind, (1, 1, 1))]
        copies = list(zip(outs, reads, out_sizes, strict=True))

        def by_write_buffer():
            plain_transfer(dev, list(zip(targets, inputs, strict=True)), passes, copies)

        def mapped():
            encoder = dev.create_command_encoder()
            for a, target, stage in zip(inputs, targets, stages, strict=True):
                stage.map_sync("WRITE")
                stage.write_mapped(a, 0)
                stage.unmap()
                encoder.copy_buffer_to_buffer(stage, 0, target, 0, a.nbytes)
            p = encoder.begin_compute_pass()
            p.set_pipeline(self.pipe)
            p.set_bind_group(0, bind)
            p.dispatch_workgroups(1)
            p.end()
            for out, read, n in copies:
                encoder.copy_buffer_to_buffer(out, 0, read, 0, n)
            dev.queue.submit([encoder.finish()])
            for read in reads:
                read.map_sync("READ")
                np.frombuffer(read.read_mapped(copy=False), np.uint8).copy()
                read.unmap()

        return min(per_call(by_write_buffer), per_call(mapped))

    def close(self):
        for b in self.buffers.values():
            b.destroy()


def torch_floors(torch, big: int) -> dict[str, float]:
    dev = torch.device("cuda")
    x = torch.ones(1024, device=dev)
    host = np.ones(big // 4, np.float32)
    pinned = torch.from_numpy(host).pin_memory()
    on_gpu = torch.from_numpy(host).to(dev)

    def op():
        x.add_(1.0)
        torch.cuda.synchronize()

    def h2d(src):
        return lambda: (src.to(dev, non_blocking=False), torch.cuda.synchronize())

    return {
        "op_sync_us": per_call(op) * 1e6,
        "sync_us": per_call(torch.cuda.synchronize) * 1e6,  # nothing queued: the sync alone
        "h2d_pageable_gbps": big / per_call(h2d(torch.from_numpy(host)), least=5) / 1e9,
        "h2d_pinned_gbps": big / per_call(h2d(pinned), least=5) / 1e9,
        "d2h_pageable_gbps": big / per_call(lambda: on_gpu.cpu().numpy(), least=5) / 1e9,
    }


def c_api_costs(device, one_pass: tuple, count: int = 2000) -> dict[str, float]:
    """Host microseconds per wgpu-native C call on the runtime's hot path (farm.gpu.native),
    made through wgpu-py's cffi `lib` on `device` (a wgpu-py device): `one_pass` is a plan's
    (pipeline, bind group, x, y, z) of raw handles. Each figure is a loop of `count` calls
    (host wall, perf_counter around the loop, divided by `count`); the passes are submitted
    and waited for outside the timed loops. Empty dict when the C API is not usable."""
    from farm.gpu import native

    if not native.available():
        return {}
    c, ffi = native.C, native.C.ffi
    pipeline, group, x, y, z = one_pass
    handle, queue = device._internal, device.queue._internal
    enc_desc, pass_desc = ffi.new("WGPUCommandEncoderDescriptor *"), ffi.new("WGPUComputePassDescriptor *")
    buf_desc, buffers = ffi.new("WGPUCommandBufferDescriptor *"), ffi.new("WGPUCommandBuffer[1]")
    out: dict[str, float] = {}

    def timed(name: str, body) -> None:
        encoder = c.wgpuDeviceCreateCommandEncoder(handle, enc_desc)
        start = time.perf_counter()
        body(encoder)
        out[name] = (time.perf_counter() - start) / count * 1e6
        command_buffer = c.wgpuCommandEncoderFinish(encoder, buf_desc)
        c.wgpuCommandEncoderRelease(encoder)
        buffers[0] = command_buffer
        c.wgpuQueueSubmit(queue, 1, buffers)
        c.wgpuCommandBufferRelease(command_buffer)
        device._poll_wait()

    def passes(steps: int):
        def body(encoder):
            for _ in range(count):
                p = c.wgpuCommandEncoderBeginComputePass(encoder, pass_desc)
                if steps > 0:
                    c.wgpuComputePassEncoderSetPipeline(p, pipeline)
                if steps > 1:
                    c.wgpuComputePassEncoderSetBindGroup(p, 0, group, 0, ffi.NULL)
                if steps > 2:
                    c.wgpuComputePassEncoderDispatchWorkgroups(p, x, y, z)
                c.wgpuComputePassEncoderEnd(p)
                c.wgpuComputePassEncoderRelease(p)

        return body

    timed("pass_begin_end_release_us", passes(0))
    timed("pass_with_set_pipeline_us", passes(1))
    timed("pass_with_set_bind_group_us", passes(2))
    timed("pass_with_dispatch_us", passes(3))  # the whole pass a recorded call makes
    start = time.perf_counter()
    for _ in range(count):
        encoder = c.wgpuDeviceCreateCommandEncoder(handle, enc_desc)
        command_buffer = c.wgpuCommandEncoderFinish(encoder, buf_desc)
        c.wgpuCommandEncoderRelease(encoder)
        c.wgpuCommandBufferRelease(command_buffer)
    out["encoder_create_finish_release_us"] = (time.perf_counter() - start) / count * 1e6
    submits = max(count // 10, 10)
    start = time.perf_counter()
    for _ in range(submits):  # empty command buffers: the submission's own cost (proxy included)
        encoder = c.wgpuDeviceCreateCommandEncoder(handle, enc_desc)
        command_buffer = c.wgpuCommandEncoderFinish(encoder, buf_desc)
        c.wgpuCommandEncoderRelease(encoder)
        buffers[0] = command_buffer
        c.wgpuQueueSubmit(queue, 1, buffers)
        c.wgpuCommandBufferRelease(command_buffer)
    out["empty_encoder_and_submit_us"] = (time.perf_counter() - start) / submits * 1e6
    device._poll_wait()
    return out


def dispatch_floors(device, pipeline, groups: list, grid: tuple, count: int = 10, reps: int = 40) -> dict[str, float]:
    """GPU microseconds a dispatch of one kernel (`pipeline`, a wgpu-py compute pipeline,
    over `grid`), by timestamps at the first pass's beginning and the last pass's end, the
    median of `reps`, / dispatches: alone; `count` times in one pass, each writing the same
    output, so each waits for the one before (what a recorded chain's calls are:
    farm.gpu.native keeps them in one pass); `count` times in one pass on `count` outputs
    (none waits); the same two with a pass each. `groups`: `count` bind groups of
    `pipeline` with distinct outputs. Empty dict without timestamp queries. Its own
    timestamp loop, not Device.time_calls (which encodes a pass per call): the five are
    timed one way, so what differs between them is the passes, not the method."""
    import wgpu

    if "timestamp-query" not in device.features:
        return {}

    def timed(bound: list, one_pass: bool) -> float:
        queries = device.create_query_set(type="timestamp", count=2 * reps)
        resolve = device.create_buffer(size=16 * reps, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        encoder = device.create_command_encoder()
        for rep in range(reps):
            first = {"query_set": queries, "beginning_of_pass_write_index": 2 * rep}
            last = {"query_set": queries, "end_of_pass_write_index": 2 * rep + 1}
            if one_pass:
                compute = encoder.begin_compute_pass(timestamp_writes={**first, **last})
            for index, group in enumerate(bound):
                if not one_pass:
                    writes = {**(first if index == 0 else {}), **(last if index == len(bound) - 1 else {})}
                    compute = encoder.begin_compute_pass(timestamp_writes=writes or None)
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, group)
                compute.dispatch_workgroups(*grid)
                if not one_pass:
                    compute.end()
            if one_pass:
                compute.end()
        encoder.resolve_query_set(queries, 0, 2 * reps, resolve, 0)
        device.queue.submit([encoder.finish()])
        stamps = np.frombuffer(bytes(device.queue.read_buffer(resolve)), np.uint64).astype(np.int64)
        resolve.destroy()
        queries.destroy()
        return float(np.median(stamps[1::2] - stamps[0::2])) / 1e3 / len(bound)

    timed([groups[0]] * count, True)  # warm-up
    return {
        "alone_us": timed(groups[:1], True),
        "dependent_one_pass_us": timed([groups[0]] * count, True),
        "independent_one_pass_us": timed(groups[:count], True),
        "dependent_pass_each_us": timed([groups[0]] * count, False),
        "independent_pass_each_us": timed(groups[:count], False),
    }
