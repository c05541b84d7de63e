"""The differential oracle: run a schedule on seed-derived inputs and compare every
output with the numpy reference. Only certified schedules may win."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from farm import catalog
from farm.catalog import KernelSpec
from farm.gpu import Device, GpuError
from farm.oracle.launch import Prepared, prepare
from farm.parallel import numpy_pool
from farm.schedule import InvalidSchedule, Problem, Schedule, Status
from farm.trial import ErrorMetrics

# Outputs above PARALLEL_MIN elements are compared in CHUNK-element pieces on the shared
# numpy pool (farm.parallel; numpy releases the GIL): on one thread a 4096^2 gemm output's
# comparison is most of a tuning trial's CPU time.
CHUNK = 1 << 20
PARALLEL_MIN = 4 * CHUNK


@dataclass(frozen=True)
class _Partial:
    """Sums and maxima of one piece, combinable; `close` is the tolerance verdict."""

    n: int
    max_abs: float
    sum_abs: float
    sum_sq: float
    max_rel: float
    close: bool


def _partial(a: np.ndarray, b: np.ndarray, atol: float | None, rtol: float | None) -> _Partial:
    work = np.float32 if a.dtype == b.dtype == np.float32 else np.float64
    a, b = a.astype(work, copy=False), b.astype(work, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - b)
        magnitude = np.abs(b)
        finite = bool(np.isfinite(diff).all())
        if not finite:  # slow path, only when NaN/Inf are present
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            diff = np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff)).astype(work)
            # a non-finite reference is matched only by the same value (np.isclose's rule)
            magnitude = np.where(np.isfinite(b), magnitude, 0.0).astype(work)
        close = True
        if atol is not None:
            bound = atol + rtol * magnitude
            if not finite:
                bound = np.where(np.isfinite(b), bound, 0.0)
            close = bool((diff <= bound).all())
        scale = np.maximum(magnitude, 1e-6)
        return _Partial(
            n=int(a.size),
            max_abs=float(diff.max()),
            sum_abs=float(diff.sum(dtype=np.float64)),
            sum_sq=float(np.square(diff, dtype=np.float64).sum()),
            max_rel=float((diff / scale).max()),
            close=close,
        )


def _measure(
    actual: np.ndarray, expected: np.ndarray, atol: float | None = None, rtol: float | None = None
) -> tuple[ErrorMetrics, bool]:
    a, b = np.ravel(actual), np.ravel(expected)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: actual {np.shape(actual)} vs expected {np.shape(expected)}")
    if a.size == 0:
        return ErrorMetrics(), True
    if a.size < PARALLEL_MIN:
        parts = [_partial(a, b, atol, rtol)]
    else:
        bounds = range(0, a.size, CHUNK)
        parts = list(numpy_pool().map(lambda i: _partial(a[i : i + CHUNK], b[i : i + CHUNK], atol, rtol), bounds))
    n = sum(p.n for p in parts)
    with np.errstate(invalid="ignore", over="ignore"):
        metrics = ErrorMetrics(
            max_abs=max(p.max_abs for p in parts),
            mean_abs=sum(p.sum_abs for p in parts) / n,
            rmse=float(np.sqrt(sum(p.sum_sq for p in parts) / n)),
            max_rel=max(p.max_rel for p in parts),
        )
    return metrics, all(p.close for p in parts)


def error_metrics(actual: np.ndarray, expected: np.ndarray) -> ErrorMetrics:
    """max_abs, mean_abs, rmse and max_rel (relative to max(|expected|, 1e-6)); sums in float64.

    Non-finite values compare equal when both sides hold the same one (NaN with NaN,
    +Inf with +Inf); any other mismatch involving them is an infinite error. Two float32
    arrays are differenced in float32 (the difference of nearby float32s is exact).
    """
    return _measure(actual, expected)[0]


def worst(metrics: list[ErrorMetrics]) -> ErrorMetrics:
    if not metrics:
        return ErrorMetrics()
    return ErrorMetrics(*(max(getattr(m, f) for m in metrics) for f in ("max_abs", "mean_abs", "rmse", "max_rel")))


@dataclass(frozen=True)
class Certification:
    status: Status
    metrics: ErrorMetrics
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


def compare(
    spec: KernelSpec, problem: Problem, outputs: dict[str, np.ndarray], expected: dict[str, np.ndarray]
) -> Certification:
    """Status OK iff every output is within the kernel's tolerance (exact where exact)."""
    metrics = []
    bad = []
    for name, want in expected.items():
        got = outputs[name]
        if got.shape != want.shape:
            return Certification(
                Status.WRONG_RESULT,
                ErrorMetrics(np.inf, np.inf, np.inf, np.inf),
                f"{name}: shape {got.shape} != reference {want.shape}",
            )
        if spec.exact:
            m, close = error_metrics(got, want), bool(np.array_equal(got, want, equal_nan=True))
        else:
            atol, rtol = spec.tolerance(problem)
            m, close = _measure(got, want, atol, rtol)  # np.allclose's test (equal_nan), in the metrics pass
        metrics.append(m)
        if not close:
            bad.append(f"{name}: max_abs {m.max_abs:.3g} max_rel {m.max_rel:.3g}")
    if bad:
        return Certification(Status.WRONG_RESULT, worst(metrics), "; ".join(bad))
    return Certification(Status.OK, worst(metrics))


def certify_prepared(prepared: Prepared, expected: dict[str, np.ndarray]) -> Certification:
    """Dispatch an already-prepared launch once and compare it with `expected`."""
    try:
        prepared.run()
        outputs = prepared.outputs()
    except GpuError as exc:
        return Certification(Status.RUNTIME_ERROR, ErrorMetrics(), str(exc))
    return compare(prepared.spec, prepared.problem, outputs, expected)


def certify(
    kernel: str | KernelSpec,
    schedule: Schedule,
    problem: Problem,
    device: Device | None = None,
    seed: int = 0,
) -> Certification:
    """Certify one (kernel, schedule, problem) on `device` against the numpy reference."""
    spec = catalog.get(kernel) if isinstance(kernel, str) else kernel
    device = device or Device()
    inputs = spec.generate(problem, seed)
    try:
        prepared = prepare(device, spec, schedule, problem, inputs)
    except InvalidSchedule as exc:
        return Certification(Status.INVALID_SCHEDULE, ErrorMetrics(), exc.reason)
    except GpuError as exc:
        status = Status.COMPILE_ERROR if exc.step in ("compile", "pipeline") else Status.RUNTIME_ERROR
        return Certification(status, ErrorMetrics(), str(exc))
    with prepared:
        expected = spec.reference(problem, schedule, inputs)
        return certify_prepared(prepared, expected)
