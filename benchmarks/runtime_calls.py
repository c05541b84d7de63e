"""What a program pays per ForgeRuntime call, next to plain wgpu-py and torch .

Every number is a per-call median of host wall time with a sync each call (perf_counter
around the call and its wait), unless its method says otherwise:
- floors, plain wgpu-py (no farm code): submit + wait; 4 KB write + dispatch + read back
  (persistent buffers); 256 MB H2D by queue.write_buffer and by a mapped staging buffer,
  256 MB D2H through a mapped staging buffer; torch: op + synchronize, 256 MB pageable and
  pinned H2D/D2H;
- per kernel: the runtime from numpy (numpy in, numpy out; again into reused numpy `out=`
  arrays, whose pages exist already; again with the read not spinning, `read_spin_s=0`), the runtime on DeviceArrays
  (`rt.synchronize()` each call; again with the sync spinning up to SPIN_WAIT_S before it
  blocks, ForgeRuntime's `spin_wait_us`), the kernel alone by GPU timestamps (same schedule), torch
  from numpy (H2D, op, D2H) and torch on device tensors (op + synchronize; FLA's
  `fused_recurrent_rwkv6` for recurrent);
- chains of dependent calls with one sync at the end, per call: recurrent stepwise T=64
  with rho on the GPU (FLA stepwise with its state on the GPU), gemm -> topk (torch's same
  chain);
- where the host time goes, per kernel (farm.runtime.costs): the runtime's own Python per
  call, timed with wgpu replaced by no-ops less the same stub under plain wgpu-py's floor
  (device_python_us: DeviceArrays and a sync; numpy_python_us: from numpy, for outputs up
  to 1 MB, where copying them out doesn't drown it), and the wgpu-native calls per call of
  the runtime against plain wgpu-py's for the same passes and transfers (*_wgpu_calls,
  *_floor_wgpu_calls: each goes through wgpu-py's error-capturing proxy; on a fast GPU they
  are most of a call's host time).
- the hot path: the host cost of one recorded DeviceArray call without a sync (2000
  rt.gemm on 256^2 DeviceArrays, host wall and thread CPU, through wgpu-native's C API and
  through wgpu-py's objects, for each --flush-calls batch size); chains of 10 dependent
  gemm 256^3 and 1024^3 with one sync, per call, for each batch size, against torch's same
  chain; tiny numpy calls (topk n=4096, gemv 256^2); what each wgpu-native C call on the
  hot path costs (runtime_floors.c_api_costs); the floors with an empty submission; what a
  gemm dispatch costs the GPU alone, 10 in one pass each waiting for the one before (a
  recorded chain), 10 that don't wait, and the same a pass each (runtime_floors.dispatch_floors),
  against cuBLAS kernel-only alone and 10 dependent by CUDA-graph replay.
Prints a table and a summary (every measure with farm's and torch's figure, their ratio, the
target and the method of each); writes runtime-calls.{md,json} and
runtime-calls-summary.csv under --out. Without torch (or CUDA) the vendor columns are
skipped, and it says so.

    PYTHONPATH=. python3 benchmarks/runtime_calls.py --db none --out /tmp/rc [--quick] [--allow-cpu]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from runtime_floors import TransferFloor, c_api_costs, dispatch_floors, per_call, torch_floors, wgpu_floors

from farm import ForgeRuntime, catalog
from farm.cli.bench import settle_clocks
from farm.cli.vendor import vendor_fn
from farm.oracle.launch import prepare
from farm.runtime.costs import NoBuffer, count_wgpu_calls, no_gpu, plain_dispatch, plain_transfer

NUMPY_STUB_MAX = 1 << 20  # numpy_python_us only for outputs up to this many bytes

def runtime_transfers(rt, big: int) -> dict[str, float]:
    """The runtime's own 256 MB upload (`rt.asarray` + synchronize) and read back (`.numpy()`)."""
    host = np.ones(big // 4, np.float32)
    kept = rt.asarray(host)

    def upload():
        rt.asarray(host).release()
        rt.synchronize()

    out = {
        "h2d_gbps": big / per_call(upload, least=5) / 1e9,
        "d2h_gbps": big / per_call(kept.numpy, least=5) / 1e9,
    }
    kept.release()
    return out


# -- kernels ----------------------------------------------------------------------------------
def cases(quick: bool):
    g = np.random.default_rng(0)

    def f32(*shape):
        return g.standard_normal(shape).astype(np.float32)

    gemm_sizes = (64, 128) if quick else (256, 1024, 4096)
    out = [(f"gemm {s}^3", "gemm", (f32(s, s), f32(s, s)), {}) for s in gemm_sizes]
    gemv_sizes = (256,) if quick else (4096, 16384)
    out += [(f"gemv {s}^2", "gemv", (f32(s, s), f32(s)), {}) for s in gemv_sizes]
    batch = 16 if quick else 16384
    out.append((f"fft {batch}x1024", "fft", ((f32(batch, 1024) + 1j * f32(batch, 1024)).astype(np.complex64),), {}))
    bits = 16 if quick else 26
    out.append((f"topk 2^{bits} k=8 per block", "topk", (f32(1 << bits),), {"k": 8}))
    # tiny calls, where a numpy call's fixed cost is all there is
    out.append(("topk n=4096 k=8 per block (tiny)", "topk", (f32(4096),), {"k": 8}))
    out.append(("gemv 256^2 (tiny)", "gemv", (f32(256, 256), f32(256)), {}))
    for e in (96, 768):
        q, v = f32(1, 8, 64, 64), f32(1, 1, 64, e)
        decay = np.linspace(0.85, 0.95, 8).astype(np.float32)
        out.append((f"recurrent E={e}", "recurrent_attention", (q, v, np.zeros((1, 8, 64, e), np.float32), decay), {}))
    return out


KERNEL = {"recurrent_attention": "recurrent"}
SPIN_WAIT_S = 1e-3  # device_spin_ms: ForgeRuntime(spin_wait_us=1000), polls without sleeping for up to 1 ms


def runtime_row(rt, torch, floor, label, method, args, kwargs, costs: bool = True) -> dict:
    fn = getattr(rt, method)
    if method == "topk":  # the per-block form at the tuned block: the kernel torch.topk on blocks matches
        problem = catalog.get("topk").problem(n=args[0].shape[0], k=kwargs["k"])
        kwargs = {**kwargs, "block": rt.tuned_schedule("topk", problem)[0].workgroup_size}
    row = {"case": label, "method": "host wall, sync each call"}
    row["numpy_ms"] = per_call(lambda: fn(*args, **kwargs)) * 1e3
    first = fn(*args, **kwargs)  # numpy out= arrays of the outputs' shapes, filled once so their pages exist
    held = tuple(np.array(r) for r in first) if isinstance(first, tuple) else np.array(first)
    row["numpy_out_ms"] = per_call(lambda: fn(*args, **kwargs, out=held)) * 1e3
    rt._caller.read_spin_s = 0.0  # the numpy calls again, their read waiting for the poller thread at once
    row["numpy_block_ms"] = per_call(lambda: fn(*args, **kwargs)) * 1e3
    rt._caller.read_spin_s = None
    device_args = [rt.asarray(a) for a in args]

    def on_device():
        fn(*device_args, **kwargs)
        rt.synchronize()

    default, rt.spin_wait_s = rt.spin_wait_s, 0.0  # device_ms: the sync blocking at once
    row["device_ms"] = per_call(on_device) * 1e3
    rt.spin_wait_s = SPIN_WAIT_S  # the same calls, the sync spinning first
    row["device_spin_ms"] = per_call(on_device) * 1e3
    rt.spin_wait_s = default
    spec, problem, inputs = _plan_inputs(rt, method, args, kwargs)
    schedule, source = rt.tuned_schedule(spec.name, problem)
    row["schedule_source"] = source
    with prepare(rt.device, spec, schedule, problem, inputs) as prepared:
        kernel = prepared.time(warmup=3, reps=30)
        row["kernel_ms"], row["kernel_method"] = kernel.median_ns / 1e6, kernel.method  # GPU timestamps
        outs = [arg.nbytes for arg in prepared.launch.args if arg.output]
    host_inputs = [np.ascontiguousarray(a) for a in args if isinstance(a, np.ndarray)]
    row["floor_ms"] = floor.seconds(host_inputs, outs) * 1e3  # plain wgpu-py, same transfers
    row["numpy_overhead_us"] = (row["numpy_ms"] - row["floor_ms"] - row["kernel_ms"]) * 1e3
    key = (spec.name, schedule, problem)
    plan = next(p for p in rt._caller._plans.values() if (p.spec.name, p.schedule, p.problem) == key)
    if costs:
        row.update(host_costs(rt, plan, lambda: fn(*args, **kwargs), on_device, host_inputs, outs))
    if torch is not None:
        row.update(torch_row(torch, spec, problem, inputs, schedule))
    for a in device_args:
        a.release()
    return row


def _plan_inputs(rt, method, args, kwargs):
    """The kernel's spec, problem and inputs dict for a runtime call (as the runtime builds them)."""
    name = KERNEL.get(method, method)
    spec = catalog.get(name)
    if name == "gemm":
        (a, b) = args
        return spec, spec.problem(m=a.shape[0], k=a.shape[1], n=b.shape[1]), {"a": a, "b": b}
    if name == "gemv":
        (a, x) = args
        return spec, spec.problem(m=a.shape[0], n=a.shape[1]), {"a": a, "x": x}
    if name == "fft":
        (s,) = args
        pts = s.view(np.float32).reshape(s.shape[0], s.shape[1], 2)
        return spec, spec.problem(n=s.shape[1], batch=s.shape[0]), {"x": pts}
    if name == "topk":
        (x,) = args
        return spec, spec.problem(n=x.shape[0], k=kwargs["k"]), {"x": x}
    q, v, rho, decay = args
    b, h, t, l_dim = q.shape
    dims = {"B": b, "H": h, "VH": v.shape[1], "T": t, "L": l_dim, "E": v.shape[3]}
    return spec, spec.problem(**dims), {"query": q, "value": v, "rho": rho, "decay": decay}


def torch_row(torch, spec, problem, inputs, schedule) -> dict:
    dev = torch.device("cuda")
    t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in inputs.items()}
    fn, checks, label = vendor_fn(torch, spec.name, problem, t, schedule)
    if fn is None:
        return {"vendor": label}

    def on_device():
        fn()
        torch.cuda.synchronize()

    row = {"vendor": label, "vendor_device_ms": per_call(on_device) * 1e3,
           "vendor_method": "host wall per call: op + torch.cuda.synchronize on device tensors"}  # fmt: skip
    if spec.name != "recurrent":

        def from_numpy():
            t.update({k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in inputs.items()})
            got = fn()
            got = got if isinstance(got, dict) else {checks[0]: got}
            [got[c].cpu().numpy() for c in checks]

        row["vendor_numpy_ms"] = per_call(from_numpy) * 1e3
        row["vendor_method"] += "; numpy: host wall per call, H2D + op + D2H"
    return row


