"""Campaign planning, size parsing, progress and the winners table (no Ray needed)."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from farm import catalog
from farm.gpu import Device
from farm.schedule import Problem, Schedule, Status
from farm.store import WinnerRecord
from farm.trial import TrialKey, TrialResult
from farm.tuning.recording import result_from_row
from farm.tuning.report import Progress, format_summary, format_winners_table, problem_line
from farm.tuning.tasks import CPU_BUDGET, TuneConfig, parse_sizes, plan


def test_parse_sizes_reads_several_kernels_and_repeats():
    sizes = parse_sizes("gemm:m=64,k=64,n=64; gemv:m=256,n=256;gemv:m=8,n=4")
    assert sizes == {
        "gemm": [Problem.of(m=64, k=64, n=64)],
        "gemv": [Problem.of(m=256, n=256), Problem.of(m=8, n=4)],
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("gemv", "'gemv' is not KERNEL:dim=value"),
        ("gemv:m=a,n=2", "dimensions must be name=integer pairs"),
        ("gemv:m=2", r"gemv problem needs \('m', 'n'\)"),
        ("nope:m=2", "unknown kernel 'nope'"),
    ],
)
def test_parse_sizes_names_the_bad_entry(text, message):
    with pytest.raises(ValueError, match=message):
        parse_sizes(text)


def test_plan_caps_cpu_budgets_and_keeps_the_default_out_of_the_space(device):
    profile = device.profile
    assert profile.is_cpu
    spec = catalog.get("gemv")
    tasks = plan(TuneConfig(kernels=("gemv",), budget=None), "topo", profile)
    assert [t.problem for t in tasks] == spec.default_problems(profile)
    (task,) = tasks
    assert spec.default not in task.space and len(task.space) == len(spec.schedules())
    assert task.budget == CPU_BUDGET and task.capped_from == len(spec.schedules())
    assert task.trials == 1 + CPU_BUDGET


def test_plan_uses_given_sizes_and_small_budgets_uncapped(device):
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": [Problem.of(m=8, n=8)]}, budget=3)
    (task,) = plan(config, "topo", device.profile)
    assert task.problem == Problem.of(m=8, n=8) and task.budget == 3 and task.capped_from is None
    assert task.trials == 4


def test_plan_leaves_out_schedules_invalid_for_the_problem(device):
    spec = catalog.get("gemv")
    problem = Problem.of(m=8, n=6)  # vector_width 4 does not divide n
    (task,) = plan(TuneConfig(kernels=("gemv",), sizes={"gemv": [problem]}, budget=4), "topo", device.profile)
    candidates = [s for s in spec.schedules() if s != spec.default]
    assert task.excluded > 0 and len(task.space) + task.excluded == len(candidates)
    for schedule in task.space:
        spec.check(schedule, problem, device.profile)  # raises if invalid


def _result(status: Status) -> TrialResult:
    key = TrialKey("t", "gemv", "s", Problem.of(m=1, n=1), Schedule())
    return TrialResult(key, status)


def test_progress_writes_plain_lines_with_failures_and_resumed_counts():
    stream = io.StringIO()
    progress = Progress(total=3, stream=stream, every_s=3600)
    progress.advance(_result(Status.OK), skipped=True)
    progress.advance(_result(Status.COMPILE_ERROR))
    progress.advance(_result(Status.OK))
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("1/3 trials, 0 failed, 1 resumed, ETA ?")
    assert lines[-1].endswith("3/3 trials, 1 failed, 1 resumed, ETA 0s")
    assert "\r" not in stream.getvalue()


def test_winners_table_shows_median_default_and_speedup():
    record = WinnerRecord("t", "gemv", "m=8,n=8", "s", Schedule(workgroup_size=32).key(), 2000.0, 5000.0, 2.5)
    table = format_winners_table([record, replace(record, kernel="gemm", default_median_ns=None, speedup=None)])
    lines = table.splitlines()
    assert lines[0].split() == ["kernel", "problem", "schedule", "median_us", "default_us", "speedup", "p20-p80_us",
                                "margin"]  # fmt: skip
    assert lines[2].split() == ["gemv", "m=8,n=8", "workgroup_size=32,items_per_invocation=1,vector_width=1", "2.00",
                                "5.00", "2.50x", "-", "-"]  # fmt: skip
    assert lines[3].split()[-4:] == ["-", "-", "-", "-"]


def test_the_closing_summary_fits_100_columns_with_the_knobs_that_differ_from_the_default():
    gemm = catalog.get("gemm")
    far = max(gemm.schedules(), key=lambda s: sum(v != gemm.default.as_dict().get(k) for k, v in s.as_dict().items()))
    records = [
        WinnerRecord("t", "gemv", "m=8,n=8", "s", Schedule(workgroup_size=32).key(), 2000.0, 5000.0, 2.5),
        WinnerRecord("t", "gemm", "m=1024,k=1024,n=1024", "s", far.key(), 2.0e6, 2.0e6, 1.0),
        WinnerRecord("t", "gemv", "m=4,n=4", "s", catalog.get("gemv").default.key(), 9.0, None, None),
    ]
    lines = format_summary(records).splitlines()
    assert lines[0].split() == ["kernel", "problem", "median_us", "speedup", "schedule"]
    assert max(len(line) for line in lines) <= 100
    assert lines[2].split() == ["gemv", "m=8,n=8", "2.00", "2.50x", "workgroup_size=32"]
    assert lines[3].split()[:4] == ["gemm", "m=1024,k=1024,n=1024", "2000.00", "1.00x"]
    wrapped = lines[4 : next(i for i, line in enumerate(lines) if line.split()[:2] == ["gemv", "m=4,n=4"])]
    assert wrapped and all(line.startswith(" " * 40) for line in wrapped)  # the long schedule, wrapped
    knobs = "".join(line.split()[-1] for line in [lines[3], *wrapped]).split(",")
    assert len(knobs) > 5 and all("=" in knob for knob in knobs)
    assert lines[-2].split() == ["gemv", "m=4,n=4", "0.01", "-", "default"]
    assert lines[-1].startswith("schedule: knobs that differ from the default")


def test_a_problem_line_says_the_winners_time_and_speedup():
    record = WinnerRecord("t", "gemv", "m=8,n=8", "s", Schedule(workgroup_size=32).key(), 2000.0, 5000.0, 2.5)
    assert problem_line(record, 9) == "gemv m=8,n=8: 2.00 us, 2.50x over the default schedule (9 trials)"
    assert problem_line(replace(record, speedup=None), 9) == "gemv m=8,n=8: 2.00 us (9 trials)"


def test_a_progress_note_is_its_own_line_above_the_progress_line():
    plain, tty = io.StringIO(), io.StringIO()
    tty.isatty = lambda: True
    for stream in (plain, tty):
        progress = Progress(total=2, stream=stream, every_s=3600)
        progress.advance(_result(Status.OK))
        progress.note("gemv m=8,n=8: done")
    assert plain.getvalue().splitlines()[-1] == "gemv m=8,n=8: done"
    assert tty.getvalue().endswith("\r\033[Kgemv m=8,n=8: done\n" + progress.line())


def test_recorded_rows_replay_as_trial_results():
    row = {
        "topology_hash": "t", "kernel": "gemv", "source_hash": "s", "schedule": Schedule(workgroup_size=32).key(),
        "status": "ok", "message": "", "median_ns": 10.0, "p20_ns": 9.0, "p80_ns": 11.0, "min_ns": 8.0, "reps": 5,
        "timing_method": "timestamp", "max_abs": 1e-6, "mean_abs": None, "rmse": None, "max_rel": None,
        "host": "h", "worker_id": "w0.0",
    }  # fmt: skip
    result = result_from_row(row, Problem.of(m=1, n=1))
    assert result.ok and result.median_ns == 10.0 and result.timing.reps == 5
    assert result.key.schedule == Schedule(workgroup_size=32) and result.metrics.max_abs == 1e-6
    assert result.as_row()["worker_id"] == "w0.0"


def test_trial_bench_reuses_uploaded_inputs_across_schedules(device: Device):
    from farm.tuning.job import Job
    from farm.tuning.runner import TrialRunner

    bench = TrialRunner(device, compile_ahead=True)
    spec = catalog.get("gemv")
    problem = spec.problem(m=48, n=40)
    jobs = [Job("gemv", problem, s, 0, 1, 2) for s in spec.schedules()[:4]]
    results = bench.evaluate(jobs)
    in_use = device.memory()["in_use"]
    results += bench.evaluate(jobs)
    assert all(r.status is Status.OK for r in results)
    assert device.memory()["in_use"] == in_use  # nothing re-uploaded, nothing leaked
    bench.close()


def test_trial_bench_certifies_topk_against_each_schedules_own_block_size(device: Device):
    """topk's reference depends on the block (= workgroup_size): one cached reference for the
    problem would fail every schedule but the first."""
    from farm.tuning.job import Job
    from farm.tuning.runner import TrialRunner

    bench = TrialRunner(device, compile_ahead=False)
    problem = catalog.get("topk").problem(n=1000, k=4)
    schedules = [Schedule.of(workgroup_size=wg, items_per_invocation=1, vector_width=1) for wg in (32, 64, 128)]
    results = bench.evaluate([Job("topk", problem, s, 0, 1, 2) for s in schedules])
    assert [r.status for r in results] == [Status.OK] * 3, [r.message for r in results]
    bench.close()


class TwoTopologyPool:
    """Two workers that report different GPUs (the second profile is this adapter renamed),
    both backed by the local device: what a campaign sees on a mixed cluster."""

    def __init__(self, device: Device):
        from farm.tuning.runner import TrialRunner

        self.bench = TrialRunner(device, compile_ahead=False)
        other = replace(device.profile, device_name="Other GPU 9000", driver_description="other 1.0")
        self._profiles = {"w0": device.profile, "w1": other}
        self.streamed: dict[str, int] = {}

    def profiles(self):
        return dict(self._profiles)

    def topologies(self):
        return {p.topology_hash(): [slot] for slot, p in self._profiles.items()}

    def _restamp(self, result: TrialResult, topology: str) -> TrialResult:
        return replace(
            result, key=replace(result.key, topology_hash=topology), worker_id=self.topologies()[topology][0]
        )

    def stream(self, jobs, topology=None, batch_size=None):
        self.streamed[topology] = self.streamed.get(topology, 0) + len(jobs)
        for result in self.bench.evaluate(jobs):
            yield self._restamp(result, topology)

    def remeasure_rounds(self, slot, kernel, problem, schedules, reps, rounds, seed=0, max_rounds=None, noise=0.01):
        return self.bench.remeasure_rounds(kernel, problem, schedules, reps, rounds, seed, max_rounds, noise)



class OneWorkerBenchPool(TwoTopologyPool):
    """One worker on the test device with a real TrialRunner (compile-ahead, prefetch, hints)."""

    def __init__(self, device):
        from farm.tuning.runner import TrialRunner

        super().__init__(device)
        self.bench.close()
        self.bench = TrialRunner(device)
        self._profiles = {"w0": device.profile}

class RecordingPool(OneWorkerBenchPool):
    """Records each problem's first batch streamed, and what the workers were asked to prefetch and forget."""

    def __init__(self, device):
        super().__init__(device)
        self.events = []

    def stream(self, jobs, topology=None, batch_size=None):
        self.events.append(("stream", jobs[0].problem.key()))
        yield from super().stream(jobs, topology, batch_size)

    def prefetch(self, kernel, problem, seed=0, topology=None):
        self.events.append(("prefetch", problem.key()))
        self.bench.prefetch(kernel, problem, seed)

    def forget(self, kernel, problem, seed=0, topology=None):
        self.events.append(("forget", problem.key()))
        self.bench.forget(kernel, problem, seed)


