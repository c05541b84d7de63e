"""The vendor side of `farm bench` and the per-call timer both sides share: torch
expressions (cuBLAS, TF32 off unless asked: `set_vendor_fp32`; cuFFT, torch.topk, ternary/p64 in torch ops) and
flash-linear-attention for the recurrence (`vendor_fn`), timed kernel-only by CUDA-graph
replay or the profiler's kernel time (`vendor_kernel_ns`), and per call by host wall with
a sync each call (`median_call_ns`)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import numpy as np

VENDOR_FP32 = ("ieee", "tf32")  # how the vendor multiplies fp32 inputs; ours is always ieee
FP32_MATMUL = {"gemm", "gemv", "ternary_gemv", "p64_project", "recurrent"}  # vendors the choice reaches
_TRITON_ENV = ("TRITON_F32_DEFAULT", "TRITON_CACHE_DIR")
_ORIGINAL_ENV: dict[str, str | None] = {}  # before the first set_vendor_fp32: what "tf32" restores


def set_vendor_fp32(torch, precision: str) -> None:
    """Make the vendor multiply fp32 inputs in `precision`.
    "ieee" (the default, like ours): cuBLAS with TF32 off, and Triton's dots (flash-linear-
    attention's chunk kernels) in fp32 FMAs through TRITON_F32_DEFAULT, read when Triton
    compiles, with a cache directory of their own so that no binary compiled for TF32 is
    reused. "tf32": TF32 allowed in cuBLAS, and Triton's environment as it was (its dots in TF32
    where a kernel allows it); such rows fail fp32 tolerances (FLA chunk_rwkv6's context
    at T=1024 by far). Triton keeps compiled kernels in memory whatever the
    environment says: one precision per process."""
    if precision not in VENDOR_FP32:
        raise ValueError(f"vendor fp32 precision {precision!r} is not one of {', '.join(VENDOR_FP32)}")
    for name in _TRITON_ENV:
        _ORIGINAL_ENV.setdefault(name, os.environ.get(name))
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    for name, value in _ORIGINAL_ENV.items():  # back to the caller's environment first
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if not tf32:
        os.environ["TRITON_F32_DEFAULT"] = "ieee"
        home = os.environ.get("TRITON_HOME") or str(Path.home())
        base = os.environ.get("TRITON_CACHE_DIR") or str(Path(home) / ".triton" / "cache")
        os.environ["TRITON_CACHE_DIR"] = base + "-fp32-ieee"


def median_call_ns(fn, seconds: float = 0.3, least: int = 10) -> float:
    """Median host ns of `fn()` (which ends in a synchronize) over back-to-back calls."""
    import time

    fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < least or (time.perf_counter() - start < seconds and len(samples) < 2000):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(float(time.perf_counter_ns() - t0))
    return statistics.median(samples)


def vendor_kernel_ns(torch, fn, reps: int, replays: int = 20) -> tuple[float, str]:
    """The vendor's kernel-only ns per call: `fn` captured into a CUDA graph and replayed
    `replays` times back to back between two CUDA events, median over `reps` samples; where
    capture fails, the profiler's CUDA kernel time per call."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()  # warm up on the side stream: allocator, cuFFT plans, Triton autotuning
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except Exception:  # noqa: BLE001 - not capturable: fall back to the profiler
        torch.cuda.synchronize()
        return _profiler_kernel_ns(torch, fn, reps), "profiler kernel time"
    for _ in range(3):
        graph.replay()
    samples = []
    for _ in range(max(reps, 5)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e6 / replays)
    return statistics.median(samples), "cuda-graph replay"


def _profiler_kernel_ns(torch, fn, reps: int) -> float:
    from torch.profiler import ProfilerActivity, profile

    calls = max(reps, 5)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total_us = sum(e.self_device_time_total for e in prof.key_averages())
    return total_us * 1e3 / calls


FLA_CHUNK_FROM = 256  # T from which flash-linear-attention's chunked kernel is the vendor


def vendor_fn(torch, name, problem, t, schedule):
    """(callable, the outputs it must match, label) for kernel `name`: a torch expression,
    or flash-linear-attention's Triton kernel for recurrent; (None, (), why) when none."""
    if name == "gemm":
        return (lambda: torch.matmul(t["a"], t["b"])), ("c",), "torch"
    if name == "gemv":
        return (lambda: torch.mv(t["a"], t["x"])), ("y",), "torch"
    if name == "fft":
        x = torch.view_as_complex(t["x"].reshape(problem["batch"], problem["n"], 2).contiguous())
        return (lambda: torch.view_as_real(torch.fft.fft(x))), ("y",), "torch"
    if name == "topk":
        block, k = schedule.workgroup_size, problem["k"]
        x = t["x"]
        pad = (-x.numel()) % block
        xp = torch.nn.functional.pad(x, (0, pad), value=float(np.finfo(np.float32).min))
        return (lambda: torch.topk(xp.view(-1, block), k, dim=1).values.reshape(-1)), ("out",), "torch"
    if name == "p64_project":
        words = t["records"].view(-1, 16)
        return (lambda: words.to(torch.int64).to(torch.float32) @ t["weights"]), ("out",), "torch"
    if name == "ternary_gemv":
        m, k = problem["m"], problem["k"]
        w = t["w_packed"].view(m, -1)
        shifts = torch.arange(0, 32, 2, device=w.device, dtype=torch.int64)

        def ternary():
            codes = ((w.to(torch.int64).unsqueeze(-1) >> shifts) & 3).reshape(m, -1)[:, :k]
            dense = (codes == 1).to(torch.float32) - (codes == 2).to(torch.float32)
            return t["scale"] * (dense @ t["x"])

        return ternary, ("out",), "torch"
    if name == "recurrent":
        return _fla_recurrent(torch, problem, t)
    return None, (), "no torch equivalent"


def _fla_recurrent(torch, problem, t):
    """flash-linear-attention computing our recurrence exactly: r = q, k = decay·q,
    w = log(decay), u = 0, scale = 1, initial state rho; its `fused_recurrent_rwkv6` below
    T = FLA_CHUNK_FROM steps and its `chunk_rwkv6` from there (the faster of the two on a
    large GPU at each length). The mapped inputs are built once, outside the timed call (in
    fla's favour)."""
    try:
        from fla.ops.rwkv6 import chunk_rwkv6, fused_recurrent_rwkv6
    except ImportError as exc:
        return None, (), f"flash-linear-attention (fla-core) not importable: {exc}"[:120]
    b, h, vh, steps, l_dim, e = (problem[d] for d in ("B", "H", "VH", "T", "L", "E"))
    r = t["query"].permute(0, 2, 1, 3).contiguous()  # [B,T,H,L]
    decay = t["decay"].view(1, 1, h, 1)
    k = (r * decay).contiguous()
    v = t["value"].permute(0, 2, 1, 3).expand(b, steps, h, e).contiguous()
    w = torch.log(decay).expand(b, steps, h, l_dim).contiguous()
    u = torch.zeros(h, l_dim, device=r.device, dtype=torch.float32)
    rho = t["rho"].contiguous()

    chunked = steps >= FLA_CHUNK_FROM
    kernel = chunk_rwkv6 if chunked else fused_recurrent_rwkv6

    def fla():
        o, final = kernel(r, k, v, w, u, scale=1.0, initial_state=rho, output_final_state=True)
        return {"context": o.permute(0, 2, 1, 3), "rho": final}

    return fla, ("context", "rho"), f"fla {'chunk_rwkv6' if chunked else 'fused_recurrent_rwkv6'}"