def stub_us(fn, seconds: float = 0.3, rounds: int = 5) -> float:
    """Per-call microseconds of `fn` under `no_gpu` (the fastest of `rounds` timed batches)."""
    fn()
    start = time.perf_counter()
    fn()
    calls = max(1, int(seconds / rounds / max(time.perf_counter() - start, 1e-7)))
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def wgpu_calls(fn, calls: int = 3) -> float:
    """wgpu-native calls per call of `fn` (after one call that plans and fills the pool)."""
    fn()
    with count_wgpu_calls() as counts:
        for _ in range(calls):
            fn()
    return sum(counts.values()) / calls


def host_costs(rt, plan, from_numpy, on_device, host_inputs: list, out_sizes: list[int]) -> dict:
    """Where a call's host time goes: the runtime's own Python (wgpu stubbed, less the
    stubbed plain floor doing the same calls) and its wgpu-native calls per call against
    plain wgpu-py's for the same passes (the plan's) and transfers (persistent buffers)."""
    gpu, use = rt.device.device, rt.device._wgpu.BufferUsage
    passes = plan.last[1]
    writes = [(gpu.create_buffer(size=a.nbytes, usage=use.STORAGE | use.COPY_DST), a) for a in host_inputs]
    targets = [gpu.create_buffer(size=n, usage=use.STORAGE | use.COPY_SRC) for n in out_sizes]
    stages = [gpu.create_buffer(size=n, usage=use.MAP_READ | use.COPY_DST) for n in out_sizes]
    reads = list(zip(targets, stages, out_sizes, strict=True))
    row = {
        "device_wgpu_calls": wgpu_calls(on_device),
        "device_floor_wgpu_calls": wgpu_calls(lambda: plain_dispatch(gpu, passes)),
        "numpy_wgpu_calls": wgpu_calls(from_numpy),
        "numpy_floor_wgpu_calls": wgpu_calls(lambda: plain_transfer(gpu, writes, passes, reads)),
    }
    for buffer in [b for b, _ in writes] + targets + stages:
        buffer.destroy()
    with no_gpu(rt) as stub:
        idle = [(None, None, (1, 1, 1))] * len(passes)
        row["device_python_us"] = stub_us(on_device) - stub_us(lambda: plain_dispatch(stub, idle))
        if sum(out_sizes) <= NUMPY_STUB_MAX:
            stub_writes = [(None, a) for a in host_inputs]
            stub_reads = [(None, NoBuffer(n), n) for n in out_sizes]
            floor_us = stub_us(lambda: plain_transfer(stub, stub_writes, idle, stub_reads))
            row["numpy_python_us"] = stub_us(from_numpy) - floor_us
    return row