def test_a_campaign_tunes_each_topology_separately_and_stores_winners_per_topology(device: Device, tmp_path):
    from farm import store
    from farm.tuning.campaign import Campaign

    pool = TwoTopologyPool(device)
    db = store.open_store(f"sqlite:///{tmp_path}/farm.db")
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": [Problem.of(m=40, n=24)]}, budget=3, reps=2, rounds=1)
    winners = Campaign(config, pool, db, tmp_path / "artifacts", "farm tune gemv").run()

    hashes = set(pool.topologies())
    assert len(hashes) == 2
    assert {w.topology_hash for w in winners} == hashes
    assert {w.device_name for w in winners} == {device.profile.device_name, "Other GPU 9000"}
    assert set(pool.streamed) == hashes and all(n >= 4 for n in pool.streamed.values())  # default + 3 each
    for topology in hashes:
        rows = store.trials(db, topology=topology, kernel="gemv")
        assert len(rows) == 4 and {r["topology_hash"] for r in rows} == {topology}
    assert {w.topology_hash for w in store.winners(db, kernel="gemv")} == hashes
    pool.bench.close()


def test_format_workers_names_each_workers_gpu_and_placement():
    from farm.tuning.report import format_workers

    reports = {
        "gpu1": {
            "host": "h",
            "pid": 11,
            "topology_hash": "b" * 64,
            "mapping": {
                "adapter": "NVIDIA H200 (DiscreteGPU) via Vulkan",
                "ray_gpu_ids": ["1"],
                "adapter_index": 1,
                "nvidia_smi": {"uuid": "GPU-2"},
                "placement_ok": True,
                "startup_s": {"adapter": 1.234, "device": 2.0, "placement": 0.51},
            },
        },
        "cpu0": {
            "host": "h",
            "pid": 10,
            "topology_hash": "a" * 64,
            "mapping": {"adapter": "llvmpipe", "ray_gpu_ids": []},
        },
    }
    lines = format_workers(reports).splitlines()
    assert lines[0] == "worker cpu0 on h pid 10: llvmpipe; no Ray GPU; placement unchecked; topology aaaaaaaaaaaaaaaa"
    assert lines[1] == (
        "worker gpu1 on h pid 11: NVIDIA H200 (DiscreteGPU) via Vulkan; ray GPU 1 -> adapter 1 GPU-2;"
        " placement ok; topology bbbbbbbbbbbbbbbb; up in adapter 1.2, device 2.0, placement 0.5 s"
    )


