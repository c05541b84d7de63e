"""A trial cap that scales with the space (spent past the plan only while the search
still improves; `--budget` stays an explicit cap), and a cheaper final decision (a clearly
separated pair stops at the first rounds; close ones still get the sign test's rounds)."""

from __future__ import annotations

import json
import math
import random

import pytest
from test_search_adaptive import GRID, far_corner, flat, landscape
from test_winner_choice import RoundsPool

from farm import catalog, store
from farm.gpu import HardwareProfile
from farm.schedule import Problem
from farm.tuning.campaign import Campaign
from farm.tuning.finalists import compare, decide, measure_until_resolved, sign_rounds
from farm.tuning.search import Budget, improving, model_based
from farm.tuning.tasks import DEFAULT_BUDGET, SPACE_SHARE, TuneConfig, plan, scaled_budget

H200 = HardwareProfile(
    backend="Vulkan", adapter_type="DiscreteGPU", vendor_id=4318, device_id=9013, device_name="NVIDIA H200",
    driver_description="580.159.04", features=("shader-f16", "subgroup", "timestamp-query"), subgroup_min_size=4,
    limits=(("max-compute-workgroup-size-x", 1024), ("max-compute-workgroup-size-y", 1024),
            ("max-compute-invocations-per-workgroup", 1024), ("max-compute-workgroup-storage-size", 49152),
            ("max-compute-workgroups-per-dimension", 65535), ("max-storage-buffer-binding-size", 2147483644),
            ("max-buffer-size", 4292870144), ("max-storage-buffers-per-shader-stage", 524288)),
)  # fmt: skip
SIZES = {"gemm": [Problem.of(m=1024, k=1024, n=1024)], "gemv": [Problem.of(m=4096, n=4096)]}
A, B = "a", "b"


def _tasks(**config):
    return {t.kernel: t for t in plan(TuneConfig(kernels=("gemm", "gemv"), sizes=SIZES, **config), "t", H200)}


def test_a_large_space_gets_a_larger_cap_and_a_small_one_keeps_the_default_budget():
    tasks = _tasks(budget=DEFAULT_BUDGET, space_share=SPACE_SHARE)
    gemm, gemv = tasks["gemm"], tasks["gemv"]
    assert len(gemm.space) > 3 * DEFAULT_BUDGET > len(gemv.space) > DEFAULT_BUDGET
    assert gemm.budget == math.ceil(len(gemm.space) * SPACE_SHARE) > DEFAULT_BUDGET
    assert (gemm.extend_after, gemm.planned, gemm.trials) == (DEFAULT_BUDGET, DEFAULT_BUDGET, DEFAULT_BUDGET + 1)
    assert (gemv.budget, gemv.extend_after, gemv.planned) == (DEFAULT_BUDGET, None, DEFAULT_BUDGET)


def test_an_explicit_budget_still_caps_it():
    for config in ({"budget": DEFAULT_BUDGET}, {"budget": 12}):  # `farm tune --budget N`: space_share 0
        gemm = _tasks(**config)["gemm"]
        assert (gemm.budget, gemm.extend_after, gemm.planned) == (config["budget"], None, config["budget"])
    gemm = _tasks(budget=None, space_share=SPACE_SHARE)["gemm"]  # --budget all: the whole space
    assert (gemm.budget, gemm.extend_after, gemm.trials) == (None, None, len(gemm.space) + 1)
    for other in ({"strategy": "random"}, {"adaptive": False}):  # no improvement to gate on: the cap is the plan
        assert _tasks(budget=DEFAULT_BUDGET, space_share=SPACE_SHARE, **other)["gemm"].budget == DEFAULT_BUDGET
    assert scaled_budget(64, 1000, 0.5) == (500, 64) and scaled_budget(64, 100, 0.5) == (64, None)
    assert scaled_budget(300, 1000, 0.25) == (300, None) and scaled_budget(None, 1000, 0.5) == (None, None)


@pytest.mark.parametrize(("argv", "budget", "share"), [
    ([], DEFAULT_BUDGET, SPACE_SHARE), (["--budget", "64"], 64, 0.0), (["--budget", "all"], None, 0.0),
    (["--strategy", "exhaustive"], None, 0.0),  # the whole space, not the default budget
    (["--strategy", "exhaustive", "--budget", "12"], 12, 0.0),
])  # fmt: skip
def test_farm_tune_scales_only_without_budget(argv, budget, share, tmp_path, monkeypatch):
    from farm.cli.main import main

    asked = []
    monkeypatch.setattr("farm.tuning.campaign.tune", lambda config, *args: asked.append(config) or [])
    argv = ["tune", "gemv", "--ray-address", "127.0.0.1:1", "--out", str(tmp_path), *argv]
    assert main(argv) == 1  # the stubbed campaign found no winner
    assert (asked[0].budget, asked[0].space_share) == (budget, share)


