"""A program that keeps its data on the GPU between ForgeRuntime calls.

Scores a batch of queries against a key matrix (gemm), keeps the best 8 scores (topk),
then runs a recurrence over 64 steps whose state never leaves the GPU, and checks both
against numpy. Runs on any adapter (lavapipe included) with the winners tuned for it, or
the default schedules when none are:

    python examples/device_chain.py [--db URL]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from farm import ForgeRuntime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=None, help="winners database (default: $FARM_DATABASE_URL or $FARM_HOME)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with ForgeRuntime(db=args.db) as rt:
        queries = rng.standard_normal((64, 96)).astype(np.float32)
        keys = rng.standard_normal((96, 128)).astype(np.float32)
        start = time.perf_counter()
        scores = rt.gemm(rt.asarray(queries), rt.asarray(keys))  # stays on the GPU
        best = rt.topk(scores.reshape(-1), k=8).numpy()  # the one wait
        want = np.sort((queries.astype(np.float64) @ keys).reshape(-1), kind="stable")[::-1][:8]
        print(f"gemm -> topk: {best.size} values in {1e3 * (time.perf_counter() - start):.1f} ms; "
              f"largest {best[0]:.4f} (numpy {want[0]:.4f})")
        np.testing.assert_allclose(best, want, rtol=1e-3, atol=1e-3)

        heads, steps, latent, embd = 4, 64, 16, 32
        q = rng.standard_normal((1, heads, steps, latent)).astype(np.float32)
        v = rng.standard_normal((1, 1, steps, embd)).astype(np.float32)
        decay = np.linspace(0.8, 0.95, heads).astype(np.float32)
        rho = rt.asarray(np.zeros((1, heads, latent, embd), np.float32))
        on_gpu_decay = rt.asarray(decay)
        start = time.perf_counter()
        for t in range(steps):
            _, rho = rt.recurrent_attention(q[:, :, t : t + 1].copy(), v[:, :, t : t + 1].copy(), rho, on_gpu_decay)
        final = rho.numpy()
        elapsed = time.perf_counter() - start
        _, whole = rt.recurrent_attention(q, v, decay=decay)
        error = float(np.abs(final - whole).max())
        print(f"recurrence: {steps} steps on the GPU in {1e3 * elapsed:.1f} ms, max |stepwise - one call| {error:.2e}")
        assert error < 1e-3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