def test_trial_bench_builds_each_launch_once_when_compiling_ahead(device: Device, monkeypatch):
    from farm.tuning.job import Job
    from farm.tuning.runner import TrialRunner

    spec = catalog.get("gemv")
    calls = []
    original = type(spec).launch

    def counted(self, schedule, problem, inputs):
        calls.append(schedule)
        return original(self, schedule, problem, inputs)

    monkeypatch.setattr(type(spec), "launch", counted)
    bench = TrialRunner(device, compile_ahead=True)
    schedules = spec.schedules()[:3]
    results = bench.evaluate([Job("gemv", spec.problem(m=16, n=8), s, 0, 1, 2) for s in schedules])
    bench.close()
    assert all(r.status is Status.OK for r in results)
    assert calls == schedules


def test_tune_gpus_flag_takes_a_positive_count(capsys):
    from farm.cli.main import build_parser

    assert build_parser().parse_args(["tune", "gemv", "--gpus", "2"]).gpus == 2
    assert build_parser().parse_args(["tune", "gemv"]).gpus is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tune", "gemv", "--gpus", "0"])
    assert "expected a positive integer, got '0'" in capsys.readouterr().err


def test_pool_refuses_a_gpu_cap_below_one():
    from farm.tuning.workers import WorkerPool

    with pytest.raises(ValueError, match="gpus=0"):
        WorkerPool(allow_cpu=True, gpus=0)