# -- chains -----------------------------------------------------------------------------------
def chains(rt, torch, quick: bool) -> list[dict]:
    g = np.random.default_rng(1)
    rows = []
    for e in (96,) if quick else (96, 768):
        steps, h, l_dim = 64, 8, 64
        q = g.standard_normal((1, h, steps, l_dim)).astype(np.float32)
        v = g.standard_normal((1, 1, steps, e)).astype(np.float32)
        decay = np.linspace(0.85, 0.95, h).astype(np.float32)
        qs = [rt.asarray(np.ascontiguousarray(q[:, :, i : i + 1])) for i in range(steps)]
        vs = [rt.asarray(np.ascontiguousarray(v[:, :, i : i + 1])) for i in range(steps)]
        dec, rho0 = rt.asarray(decay), rt.asarray(np.zeros((1, h, l_dim, e), np.float32))

        def chain(qs=qs, vs=vs, dec=dec, rho0=rho0):
            rho = rho0
            for qi, vi in zip(qs, vs, strict=True):
                _, rho = rt.recurrent_attention(qi, vi, rho, dec)
            rt.synchronize()

        row = {"case": f"recurrent stepwise T=64 E={e}", "method": "host wall, one sync per chain, per call"}
        row["device_ms"] = per_call(chain, least=5) * 1e3 / steps
        if torch is not None:
            row.update(_fla_chain(torch, q, v, decay, steps))
        rows.append(row)
    s = 128 if quick else 1024
    a, b = (g.standard_normal((s, s)).astype(np.float32) for _ in range(2))
    da, db = rt.asarray(a), rt.asarray(b)
    block = rt.tuned_schedule("topk", catalog.get("topk").problem(n=s * s, k=8))[0].workgroup_size

    def chain2():
        rt.topk(rt.gemm(da, db).reshape(-1), 8, block=block)
        rt.synchronize()

    row = {"case": f"gemm {s}^3 -> topk k=8", "method": "host wall, one sync per chain, per call"}
    row["device_ms"] = per_call(chain2) * 1e3 / 2
    if torch is not None:
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()

        def torch_chain():
            torch.topk((ta @ tb).view(-1, block), 8, dim=1)
            torch.cuda.synchronize()

        row["vendor_device_ms"] = per_call(torch_chain) * 1e3 / 2
        row["vendor"] = "torch"
    rows.append(row)
    return rows


