"""A simulated fleet on one box: the real driver (Campaign, engine, search, WorkerPool's batch
loop, TrialRecorder), a real Ray and a real database, with the GPUs replaced by stubs.

    .venv/bin/python benchmarks/fleet.py record [--rows 50000] [--no-postgres]
    .venv/bin/python benchmarks/fleet.py driver [--trials 20000] [--db sqlite|postgres]
    .venv/bin/python benchmarks/fleet.py fleet --gpus 64,256,1000 [--trial-s 0.09] [--db postgres]
    .venv/bin/python benchmarks/fleet.py drivers --drivers 4 --gpus 1000 --requests 200 [--db postgres]

`record`: rows/s of "recording as a campaign records": a TrialRecorder with a campaign's
progress counters fed one trial at a time, flushing as a campaign does, into SQLite and a
throwaway PostgreSQL (fsync on), Parquet at close not counted.

`driver`: the driver's own cost per trial with workers that answer at once: one campaign,
exhaustive over every space of `farm tune --all` until `--trials`, through the real pool
and Ray; driver CPU (this process, all its threads) per trial. A warm-up campaign (32 trials
of a small gemv) runs first in the same process and is not counted, as a long-lived driver
(`farm serve`) has paid its one-off costs (SQLAlchemy configuring its mappers on first use:
~0.25 s, ~14 us a trial of this run) before its next campaign; `warm_up_cpu_s` is its CPU.

`fleet`: `farm tune --all`-like work (the catalog's default problems on a simulated H200, the
default model search and budget) on N simulated GPUs, each answering one trial at a time at
its real per-trial rate: trials/s, driver CPU per trial, worker utilization (the GPUs' busy
seconds over N x wall) and database rows/s.

`drivers`: several drivers at once, sharded through the queue: `--requests` tune requests
(the catalog's default problems and variants of them with a dimension doubled or halved, each
request a problem as `farm queue add` queues it) in one database, then `--drivers` processes,
each the real `farm serve` drainer (farm.tuning.serve.Drainer, `serve(once=True)`) over its
share of `--gpus` simulated GPUs, joined to one Ray; aggregate trials/s, worker utilization,
driver CPU per trial (all drivers' CPU over all trials), database rows/s, and from those how
many drivers 11,600 trials/s would take. `dry_s` is when the last request was claimed and
`busy_until_dry` the GPUs' busy share until then: a fleet's steady state while work still
waits, apart from the tail of the last requests' sequential rounds.

How a GPU is simulated: SimulatedGpus, an asyncio Ray actor, stands for many GPUs (one lock
each, so each runs one batch at a time as a real worker's GPU lock does); a trial sleeps
`--trial-s` times a seeded log-normal jitter (sigma 0.3; the default 0.09 s is one H200's
`farm tune --all` rate, ~11 trials/s) and answers the median measured for that schedule in
tests/data/landscapes/ and tests/data/h200_gemm_trials.json where there is one, else a
seeded synthetic time (log-normal around a per-problem base, ~5% failures). Finalists are
re-measured on the least busy GPU of the task's home for `rounds x finalists x trial-s x
REMEASURE_SHARE`, answering the replayed medians with 1% noise: a finalist-round is one
timing of a compiled pipeline, no compile and no check (on the H200 a `farm tune --all` spent
7.9 s on 494 finalist-rounds, 16 ms each, warm-up included, against ~90 ms a trial).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import itertools
import json
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

from farm import catalog, store  # noqa: E402
from farm.gpu import HardwareProfile, Timing  # noqa: E402
from farm.schedule import Problem, Schedule, Status  # noqa: E402
from farm.trial import ErrorMetrics, TrialKey, TrialResult  # noqa: E402

SIMULATED = "NVIDIA H200 (simulated)"
H200_TRIAL_S = 0.09  # one H200's `farm tune --all`: ~1,550 trials in ~140 s
REMEASURE_SHARE = 0.18  # a finalist-round's GPU time over a trial's (H200: 16 ms against 90 ms)
GPUS_PER_ACTOR = 250  # simulated GPUs per stub actor process


# ------------------------------------------------------------------ what the GPUs answer


def replayed_medians() -> dict[tuple[str, str], dict[str, float | None]]:
    """(kernel, problem key) -> {schedule key: median ns, None for a failure} from tests/data."""
    data = ROOT / "tests" / "data"
    out: dict[tuple[str, str], dict[str, float | None]] = {}
    for path in sorted((data / "landscapes").glob("*.json.gz")):
        land = json.loads(gzip.decompress(path.read_bytes()))
        fields = land["fields"]
        rows = out.setdefault((land["kernel"], land["problem"]), {})
        for trial in land["trials"]:
            row = dict(zip(fields, trial, strict=True))
            rows[row["schedule"]] = row["median_ns"] if row["status"] == "ok" else None
    gemm = json.loads((data / "h200_gemm_trials.json").read_text())
    for problem, medians in gemm["problems"].items():
        rows = out.setdefault(("gemm", problem), {})
        for key, median in medians.items():
            rows.setdefault(key, median)
    return out


def _unit(*parts: str) -> float:
    """A seeded number in [0, 1) from `parts` (the same answer in every process and run)."""
    digest = hashlib.blake2b("|".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def answer(medians: dict, topology: str, source: str, kernel: str, problem: Problem, schedule: Schedule, worker: str):
    """The stub's TrialResult: the replayed median, else a seeded synthetic one."""
    key = TrialKey(topology, kernel, source, problem, schedule)
    known = medians.get((kernel, problem.key()))
    if known is not None and schedule.key() in known:
        median = known[schedule.key()]
    else:
        base = 1e5 * (1 + 20 * _unit(kernel, problem.key()))
        u = _unit(kernel, problem.key(), schedule.key())
        median = None if u < 0.05 else base * math.exp(0.6 * math.sqrt(-2 * math.log(1 - u)) * (u - 0.5))
    if median is None:
        return TrialResult(key, Status.WRONG_RESULT, "max_abs 1.0 > atol 0.001 (simulated)", None, ErrorMetrics(),
                           "fleet", worker)  # fmt: skip
    timing = Timing(median, median * 0.99, median * 1.01, median * 0.98, 10, "timestamp")
    return TrialResult(key, Status.OK, "", timing, ErrorMetrics(1e-6, 1e-7, 1e-7, 1e-6), "fleet", worker)