@pytest.mark.parametrize("text", ["0", "-3", "x"])
def test_tune_budget_refuses_what_is_not_a_positive_count_or_all(text, capsys):
    from farm.cli.main import build_parser

    assert build_parser().parse_args(["tune", "gemv", "--budget", "all"]).budget is None
    assert build_parser().parse_args(["tune", "gemv", "--budget", "5"]).budget == 5
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tune", "gemv", "--budget", text])
    assert f"budget must be a positive integer or 'all', got '{text}'" in capsys.readouterr().err


def test_trial_recorder_writes_every_flush_every_trials_and_the_rest_on_flush(tmp_path, monkeypatch):
    # farm tune and the benchmarks that measure its path (recorded()) store trials the same way
    from test_store_support import profile, trial

    from farm import store
    from farm.tuning.recording import FLUSH_EVERY, TrialRecorder, recorded

    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    topo = store.upsert_topology(db, profile())
    monkeypatch.setattr("farm.tuning.recording.FLUSH_INTERVAL_S", 3600.0)  # by count only
    campaign_id = store.start_campaign(db, "farm tune", "random", None, 7, 1000)
    flushes = []

    def progress():  # the counters go into each flush's transaction, read as it writes (before its rows)
        flushes.append(store.count_trials(db))
        return (len(flushes) * 100, 0, 1000)

    recorder = TrialRecorder(db, campaign_id, tmp_path / "artifacts", progress)
    results = [trial(topo, wg) for wg in range(1, FLUSH_EVERY + 4)]
    for result in results[:FLUSH_EVERY]:
        recorder.add(result)
    assert flushes == [0] and store.count_trials(db) == FLUSH_EVERY and not recorder.buffer
    assert store.campaign(db, campaign_id)["done"] == 100  # written with the trials
    for result in results[FLUSH_EVERY:]:
        recorder.add(result)
    assert store.count_trials(db) == FLUSH_EVERY and len(recorder.buffer) == 3
    assert not list((tmp_path / "artifacts").rglob("*.parquet"))  # Parquet waits for close()
    recorder.close()
    assert flushes == [0, FLUSH_EVERY] and store.count_trials(db) == len(results)
    assert store.campaign(db, campaign_id)["done"] == 200
    assert recorder.spent["sql_s"] > 0 and recorder.spent["parquet_s"] > 0
    spent: dict[str, float] = {}
    more = [trial(topo, wg) for wg in range(10_000, 10_005)]
    assert list(recorded(more, db, None, tmp_path / "artifacts", spent)) == more
    assert store.count_trials(db) == len(results) + len(more) and spent["sql_s"] > 0
    db.engine.dispose()


