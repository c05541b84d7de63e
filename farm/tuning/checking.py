"""Certification off the GPU thread: a timed trial waiting for its comparison, and the
checker thread's work.

farm.tuning.runner's trial loop queues a trial's run (outputs copied to staging buffers in
the same submission), times it, and hands the outputs to a checker thread
(`read_and_compare`) while the GPU goes on to the next trials. Until that comparison ends
the trial is a `PendingTrial`: its timing counts only if the outputs match the reference,
and its staging bytes (`held_bytes`) bound how many the loop lets pile up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from farm.catalog import KernelSpec
from farm.gpu import GpuError, PendingRead, Timing
from farm.oracle.compare import Certification, compare
from farm.schedule import Problem, Status
from farm.trial import ErrorMetrics, TrialKey, TrialResult


def held_bytes(pending: Iterable[PendingTrial]) -> int:
    """Staging bytes still held by the pending trials whose comparison has not finished."""
    return sum(p.held for p in pending if not p.verdict.done())


def read_and_compare(pending: PendingRead, spec: KernelSpec, problem: Problem, expected: Future) -> Certification:
    """A checker thread's work: the outputs from their staging buffers, compared with
    the reference once it is computed."""
    try:
        outputs = pending.collect()
    except GpuError as exc:
        return Certification(Status.RUNTIME_ERROR, ErrorMetrics(), str(exc))
    return compare(spec, problem, outputs, expected.result())


@dataclass
class PendingTrial:
    """A trial timed on the GPU whose comparison with the reference is still running.
    `make_result(key, status, message, timing=None, metrics=None)` builds the TrialResult
    (the runner's, stamped with its host and worker id)."""

    make_result: Callable[..., TrialResult]
    key: TrialKey
    verdict: Future
    timing: Timing
    held: int = 0  # staging bytes its outputs hold until the comparison has read them

    def result(self) -> TrialResult:
        certification: Certification = self.verdict.result()
        if not certification.ok:
            return self.make_result(
                self.key, certification.status, certification.message, metrics=certification.metrics
            )
        return self.make_result(self.key, Status.OK, "", timing=self.timing, metrics=certification.metrics)
