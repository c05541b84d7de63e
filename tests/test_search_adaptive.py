"""The model search's adaptive stop (keep searching while the models predict an
improvement beyond the noise; `budget` stays the cap) and its warm start from stored trials,
on synthetic landscapes."""

from __future__ import annotations

import itertools
import math
import random

from test_search import PROBLEM, best_found, gemm_like_space, synthetic_evaluate

from farm.gpu import Timing
from farm.schedule import Schedule, Status
from farm.trial import TrialKey, TrialResult
from farm.tuning.search import Budget, model_based, trial_noise

GRID = [Schedule.of(workgroup_size=wg, tile_m=a, tile_n=b, reg_m=r) for wg, a, b, r in
        itertools.product((32, 64, 128, 256), (1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 16, 32), (1, 2, 4))]  # fmt: skip


def landscape(cost, spread: float = 0.004, seed: int = 0):
    rng = random.Random(seed)

    def evaluate(batch):
        out = []
        for s in batch:
            ns = cost(s) * rng.uniform(1 - spread, 1 + spread)
            timing = Timing(ns, ns * (1 - spread), ns * (1 + spread), ns * (1 - 2 * spread), 10, "timestamp")
            out.append(TrialResult(TrialKey("t", "k", "s", PROBLEM, s), Status.OK, timing=timing))
        return out

    return evaluate


def flat(s: Schedule) -> float:
    return 1e5


def far_region(s: Schedule) -> float:
    """Flat but for a region 30% faster, a ninth of the space far from the default (large tiles)."""
    return 0.7e5 if s["tile_m"] >= 16 and s["tile_n"] >= 16 else 1e5


def far_corner(s: Schedule) -> float:
    """Steadily faster toward large tiles: the seeds see the trend, the best is the far corner."""
    return 1e5 * math.exp(-0.25 * (math.log2(s["tile_m"]) + math.log2(s["tile_n"])))


def run(cost, budget: int, seed: int = 0, noise: float | None = 0.01, **kwargs):
    b = Budget(budget)
    results = model_based(GRID, landscape(cost, seed=seed), b, random.Random(seed), noise=noise, **kwargs)
    return results, b


def test_a_flat_landscape_stops_early():
    for seed in range(3):
        results, budget = run(flat, 120, seed)
        assert len(results) == budget.spent < 60, len(results)  # seeds (30) and a few model rounds
        assert len({r.key.schedule.key() for r in results}) == len(results)


def test_a_landscape_with_a_far_better_region_keeps_searching_to_the_cap():
    for seed in range(3):
        results, budget = run(far_region, 120, seed)
        assert budget.spent == 120 and len(results) == 120
        assert best_found(results) < 0.71e5


def test_a_steady_trend_keeps_searching_past_where_a_flat_landscape_stops():
    for seed in range(3):
        results, budget = run(far_corner, 120, seed)
        assert budget.spent >= 70 > run(flat, 120, seed)[1].spent
        assert best_found(results) <= far_corner(Schedule.of(workgroup_size=32, tile_m=32, tile_n=32)) * 1.01


def test_without_noise_the_search_spends_its_whole_budget_as_before():
    results, budget = run(flat, 120, noise=None)
    assert budget.spent == 120 and len(results) == 120


def test_the_adaptive_stop_still_finds_the_gemm_shaped_optimum_with_fewer_or_equal_trials():
    space = gemm_like_space()
    for seed in range(8):
        b = Budget(96)
        results = model_based(space, synthetic_evaluate(random.Random(seed)), b, random.Random(seed), noise=0.01)
        fixed = model_based(space, synthetic_evaluate(random.Random(seed)), Budget(96), random.Random(seed))
        assert b.spent <= 96 and best_found(results) <= best_found(fixed) * 1.01


def test_stored_trials_seed_the_model_and_count_against_the_cap():
    evaluate = landscape(far_corner)
    prior = evaluate(GRID[:40])
    calls: list[int] = []

    def counting(batch):
        calls.append(len(batch))
        return evaluate(batch)

    budget = Budget(60)
    results = model_based(GRID, counting, budget, random.Random(0), prior=prior + landscape(flat)([Schedule.of(x=1)]))
    assert budget.spent == 60 and len(results) == sum(calls) == 20  # 40 known (the stray one ignored), 20 new
    assert not {r.key.schedule.key() for r in results} & {s.key() for s in GRID[:40]}
    assert calls[0] <= 4  # no random seed batch: the stored trials took its place
    assert run(far_corner, 30, prior=evaluate(GRID[:40]))[1].spent == 30  # more stored than the cap: nothing new
    assert len(run(far_corner, 30, prior=evaluate(GRID[:40]))[0]) == 0


def test_trial_noise_is_the_median_relative_spread():
    results = landscape(flat, spread=0.02)(GRID[:9])
    assert abs(trial_noise(results) - 0.04) < 1e-9
    assert trial_noise([]) == 0.0