def test_a_thread_adding_a_trial_does_not_wait_for_another_threads_write(tmp_path, monkeypatch):
    import threading

    from test_store_support import profile, trial

    from farm import store
    from farm.tuning.recording import TrialRecorder

    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    topo = store.upsert_topology(db, profile())
    monkeypatch.setattr("farm.tuning.recording.FLUSH_EVERY", 2)
    writing, release = threading.Event(), threading.Event()

    def progress():  # the first write holds its transaction open until released
        if not writing.is_set():
            writing.set()
            assert release.wait(10)
        return (0, 0, 10)

    campaign_id = store.start_campaign(db, "farm tune", "random", None, 7, 10)
    recorder = TrialRecorder(db, campaign_id, tmp_path / "out", progress)
    recorder.add(trial(topo, 1))
    writer = threading.Thread(target=recorder.add, args=(trial(topo, 2),))  # due: this thread writes
    writer.start()
    assert writing.wait(10)
    for wg in (3, 4, 5):  # due as well, but a write is in progress: buffered, not waited on
        recorder.add(trial(topo, wg))
    assert len(recorder.buffer) == 3 and store.count_trials(db) == 0
    release.set()
    writer.join(10)
    assert store.count_trials(db) == 2
    recorder.close()
    assert store.count_trials(db) == 5 and not recorder.buffer
    db.engine.dispose()