def _fla_chain(torch, q, v, decay, steps) -> dict:
    try:
        from fla.ops.rwkv6 import fused_recurrent_rwkv6
    except ImportError as exc:
        return {"vendor": f"fla not importable: {exc}"[:80]}
    dev = torch.device("cuda")
    h, l_dim, e = q.shape[1], q.shape[3], v.shape[3]
    r = torch.from_numpy(q).to(dev).permute(0, 2, 1, 3).contiguous()
    dk = torch.from_numpy(decay).to(dev).view(1, 1, h, 1)
    k = (r * dk).contiguous()
    vv = torch.from_numpy(v).to(dev).permute(0, 2, 1, 3).expand(1, steps, h, e).contiguous()
    w = torch.log(dk).expand(1, steps, h, l_dim).contiguous()
    u = torch.zeros(h, l_dim, device=dev)
    per = [(r[:, i : i + 1].contiguous(), k[:, i : i + 1].contiguous(), vv[:, i : i + 1].contiguous(),
            w[:, i : i + 1].contiguous()) for i in range(steps)]
    rho0 = torch.zeros(1, h, l_dim, e, device=dev)

    def chain():
        state = rho0
        for ri, ki, vi, wi in per:
            _, state = fused_recurrent_rwkv6(ri, ki, vi, wi, u, scale=1.0, initial_state=state, output_final_state=True)
        torch.cuda.synchronize()

    return {"vendor": "fla fused_recurrent_rwkv6 stepwise", "vendor_device_ms": per_call(chain, least=5) * 1e3 / steps}


def gemm_chains(rt, torch, quick: bool, flush_values: list[int], length: int = 10) -> list[dict]:
    """Chains of `length` dependent gemms (c = c @ b) with one sync, per call, for each
    recorded-calls batch size (the runtime's `flush_calls`), and torch's same chain."""
    g = np.random.default_rng(2)
    rows = []
    for s in (64, 128) if quick else (256, 1024):
        a = g.standard_normal((s, s)).astype(np.float32)
        b = (g.standard_normal((s, s)) / np.sqrt(s)).astype(np.float32)  # keeps the chain's values bounded
        da, db = rt.asarray(a), rt.asarray(b)

        def chain(da=da, db=db):
            c = da
            for _ in range(length):
                c = rt.gemm(c, db)
            rt.synchronize()

        default = rt._caller.flush_calls
        for flush in flush_values:
            rt._caller.flush_calls = flush
            row = {"case": f"gemm {s}^3 chain of {length}, flush_calls={flush}",
                   "method": f"host wall of {length} dependent calls + one synchronize (default wait), / {length}"}
            row["device_ms"] = per_call(chain) * 1e3 / length
            rows.append(row)
        rt._caller.flush_calls = default
        if torch is not None:
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()

            def torch_chain(ta=ta, tb=tb):
                c = ta
                for _ in range(length):
                    c = c @ tb
                torch.cuda.synchronize()

            for row in rows[-len(flush_values):]:
                row["vendor"] = "torch"
                row["vendor_device_ms"] = per_call(torch_chain) * 1e3 / length
        da.release()
        db.release()
    return rows