def _search(cost, budget: int, extend_after: int | None, seed: int = 0):
    b = Budget(budget)
    results = model_based(GRID, landscape(cost, seed=seed), b, random.Random(seed), extend_after=extend_after)
    return results, b


def rugged(s) -> float:
    """No structure the models could learn: each schedule's time is its own draw over a factor
    of 10, so a search keeps finding better ones now and then, as random sampling does."""
    return 1e5 * 10 ** -random.Random(s.key()).random()


def test_past_its_plan_the_search_goes_on_only_while_it_improves():
    went_on = 0
    for seed in range(6):
        planned, _ = _search(rugged, 32, None, seed)
        extended, budget = _search(rugged, 120, 32, seed)
        assert [r.key.schedule for r in extended[:32]] == [r.key.schedule for r in planned]  # the same path up to it
        window = 3 * 4  # patience rounds of batch_size 4 (one worker)
        assert (budget.spent > 32) == improving(extended[:32], window, 0.0)
        assert budget.spent == 120 or not improving(extended, window, 0.0)  # stopped after a window without gain
        went_on += budget.spent > 32
        settled, budget = _search(far_corner, 120, 32, seed)
        assert budget.spent == len(settled) == 32  # its optimum found early: nothing better lately, stops at the plan
        flat_results, budget = _search(flat, 120, 32, seed)
        assert budget.spent == 32
    assert went_on >= 2


def test_a_clearly_separated_pair_uses_the_minimum_rounds():
    rounds = TuneConfig(kernels=()).rounds
    assert rounds == 3 < sign_rounds() == 5
    calls = []

    def measure_round(keys):  # B 10% slower, the rounds drifting 5% together
        calls.append(list(keys))
        drift = 1 + 0.05 * (len(calls) % 2)
        return {k: (100.0 if k == A else 110.0) * drift for k in keys}

    samples = measure_until_resolved(measure_round, [A, B], rounds, max_rounds=15, noise=0.01)
    assert len(calls) == len(samples[A]) == len(samples[B]) == rounds
    decision = decide(samples, 0.01)
    assert (decision.winner, decision.runner_up, decision.tie, decision.rounds) == (A, B, False, rounds)


def test_a_close_pair_gets_the_sign_tests_rounds_before_any_verdict():
    close = {A: [100.0] * 3, B: [101.8] * 3}
    assert compare(close, B, A, 0.01).verdict == "unresolved"  # 1.8% in 3 rounds: too few to tell
    assert compare({A: [100.0] * 3, B: [100.1] * 3}, B, A, 0.01).verdict == "unresolved"  # nor a tie
    assert compare({A: [100.0] * 5, B: [101.8] * 5}, B, A, 0.01).verdict == "slower"
    assert compare({A: [100.0] * 5, B: [100.1] * 5}, B, A, 0.01).verdict == "tie"
    truth = {A: 100.0, B: 101.8}
    rng = random.Random(3)

    def measure_round(keys):
        return {k: truth[k] * rng.uniform(0.998, 1.002) for k in keys}

    samples = measure_until_resolved(measure_round, [A, B], 3, max_rounds=15, noise=0.01)
    assert len(samples[A]) == len(samples[B]) == 5 and decide(samples, 0.01).winner == A


def test_a_campaign_reports_its_trials_and_re_measurement_cost(device, tmp_path):
    db = store.open_store(f"sqlite:///{tmp_path}/farm.db")
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": [Problem.of(m=40, n=24)]}, budget=6, reps=2)
    pool = RoundsPool(device.profile, lambda key: 1000.0)
    Campaign(config, pool, db, tmp_path / "a", "farm tune gemv").run()
    assert pool.asked[0][1] == 3  # the first rounds: TuneConfig.rounds
    summary = json.loads(next((tmp_path / "a" / "campaigns").glob("*/summary.json")).read_text())
    (task,) = summary["tasks"]
    assert (task["kernel"], task["cap"], task["planned"], task["trials"], task["rounds"]) == ("gemv", 6, 6, 6, 3)
    assert task["timings"] == 3 * task["finalists"] and task["search_s"] > 0 and task["remeasure_s"] >= 0
    assert summary["totals"]["trials"] == 6 and summary["totals"]["timings"] == task["timings"]
    (row,) = store.campaigns(db)
    assert row["total"] == row["done"] == 7  # the default and six trials
    assert catalog.get("gemv").default.key() in pool.asked[0][0]
    db.engine.dispose()
