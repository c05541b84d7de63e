"""`farm.tune_kernel` and `farm tune` run one tuning engine (farm.tuning.engine): the same
kernel and sizes get the same plan, the same candidates and the same kind of winner, its
decision included, in a notebook and on the farm."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import fields, replace

import pytest

import farm
from farm import store
from farm.catalog import files
from farm.store import WinnerRecord
from farm.store.records import DECISION_FIELDS, VENDOR_FIELDS
from farm.tuning.tasks import TuneConfig

# A kernel whose winner is clear whatever the timing noise: `work` iterations of a dependent
# multiply-add per element, the default the slowest (256), the best (1) many times faster
# than the runner-up (32).
SPIN = '''"""A kernel with one knob, the work per element."""

from farm import Kernel

SOURCE = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> params: vec4<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.x) {
        let v = x[gid.x];
        var acc = v;
        for (var i = 0u; i < {{work}}u; i++) { acc = acc * 0.5 + v; }
        y[gid.x] = acc;
    }
}
"""

Kernel("spin_parity", source=SOURCE, dims=("n",), inputs={"x": "f32[n]"}, outputs={"y": "f32[n]"},
       space={"work": [256, 1, 32]}, grid="ceil(n / 64)", reference=lambda x, work: x * (2.0 - 0.5**work),
       atol=1e-5, rtol=1e-5, sizes=["n=65536"])
'''
SETTINGS = {"strategy": "model", "budget": 2, "reps": 3, "seed": 0}  # farm tune's strategy and seed, a small budget


@pytest.fixture(scope="module")
def spin_file(tmp_path_factory):
    """The kernel's file, loaded in this process once (a kernel is defined in one file only)."""
    path = tmp_path_factory.mktemp("kernels") / "spin_parity.py"
    path.write_text(SPIN)
    files.load([str(path)])
    return path


def _cli_tune(path, db: str, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_KERNELS")}
    options = [f"--{name}={value}" for name, value in SETTINGS.items()]
    argv = [sys.executable, "-m", "farm", "tune", "--kernels-file", str(path), "--sizes", "spin_parity:n=65536",
            *options, "--allow-cpu", "--db", db, "--out", str(tmp_path / "artifacts")]  # fmt: skip
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr


def _tried(db: str) -> set[str]:
    opened = store.open_store(db)
    try:
        return {row["schedule"] for row in store.trials(opened, kernel="spin_parity")}
    finally:
        opened.engine.dispose()


def _stored_winner(db: str) -> WinnerRecord:
    opened = store.open_store(db)
    try:
        (winner,) = store.winners(opened, kernel="spin_parity")
        return winner
    finally:
        opened.engine.dispose()


def _decision_is_whole(winner: WinnerRecord, tried: set[str]) -> None:
    """Every decision field set, and consistent with a clear winner over the tried schedules."""
    assert all(getattr(winner, name) is not None for name in DECISION_FIELDS), winner
    assert winner.tie is False and winner.runner_up in tried and winner.schedule_key in tried
    assert winner.margin_low <= winner.margin <= winner.margin_high and winner.margin_low > 0.01
    assert winner.p20_ns <= winner.median_ns <= winner.p80_ns < winner.runner_up_ns
    assert winner.speedup == pytest.approx(winner.default_median_ns / winner.median_ns) and winner.speedup > 1


def test_tune_kernel_and_farm_tune_decide_the_same_winner_the_same_way(spin_file, device, farm_home, tmp_path):
    cli_db, local_db = f"sqlite:///{tmp_path}/cli.db", f"sqlite:///{tmp_path}/local.db"
    _cli_tune(spin_file, cli_db, tmp_path)
    tuned = farm.tune_kernel("spin_parity", **SETTINGS, db=local_db, device=device)

    on_farm, in_process = _stored_winner(cli_db), tuned.winner
    assert isinstance(in_process, WinnerRecord)
    assert replace(_stored_winner(local_db), updated_at=None) == in_process  # stored as returned
    assert _tried(cli_db) == _tried(local_db) == {t.key.schedule.key() for t in tuned.trials}  # the same candidates
    for winner, tried in ((on_farm, _tried(cli_db)), (in_process, _tried(local_db))):
        _decision_is_whole(winner, tried)
    same = ("schedule_key", "runner_up", "tie", "problem_key", "source_hash", "topology_hash")
    assert {f: getattr(on_farm, f) for f in same} == {f: getattr(in_process, f) for f in same}
    # rounds are added while timing noise keeps finalists close, so two runs agree on the rule, not the count
    assert all(TuneConfig.rounds <= w.rounds <= TuneConfig.max_rounds for w in (on_farm, in_process))
    assert in_process.knobs == {"work": 1}
    # every field a stored winner has, the in-process one has: nothing kept apart for notebooks
    unset = {f.name for f in fields(WinnerRecord) if getattr(in_process, f.name) is None}
    assert unset <= {"updated_at", *VENDOR_FIELDS}  # filled by the store and by `farm bench`


def test_tune_kernel_with_a_database_replays_the_trials_it_stored_before(spin_file, device, tmp_path):
    db = f"sqlite:///{tmp_path}/farm.db"
    first = farm.tune_kernel("spin_parity", **SETTINGS, db=db, device=device)
    opened = store.open_store(db)
    ran = store.count_trials(opened)
    again = farm.tune_kernel("spin_parity", **SETTINGS, db=db, device=device)
    assert store.count_trials(opened) == ran  # every trial replayed from the database, none run again
    assert {t.key.schedule.key() for t in again.trials} == {t.key.schedule.key() for t in first.trials}
    assert again.winner.schedule_key == first.winner.schedule_key
    rows = store.campaigns(opened)
    assert [(r["status"], r["done"], r["failures"]) for r in rows] == [("done", ran, 0), ("done", ran, 0)]
    opened.engine.dispose()