def gemm_dispatch_floors(rt, torch, quick: bool, count: int = 10) -> dict[str, dict]:
    """runtime_floors.dispatch_floors for the runtime's gemm plans of the chains' sizes: the
    GPU's cost of a dependent dispatch beside the kernel's own, by size; with torch, cuBLAS
    kernel-only the same two ways (`vendor_kernel_gpu`)."""
    out = {}
    for s in (64,) if quick else (256, 1024):
        da, db = (rt.asarray(np.ones((s, s), np.float32)) for _ in range(2))
        outputs = [rt.gemm(da, db) for _ in range(count)]  # live at once: `count` bind groups, distinct outputs
        rt.synchronize()
        plan = next(p for p in rt._caller._plans.values() if p.spec.name == "gemm" and p.problem.as_dict()["m"] == s)
        bound = [calls for calls, _ in list(plan.bind_sets.values())[-count:]]
        if len(plan.passes) == 1 and len(bound) == count:  # one pass a call, as gemm's schedules are
            groups = [calls[0][1] for calls in bound]
            reps = 3 if quick else 40
            out[f"gemm {s}^3"] = dispatch_floors(rt.device.device, bound[0][0][0], groups, bound[0][0][2], count, reps)
            if torch is not None:
                out[f"gemm {s}^3"]["vendor"] = vendor_kernel_gpu(torch, s, count)
        for array in (da, db, *outputs):
            array.release()
    return out


def vendor_kernel_gpu(torch, s: int, count: int) -> dict[str, float]:
    """cuBLAS's kernel-only microseconds of one s^3 fp32 matmul, and of each of `count`
    dependent ones (each reads the one before's output: on one stream they run in order
    either way), by farm bench's CUDA-graph replay (farm.cli.vendor.vendor_kernel_ns)."""
    from farm.cli.vendor import vendor_kernel_ns

    a = torch.ones(s, s, device="cuda")
    b = torch.full((s, s), 1.0 / s, device="cuda")
    ping, pong = torch.empty_like(a), torch.empty_like(a)

    def one():
        torch.mm(a, b, out=ping)

    def chain():
        source = a
        for i in range(count):
            target = ping if i % 2 == 0 else pong
            torch.mm(source, b, out=target)
            source = target

    alone, method = vendor_kernel_ns(torch, one, reps=20)
    dependent, _ = vendor_kernel_ns(torch, chain, reps=20)
    return {"alone_us": alone / 1e3, "dependent_us": dependent / 1e3 / count, "method": method}


def recorded_host_cost(rt, quick: bool, flush_values: list[int]) -> list[dict]:
    """The host cost of one recorded DeviceArray call, no sync: 2000 (--quick: 200) rt.gemm(DeviceArray,
    DeviceArray) back to back (each output dropped), host wall (perf_counter) and this
    thread's CPU time (thread_time) around the loop, / calls, the median of 5 loops; the
    work is waited for outside the loop. Through wgpu-native's C API (the runtime's path)
    and through wgpu-py's objects (its fallback), for each batch size."""
    g = np.random.default_rng(3)
    s, calls = (64, 200) if quick else (256, 2000)
    da, db = (rt.asarray(g.standard_normal((s, s)).astype(np.float32)) for _ in range(2))
    caller = rt._caller
    default_flush, native_encoder = caller.flush_calls, caller._native
    rows = []
    for path in ("c api", "wgpu-py objects"):
        rt.synchronize()
        caller._native = native_encoder if path == "c api" else None
        _forget_bind_groups(caller)  # a path's kept bind groups carry its handles, not the other's
        if path == "c api" and native_encoder is None:
            continue
        for flush in flush_values:
            caller.flush_calls = flush

            def loop():
                for _ in range(calls):
                    rt.gemm(da, db)

            loop()  # plans, fills the pool and the kept bind groups
            rt.synchronize()
            walls, cpus = [], []
            for _ in range(5):
                t0, c0 = time.perf_counter(), time.thread_time()
                loop()
                walls.append(time.perf_counter() - t0)
                cpus.append(time.thread_time() - c0)
                rt.synchronize()
            rows.append({
                "case": f"recorded gemm {s}^3 through {path}, flush_calls={flush}",
                "method": f"host wall of {calls} recorded calls, no sync, / {calls} (median of 5); cpu: thread_time",
                "host_us": statistics.median(walls) / calls * 1e6,
                "cpu_us": statistics.median(cpus) / calls * 1e6,
            })
    caller.flush_calls, caller._native = default_flush, native_encoder
    _forget_bind_groups(caller)
    da.release()
    db.release()
    return rows