def simulated_profile() -> HardwareProfile:
    """This machine's adapter's limits, named and typed as a discrete GPU (the plan of `--all`)."""
    from farm.gpu import enumerate_adapters

    profile = HardwareProfile.from_adapter(enumerate_adapters()[0])
    return replace(profile, adapter_type="DiscreteGPU", device_name=SIMULATED, backend="Vulkan")


def _stub_class():
    import ray

    if __name__ != "__main__":  # imported (the tests): Ray's workers can't import this file by name
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    @ray.remote
    class SimulatedGpus:
        """Many simulated GPUs in one asyncio actor: one lock per GPU, a trial a sleep."""

        def __init__(self, profile: dict, first: int, count: int, trial_s: float, inputs_s: float = 0.0):
            self.profile = HardwareProfile.from_dict(profile)
            self.topology = self.profile.topology_hash()
            self.first, self.trial_s, self.inputs_s = first, trial_s, inputs_s
            self.ready: dict[tuple, float] = {}  # (gpu, kernel, problem key, seed) -> when its inputs are made
            self.how: dict[tuple, str] = {}  # how each entry of `ready` was asked for
            # inputs made ahead (prefetched) and at a trial, and the GPU-seconds trials waited for each
            self.inputs = {"made ahead": 0, "made at a trial": 0, "waited ahead_s": 0.0, "waited at a trial_s": 0.0}
            self.locks = {first + i: asyncio.Lock() for i in range(count)}
            self.by_second: dict[int, float] = {}  # busy GPU-seconds in each wall-clock second
            self.medians = replayed_medians()
            self.sources = {name: catalog.get(name).source_hash() for name in catalog.names()}
            self.rng = random.Random(first)

        def _seconds(self, n: int) -> float:
            if self.trial_s <= 0:
                return 0.0
            return sum(self.trial_s * math.exp(self.rng.gauss(0.0, 0.3) - 0.045) for _ in range(n))

        async def report(self, gpu: int) -> dict:
            return {"worker_id": f"w{gpu}.0", "host": "fleet", "pid": os.getpid(), "profile": self.profile.to_dict(),
                    "topology_hash": self.topology, "mapping": {"adapter": SIMULATED}}  # fmt: skip

        def _inputs_ready(self, gpu: int, kernel: str, problem: Problem, seed: int, how: str) -> float:
            """When this GPU's worker has the problem's inputs and reference: `inputs_s` after
            it first needed them (a prefetch or a trial), until it forgets them."""
            key = (gpu, kernel, problem.key(), seed)
            if key not in self.ready:
                self.ready[key], self.how[key] = time.time() + self.inputs_s, how
                self.inputs[how] += 1
            return self.ready[key]

        async def prefetch(self, gpu: int, kernel: str, problem: Problem, seed: int) -> None:
            self._inputs_ready(gpu, kernel, problem, seed, "made ahead")

        async def forget(self, gpu: int, kernel: str, problem: Problem, seed: int) -> None:
            self.ready.pop((gpu, kernel, problem.key(), seed), None)
            self.how.pop((gpu, kernel, problem.key(), seed), None)

        async def inputs_held(self, gpu: int) -> list[tuple[str, str, int]]:
            return sorted(key[1:] for key in self.ready if key[0] == gpu)

        async def evaluate(self, gpu: int, jobs: list) -> list:
            async with self.locks[gpu]:
                # the GPU idles (not counted busy) while its worker makes the inputs it lacks
                ready, key = max((self._inputs_ready(gpu, j.kernel, j.problem, j.seed, "made at a trial"),
                                  (gpu, j.kernel, j.problem.key(), j.seed)) for j in jobs)  # fmt: skip
                wait = ready - time.time()
                if wait > 0:
                    self.inputs["waited ahead_s" if self.how[key] == "made ahead" else "waited at a trial_s"] += wait
                    await asyncio.sleep(wait)
                seconds = self._seconds(len(jobs))
                if seconds:
                    self._spend(time.time(), seconds)
                    await asyncio.sleep(seconds)
            worker = f"w{gpu}.0"
            return [answer(self.medians, self.topology, self.sources[j.kernel], j.kernel, j.problem, j.schedule,
                           worker) for j in jobs]  # fmt: skip

        async def remeasure_rounds(self, gpu, kernel, problem, schedules, reps, rounds, seed, max_rounds, noise):
            async with self.locks[gpu]:
                seconds = self._seconds(rounds * len(schedules)) * REMEASURE_SHARE
                if seconds:
                    self._spend(time.time(), seconds)
                    await asyncio.sleep(seconds)
            rng = random.Random(f"{kernel}{problem.key()}{seed}")
            out = {}
            for s in schedules:
                r = answer(self.medians, self.topology, "", kernel, problem, s, "")
                out[s.key()] = [r.median_ns * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(rounds)] if r.ok else None
            return out

        def _spend(self, start: float, seconds: float) -> None:
            while seconds > 0:
                second = int(start)
                part = min(seconds, second + 1 - start)
                self.by_second[second] = self.by_second.get(second, 0.0) + part
                start, seconds = start + part, seconds - part

        async def busy_by_second(self) -> dict:
            return dict(self.by_second)

        async def inputs_made(self) -> dict:
            return dict(self.inputs)

        async def nothing(self, *args) -> None:
            return None

    return SimulatedGpus