def test_a_problem_first_tries_this_campaigns_winners_of_the_kernels_other_problems(device: Device, tmp_path):
    """The winners of earlier problems of the same kernel seed the next problem's search
    (latest first, at most SIBLING_SEEDS, only schedules it can run and has no stored trial
    of, never the default again), and a campaign of two problems records them."""
    from farm import catalog, store
    from farm.tuning.campaign import Campaign
    from farm.tuning.engine import SIBLING_SEEDS, sibling_schedules
    from farm.tuning.tasks import Task

    spec = catalog.get("gemv")
    problem = Problem.of(m=40, n=24)
    space = [s for s in spec.schedules() if not spec.invalid_reason(s, problem, device.profile)]
    pool = TwoTopologyPool(device)
    topology = next(iter(pool.topologies()))
    keys = [s.key() for s in space if s != spec.default][: SIBLING_SEEDS + 2]
    siblings = [spec.default.key(), *keys, keys[0]]
    task = Task(topology=topology, kernel="gemv", problem=problem, space=space, budget=3)
    lead = [s.key() for s in sibling_schedules(task, siblings, {keys[-1]: None})]
    assert lead == [keys[0], *keys[-2:0:-1]][:SIBLING_SEEDS]  # latest first, recorded one out
    assert spec.default.key() not in lead
    assert sibling_schedules(task, [], {}) == []  # no earlier winner of this kernel: nothing tried

    second = Problem.of(m=24, n=40)
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": [problem, second]}, budget=3, reps=2, rounds=1)
    db = store.open_store(f"sqlite:///{tmp_path}/b.db")
    campaign = Campaign(config, TwoTopologyPool(device), db, tmp_path / "b", "farm tune gemv")
    winners = campaign.run()
    first = {w.topology_hash: w for w in winners if w.problem_key == problem.key()}
    checked = 0
    for w in winners:
        if w.problem_key == second.key() and first[w.topology_hash].schedule_key != spec.default.key():
            rows = store.trials(campaign.db, topology=w.topology_hash, kernel="gemv")
            tried = {r["schedule"] for r in rows if r["problem"] == second.key()}
            assert first[w.topology_hash].schedule_key in tried
            checked += 1
    assert checked or all(w.schedule_key == spec.default.key() for w in first.values())
    campaign.pool.bench.close()
    pool.bench.close()


def test_a_campaign_prefetches_the_next_problems_inputs_and_forgets_each_finished_one(device: Device, tmp_path):
    """So the GPU does not wait between problems for the next problem's inputs and reference,
    the campaign asks its workers for the next PREFETCH_AHEAD problems' (each problem once: a
    large problem's inputs can outlast one short problem), after the first problem's first
    trial, before the later ones' (their own were asked for earlier), and drops each
    problem's inputs once its winner is stored (docs/decisions/014-keep-the-gpu-busy.md)."""
    import threading

    from farm import store
    from farm.tuning.campaign import Campaign

    first, second, third, fourth = (Problem.of(m=40, n=24), Problem.of(m=24, n=40), Problem.of(m=32, n=32),
                                    Problem.of(m=16, n=48))  # fmt: skip
    spec = catalog.get("gemv")
    threads = []
    real = type(spec).generate
    pool = RecordingPool(device)
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": [first, second, third, fourth]}, budget=3, reps=2, rounds=1)
    db = store.open_store(f"sqlite:///{tmp_path}/farm.db")
    def generate(self, *args):
        threads.append(threading.current_thread().name)
        return real(self, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(spec), "generate", generate)
        winners = Campaign(config, pool, db, tmp_path / "artifacts", "farm tune gemv").run()
    assert len(winners) == 4
    a, b, c, d = first.key(), second.key(), third.key(), fourth.key()
    events = [e for i, e in enumerate(pool.events) if e[0] != "stream" or pool.events[i - 1] != e]
    assert events[:3] == [("stream", a), ("prefetch", b), ("prefetch", c)]  # the first: after its first trial
    assert [e for e in events if e[0] == "prefetch"] == [("prefetch", b), ("prefetch", c), ("prefetch", d)]  # once
    assert events.index(("prefetch", d)) < events.index(("stream", b))  # b's own were asked for: before its trials
    assert events.index(("forget", a)) < events.index(("stream", b)) and events[-1] == ("forget", d)
    assert len(threads) == 4 and sum(t.startswith("farm-prefetch") for t in threads) == 3  # the later three, ahead
    pool.bench.inputs.settled()
    assert pool.bench.inputs_held() == []
    pool.bench.close()