def _forget_bind_groups(caller) -> None:
    """Drop every plan's kept bind groups: switching the runtime's encoding path mid-life (the
    runtime itself never does) would otherwise reuse groups made without raw C handles."""
    for plan in caller._plans.values():
        plan.bind_sets.clear()
        plan.last = ((), (), None)


def summary(result: dict) -> list[dict]:
    """One row per measure of the hot path's targets: farm's figure, torch's (or FLA's),
    their ratio and the method of each (rows whose data this run lacks are left out)."""
    rows = []
    kernels = {row["case"]: row for row in result["kernels"]}
    sync = "host wall per call, sync each call (median)"

    def add(measure, farm, farm_method, vendor=None, vendor_method="", target=""):
        rows.append({"measure": measure, "farm": farm, "farm_method": farm_method, "vendor": vendor,
                     "vendor_method": vendor_method, "target": target,
                     "ratio": farm / vendor if farm is not None and vendor else None})  # fmt: skip

    for row in result.get("recorded", []):
        add(f"{row['case']}: host us per call", row["host_us"], row["method"], target="<= 25 us")
        add(f"{row['case']}: thread cpu us per call", row["cpu_us"], row["method"])
    for row in result.get("gemm_chains", []) + result.get("chains", []):
        add(f"{row['case']}: ms per call", row["device_ms"], row["method"], row.get("vendor_device_ms"),
            f"{row.get('vendor', '-')}: the same chain on device tensors, one synchronize", "<= 1.2x")  # fmt: skip
    for case, row in kernels.items():
        vendor = row.get("vendor", "torch")
        vendor_method = f"{vendor}: op + torch.cuda.synchronize on device tensors"
        tiny = "(tiny)" in case
        if not tiny:
            target = "<= 2.0x" if case.split(" (")[0] in ("gemm 256^3", "gemv 4096^2") or case.startswith("fft") else ""
            if case in ("gemm 4096^3", "gemv 16384^2") or case.startswith("fft"):
                target = (target + "; large: no worse than before").lstrip("; ")
            add(f"{case}, DeviceArrays, blocking sync: ms", row["device_ms"], sync + ", spin_wait_us=0",
                row.get("vendor_device_ms"), vendor_method, target)  # fmt: skip
            spin = sync + f", spin_wait_us={SPIN_WAIT_S * 1e6:.0f}"
            add(f"{case}, DeviceArrays, spinning sync: ms", row["device_spin_ms"], spin,
                row.get("vendor_device_ms"), vendor_method, target)  # fmt: skip
        add(f"{case}, numpy in and out: ms", row["numpy_ms"],
            "host wall per call (upload, call, read back; the read spinning up to the default spin_wait_us)",
            row.get("vendor_numpy_ms"), f"{vendor}: H2D + op + D2H", "<= 2.5x" if tiny else "")  # fmt: skip
        add(f"{case}, numpy in and out, read not spinning: ms", row["numpy_block_ms"],
            "as numpy in and out, the read waiting for wgpu-py's poller thread at once (read_spin_s=0)",
            row.get("vendor_numpy_ms"), f"{vendor}: H2D + op + D2H", "<= 2.5x" if tiny else "")  # fmt: skip
        add(f"{case}, kernel alone: ms", row["kernel_ms"], f"GPU {row['kernel_method']}s")
    floors = {**result["wgpu_floors"], **{f"torch {k}": v for k, v in result.get("torch_floors", {}).items()}}
    names = {"empty_submit_wait_us": "empty submission + blocking wait", "empty_submit_spin_us":
             "empty submission + spinning wait", "empty_submit_only_us": "empty submission alone",
             "submit_wait_us": "one trivial dispatch + blocking wait", "submit_spin_us":
             "one trivial dispatch + spinning wait", "submit_only_us": "one trivial dispatch, submit alone",
             "torch op_sync_us": "torch op + synchronize", "torch sync_us": "torch synchronize alone"}  # fmt: skip
    for key, label in names.items():
        if key in floors:
            add(f"floor: {label}: us", floors[key], "host wall per call, plain wgpu-py (torch: torch) (median)")
    for key, value in result.get("c_api", {}).items():
        add(f"C API: {key}", value, "host wall of a loop of 2000 calls through wgpu-py's cffi lib, / 2000")
    for case, floors in result.get("dispatch_floors", {}).items():
        vendor = floors.get("vendor", {})
        like = {"alone_us": vendor.get("alone_us"), "dependent_one_pass_us": vendor.get("dependent_us")}
        for key, value in floors.items():
            if key != "vendor":
                add(f"GPU: {case} a dispatch, {key}", value,
                    "kernel-only: GPU timestamps at the first pass's begin and the last's end / dispatches (median)",
                    like.get(key), f"cuBLAS kernel-only, {vendor['method']}" if like.get(key) else "")  # fmt: skip
    return rows


