"""A campaign on a topology with many workers tunes several problems at once (one TrialQueue
shared by their searches), records every trial once, and reports its winners and task totals
in plan order; the simulated GPUs are benchmarks/fleet.py's stubs over a real local Ray."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from farm import catalog, store
from farm.tuning.campaign import PROBLEM_WORKERS, Campaign
from farm.tuning.tasks import TuneConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fleet  # noqa: E402


@pytest.fixture
def pool():
    made = fleet.fleet_pool(2 * PROBLEM_WORKERS, 0.003, fleet.simulated_profile())
    yield made
    made.shutdown()


def test_problems_run_side_by_side_and_every_trial_is_recorded_once(pool, tmp_path):
    spec = catalog.get("gemm")
    problems = [spec.problem(m=n, k=n, n=n) for n in (256, 512, 1024)]
    config = TuneConfig(kernels=("gemm",), sizes={"gemm": problems}, strategy="model", budget=24)
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    campaign = Campaign(config, pool, db, tmp_path / "artifacts", "farm tune gemm")
    winners = campaign.run()
    assert [w.problem_key for w in winners] == [p.key() for p in problems]
    assert [t["problem"] for t in campaign.tasks] == [p.key() for p in problems]
    rows = store.trials(db)
    assert len(rows) == len({(r["problem"], r["schedule"]) for r in rows})  # no trial twice
    for task in campaign.tasks:
        assert sum(r["problem"] == task["problem"] for r in rows) == task["trials"] + 1  # and the default
    row = store.campaign(db, campaign.campaign_id)
    assert row["status"] == "done" and row["done"] == len(rows)
    spans = {p.key(): [r["finished_at"] for r in rows if r["problem"] == p.key()] for p in problems}
    first, second = spans[problems[0].key()], spans[problems[1].key()]
    assert min(second) < max(first)  # the second problem's search began before the first's ended
    db.engine.dispose()
