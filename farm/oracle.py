"""The differential oracle: run a schedule on seed-derived inputs and compare every
output with the numpy reference. Only certified schedules may win."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from farm import catalog
from farm.catalog import KernelSpec
from farm.gpu import Device, GpuError
from farm.launch import Prepared, prepare
from farm.schedule import InvalidSchedule, Problem, Schedule, Status


@dataclass(frozen=True)
class ErrorMetrics:
    max_abs: float = 0.0
    mean_abs: float = 0.0
    rmse: float = 0.0
    max_rel: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def error_metrics(actual: np.ndarray, expected: np.ndarray) -> ErrorMetrics:
    """max_abs, mean_abs, rmse and max_rel (relative to max(|expected|, 1e-6)), in float64.

    Non-finite values compare equal when both sides hold the same one (NaN with NaN,
    +Inf with +Inf); any other mismatch involving them is an infinite error.
    """
    a, b = np.ravel(actual), np.ravel(expected)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: actual {np.shape(actual)} vs expected {np.shape(expected)}")
    if a.size == 0:
        return ErrorMetrics()
    # Both sides float32 (the common case: GPU output vs a float32-cast reference): the
    # difference of two nearby float32s is exact in float32, and sums run in float64.
    work = np.float32 if a.dtype == b.dtype == np.float32 else np.float64
    a, b = a.astype(work, copy=False), b.astype(work, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - b)
        scale = np.abs(b)
        if not np.isfinite(diff).all():  # slow path, only when NaN/Inf are present
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            diff = np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff)).astype(work)
            scale = np.where(np.isnan(scale), 0.0, scale).astype(work)
        np.maximum(scale, 1e-6, out=scale)
        return ErrorMetrics(
            max_abs=float(diff.max()),
            mean_abs=float(diff.mean(dtype=np.float64)),
            rmse=float(np.sqrt(np.square(diff, dtype=np.float64).mean())),
            max_rel=float((diff / scale).max()),
        )


def worst(metrics: list[ErrorMetrics]) -> ErrorMetrics:
    if not metrics:
        return ErrorMetrics()
    return ErrorMetrics(*(max(getattr(m, f) for m in metrics) for f in ("max_abs", "mean_abs", "rmse", "max_rel")))


def within_tolerance(spec: KernelSpec, problem: Problem, actual: np.ndarray, expected: np.ndarray) -> bool:
    if spec.exact:
        return bool(np.array_equal(actual, expected, equal_nan=True))
    atol, rtol = spec.tolerance(problem)
    return bool(np.allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True))


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
        m = error_metrics(got, want)
        metrics.append(m)
        if not within_tolerance(spec, problem, got, want):
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
