"""Small inputs for every built-in ForgeRuntime method, shared by the DeviceArray tests
(tests/test_runtime_device.py) and the per-call cost tests (tests/test_runtime_costs.py)."""

import numpy as np

from farm.catalog.ternary_gemv import pack_codes


def rng(seed):
    return np.random.default_rng(seed)


def f32(*shape, seed=0):
    return rng(seed).standard_normal(shape).astype(np.float32)


def method_cases(recurrent_state: bool = False) -> dict:
    """method -> (numpy args, kwargs). recurrent_attention gets rho and decay arrays with
    `recurrent_state` (four inputs, two outputs), else no rho and a constant decay."""
    codes = rng(3).integers(0, 3, size=(5, 40))
    records = rng(4).integers(0, 1000, size=(9, 16)).astype(np.uint32)
    state = (f32(1, 2, 5, 7, seed=2), f32(2)) if recurrent_state else (None, np.full(2, 0.9, np.float32))
    return {
        "gemv": ((f32(7, 33), f32(33, seed=1)), {}),
        "gemm": ((f32(5, 12), f32(12, 9, seed=1)), {}),
        "topk": ((f32(300),), {"k": 4}),
        "ternary_gemv": ((f32(40), pack_codes(codes), f32(5, seed=2)), {"m": 5, "k": 40}),
        "p64_project": ((records, f32(16, seed=5)), {}),
        "fft": (((f32(3, 16) + 1j * f32(3, 16, seed=1)).astype(np.complex64),), {}),
        "recurrent_attention": ((f32(1, 2, 6, 5), f32(1, 2, 6, 7, seed=1), *state), {}),
    }
