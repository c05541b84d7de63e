"""Kill `farm tune` mid-campaign, run the same command again: it resumes (recorded trials
skipped, none duplicated) and ends with the same trials as an uninterrupted run.

Two problems, one after the other: the kill lands as the first rows are stored, seconds
before the second problem's can be (a problem's trials go out as one batch, so two of its
batches may land within one poll of each other)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import faulty_kernels
import pytest

from farm.store.parquet import read_trials

pytestmark = pytest.mark.slow


def tune_command(db: Path, out: Path, *more: str) -> list[str]:
    return [
        sys.executable, "-m", "farm", "tune", "slow_gemv",
        "--sizes", "slow_gemv:m=64,n=64;slow_gemv:m=32,n=32",
        "--strategy", "random", "--budget", "6", "--reps", "2", "--seed", "3",
        "--allow-cpu", "--db", f"sqlite:///{db}", "--out", str(out), *more,
    ]  # fmt: skip


def environment(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env |= {"FARM_HOME": str(home), "FARM_EXTRA_KERNELS": faulty_kernels.PATH, "FARM_TEST_SLOW_S": "0.4"}
    env |= {"XDG_RUNTIME_DIR": "/tmp"}
    env.pop("FARM_DATABASE_URL", None)
    env.pop("RAY_ADDRESS", None)
    return env


def trial_rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        try:
            query = "SELECT problem, schedule, status, campaign_id FROM trials ORDER BY problem, schedule"
            return conn.execute(query).fetchall()
        except sqlite3.OperationalError:  # tables not migrated yet
            return []


def run_to_end(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def kill_after_trials(command: list[str], env: dict[str, str], db: Path, trials: int) -> None:
    """Start the driver in its own process group and SIGKILL the group once `trials` are stored."""
    driver = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while len(trial_rows(db)) < trials:
            assert driver.poll() is None, "the campaign finished before it could be killed"
            assert time.monotonic() < deadline, "no trials recorded in time"
            time.sleep(0.2)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)


def test_killed_campaign_resumes_without_duplicates_and_matches_an_uninterrupted_run(tmp_path):
    env = environment(tmp_path / "home")
    resumed_db, clean_db = tmp_path / "resumed.db", tmp_path / "clean.db"

    kill_after_trials(tune_command(resumed_db, tmp_path / "out1"), env, resumed_db, trials=1)
    before = trial_rows(resumed_db)
    assert 1 <= len(before) < 14

    rerun = run_to_end(tune_command(resumed_db, tmp_path / "out1"), env)
    after = trial_rows(resumed_db)
    clean = run_to_end(tune_command(clean_db, tmp_path / "out2", "-v"), env)
    # where the process wall outside the campaign went (stability.py reads it as startup_s)
    assert re.search(r"^startup: database, Ray and 1 worker\(s\) up in [0-9.]+ s$", clean.stderr, re.MULTILINE)
    assert re.search(r"; up in adapter [0-9.]+, device [0-9.]+, placement [0-9.]+ s$", clean.stderr, re.MULTILINE)

    # each problem's default + 6 sampled schedules, each stored once; the first campaign's rows kept
    assert len(after) == 14 and len({row[:2] for row in after}) == 14
    assert set(before) <= set(after)
    assert {row[3] for row in after} == {1, 2}
    assert f"{len(before)} resumed" in rerun.stderr
    assert [row[:3] for row in after] == [row[:3] for row in trial_rows(clean_db)]
    assert all(status == "ok" for _, _, status, _ in after)
    assert "slow_gemv  m=64,n=64" in rerun.stdout and "slow_gemv  m=64,n=64" in clean.stdout
    # by default: a line per problem, a table that fits 100 columns, where the results are and what
    # to run next; the workers, stage times and margins' intervals only with -v; none of Ray's logging
    assert re.search(r"^slow_gemv m=64,n=64: [0-9.]+ us, [0-9.]+x over the default schedule", rerun.stderr, re.M)
    table = rerun.stdout.split("\n\n")[0].splitlines()
    assert table[0].split() == ["kernel", "problem", "median_us", "speedup", "schedule"]
    assert max(len(line) for line in table) <= 100
    assert f"results:  sqlite:///{resumed_db}" in rerun.stdout and "next:\n  farm winners" in rerun.stdout
    assert "worker ms per trial by stage" not in rerun.stderr and "placement" not in rerun.stderr
    assert "worker ms per trial by stage" in clean.stderr and "(3 rounds)" not in rerun.stdout
    assert "[low, high]: its 90% sign-test interval" in clean.stdout
    assert "WARNING" not in rerun.stderr + clean.stderr

    # the re-run counts what it replayed and marked the killed campaign interrupted at once
    killed, resumed = sorted(campaign_rows(resumed_db), key=lambda row: row["id"])
    assert (resumed["status"], resumed["done"], resumed["total"]) == ("done", 14, 14)
    assert killed["status"] == "interrupted" and killed["heartbeat_at"] is not None
    assert re.search(rf"^campaign {killed['id']} \(['\"]farm tune .* marked interrupted", rerun.stderr, re.M)
    # Parquet equals SQL right after the resume: each trial key once, the killed campaign's rows included
    for db, out in ((resumed_db, tmp_path / "out1"), (clean_db, tmp_path / "out2")):
        frame = read_trials(out)
        stored = {(r[0], r[1], r[3]) for r in trial_rows(db)}
        assert len(frame) == len(stored) == 14
        assert set(zip(frame["problem"], frame["schedule"], frame["campaign_id"], strict=True)) == stored


def campaign_rows(db: Path) -> list[dict]:
    from farm import store

    opened = store.open_store(f"sqlite:///{db}", read_only=True)
    try:
        return store.campaigns(opened)
    finally:
        opened.engine.dispose()