def test_a_failed_campaign_has_its_workers_drop_the_current_and_prefetched_inputs(device: Device, tmp_path):
    """`farm serve`'s workers outlive a campaign: one that fails mid-way must not leave them
    holding the problem it was on and the ones asked for ahead."""
    from farm import store
    from farm.tuning.campaign import Campaign

    class FailingPool(RecordingPool):
        def stream(self, jobs, topology=None, batch_size=None):
            if jobs[0].problem.key() == "m=24,n=40":
                raise RuntimeError("worker lost")
            yield from super().stream(jobs, topology, batch_size)

    problems = [Problem.of(m=40, n=24), Problem.of(m=24, n=40), Problem.of(m=32, n=32), Problem.of(m=16, n=48)]
    pool = FailingPool(device)
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": problems}, budget=2, reps=2, rounds=1)
    db = store.open_store(f"sqlite:///{tmp_path}/farm.db")
    with pytest.raises(RuntimeError, match="worker lost"):
        Campaign(config, pool, db, tmp_path / "artifacts", "farm tune gemv").run()
    forgotten = [key for what, key in pool.events if what == "forget"]
    assert sorted(forgotten) == sorted(["m=40,n=24", "m=24,n=40", "m=32,n=32", "m=16,n=48"])  # each once
    pool.bench.inputs.settled()
    assert pool.bench.inputs_held() == []
    pool.bench.close()


def test_precompile_compiles_hinted_pipelines_ahead_so_their_trials_find_them_cached(device: Device):
    import time

    from farm.tuning import runner as bench_module
    from farm.tuning.job import Job
    from farm.tuning.runner import TrialRunner

    bench = TrialRunner(device, compile_ahead=True)
    spec = catalog.get("gemv")
    problem = spec.problem(m=40, n=24)
    valid = [s for s in spec.schedules() if not spec.invalid_reason(s, problem, device.profile)]
    hinted, invalid = valid[-3:], Schedule.of(workgroup_size=48, threads_per_row=5)
    before = device.cached_pipelines
    assert bench.precompile("gemv", problem, [*hinted, invalid]) == 4  # the invalid one is dropped quietly
    deadline = time.monotonic() + 60
    while bench._hinted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert device.cached_pipelines == before + 3
    results = bench.evaluate([Job("gemv", problem, s, 0, 1, 2) for s in hinted])
    assert all(r.ok for r in results) and device.cached_pipelines == before + 3  # nothing compiled again
    assert bench.stage_times()["seconds"]["precompile"] > 0
    bench._hinted = bench_module.HINTED_MAX  # a full queue: the hint is dropped, nothing queued
    assert bench.precompile("gemv", problem, valid[:2]) == 0
    bench._hinted = 0
    bench.close()
    plain = TrialRunner(device, compile_ahead=False)
    assert plain.precompile("gemv", problem, valid[:1]) == 0
    plain.close()


def test_a_campaigns_model_search_has_its_workers_compile_the_next_likely_picks(device: Device, tmp_path):
    from farm import store
    from farm.tuning.campaign import Campaign

    class HintPool(OneWorkerBenchPool):
        def __init__(self, device):
            super().__init__(device)
            self.hints, self.tried = [], []

        def stream(self, jobs, topology=None, batch_size=None):
            self.tried += [j.schedule.key() for j in jobs]
            yield from super().stream(jobs, topology, batch_size)

        def precompile(self, kernel, problem, schedules, seed=0, topology=None):
            self.hints.append((kernel, problem.key(), [s.key() for s in schedules], len(self.tried)))
            self.bench.precompile(kernel, problem, schedules, seed)

    problem = Problem.of(m=40, n=24)
    pool = HintPool(device)
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": [problem]}, budget=16, reps=2, rounds=1)
    db = store.open_store(f"sqlite:///{tmp_path}/farm.db")
    winners = Campaign(config, pool, db, tmp_path / "artifacts", "farm tune gemv").run()
    assert len(winners) == 1 and pool.hints
    for kernel, key, hinted, tried_before in pool.hints:
        assert (kernel, key) == ("gemv", problem.key()) and hinted
        assert not set(hinted) & set(pool.tried[:tried_before])  # never one already tried
    pool.bench.close()


