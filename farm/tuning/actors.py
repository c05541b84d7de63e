"""The worker side of the pool: which GPU a Ray worker takes, and the actor that holds it.

`pick_adapter` maps a worker's Ray GPU id to a wgpu adapter (Ray only sets
CUDA_VISIBLE_DEVICES, which Vulkan ignores) and cross-checks it against `nvidia-smi`;
`_placement` checks, once the device exists, which GPU the process really holds.
`GpuWorker` is the Ray actor (farm.tuning.pool starts one per GPU): a threaded actor
(ACTOR_THREADS) wrapping one TrialRunner (farm.tuning.runner) for its whole life.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

from farm.gpu import (
    CpuAdapterRefused,
    Device,
    HardwareProfile,
    NoAdapterError,
    Timing,
    enumerate_adapters,
    nvidia,
    refuse_cpu,
)
from farm.schedule import Problem, Schedule
from farm.trial import TrialResult
from farm.tuning.job import Job
from farm.tuning.runner import TrialRunner

NVIDIA_SMI_TIMEOUT_S = 20.0
# Method calls a GpuWorker runs at once (a threaded actor): one batch on the GPU while
# the next compiles ahead or the previous one drains its comparisons; the TrialRunner's
# GPU lock keeps their GPU work apart. Ray doesn't promise a threaded actor starts calls
# in submission order, and nothing here depends on it.
ACTOR_THREADS = 2


def pick_adapter(gpu_ids: list, allow_cpu: bool) -> tuple[Any, dict]:
    """The wgpu adapter for this worker and a record of how it was chosen.

    Ray only sets CUDA_VISIBLE_DEVICES, which Vulkan ignores, so with Ray GPU id N we take
    the N-th GPU adapter of the preferred backend in driver enumeration order (PCI order
    on NVIDIA), and cross-check its name against `nvidia-smi` when that is available.
    """
    adapters = enumerate_adapters()
    gpus = [a for a in adapters if a.info.get("adapter_type") != "CPU"]
    if gpu_ids:
        if not gpus:
            raise RuntimeError(f"Ray assigned GPU ids {gpu_ids} but wgpu sees no GPU adapter")
        backend = gpus[0].info.get("backend_type")
        same_backend = [a for a in gpus if a.info.get("backend_type") == backend]
        index = int(gpu_ids[0])
        if index >= len(same_backend):
            raise RuntimeError(f"Ray GPU id {index} but only {len(same_backend)} {backend} GPU adapters")
        adapter = same_backend[index]
        mapping = {"ray_gpu_ids": [str(g) for g in gpu_ids], "adapter_index": index, "gpu_adapters": len(same_backend)}
        mapping |= _nvidia_smi_crosscheck(index, adapter.info.get("device", ""))
        return adapter, mapping
    from farm.gpu import choose_adapter

    adapter = choose_adapter()
    refuse_cpu(HardwareProfile.from_adapter(adapter), allow_cpu, "tune")
    return adapter, {"ray_gpu_ids": [], "adapter_index": None, "gpu_adapters": len(gpus)}


def _nvidia_smi_crosscheck(index: int, adapter_name: str) -> dict:
    gpus = nvidia.query_gpus(("index", "pci.bus_id", "uuid", "name"), timeout_s=NVIDIA_SMI_TIMEOUT_S)
    row = next((g for g in gpus or [] if g["index"] == str(index)), None)
    if row is None:
        return {"nvidia_smi": None}
    name = row["name"]
    return {
        "nvidia_smi": {"index": row["index"], "pci_bus_id": row["pci.bus_id"], "uuid": row["uuid"], "name": name},
        "name_matches": name.lower().replace("nvidia ", "") in adapter_name.lower(),
    }


def _placement(mapping: dict) -> dict:
    """Which GPU this process really holds a context on (nvidia-smi's process list), once the
    device exists; `placement_ok` says whether it is the GPU Ray assigned."""
    expected = (mapping.get("nvidia_smi") or {}).get("uuid")
    if not expected:
        return {}
    apps = nvidia.compute_apps(("pid", "gpu_uuid"), timeout_s=NVIDIA_SMI_TIMEOUT_S)
    if apps is None:
        return {"placement_uuid": None}
    mine = [app["gpu_uuid"] for app in apps if app["pid"] == str(os.getpid())]
    return {"placement_uuids": mine, "placement_ok": mine == [expected] if mine else None}


class GpuWorker:
    """Holds one Device (and its pipeline + input caches) for the actor's whole life.
    Runs as a threaded actor: its methods may run concurrently (see ACTOR_THREADS)."""

    def __init__(self, worker_id: str, allow_cpu: bool = False, compile_ahead: bool = True):
        import ray

        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
        gpu_ids = list(ray.get_gpu_ids()) if ray.is_initialized() else []
        self.worker_id = worker_id
        # No adapter for this worker (FARM_ADAPTER naming none, no GPU): the user's setup, not
        # a crash. report(), the driver's first call, raises it, and the pool passes it on
        # as itself (an actor that raised in __init__ only dies, with its error as text).
        self.startup_error: Exception | None = None
        # Seconds of each start-up step (the worker line prints them): on the H200 ~15 s of a
        # campaign's process wall went to starting the database, Ray and the workers.
        marks = [time.perf_counter()]
        try:
            adapter, mapping = pick_adapter(gpu_ids, allow_cpu)
        except (NoAdapterError, CpuAdapterRefused) as exc:
            self.startup_error = exc
            return
        marks.append(time.perf_counter())
        self.runner = TrialRunner(Device(adapter), worker_id, compile_ahead)
        marks.append(time.perf_counter())
        placement = _placement(mapping)
        marks.append(time.perf_counter())
        names = ("adapter", "device", "placement")
        steps = {name: marks[i + 1] - marks[i] for i, name in enumerate(names)}
        self.mapping = mapping | {"adapter": adapter.summary} | placement | {"startup_s": steps}

    def report(self) -> dict:
        if self.startup_error is not None:
            raise self.startup_error
        profile = self.runner.device.profile
        return {
            "worker_id": self.worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "profile": profile.to_dict(),
            "topology_hash": profile.topology_hash(),
            "mapping": self.mapping,
        }

    def evaluate(self, jobs: list[Job]) -> list[TrialResult]:
        return self.runner.evaluate(jobs)

    def remeasure(
        self, kernel: str, problem: Problem, schedules: list[Schedule], reps: int, rounds: int, seed: int = 0
    ) -> dict[str, Timing | None]:
        return self.runner.remeasure(kernel, problem, schedules, reps, rounds, seed)

    def remeasure_rounds(
        self,
        kernel: str,
        problem: Problem,
        schedules: list[Schedule],
        reps: int,
        rounds: int,
        seed: int = 0,
        max_rounds: int | None = None,
        noise: float = 0.01,
    ) -> dict[str, list[float] | None]:
        return self.runner.remeasure_rounds(kernel, problem, schedules, reps, rounds, seed, max_rounds, noise)

    def prefetch(self, kernel: str, problem: Problem, seed: int = 0) -> None:
        self.runner.prefetch(kernel, problem, seed)  # returns at once; see TrialRunner.prefetch

    def forget(self, kernel: str, problem: Problem, seed: int = 0) -> None:
        self.runner.forget(kernel, problem, seed)  # returns at once; see TrialRunner.forget

    def precompile(self, kernel: str, problem: Problem, schedules: list, seed: int = 0) -> int:
        return self.runner.precompile(kernel, problem, schedules, seed)  # returns at once

    def inputs_held(self) -> list[tuple[str, str, int]]:
        return self.runner.inputs_held()

    def stage_times(self) -> dict:
        return self.runner.stage_times()

    def run(self, fn: Callable[[Device, Any], Any], item: Any) -> Any:
        with self.runner.exclusive() as device:  # never beside another call's GPU work
            return fn(device, item)
