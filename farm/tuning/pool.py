"""The worker pool: one GpuWorker actor per GPU of a Ray cluster, and what a campaign asks of it.

`WorkerPool` starts (or joins) Ray (farm.tuning.ray_session), starts one
`farm.tuning.actors.GpuWorker` per GPU (`num_gpus=1`; on a cluster without GPUs,
CPU-adapter workers only when `allow_cpu`: `cpu_workers` of them, by default one per node
with a CPU, spread over the nodes), and collects each worker's report
(HardwareProfile, adapter mapping) before any work. Trials go through the batch loop and
failure rules of farm.tuning.dispatch (which WorkerPool inherits); a failed actor is
replaced in its slot. Also: interleaved re-measurement on one worker (`remeasure`), any
picklable function on the workers' devices (`map`), and per-worker stage times.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from farm.gpu import CpuAdapterRefused, Device, HardwareProfile, Timing, refuse_cpu
from farm.schedule import Problem, Schedule
from farm.trial import TrialResult
from farm.tuning.actors import ACTOR_THREADS, GpuWorker
from farm.tuning.dispatch import BatchDispatch, WorkerFailure, _Slot, raise_users_error
from farm.tuning.finalists import interleaved_timings
from farm.tuning.job import Job
from farm.tuning.ray_session import init_ray


class WorkerPool(BatchDispatch):
    """Ray workers, one per GPU; see farm.tuning.dispatch for the failure rules."""

    def __init__(
        self,
        ray_address: str | None = None,
        allow_cpu: bool = False,
        trial_timeout_s: float = 60.0,
        max_in_flight: int = 2,
        max_retries: int = 2,
        cpu_workers: int | None = None,
        num_cpus: int | None = None,
        compile_ahead: bool = True,
        startup_timeout_s: float = 300.0,
        gpus: int | None = None,
        connect_timeout_s: float | None = None,
    ):
        import ray

        if (
            trial_timeout_s <= 0
            or max_in_flight < 1
            or max_retries < 0
            or (cpu_workers is not None and cpu_workers < 1)
            or (gpus is not None and gpus < 1)
        ):
            raise ValueError(
                f"bad pool settings: trial_timeout_s={trial_timeout_s}, max_in_flight={max_in_flight}, "
                f"max_retries={max_retries}, cpu_workers={cpu_workers}, gpus={gpus}"
            )
        self._ray = ray
        self.allow_cpu = allow_cpu
        self.trial_timeout_s = float(trial_timeout_s)
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.compile_ahead = compile_ahead
        self.startup_timeout_s = startup_timeout_s
        self._owns_ray = init_ray(ray_address, num_cpus, connect_timeout_s)
        resources = ray.cluster_resources()
        self.gpus = int(resources.get("GPU", 0))
        if gpus is not None and self.gpus > gpus:
            self.gpus = gpus  # use only `gpus` of the cluster's GPUs (scaling measurements)
        if self.gpus == 0 and not allow_cpu:
            self.shutdown()
            raise CpuAdapterRefused(
                f"the Ray cluster has no GPUs (resources: {_resources_text(resources)}); "
                "pass --allow-cpu to tune on a CPU adapter such as lavapipe"
            )
        count = self.gpus or cpu_workers or _cpu_nodes(ray.nodes())
        self._slots = {f"w{i}": _Slot(f"w{i}") for i in range(count)}
        self.replacements = 0
        try:
            self._start_all()
        except Exception:
            self.shutdown()
            raise

    # -- membership ------------------------------------------------------------------
    def _actor_class(self):
        # CPU workers spread over the nodes (one per node by default), as GPU workers follow the GPUs.
        options = {"num_gpus": 1, "num_cpus": 1} if self.gpus else {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
        return self._ray.remote(GpuWorker).options(
            max_restarts=0, max_task_retries=0, max_concurrency=ACTOR_THREADS, **options
        )

    def _start_all(self) -> None:
        cls = self._actor_class()
        for slot in self._slots.values():
            slot.actor = cls.remote(slot.worker_id, self.allow_cpu, self.compile_ahead)
        for slot in self._slots.values():
            self._await_report(slot)

    def _await_report(self, slot: _Slot) -> None:
        ref = slot.actor.report.remote()
        ready, _ = self._ray.wait([ref], timeout=self.startup_timeout_s)
        if not ready:
            raise WorkerFailure(f"worker {slot.worker_id} did not start within {self.startup_timeout_s:.0f} s")
        try:
            slot.report = self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            raise_users_error(exc)  # GpuWorker.startup_error: no adapter for it
            raise
        refuse_cpu(slot.profile, self.allow_cpu, f"tune with worker {slot.worker_id}")

    def _replace(self, slot: _Slot) -> None:
        """Kill `slot`'s actor (if still alive) and start a fresh one in its place."""
        try:
            self._ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - the actor may already be gone
            pass
        slot.fifo.clear()
        slot.generation += 1
        self.replacements += 1
        slot.actor = self._actor_class().remote(slot.worker_id, self.allow_cpu, self.compile_ahead)
        self._await_report(slot)

    def profiles(self) -> dict[str, HardwareProfile]:
        """{worker slot: HardwareProfile} as each worker reported it."""
        return {name: slot.profile for name, slot in self._slots.items()}

    def reports(self) -> dict[str, dict]:
        """Each worker's report: host, pid, profile, topology hash and adapter mapping."""
        return {name: dict(slot.report) for name, slot in self._slots.items()}

    def stage_times(self) -> dict[str, dict]:
        """{worker slot: its TrialRunner.stage_times()} for the live workers."""
        slots = list(self._slots.values())
        refs = [slot.actor.stage_times.remote() for slot in slots]
        return {slot.name: times for slot, times in zip(slots, self._ray.get(refs), strict=True)}

    def topologies(self) -> dict[str, list[str]]:
        """{topology hash: worker slots}: a campaign tunes each topology separately."""
        groups: dict[str, list[str]] = {}
        for name, slot in self._slots.items():
            groups.setdefault(slot.report["topology_hash"], []).append(name)
        return groups

    def worker_id(self, slot: str) -> str:
        """The current actor's id for `slot` (it changes when the actor is replaced)."""
        return self._slots[slot].worker_id

    # -- trials ----------------------------------------------------------------------
    def stream(
        self, jobs: list[Job], topology: str | None = None, batch_size: int | None = None
    ) -> Iterator[TrialResult]:
        """Run `jobs` on the workers of `topology` (all workers when None); yield results as they arrive."""
        for _, result in self._run(jobs, self._slots_for(topology), batch_size):
            yield result

    def evaluate(self, worker_id: str, jobs: list[Job], batch_size: int | None = None) -> list[TrialResult]:
        """Run `jobs` on one worker slot; results in job order."""
        if worker_id not in self._slots:
            raise ValueError(f"unknown worker {worker_id!r}; have {sorted(self._slots)}")
        results: dict[int, TrialResult] = dict(self._run(jobs, [self._slots[worker_id]], batch_size))
        return [results[i] for i in range(len(jobs))]

    def _slots_for(self, topology: str | None) -> list[_Slot]:
        if topology is None:
            return list(self._slots.values())
        names = self.topologies().get(topology)
        if not names:
            raise ValueError(f"no worker has topology {topology!r}; have {sorted(self.topologies())}")
        return [self._slots[n] for n in names]

    # -- inputs ahead and behind ------------------------------------------------------
    def prefetch(self, kernel: str, problem: Problem, seed: int = 0, topology: str | None = None) -> None:
        """Ask the workers (of `topology`) to generate `problem`'s inputs and reference in
        the background (TrialRunner.prefetch); returns at once. A worker replaced meanwhile
        just generates them at its first trial."""
        for slot in self._slots_for(topology):
            slot.actor.prefetch.remote(kernel, problem, seed)

    def precompile(
        self, kernel: str, problem: Problem, schedules: list, seed: int = 0, topology: str | None = None
    ) -> None:
        """Ask the workers (of `topology`) to compile these schedules' pipelines ahead
        (TrialRunner.precompile: the search's likely next picks); returns at once."""
        for slot in self._slots_for(topology):
            slot.actor.precompile.remote(kernel, problem, schedules, seed)

    def forget(self, kernel: str, problem: Problem, seed: int = 0, topology: str | None = None) -> None:
        """Ask the workers (of `topology`) to drop `problem`'s inputs and buffers
        (TrialRunner.forget); returns at once."""
        for slot in self._slots_for(topology):
            slot.actor.forget.remote(kernel, problem, seed)

    def inputs_held(self, worker_id: str) -> list[tuple[str, str, int]]:
        """The (kernel, problem key, seed) whose inputs that worker holds now."""
        return self._ray.get(self._slots[worker_id].actor.inputs_held.remote())

    # -- other work ------------------------------------------------------------------
    def remeasure(
        self,
        worker_id: str,
        kernel: str,
        problem: Problem,
        schedules: list[Schedule],
        reps: int = 10,
        rounds: int = 5,
        seed: int = 0,
    ) -> dict[str, Timing | None]:
        """Interleaved re-measurement of `schedules` on one worker (see TrialRunner.remeasure).

        Raises WorkerFailure when it runs past the trial timeout per schedule and round
        (the worker is replaced) or the worker dies."""
        samples = self.remeasure_rounds(worker_id, kernel, problem, schedules, reps, rounds, seed)
        return interleaved_timings(samples)

    def remeasure_rounds(
        self,
        worker_id: str,
        kernel: str,
        problem: Problem,
        schedules: list[Schedule],
        reps: int = 10,
        rounds: int = 5,
        seed: int = 0,
        max_rounds: int | None = None,
        noise: float = 0.01,
    ) -> dict[str, list[float] | None]:
        """Per-round medians of an interleaved re-measurement, with rounds added up to
        `max_rounds` for finalists not yet separated (TrialRunner.remeasure_rounds); the
        same failure rules as `remeasure`, its time limit counted over `max_rounds`."""
        slot = self._slots[worker_id]
        ref = slot.actor.remeasure_rounds.remote(kernel, problem, schedules, reps, rounds, seed, max_rounds, noise)
        limit = self.trial_timeout_s * max(1, len(schedules)) * max(rounds, max_rounds or 0)
        ready, _ = self._ray.wait([ref], timeout=limit)
        if not ready:
            self._replace(slot)
            raise WorkerFailure(f"re-measuring {kernel} {problem} exceeded {limit:.0f} s")
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayActorError as exc:
            self._replace(slot)
            raise WorkerFailure(f"worker {worker_id} died re-measuring {kernel} {problem}") from exc

    def map(self, fn: Callable[[Device, Any], Any], items: Iterable[Any], topology: str | None = None) -> Iterator[Any]:
        """Run picklable `fn(device, item)` on the workers (of `topology`), at most
        `max_in_flight` per worker, yielding results as they arrive (not in item order).
        Exceptions raised by `fn` propagate."""
        slots = self._slots_for(topology)
        queue = deque(items)
        owner: dict[Any, _Slot] = {}
        load = {slot.name: 0 for slot in slots}
        while queue or owner:
            for slot in slots:
                while queue and load[slot.name] < self.max_in_flight:
                    owner[slot.actor.run.remote(fn, queue.popleft())] = slot
                    load[slot.name] += 1
            ready, _ = self._ray.wait(list(owner), num_returns=1)
            for ref in ready:
                load[owner.pop(ref).name] -= 1
                yield self._ray.get(ref)

    def shutdown(self) -> None:
        """Stop the workers; stop Ray too when this pool started it."""
        for slot in getattr(self, "_slots", {}).values():
            if slot.actor is not None:
                try:
                    self._ray.kill(slot.actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
                slot.actor = None
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns_ray = False

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def _cpu_nodes(nodes: list[dict]) -> int:
    """How many live Ray nodes can hold a CPU worker (at least 1: a worker that can't be placed
    times out with the startup error rather than the pool having no slot)."""
    return max(1, sum(1 for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1))


def _resources_text(resources: dict) -> str:
    keep = {k: v for k, v in resources.items() if not k.startswith("node:") and "memory" not in k}
    return ", ".join(f"{k}={v:g}" for k, v in sorted(keep.items())) or "none"