def test_a_problem_without_winner_says_its_commonest_failure_and_the_compilers_line():
    """A WGSL error under `farm tune` reports the compiler's line, as farm certify does, not
    only "no certified schedule"."""
    from farm.tuning.report import failure_summary

    compile_error = (
        "compile failed for kernel 'k[workgroup_size=32]' schedule workgroup_size=32: Validation Error\n\n"
        "Caused by:\n  In wgpuDeviceCreateShaderModule, label = 'k'\n\n"
        "Shader 'k' parsing error: no definition in scope for identifier: `oops`\n  ┌─ wgsl:6:51\n  │\n"
    )
    rows = {
        "a": {"status": "compile_error", "message": compile_error},
        "b": {"status": "compile_error", "message": compile_error},
        "c": {"status": "wrong_output", "message": "max_abs 3.0 > atol"},
    }
    assert failure_summary(rows) == (
        "; 2 of 3 trials compile_error: Shader 'k' parsing error: no definition in scope for identifier: `oops`"
        " (wgsl:6:51)"
    )
    assert failure_summary({"c": rows["c"]}) == "; 1 of 1 trials wrong_output: max_abs 3.0 > atol"
    assert failure_summary({"ok": {"status": "ok", "message": ""}}) == ""


def test_the_python_that_farm_tune_suggests_runs(farm_home, capsys):
    from farm.tuning.report import NEXT_STEPS

    lines = NEXT_STEPS.split("and in Python, the tuned kernels on your arrays:\n", 1)[1].splitlines()
    assert len(lines) == 5
    exec(compile("\n".join(line.strip() for line in lines), "NEXT_STEPS", "exec"), {})  # noqa: S102 - our own text
    assert capsys.readouterr().out.strip().startswith("[")


class _CostExecutor:
    """A TrialExecutor whose trials take no GPU: each schedule's time is a function of its key."""

    workers, device_name = 8, "fake"

    def __init__(self, events: list):
        self.batches, self.events = [], events

    def evaluate(self, jobs):
        import hashlib

        from farm.gpu import Timing

        self.batches.append([job.schedule.key() for job in jobs])
        for job in jobs:
            ns = 1e4 + int(hashlib.sha256((job.problem.key() + job.schedule.key()).encode()).hexdigest()[:6], 16) % 9e4
            key = TrialKey("t", job.kernel, catalog.get(job.kernel).source_hash(), job.problem, job.schedule)
            self.events.append("trial")
            yield TrialResult(key, Status.OK, timing=Timing(ns, ns, ns, ns, 10, "fake"))

    def remeasure_rounds(self, kernel, problem, schedules, reps, rounds, seed, max_rounds, noise):
        return {s.key(): [1e4 + i for i in range(rounds)] for s in schedules}

    def precompile(self, *args):
        pass


@pytest.mark.parametrize("searched", [True, False])
def test_the_default_and_the_siblings_go_in_the_searchs_first_batch_and_the_first_trial_back_is_announced(searched):
    """Each round of a problem waits for its slowest trial on a fleet: the default and this
    run's winners of the kernel's other problems are measured with the search's seeds (the
    default first, so its trial is the first back), not in rounds of their own."""
    from farm.tuning.engine import tune_problem
    from farm.tuning.tasks import Task
    from farm.tuning.trial_logs import MemoryLog

    spec = catalog.get("gemv")
    problem = spec.problem(m=256, n=256)
    space = [s for s in spec.schedules() if s != spec.default]
    task = Task(topology="t", kernel="gemv", problem=problem, space=space if searched else [], budget=24)
    events: list = []
    runner = _CostExecutor(events)
    siblings = [s.key() for s in space[:2]]
    outcome = tune_problem(task, TuneConfig(kernels=("gemv",)), runner, MemoryLog(), siblings,
                           lambda: events.append("first back"))  # fmt: skip
    first = runner.batches[0]
    assert first[0] == spec.default.key()
    assert events[:2] == ["trial", "first back"] and events.count("first back") == 1
    if searched:
        assert first[1:3] == siblings[::-1] and len(first) > 3  # latest winner first, then the seeds
        assert len(runner.batches) > 1 and outcome.winner is not None
    else:
        assert runner.batches == [[spec.default.key()]]  # nothing to search: the default alone