def summary_markdown(rows: list[dict]) -> str:
    def num(v):
        return "-" if v is None else f"{v:.4g}"

    lines = ["| measure | farm | torch/FLA | ratio | target | farm's method | torch's method |", "|" + " --- |" * 7]
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        lines.append(f"| {r['measure']} | {num(r['farm'])} | {num(r['vendor'])} | {ratio} | {r['target'] or '-'} "
                     f"| {r['farm_method']} | {r['vendor_method'] or '-'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


# -- report -----------------------------------------------------------------------------------
def markdown(result: dict) -> str:
    lines = [f"# ForgeRuntime per call ({result['adapter']}, {result['date']})", "", "## Floors", ""]
    lines += [f"- {k}: {v:.3g}" for k, v in {**result["wgpu_floors"], **result.get("torch_floors", {})}.items()]
    lines += [f"- runtime {k}: {v:.3g}" for k, v in result["runtime_transfers"].items()]
    if result.get("runtime_python_us") is not None:
        lines += [f"- runtime Python per call, wgpu stubbed, less the stubbed floor (recurrent E=96 on DeviceArrays, "
                  f"sync each call): {result['runtime_python_us']:.3g} us"]
    lines += ["", "## Per call (host wall with a sync each call; kernel_ms by GPU timestamps; floor_ms: plain",
              "wgpu-py doing the same transfers; overheads: numpy_ms - floor_ms - kernel_ms and",
              "device_ms - kernel_ms - submit_wait; numpy_out_ms: the numpy calls writing into reused",
              "out= arrays; device_ms: the DeviceArray calls with spin_wait_us=0 (the sync blocking at once);",
              f"device_spin_ms: with spin_wait_us={SPIN_WAIT_S * 1e6:.0f}, the sync polling without sleeping first;",
              "the chain rows use the runtime's default wait)", ""]
    cols = ["numpy_ms", "numpy_out_ms", "floor_ms", "numpy_overhead_us", "device_ms", "kernel_ms",
            "device_overhead_us", "device_spin_ms", "vendor_numpy_ms", "vendor_device_ms"]
    ratios = "numpy/vendor | numpy out=/vendor | device/vendor | spin/vendor"
    lines += ["| case | " + " | ".join(cols) + f" | {ratios} | schedule |", "|" + " --- |" * 16]

    def cell(row, key):
        return f"{row[key]:.4g}" if isinstance(row.get(key), float) else "-"

    def ratio(row, a, b):
        ok = isinstance(row.get(a), float) and isinstance(row.get(b), float)
        return f"{row[a] / row[b]:.2f}x" if ok else "-"

    for row in result["kernels"] + result.get("chains", []):
        lines.append(
            f"| {row['case']} | " + " | ".join(cell(row, c) for c in cols)
            + f" | {ratio(row, 'numpy_ms', 'vendor_numpy_ms')} | {ratio(row, 'numpy_out_ms', 'vendor_numpy_ms')}"
            + f" | {ratio(row, 'device_ms', 'vendor_device_ms')}"
            + f" | {ratio(row, 'device_spin_ms', 'vendor_device_ms')}"
            + f" | {row.get('schedule_source', '-')} |"
        )
    lines += ["", "## Where the host time goes (the runtime's own Python: wgpu stubbed, less the stubbed plain",
              "floor; wgpu-native calls per call: the runtime / plain wgpu-py for the same passes and transfers)", "",
              "| case | device_python_us | wgpu calls, DeviceArrays + sync | numpy_python_us | wgpu calls, numpy |",
              "|" + " --- |" * 5]

    def calls(row, path):
        runtime, floor = row.get(f"{path}_wgpu_calls"), row.get(f"{path}_floor_wgpu_calls")
        return f"{runtime:.3g} / {floor:.3g}" if runtime is not None else "-"

    for row in result["kernels"]:
        lines.append(f"| {row['case']} | {cell(row, 'device_python_us')} | {calls(row, 'device')} | "
                     f"{cell(row, 'numpy_python_us')} | {calls(row, 'numpy')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=None, help="the tuned winners' database URL, or none (default schedules)")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--settle-s", type=float, default=8.0)
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="only the kernel cases whose label contains TEXT (repeatable)")
    parser.add_argument("--skip-costs", action="store_true",
                        help="skip where the host time goes (the stubbed-wgpu runs: most of a row's time)")
    parser.add_argument("--skip-chains", action="store_true")
    parser.add_argument("--flush-calls", default="1,8,32", metavar="N,N,...",
                        help="recorded calls per submission to measure the gemm chains and the recorded call with")
    args = parser.parse_args()
    try:
        flush_values = [int(v) for v in args.flush_calls.split(",")]
        if min(flush_values) < 1:
            raise ValueError
    except ValueError:
        print(f"runtime_calls: error: --flush-calls: expected integers >= 1, got {args.flush_calls!r}", file=sys.stderr)
        return 2
    absent = tempfile.TemporaryDirectory()
    db = f"sqlite:///{absent.name}/none.db" if args.db in ("none", "None", "") else args.db
    rt = ForgeRuntime(db=db)
    if rt.profile.is_cpu and not args.allow_cpu:
        print(f"refusing to benchmark on CPU adapter {rt.profile.summary}; pass --allow-cpu", file=sys.stderr)
        return 2
    try:
        import torch

        from farm.cli.vendor import set_vendor_fp32

        set_vendor_fp32(torch, "ieee")  # fp32 multiplied in fp32, as farm bench's vendor (cuBLAS and Triton)
        if not torch.cuda.is_available():
            print("torch has no CUDA device: the torch and FLA columns are skipped", flush=True)
            torch = None
    except ImportError:
        print("torch is not importable: the torch and FLA columns are skipped", flush=True)
        torch = None
    settle_clocks(rt.device, args.settle_s)
    big = (1 << 22) if args.quick else (1 << 28)
    from farm.gpu import native

    result = {"adapter": rt.profile.summary, "date": time.strftime("%Y-%m-%d"), "wgpu_floors": wgpu_floors(big),
              "c_api_path": native.available(), "pinned": native.PINNED, "default_flush_calls": rt._caller.flush_calls,
              "default_spin_wait_us": rt.spin_wait_s * 1e6}  # fmt: skip
    if torch is not None:
        result["torch_floors"] = torch_floors(torch, big)
    result["runtime_transfers"] = runtime_transfers(rt, big)
    result["kernels"] = []
    floor = TransferFloor()
    submit_wait = result["wgpu_floors"]["submit_wait_us"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result["recorded"] = recorded_host_cost(rt, args.quick, flush_values)
    for row in result["recorded"]:
        print(json.dumps(row), flush=True)
    for label, method, a, kw in cases(args.quick):
        if args.only and not any(text in label for text in args.only):
            continue
        row = runtime_row(rt, torch, floor, label, method, a, kw, costs=not args.skip_costs)
        row["device_overhead_us"] = (row["device_ms"] - row["kernel_ms"]) * 1e3 - submit_wait
        row["device_spin_overhead_us"] = (row["device_spin_ms"] - row["kernel_ms"]) * 1e3 - submit_wait
        result["kernels"].append(row)
        print(json.dumps(result["kernels"][-1]), flush=True)
        (out / "runtime-calls.json").write_text(json.dumps(result, indent=2))  # what a cut-short run had
    gemm_plans = [p for p in rt._caller._plans.values()
                  if p.spec.name == "gemm" and p.last[2] and p.last[2][0][1] is not None]  # fmt: skip
    if gemm_plans:  # the smallest gemm's pass: the GPU work the timed loops queue stays short
        gemm_plan = min(gemm_plans, key=lambda p: p.problem.as_dict()["m"])
        result["c_api"] = c_api_costs(rt.device.device, gemm_plan.last[2][0])
    result["dispatch_floors"] = gemm_dispatch_floors(rt, torch, args.quick)
    if not args.skip_chains:
        result["gemm_chains"] = gemm_chains(rt, torch, args.quick, flush_values)
        result["chains"] = chains(rt, torch, args.quick)
    e96 = next((row for row in result["kernels"] if row["case"] == "recurrent E=96"), {})
    result["runtime_python_us"] = e96.get("device_python_us")  # the runtime's own Python per call, the headline figure
    result["summary"] = summary(result)
    (out / "runtime-calls.json").write_text(json.dumps(result, indent=2))
    with open(out / "runtime-calls-summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(result["summary"][0]))
        writer.writeheader()
        writer.writerows(result["summary"])
    text = markdown(result) + "\n## Summary: the hot path's measures, farm against torch (FLA for recurrent)\n\n"
    text += summary_markdown(result["summary"])
    (out / "runtime-calls.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
