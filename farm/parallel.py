"""One shared thread pool for large numpy work, which releases the GIL: the oracle's chunked
comparisons and the gemm reference's row blocks (Ray workers run BLAS single-threaded)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

THREADS = max(1, min(8, os.cpu_count() or 1))
_pool: ThreadPoolExecutor | None = None


def numpy_pool() -> ThreadPoolExecutor:
    """The process's pool of THREADS threads, created on first use."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="farm-numpy")
    return _pool