class _Method:
    def __init__(self, actor, name: str, gpu: int):
        self.actor, self.name, self.gpu = actor, name, gpu

    def remote(self, *args):
        if self.name in ("precompile", "stage_times"):
            return self.actor.nothing.remote()
        return getattr(self.actor, self.name).remote(self.gpu, *args)


class _Gpu:
    """A slot's actor handle as WorkerPool uses it: calls go to the stub actor with the GPU's number."""

    def __init__(self, actor, gpu: int):
        self.actor, self.gpu = actor, gpu

    def __getattr__(self, name: str) -> _Method:
        return _Method(self.actor, name, self.gpu)


def fleet_pool(
    gpus: int, trial_s: float, profile: HardwareProfile, max_in_flight: int = 2, first: int = 0, inputs_s: float = 0.0
):
    """The real WorkerPool (its batch loop and failure rules) over `gpus` simulated GPUs
    (numbered from `first`: several drivers' GPUs have distinct worker ids); a GPU's first
    trial of a problem it has no inputs for waits `inputs_s` (see SimulatedGpus)."""
    import ray

    from farm.tuning.ray_session import init_ray
    from farm.tuning.workers import WorkerPool, _Slot

    class FleetPool(WorkerPool):
        def __init__(self):  # WorkerPool's, with stub actors instead of one GpuWorker per GPU
            self._ray, self.allow_cpu, self.trial_timeout_s = ray, False, 600.0
            self.max_in_flight, self.max_retries, self.compile_ahead = max_in_flight, 0, False
            self.startup_timeout_s, self.replacements, self.gpus = 300.0, 0, gpus
            self._owns_ray = init_ray(None, os.cpu_count())
            stub = _stub_class()
            actors = []
            for start in range(0, gpus, GPUS_PER_ACTOR):
                count = min(GPUS_PER_ACTOR, gpus - start)
                actors.append(stub.options(max_concurrency=4 * count, num_cpus=0).remote(
                    profile.to_dict(), first + start, count, trial_s, inputs_s))  # fmt: skip
            self.stubs = actors
            self._slots = {}
            for i in range(gpus):
                slot = _Slot(f"w{i}", actor=_Gpu(actors[i // GPUS_PER_ACTOR], first + i))
                slot.report = ray.get(slot.actor.report.remote()) if i % GPUS_PER_ACTOR == 0 else None
                self._slots[slot.name] = slot
            first_report = next(iter(self._slots.values())).report
            for i, slot in enumerate(self._slots.values()):
                slot.report = first_report | {"worker_id": f"w{first + i}.0"}

        def busy_seconds(self) -> float:
            return sum(self.busy_by_second().values())

        def busy_by_second(self) -> dict[int, float]:
            total: dict[int, float] = {}
            for part in ray.get([a.busy_by_second.remote() for a in self.stubs]):
                for second, busy in part.items():
                    total[second] = total.get(second, 0.0) + busy
            return total

        def inputs_made(self) -> dict:
            """Inputs made ahead (prefetches) and at a trial, and the GPU-seconds trials waited for them."""
            total: dict = {}
            for part in ray.get([a.inputs_made.remote() for a in self.stubs]):
                for what, value in part.items():
                    total[what] = total.get(what, 0) + value
            return total

        def stage_times(self) -> dict:
            return {}

        def shutdown(self) -> None:
            for actor in getattr(self, "stubs", []):
                ray.kill(actor, no_restart=True)
            self.stubs = []
            self._slots = {}
            if self._owns_ray and ray.is_initialized():
                ray.shutdown()

    return FleetPool()


# ------------------------------------------------------------------ databases


class Databases:
    """A SQLite file in a temp dir and, unless disabled, a throwaway PostgreSQL with fsync on."""

    def __init__(self, postgres: bool):
        self.dir = Path(tempfile.mkdtemp(prefix="farm-fleet-"))
        self.server = None
        self.count = 0
        if postgres:
            from pg import PostgresServer, find_pg_bin

            self.server = PostgresServer(find_pg_bin(), fsync=True)
            self.server.start()

    def url(self, kind: str) -> str:
        self.count += 1
        if kind == "sqlite":
            return f"sqlite:///{self.dir / f'farm{self.count}.db'}"
        if self.server is None:
            raise SystemExit("fleet.py: error: PostgreSQL disabled (--no-postgres)")
        self.server.admin(f"CREATE DATABASE fleet{self.count}")
        return self.server.url(f"fleet{self.count}")

    def close(self) -> None:
        try:
            if self.server is not None:
                self.server.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)  # the SQLite files and the drivers' homes


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# ------------------------------------------------------------------ modes


class Counter:
    """A campaign's progress counters as the recorder reads them at each flush."""

    def __init__(self, total: int):
        self.done, self.total = 0, total

    def counts(self) -> tuple[int, int, int]:
        return self.done, 0, self.total


def record(args, dbs: Databases) -> list[dict]:
    """Rows/s of a campaign's recording: TrialRecorder, one add per trial, its flushes, its counters."""
    from farm.tuning.recording import TrialRecorder

    profile = simulated_profile()
    medians = replayed_medians()
    spec = catalog.get("gemm")
    schedules = spec.schedules()
    problems = [Problem.of(m=256 << (i % 5), k=256 << (i // 5 % 5), n=256 << (i // 25)) for i in range(125)]
    results = [
        answer(
            medians,
            profile.topology_hash(),
            spec.source_hash(),
            "gemm",
            problems[i // len(schedules)],
            schedules[i % len(schedules)],
            "w0.0",
        )  # fmt: skip
        for i in range(args.rows)
    ]
    rows = []
    for kind in ["sqlite"] + ([] if args.no_postgres else ["postgresql"]):
        db = store.open_store(dbs.url(kind))
        store.upsert_topology(db, profile)
        campaign_id = store.start_campaign(db, "fleet record", "model", None, 10, len(results))
        counter = Counter(len(results))
        recorder = TrialRecorder(db, campaign_id, dbs.dir / "artifacts", counter.counts)
        start, cpu = time.perf_counter(), time.process_time()
        for result in results:
            counter.done += 1
            recorder.add(result)
        recorder.flush()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        recorder.writer.close()
        assert store.count_trials(db) == len(results)
        rows.append({"mode": "record", "db": kind, "rows": len(results), "rows_per_s": len(results) / wall,
                     "driver_cpu_us_per_row": 1e6 * cpu / len(results), "load": load()})  # fmt: skip
        db.engine.dispose()
    return rows


def campaign_run(
    args, dbs: Databases, gpus: int, trial_s: float, strategy: str, budget, limit: int | None, warm: bool = False
) -> dict:
    from farm.tuning.campaign import Campaign
    from farm.tuning.tasks import DEFAULT_BUDGET, SPACE_SHARE, TuneConfig

    profile = simulated_profile()
    db = store.open_store(dbs.url(args.db))
    kernels = tuple(catalog.names())
    scaled = budget is None and strategy == "model"
    config = TuneConfig(kernels=kernels, sizes={}, strategy=strategy, budget=DEFAULT_BUDGET if scaled else budget,
                        space_share=SPACE_SHARE if scaled else 0.0, out=dbs.dir / "artifacts")  # fmt: skip
    pool = fleet_pool(gpus, trial_s, profile)
    try:
        if limit is not None:  # enough tasks for `limit` trials (exhaustive: every schedule of each)
            from farm.tuning import tasks as planning

            whole = planning.plan(config, profile.topology_hash(), profile)
            keep, total = [], 0
            for task in whole:
                if total >= limit:
                    break
                keep.append(task)
                total += task.trials
            chosen = {(t.kernel, t.problem.key()) for t in keep}
            sizes = {}
            for t in keep:
                sizes.setdefault(t.kernel, []).append(t.problem)
            config = replace(config, kernels=tuple(sizes), sizes=sizes)
            assert len(chosen) == len(keep)
        warm_cpu, before = None, 0
        if warm:  # a long-lived driver's state: its ORM configured, its Ray calls and recorder used once
            small = {"gemv": [catalog.get("gemv").problem(m=64, n=64)]}
            warm_config = replace(config, kernels=("gemv",), sizes=small, strategy="exhaustive", budget=32)
            cpu = time.process_time()
            Campaign(warm_config, pool, db, dbs.dir / "artifacts", "fleet warm-up").run()
            warm_cpu, before = time.process_time() - cpu, store.count_trials(db)
        campaign = Campaign(config, pool, db, dbs.dir / "artifacts", "fleet")
        start, cpu = time.perf_counter(), time.process_time()
        winners = campaign.run()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        trials = store.count_trials(db) - before
        busy = pool.busy_seconds()
    finally:
        pool.shutdown()
        db.engine.dispose()
    return {"mode": args.mode, "db": args.db, "gpus": gpus, "trial_s": trial_s, "problems": len(campaign.tasks),
            "winners": len(winners), "trials": trials, "wall_s": wall, "trials_per_s": trials / wall,
            "driver_cpu_us_per_trial": 1e6 * cpu / max(trials, 1), "warm_up_cpu_s": warm_cpu,
            "utilization": busy / (gpus * wall) if trial_s else None,
            "db_rows_per_s": trials / wall, "load": load()}  # fmt: skip


def request_problems(count: int, profile: HardwareProfile) -> list[tuple[str, Problem]]:
    """`count` distinct (kernel, problem) this adapter can run: the default problems of every
    kernel, then variants of them with one dimension doubled or halved, round after round,
    then (for a queue deeper than those) with two dimensions scaled at once."""
    from farm.tuning.problems import check_problem

    seen, out = set(), []

    def add(name: str, dims: dict[str, int]) -> bool:
        """Whether `count` are reached once this variant is added (when valid and new)."""
        spec = catalog.get(name)
        try:
            problem = spec.problem(**dims)
            check_problem(spec, problem, profile)
        except ValueError:
            return False
        if (name, problem.key()) not in seen:
            seen.add((name, problem.key()))
            out.append((name, problem))
        return len(out) == count

    bases = [(name, p) for name in catalog.names() for p in catalog.get(name).default_problems(profile)]
    for step in range(64):
        for name, base in bases:
            dims = base.as_dict()
            if step:
                dim = sorted(dims)[step % len(dims)]
                dims[dim] = dims[dim] * 2 ** ((step + 1) // 2) if step % 2 else dims[dim] // 2 ** (step // 2)
            if add(name, dims):
                return out
    scales = [(a, b) for a in (-2, -1, 1, 2, -3, 3) for b in (-2, -1, 1, 2, -3, 3)]
    for a, b in scales:
        for name, base in bases:
            for first, second in itertools.combinations(sorted(base.as_dict()), 2):
                dims = base.as_dict()
                for dim, power in ((first, a), (second, b)):
                    dims[dim] = dims[dim] * 2**power if power > 0 else dims[dim] // 2**-power
                if add(name, dims):
                    return out
    return out


def drain(args) -> dict:
    """One driver of `drivers`: joins the Ray at `--ray-address`, the database at
    $FARM_DATABASE_URL, and drains the queue with `farm serve`'s Drainer over its GPUs."""
    import ray

    from farm.tuning.serve import Drainer
    from farm.tuning.tasks import DEFAULT_BUDGET, SPACE_SHARE, TuneConfig

    ray.init(address=args.ray_address, log_to_driver=False, logging_level="WARNING")
    profile = simulated_profile()
    db = store.open_store(None)
    out = Path(os.environ["FARM_HOME"]) / "artifacts"
    config = TuneConfig(kernels=(), sizes={}, strategy="model", budget=args.budget or DEFAULT_BUDGET,
                        space_share=0.0 if args.budget else SPACE_SHARE, out=out)  # fmt: skip
    pool = fleet_pool(args.gpus_each, args.trial_s, profile, first=args.first, inputs_s=args.inputs_s)
    try:
        drainer = Drainer(pool, db, config, out, name=f"fleet-{args.first}", batch=args.batch or None,
                          stream=open(os.devnull, "w"))  # fmt: skip
        start, cpu = time.time(), time.process_time()
        tally = drainer.serve(once=True)
        end, cpu = time.time(), time.process_time() - cpu
        busy, by_second, inputs = pool.busy_seconds(), pool.busy_by_second(), pool.inputs_made()
    finally:
        pool.shutdown()
        db.engine.dispose()
    return {"start": start, "end": end, "cpu_s": cpu, "busy_s": busy, "gpus": args.gpus_each, "by_second": by_second,
            "claimed": tally.claimed, "done": tally.done, "failed": tally.failed + tally.retried,
            "inputs": inputs}  # fmt: skip


def drivers(args, dbs: Databases) -> dict:
    """`--drivers` drainer processes over one queue and one Ray; their aggregate (module docstring)."""
    import subprocess

    import ray

    from farm.store import queue
    from farm.tuning.ray_session import init_ray

    profile = simulated_profile()
    url = dbs.url(args.db)
    db = store.open_store(url)
    wanted = request_problems(args.requests, profile)
    for kernel, problem in wanted:
        queue.enqueue(db, queue.ANY_TOPOLOGY, kernel, problem.key(), catalog.get(kernel).source_hash(), 0, "fleet")
    owns = init_ray(None, os.cpu_count())
    address = ray.get_runtime_context().gcs_address
    shares = [args.gpus // args.drivers + (k < args.gpus % args.drivers) for k in range(args.drivers)]
    env = {**os.environ, "FARM_DATABASE_URL": url, "FARM_DEVICE_LOCK": "off", "RAY_ADDRESS": address,
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    procs = []
    try:
        for k, share in enumerate(shares):
            home = dbs.dir / f"driver{k}"
            home.mkdir()
            command = [sys.executable, __file__, "drain", "--ray-address", address, "--gpus-each", str(share),
                       "--first", str(sum(shares[:k])), "--trial-s", str(args.trial_s), "--batch", str(args.batch),
                       "--inputs-s", str(args.inputs_s),
                       "--budget", str(args.budget or 0), "--json", str(home / "drain.json")]  # fmt: skip
            log = open(home / "stderr.txt", "w")
            procs.append((subprocess.Popen(command, env=env | {"FARM_HOME": str(home)}, stderr=log,
                                           stdout=subprocess.DEVNULL), home, log))  # fmt: skip
        for proc, home, log in procs:
            if proc.wait() != 0:
                tail = (home / "stderr.txt").read_text()[-2000:]
                raise SystemExit(f"fleet.py: error: driver {home.name} exited {proc.returncode}:\n{tail}")
            log.close()
    finally:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
        if owns:
            ray.shutdown()
    parts = [json.loads((home / "drain.json").read_text()) for _, home, _ in procs]
    trials = store.count_trials(db)
    counts = queue.status_counts(db)
    dry = max(r["claimed_at"] for r in queue.requests(db) if r["claimed_at"]).timestamp()  # the last claim: dry
    won = [w.median_ns for w in store.winners(db) if w.median_ns]
    db.engine.dispose()
    start = min(p["start"] for p in parts)
    wall = max(p["end"] for p in parts) - start
    # busy while requests still waited for a claim: a fleet's steady state, before the last ones' tail
    until_dry = sum(b for p in parts for second, b in p["by_second"].items() if int(start) <= int(second) < int(dry))
    cpu = sum(p["cpu_s"] for p in parts)
    cpu_us = 1e6 * cpu / max(trials, 1)
    return {"mode": "drivers", "db": args.db, "drivers": args.drivers, "gpus": args.gpus, "trial_s": args.trial_s,
            "inputs_s": args.inputs_s,
            "requests": len(wanted), "done": counts.get("done", 0), "trials": trials, "wall_s": wall,
            "trials_per_s": trials / wall, "utilization": sum(p["busy_s"] for p in parts) / (args.gpus * wall),
            "dry_s": dry - start, "busy_until_dry": until_dry / (args.gpus * max(int(dry) - int(start), 1)),
            "claimed": [p["claimed"] for p in parts], "driver_cpu_us_per_trial": cpu_us,
            "inputs_ahead": sum(p["inputs"]["made ahead"] for p in parts),
            "inputs_at_trial": sum(p["inputs"]["made at a trial"] for p in parts),
            "wait_ahead_s": sum(p["inputs"]["waited ahead_s"] for p in parts),
            "wait_at_trial_s": sum(p["inputs"]["waited at a trial_s"] for p in parts),
            "driver_cores_busy": cpu / wall, "db_rows_per_s": trials / wall,
            "drivers_for_11600": math.ceil(11_600 * cpu_us / 1e6),
            "winners_geomean_us": math.exp(sum(map(math.log, won)) / len(won)) / 1e3 if won else None,
            "load": load()}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("record", "driver", "fleet", "drivers", "drain"))
    parser.add_argument("--rows", type=int, default=50_000, help="record: trials recorded per database")
    parser.add_argument("--no-postgres", action="store_true", help="record: SQLite only")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="postgresql", help="driver, fleet")
    parser.add_argument("--trials", type=int, default=20_000, help="driver: about this many trials (exhaustive)")
    parser.add_argument("--workers", type=int, default=4, help="driver: simulated GPUs answering at once")
    parser.add_argument("--gpus", default="64", help="fleet: comma-separated counts of simulated GPUs")
    parser.add_argument("--trial-s", type=float, default=H200_TRIAL_S, help="fleet: mean seconds per trial per GPU")
    parser.add_argument("--inputs-s", type=float, default=0.0,
                        help="drivers: seconds a GPU waits for a problem's inputs and reference before its first trial "
                             "of it (0: free)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument("--drivers", type=int, default=2, help="drivers: drainer processes over one queue")
    parser.add_argument("--requests", type=int, default=100, help="drivers: tune requests queued")
    parser.add_argument("--batch", type=int, default=0,
                        help="drivers: requests a drainer claims per round (0: farm serve's own, sized to its GPUs)")
    parser.add_argument("--budget", type=int, default=0, help="drivers: trials per request (0: the default)")
    parser.add_argument("--ray-address", help=argparse.SUPPRESS)  # drain: one driver of `drivers`
    parser.add_argument("--gpus-each", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "drain":
        row = drain(args)
        args.json.write_text(json.dumps(row))
        return 0
    if args.mode == "drivers" and not (1 <= args.drivers <= int(args.gpus)):
        raise SystemExit(f"fleet.py: error: --drivers {args.drivers} must be 1..--gpus ({args.gpus})")
    needs_pg = (args.mode == "record" and not args.no_postgres) or args.db == "postgresql"
    dbs = Databases(needs_pg)
    try:
        if args.mode == "record":
            rows = record(args, dbs)
        elif args.mode == "drivers":
            args.gpus = int(args.gpus)
            rows = [drivers(args, dbs)]
        elif args.mode == "driver":
            rows = [campaign_run(args, dbs, args.workers, 0.0, "exhaustive", None, args.trials, warm=True)]
        else:
            rows = [campaign_run(args, dbs, int(n), args.trial_s, "model", None, None) for n in args.gpus.split(",")]
    finally:
        dbs.close()
    print(f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, load {load()}")
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(f"{row.get(k):.3g}" if isinstance(row.get(k), float) else str(row.get(k)) for k in keys))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
