"""What one tuning worker does with its device, without Ray: turn jobs into trial results.

`TrialRunner` owns one `farm.gpu.Device` for its life, and its inputs in an
`farm.tuning.inputs.InputStore`: per (kernel, problem, seed) generated once (ahead of the
problem's first trial when asked to `prefetch`), uploaded once and kept until the campaign
says to `forget` them, the numpy reference computed once on a thread of its own,
overlapping the first trials. Per trial it validates and compiles
(pipelines are cached by the Device), queues one run whose outputs are copied to staging
buffers in the same submission, and times the kernel right behind it (that run is the
first warm-up). The GPU is kept busy: the next COMPILE_AHEAD trials' pipelines compile on
background threads, and each trial's outputs are read back and compared with the
reference on a pool of checker threads while the GPU goes on timing the next trials (at
most MAX_PENDING comparisons or PENDING_BYTES of held outputs outstanding per batch; the
timing of a schedule that fails its comparison is discarded). An idle GPU drops its
clocks, so a CPU-bound loop of compare-then-time would measure slow clocks and waste the GPU.

Batches overlap: `evaluate` may be called from several threads (`farm.tuning.workers.GpuWorker`
is a threaded actor with two batches in flight). One lock (the GPU lock) serializes
everything that uses the GPU: a batch's trial loop from its first trial to its last,
`remeasure`, and `exclusive()` (sweep work); two timings never share the GPU. A batch
starts compiling its first pipelines before it takes the lock, while the previous batch is
still being timed, and waits for its own last comparisons after releasing it, while the
next batch's trials run: the GPU does not idle at batch boundaries. Outputs are compared
from per-trial staging buffers copied in the trial's own submission, so the next trial (of
either batch) may overwrite the shared output buffers: the queue runs in order.

Failures become typed results: InvalidSchedule -> invalid_schedule, compile/pipeline
GpuError -> compile_error, any other GpuError -> runtime_error, outputs outside
tolerance -> wrong_result. Anything else is a bug in a kernel spec and propagates.

A trial timed but waiting for its comparison is a `PendingTrial`: its timing counts only if
the outputs match the reference, and its staging bytes (`held_bytes`) bound how many the
loop lets pile up. `farm.tuning.workers.GpuWorker` wraps a TrialRunner in a Ray actor; the
Job and StageTimes are farm.tuning.job's.

This is one idea in one module: one trial, from its job to its certified result, with the
overlap of compiling, timing and checking that keeps the GPU busy.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from farm import catalog
from farm.catalog import KernelSpec, Launch, check_launch
from farm.gpu import Device, GpuError, PendingRead, Pipeline, Timing
from farm.oracle.compare import Certification, compare
from farm.oracle.launch import Prepared, compile_launch
from farm.schedule import InvalidSchedule, Problem, Schedule, Status
from farm.trial import ErrorMetrics, TrialKey, TrialResult
from farm.tuning.finalists import interleaved_timings, measure_until_resolved
from farm.tuning.inputs import InputStore, Transient
from farm.tuning.job import Job, StageTimes

# Trials whose pipelines compile (on as many threads) while the current one runs: a gemm
# pipeline can take a driver as long to compile as several trials take to run.
COMPILE_AHEAD = max(4, min(8, (os.cpu_count() or 2) // 2))
# Trials timed but not yet certified, per batch: each holds its outputs in a staging buffer
# until a checker has read them. The trial loop waits for the oldest comparison only past
# MAX_PENDING trials or PENDING_BYTES of held outputs: enough for the first 2-4 s of gemm
# 4096^3 trials (64 MB each) to run while the worker's reference is still being computed.
MAX_PENDING = 64
PENDING_BYTES = 2 << 30
# A trial the clock check read slightly slow is timed again when, scaled by the canary, it
# comes within this factor of the problem's best certified median (farm.gpu.device.RECHECK_TOLERANCE)
RECHECK_BAR = 1.03
# Before the interleaved re-measurement, unless the GPU is hot: REMEASURE_LEAST_S of the first
# finalist's dispatches, then the clock canary's heater while it reads slow, REMEASURE_WARM_S
# in all (a few-workgroup kernel's own dispatches may not lift the clocks).
REMEASURE_LEAST_S = 0.3
REMEASURE_WARM_S = 1.0
CHECKERS = max(1, min(4, (os.cpu_count() or 2) // 2))  # comparison threads per worker
# Hinted compiles (TrialRunner.precompile: the search's likely next picks) run on threads of
# their own, never ahead of a batch's compile-ahead; at most HINTED_MAX outstanding.
HINT_THREADS = max(1, min(4, (os.cpu_count() or 2) // 4))
HINTED_MAX = 8


class TrialRunner:
    """Runs jobs on one device with inputs kept uploaded; see the module docstring. It is
    also the engine's trial executor for `tune_kernel` (farm.tuning.engine.TrialExecutor)."""

    workers = 1  # one device: the model search's batches are sized for one runner

    def __init__(self, device: Device, worker_id: str = "local", compile_ahead: bool = True):
        self.device = device
        self.worker_id = worker_id
        self.host = socket.gethostname()
        self.topology_hash = device.profile.topology_hash()
        self.device_name = device.profile.device_name
        self._gpu = threading.Lock()  # held by whatever uses the GPU; see the module docstring
        self._compiler = (
            ThreadPoolExecutor(max_workers=COMPILE_AHEAD, thread_name_prefix="farm-compile") if compile_ahead else None
        )
        self._checker = ThreadPoolExecutor(max_workers=CHECKERS, thread_name_prefix="farm-check")
        self._hinter = ThreadPoolExecutor(max_workers=HINT_THREADS, thread_name_prefix="farm-hint")
        self._hinted = 0  # hinted compiles queued or running (under _hint_lock)
        self._hint_lock = threading.Lock()
        self.stages = StageTimes()
        self.inputs = InputStore(device, self._gpu, self.stages)
        self._best: dict[tuple[str, str], float] = {}  # certified median per (kernel, problem): the re-check's bar
        self._best_lock = threading.Lock()  # two batches' checks may drain at once

    # -- public API ----------------------------------------------------------------
    def evaluate(self, jobs: list[Job]) -> list[TrialResult]:
        """One result per job, in order; later jobs' pipelines compile and earlier jobs'
        outputs are compared while the GPU times the current one. Thread-safe: a batch
        compiles its first pipelines while another batch holds the GPU, and compares its
        last outputs while the next one is timed."""
        depth = COMPILE_AHEAD if self._compiler is not None else 0
        ahead = {i: self._compile_ahead(jobs[i]) for i in range(min(depth, len(jobs)))}
        outcomes: list[TrialResult | PendingTrial] = []
        pending: deque[PendingTrial] = deque()
        with self.stages.timed("gpu_wait"):
            self._gpu.acquire()
        try:
            for index, job in enumerate(jobs):
                if depth and index + depth < len(jobs):
                    ahead[index + depth] = self._compile_ahead(jobs[index + depth])
                outcome = self._trial(job, ahead.pop(index, None))
                self.stages.count_trial()
                outcomes.append(outcome)
                if isinstance(outcome, PendingTrial):
                    pending.append(outcome)
                    with self.stages.timed("certify_wait"):
                        while pending and pending[0].verdict.done():
                            pending.popleft()
                        while len(pending) > MAX_PENDING or held_bytes(pending) > PENDING_BYTES:
                            pending.popleft().verdict.result()
        finally:
            self._gpu.release()
        with self.stages.timed("certify_drain"):
            return [o.result() if isinstance(o, PendingTrial) else o for o in outcomes]

    def prefetch(self, kernel: str, problem: Problem, seed: int = 0, schedule: Schedule | None = None) -> None:
        """Generate the problem's inputs and reference in the background (InputStore.prefetch)."""
        self.inputs.prefetch(kernel, problem, seed, schedule)

    def precompile(self, kernel: str, problem: Problem, schedules: list[Schedule], seed: int = 0) -> int:
        """Start compiling the pipelines of `schedules` (the search's likely next picks) on
        the hint threads and return at once, how many were queued (at most HINTED_MAX
        outstanding; the rest of a hint is dropped). A trial whose pipeline is compiled
        already finds it in the Device's cache and does not wait: uncached compiles can
        take longer than the trials themselves."""
        if self._compiler is None:
            return 0
        spec, queued = catalog.get(kernel), 0
        for schedule in schedules:
            with self._hint_lock:
                if self._hinted >= HINTED_MAX:
                    break
                self._hinted += 1
            self._hinter.submit(self._precompile, spec, Job(kernel, problem, schedule, seed, 0, 1))
            queued += 1
        return queued

    def _precompile(self, spec: KernelSpec, job: Job) -> None:
        try:
            with self.stages.timed("precompile"):
                compile_launch(self.device, spec, job.schedule, self._launch(spec, job))
        except Exception:  # noqa: BLE001 - the trial, if the search picks it, reports it
            pass
        finally:
            with self._hint_lock:
                self._hinted -= 1

    def forget(self, kernel: str, problem: Problem, seed: int = 0) -> None:
        """Drop the problem's inputs and buffers in the background (InputStore.forget)."""
        self.inputs.forget(kernel, problem, seed)

    def inputs_held(self) -> list[tuple[str, str, int]]:
        """The (kernel, problem key, seed) whose inputs this runner holds now."""
        return self.inputs.held()

    @contextmanager
    def exclusive(self):
        """Hold the GPU lock: work run under it (`GpuWorker.run`'s sweep cases) never
        shares the GPU with a batch's trials or a re-measurement."""
        with self._gpu:
            yield self.device

    def remeasure(
        self, kernel: str, problem: Problem, schedules: list[Schedule], reps: int = 10, rounds: int = 5, seed: int = 0
    ) -> dict[str, Timing | None]:
        """Time `schedules` interleaved (a rotated order each round) on this device.

        Returns {schedule key: Timing over the per-round medians}, None for a schedule that
        fails to prepare or run, so drift and warm-up hit every finalist alike.
        """
        samples = self.remeasure_rounds(kernel, problem, schedules, reps, rounds, seed)
        return interleaved_timings(samples)

    def remeasure_rounds(
        self,
        kernel: str,
        problem: Problem,
        schedules: list[Schedule],
        reps: int = 10,
        rounds: int = 5,
        seed: int = 0,
        max_rounds: int | None = None,
        noise: float = 0.01,
    ) -> dict[str, list[float] | None]:
        """Like `remeasure`, but {schedule key: the median of each round, in round order}
        (None: failed), and past `rounds` more rounds, up to `max_rounds`, for the leader
        and the finalists not yet separated from it (farm.tuning.finalists.measure_until_resolved)."""
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        with self._gpu:
            return self._remeasure(kernel, problem, schedules, reps, rounds, seed, max_rounds or rounds, noise)

    def _remeasure(
        self,
        kernel: str,
        problem: Problem,
        schedules: list[Schedule],
        reps: int,
        rounds: int,
        seed: int,
        max_rounds: int,
        noise: float,
    ) -> dict[str, list[float] | None]:
        spec = catalog.get(kernel)
        prepared: dict[str, Prepared] = {}
        for schedule in schedules:
            try:
                prepared[schedule.key()] = self._prepare(spec, Job(kernel, problem, schedule, seed, 0, reps))
            except (InvalidSchedule, GpuError):
                continue
        order = list(prepared)
        if order:  # clocks up before the first round (see Device.warm_until_clocks)
            try:
                prepared[order[0]].warm_until_clocks(REMEASURE_LEAST_S, REMEASURE_WARM_S, unless_hot=True)
            except GpuError:
                pass  # that finalist's own timing reports it

        def measure_round(keys: list[str]) -> dict[str, float | None]:
            out: dict[str, float | None] = {}
            for key in keys:
                try:
                    out[key] = prepared[key].time(warmup=1, reps=reps).median_ns
                except GpuError:
                    out[key] = None
            return out

        try:
            samples = measure_until_resolved(measure_round, order, rounds, max(rounds, max_rounds), noise)
        finally:
            for item in prepared.values():
                self._release_transient(item)
        return {s.key(): samples.get(s.key()) for s in schedules}

    def stage_times(self) -> dict:
        """{"trials": n, "seconds": {stage: seconds over the batches' threads}} (see
        StageTimes); "time" includes the GPU warm-up, also reported alone as "warm_up" (of
        it, "warm_rounds": the warm-up rounds; the rest keeping the GPU busy and the
        re-timings' heater), and the timings the clock check re-timed (farm.gpu.clocks), as
        "clock_retime" (their heater counted in "warm_up" too). Beside the seconds:
        "clock_retimes", "clock_rechecks" (of them, competitive at a slightly low clock) and
        "clock_retimes_slow" (of the slow ones, those the canary still read slow after)."""
        report = self.stages.as_dict()
        report["seconds"]["warm_up"] = self.device.warm_spent_s
        report["seconds"]["warm_rounds"] = self.device.rounds_spent_s
        report["seconds"]["clock_retime"] = self.device.clock_retime_s
        report["clock_retimes"] = self.device.clock_retimes
        report["clock_rechecks"] = self.device.clock_rechecks
        report["clock_retimes_slow"] = self.device.clock_retimes_slow
        return report

    def close(self) -> None:
        self._hinter.shutdown(wait=True, cancel_futures=True)
        if self._compiler is not None:
            self._compiler.shutdown(wait=True)
        self._checker.shutdown(wait=True)
        self.inputs.close()

    # -- one trial -------------------------------------------------------------------
    def _trial(self, job: Job, ahead: tuple[Launch, Future] | None) -> TrialResult | PendingTrial:
        spec = catalog.get(job.kernel)
        key = TrialKey(self.topology_hash, job.kernel, spec.source_hash(), job.problem, job.schedule)
        try:
            launch = None
            if ahead is not None:
                launch, compiled = ahead
                with self.stages.timed("compile_wait"):
                    compiled.result()  # re-raises the compile error, if any
            with self.stages.timed("prepare"):
                prepared = self._prepare(spec, job, launch)
        except InvalidSchedule as exc:
            return self._result(key, Status.INVALID_SCHEDULE, exc.reason)
        except GpuError as exc:
            status = Status.COMPILE_ERROR if exc.step in ("compile", "pipeline") else Status.RUNTIME_ERROR
            return self._result(key, status, str(exc))
        try:
            return self._certify_and_time(key, prepared, job)
        finally:
            self._release_transient(prepared)

    def _certify_and_time(self, key: TrialKey, prepared: Prepared, job: Job) -> TrialResult | PendingTrial:
        """Queue one run with its outputs' copy to staging buffers, then time right behind
        it (that run is the first warm-up: same kernel, same inputs, GPU at its clocks),
        and read the outputs back and compare them with the reference on a checker thread
        while the GPU goes on to the next trials: on large outputs reading and comparing
        are CPU work of the same order as the timing. A schedule that fails the
        comparison is never a winner: its timing is discarded and the trial is wrong_result."""
        expected = self.inputs.expected(prepared.spec, job)
        try:
            with self.stages.timed("run"):
                pending = prepared.submit_run()
        except GpuError as exc:
            return self._result(key, Status.RUNTIME_ERROR, str(exc))
        try:
            best = self._best.get((job.kernel, job.problem.key()))  # competitive at a low clock: timed again
            bar = best * RECHECK_BAR if best else None
            with self.stages.timed("time"):
                timing = prepared.time(warmup=max(job.warmup - 1, 0), reps=job.reps, beat_ns=bar)
        except GpuError as exc:
            verdict = read_and_compare(pending, prepared.spec, prepared.problem, expected)
            return self._result(key, Status.RUNTIME_ERROR, str(exc), metrics=verdict.metrics)
        try:
            with self.stages.timed("map"):
                pending.map()  # done by now (queued before the timing); see PendingRead
        except GpuError as exc:
            return self._result(key, Status.RUNTIME_ERROR, str(exc))
        held = pending.nbytes  # before a checker collects it
        verdict = self._checker.submit(read_and_compare, pending, prepared.spec, prepared.problem, expected)
        return PendingTrial(self._result, key, verdict, timing, held)

    def _result(
        self,
        key: TrialKey,
        status: Status,
        message: str,
        timing: Timing | None = None,
        metrics: ErrorMetrics | None = None,
    ) -> TrialResult:
        if status is Status.OK and timing is not None:
            problem = (key.kernel, key.problem.key())
            with self._best_lock:
                self._best[problem] = min(self._best.get(problem, math.inf), timing.median_ns)
        return TrialResult(
            key=key,
            status=status,
            message=message,
            timing=timing,
            metrics=metrics or ErrorMetrics(),
            host=self.host,
            worker_id=self.worker_id,
        )

    # -- preparation with cached inputs ---------------------------------------------
    def _compile_ahead(self, job: Job) -> tuple[Launch, Future] | None:
        """Build `job`'s launch and start compiling its pipeline on the compile thread; the
        trial reuses both (None when disabled or the schedule is invalid)."""
        if self._compiler is None:
            return None
        try:
            spec = catalog.get(job.kernel)
            with self.stages.timed("launch"):
                launch = self._launch(spec, job)
        except InvalidSchedule:
            return None  # the trial itself reports it
        return launch, self._compiler.submit(compile_launch, self.device, spec, job.schedule, launch)

    def _launch(self, spec: KernelSpec, job: Job) -> Launch:
        """Validated launch for `job` (no GPU work: compile-ahead calls it outside the GPU lock)."""
        spec.check(job.schedule, job.problem, self.device.profile)
        inputs = self.inputs.entry(spec, job).arrays
        launch = spec.launch(job.schedule, job.problem, inputs)
        check_launch(spec, job.schedule, launch, self.device.profile)
        return launch

    def _prepare(self, spec: KernelSpec, job: Job, launch: Launch | None = None) -> Prepared:
        """Like farm.oracle.launch.prepare, but input arrays the spec passes through unchanged reuse
        buffers uploaded once per (kernel, problem, seed); outputs reuse cached buffers.
        `launch` is the one built when the pipeline was compiled ahead, if it was. Under
        the GPU lock: it allocates and uploads, and the entry's buffer dicts are the lock's."""
        launch = launch if launch is not None else self._launch(spec, job)
        pipelines: list[Pipeline] = compile_launch(self.device, spec, job.schedule, launch)
        entry = self.inputs.entry(spec, job)
        buffers = [self.inputs.buffer_for(entry, arg) for arg in launch.args]
        return Prepared(spec, job.schedule, job.problem, launch, pipelines, buffers, self.device)

    def _release_transient(self, prepared: Prepared) -> None:
        self.device.release(*(b for b in prepared.buffers if isinstance(b, Transient)))


# -- certification off the GPU thread ---------------------------------------------------


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
