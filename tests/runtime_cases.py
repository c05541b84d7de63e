"""Small inputs for every built-in ForgeRuntime method, shared by the DeviceArray tests
(tests/test_runtime_device.py) and the per-call cost tests (tests/test_runtime_costs.py),
and a way to run a test's work on several threads at once."""

import threading

import numpy as np

from farm.catalog.ternary_gemv import pack_codes


def rng(seed):
    return np.random.default_rng(seed)


def f32(*shape, seed=0):
    return rng(seed).standard_normal(shape).astype(np.float32)


def errors_of_threads(work, count: int = 4) -> list[Exception]:
    """Run `work(index)` on `count` threads at once; the exceptions they raised."""
    errors: list[Exception] = []

    def run(index):
        try:
            work(index)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


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
