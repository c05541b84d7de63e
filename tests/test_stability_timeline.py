"""benchmarks/stability.py's timeline: a campaign's wall split into trials, re-measurement
and the gaps before each problem's first trial, from SQL's timestamps."""

import importlib.util
from pathlib import Path

from sqlalchemy import create_engine, text

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "stability.py"


def _stability():
    spec = importlib.util.spec_from_file_location("stability", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Db:
    def __init__(self, url):
        self.engine = create_engine(url)


def test_timeline_sums_trials_remeasurement_and_gaps_per_problem(tmp_path):
    db = _Db(f"sqlite:///{tmp_path / 't.db'}")
    with db.engine.begin() as conn:
        conn.execute(text("CREATE TABLE campaigns (started_at TEXT)"))
        conn.execute(text("CREATE TABLE trials (id INTEGER PRIMARY KEY, kernel TEXT, problem TEXT, finished_at TEXT)"))
        conn.execute(text("CREATE TABLE winners (kernel TEXT, problem TEXT, updated_at TEXT)"))
        conn.execute(text("INSERT INTO campaigns VALUES ('2026-12-01 10:00:00')"))
        trials = [("gemv", "m=1", "10:00:05"), ("gemv", "m=1", "10:00:15"), ("gemm", "m=2", "10:00:20"),
                  ("gemm", "m=2", "10:00:21")]  # fmt: skip
        for kernel, problem, at in trials:
            conn.execute(text("INSERT INTO trials (kernel, problem, finished_at) VALUES (:k, :p, :t)"),
                         {"k": kernel, "p": problem, "t": f"2026-12-01 {at}"})  # fmt: skip
        conn.execute(text("INSERT INTO winners VALUES ('gemv', 'm=1', '2026-12-01 10:00:17')"))
        conn.execute(text("INSERT INTO winners VALUES ('gemm', 'm=2', '2026-12-01 10:00:24')"))
    got = _stability().timeline(db)
    # trials 10 + 1 s, re-measurement 2 + 3 s, gaps: start -> first trial 5 s, gemv's winner -> gemm 3 s
    assert got == {"trials_s": 11.0, "winner_s": 5.0, "gaps_s": 8.0}


def test_worker_stages_reads_the_first_workers_ms_per_trial_from_the_campaign_log():
    stability = _stability()
    log = (
        "notice: something\ncampaign wall time 3.0 s; worker ms per trial by stage:\n"
        "  worker 0: 12 trials; certify_drain 1, compile_wait 23, gpu_wait 0, time 4\n"
        "  worker 1: 10 trials; compile_wait 5\n"
    )
    stages = {"certify_drain": 1.0, "compile_wait": 23.0, "gpu_wait": 0.0, "time": 4.0}
    none = {"clock_retimes": 0.0, "clock_rechecks": 0.0, "clock_retimes_slow": 0.0}
    assert stability.worker_stages(log) == stages | none
    retimed = log.replace("12 trials;", "12 trials (3 re-timed at low clocks);")
    assert stability.worker_stages(retimed) == stages | none | {"clock_retimes": 3.0}
    rechecked = log.replace("12 trials;", "12 trials (3 re-timed at low clocks, 2 of them competitive);")
    assert stability.worker_stages(rechecked) == stages | none | {"clock_retimes": 3.0, "clock_rechecks": 2.0}
    still = log.replace("12 trials;", "12 trials (3 re-timed at low clocks, 1 still slow after);")
    assert stability.worker_stages(still) == stages | none | {"clock_retimes": 3.0, "clock_retimes_slow": 1.0}
    assert stability.worker_stages("worker stage times unavailable: gone") == {}


def test_a_fresh_shader_cache_gives_each_campaign_an_empty_cache_of_its_own(tmp_path):
    stability = _stability()
    import os

    shared = stability.campaign_env("a", "shared", tmp_path)
    assert shared["FARM_HOME"] == str(tmp_path / "a-home")
    assert shared.get("__GL_SHADER_DISK_CACHE_PATH") == os.environ.get("__GL_SHADER_DISK_CACHE_PATH")
    a, b = (stability.campaign_env(n, "fresh", tmp_path) for n in "ab")
    assert a["__GL_SHADER_DISK_CACHE_PATH"] != b["__GL_SHADER_DISK_CACHE_PATH"]
    assert (tmp_path / "a-shader-cache").is_dir() and not any((tmp_path / "a-shader-cache").iterdir())
    assert a["__GL_SHADER_DISK_CACHE"] == "1"


def test_campaign_cost_reads_the_start_up_and_the_campaign_wall_from_the_log(tmp_path):
    stability = _stability()
    log = tmp_path / "a.log"
    log.write_text("worker w0 on h: gpu; topology ab; up in adapter 1.5, device 2.25, placement 0.5 s\n"
                   "startup: database, Ray and 1 worker(s) up in 14.2 s\n"
                   "campaign wall time 137.9 s; worker ms per trial by stage:\n")  # fmt: skip
    cost = stability.campaign_cost(log, tmp_path / "artifacts", [])
    assert cost["startup_s"] == 14.2 and cost["campaign_s"] == 137.9
    assert cost["worker_startup_s"] == {"adapter": 1.5, "device": 2.25, "placement": 0.5}
    log.write_text("campaign wall time 1.0 s\n")  # a log from before the line existed
    assert stability.campaign_cost(log, tmp_path / "artifacts", [])["startup_s"] is None
