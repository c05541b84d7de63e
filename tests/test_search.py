"""Search strategies on a synthetic cost shaped like gemm's: register tiles and block tiles
that interact, an invalid region (thread counts outside 64..256), and noise."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import numpy as np
import pytest

from farm.gpu import Timing
from farm.schedule import Problem, Schedule, Status
from farm.trial import TrialKey, TrialResult
from farm.tuning.search import Budget, BudgetSpent, exhaustive, model_based, random_search, strategy
from farm.tuning.surrogate import knn_predict

PROBLEM = Problem.of(m=1024, k=1024, n=1024)


def gemm_like_space() -> list[Schedule]:
    space = []
    for bm, bn, tm, tn, bk, vw, db in itertools.product(
        (16, 32, 64, 128), (16, 32, 64, 128), (1, 2, 4, 8), (1, 2, 4, 8), (8, 16, 32), (1, 4), (0, 1)
    ):
        if bm % tm == 0 and bn % tn == 0:
            space.append(
                Schedule.of(
                    workgroup_size=(bm // tm) * (bn // tn),
                    vector_width=vw,
                    tile_m=bm,
                    tile_n=bn,
                    reg_m=tm,
                    reg_n=tn,
                    tile_k=bk,
                    double_buffer=db,
                )
            )
    return space


def gemm_like_cost(schedule: Schedule, noise: random.Random) -> float | None:
    """ns, or None where the schedule is invalid; best near 64x64 blocks of 4x4 register tiles."""
    threads = schedule.workgroup_size
    if threads < 64 or threads > 256:
        return None
    lg = math.log2
    distance = (
        (lg(schedule["tile_m"]) - 6) ** 2
        + (lg(schedule["tile_n"]) - 6) ** 2
        + 1.5 * (lg(schedule["reg_m"]) - 2) ** 2
        + 1.5 * (lg(schedule["reg_n"]) - 2) ** 2
        + 0.5 * (lg(schedule["tile_k"]) - 4) ** 2
        + 0.3 * (lg(threads) - 7) ** 2
    )
    speed = 1.0 + 0.6 * (schedule.vector_width == 4) + 0.2 * schedule["double_buffer"]
    return 1e6 * math.exp(0.4 * distance) / speed * noise.uniform(0.97, 1.03)


def synthetic_evaluate(noise: random.Random):
    def evaluate(batch: list[Schedule]) -> list[TrialResult]:
        out = []
        for schedule in batch:
            key = TrialKey("t", "gemm", "s", PROBLEM, schedule)
            cost = gemm_like_cost(schedule, noise)
            if cost is None:
                out.append(TrialResult(key, Status.INVALID_SCHEDULE, "threads"))
            else:
                out.append(TrialResult(key, Status.OK, timing=Timing(cost, cost, cost, cost, 1, "host")))
        return out

    return evaluate


def best_found(results: list[TrialResult]) -> float:
    return min((r.median_ns for r in results if r.ok), default=math.inf)


def test_model_based_beats_random_on_a_gemm_shaped_cost_at_equal_budget():
    space = gemm_like_space()
    optimum = min(c for s in space if (c := gemm_like_cost(s, random.Random(0))) is not None)
    model, rand = [], []
    for seed in range(8):
        model.append(
            best_found(model_based(space, synthetic_evaluate(random.Random(seed)), Budget(40), random.Random(seed)))
        )
        rand.append(
            best_found(random_search(space, synthetic_evaluate(random.Random(seed)), Budget(40), random.Random(seed)))
        )
    print(
        f"space {len(space)}; mean best/optimum: model {statistics.mean(model) / optimum:.2f}, "
        f"random {statistics.mean(rand) / optimum:.2f}"
    )
    assert statistics.mean(model) < statistics.mean(rand)
    assert sum(m <= r for m, r in zip(model, rand, strict=True)) >= 5


@pytest.mark.parametrize("name", ["exhaustive", "random", "model"])
def test_every_strategy_spends_exactly_its_budget_without_repeats(name):
    space = gemm_like_space()
    budget = Budget(23)
    results = strategy(name)(space, synthetic_evaluate(random.Random(1)), budget, random.Random(1))
    keys = [r.key.schedule.key() for r in results]
    assert len(keys) == 23 and len(set(keys)) == 23
    assert budget.spent == 23 and budget.remaining == 0


def test_strategies_are_deterministic_given_the_seed_and_results():
    space = gemm_like_space()
    runs = [model_based(space, synthetic_evaluate(random.Random(5)), Budget(20), random.Random(7)) for _ in range(2)]
    assert [r.key.schedule for r in runs[0]] == [r.key.schedule for r in runs[1]]


def test_exhaustive_covers_a_small_space_in_order():
    space = gemm_like_space()[:5]
    results = exhaustive(space, synthetic_evaluate(random.Random(0)), Budget(None), random.Random(0))
    assert [r.key.schedule for r in results] == space


def test_budget_refuses_overspending_and_bad_sizes():
    budget = Budget(3)
    budget.spend(2)
    with pytest.raises(BudgetSpent, match="asked for 2 trials with 1 of 3 left"):
        budget.spend(2)
    with pytest.raises(ValueError, match="budget must be >= 1 trials, got 0"):
        Budget(0)


def test_unknown_strategy_names_the_choices():
    with pytest.raises(ValueError, match="unknown strategy 'annealing'; choose from exhaustive, random, model"):
        strategy("annealing")


def test_knn_predicts_the_nearest_targets():
    known = np.array([[0.0], [1.0]])
    predicted = knn_predict(known, np.array([10.0, 20.0]), np.array([[0.0], [1.0]]), k=1)
    np.testing.assert_allclose(predicted, [10.0, 20.0])


def h200_landscapes() -> dict[str, dict[str, float]]:
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "data" / "h200_gemm_trials.json").read_text())
    return data["problems"]


def replay_evaluate(problem_key: str, table: dict[str, float]):
    problem = Problem.from_key(problem_key)

    def evaluate(batch: list[Schedule]) -> list[TrialResult]:
        out = []
        for schedule in batch:
            ns = table[schedule.key()]
            key = TrialKey("h200", "gemm", "s", problem, schedule)
            out.append(TrialResult(key, Status.OK, timing=Timing(ns, ns, ns, ns, 1, "timestamp")))
        return out

    return evaluate


@pytest.mark.parametrize("problem_key", sorted(h200_landscapes()))
def test_model_based_beats_random_on_measured_h200_gemm_timings(problem_key):
    """Replays gemm trials measured on an H200 (70-77 schedules per size) as the landscape: at a
    budget of 16, the model's best is closer to the optimum than random's, over 60 seeds."""
    table = h200_landscapes()[problem_key]
    space = [Schedule.from_key(k) for k in sorted(table)]
    optimum = min(table.values())
    evaluate = replay_evaluate(problem_key, table)
    model, rand = [], []
    for seed in range(60):
        model.append(best_found(model_based(space, evaluate, Budget(16), random.Random(seed))) / optimum)
        rand.append(best_found(random_search(space, evaluate, Budget(16), random.Random(seed))) / optimum)
    assert statistics.mean(model) < statistics.mean(rand)


@pytest.mark.parametrize("workers, batches", [(1, 4), (8, 16)])
def test_model_batches_keep_every_worker_busy(workers, batches):
    sizes = []
    base = synthetic_evaluate(random.Random(0))

    def evaluate(batch):
        sizes.append(len(batch))
        return base(batch)

    model_based(gemm_like_space(), evaluate, Budget(60), random.Random(0), workers=workers)
    assert sum(sizes) == 60
    assert max(sizes[1:-1]) == batches  # after the random seed batch, before the remainder


def test_lead_schedules_are_measured_with_the_seeds_and_the_search_goes_as_with_them_as_prior():
    """A campaign's winners of other problems (`lead`) go in the seeds' batch, not a round of
    their own before it, and the search then measures the same schedules as when they were
    measured first and handed over as prior trials."""
    space = gemm_like_space()
    lead = space[5:8]

    def evaluate(batch):  # each schedule's noise its own: the same costs in any order
        return [synthetic_evaluate(random.Random(s.key()))([s])[0] for s in batch]

    def searched(**kwargs):
        batches = []

        def recording(batch):
            batches.append([s.key() for s in batch])
            return evaluate(batch)

        model_based(space, recording, Budget(60), random.Random(1), workers=4, **kwargs)
        return batches

    prior = evaluate(lead)
    before, now = searched(prior=prior), searched(lead=lead)
    assert now[0] == [s.key() for s in lead] + before[0]  # one round: the lead, then the seeds
    assert now[1:] == before[1:]
    assert sum(map(len, now)) == 60  # the lead counts against the budget, as prior trials do


def test_model_rejects_a_worker_count_below_one():
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        model_based(gemm_like_space(), synthetic_evaluate(random.Random(0)), Budget(8), random.Random(0), workers=0)


def test_model_seeds_sample_every_family_of_schedules():
    """A kernel's second form (its own knob names: recurrent's chunked schedules,
    27 of 840) is measured among the seeds of every search, so two campaigns don't differ in
    whether their random seeds happened to sample it; one-family spaces seed as before."""
    from farm.tuning.search import covering

    space = [Schedule.of(workgroup_size=w, a=a, b=b) for w in (32, 64, 128, 256) for a in range(10) for b in range(5)]
    space += [Schedule.of(workgroup_size=w, form=1, c=c) for w in (64, 256) for c in range(3)]

    def evaluate(batch):
        out = []
        for s in batch:
            ns = 500.0 + s.get("c", 0) if s.get("form", 0) else 1000.0 + 10 * s["a"] + s["b"] + s.workgroup_size
            key = TrialKey("t", "k", "s", PROBLEM, s)
            out.append(TrialResult(key, Status.OK, timing=Timing(ns, ns, ns, ns, 1, "host")))
        return out

    for seed in range(12):
        best = min(model_based(space, evaluate, Budget(12), random.Random(seed)), key=lambda r: r.median_ns)
        assert best.key.schedule.get("form", 0) == 1, seed
    order = list(range(len(space)))
    random.Random(3).shuffle(order)
    picks = covering(order, space, [], 5)
    assert len(picks) == 5 and len(set(picks)) == 5
    assert {tuple(space[i].as_dict()) for i in picks[:2]} == {tuple(space[0].as_dict()), tuple(space[-1].as_dict())}
    first_a = next(i for i in order if i < 200)
    rest = [i for i in order if i != first_a]
    assert covering(order, space, [len(space) - 1], 3) == [first_a, *rest[:2]]  # B already seen
    single = list(range(200))
    random.Random(4).shuffle(single)
    assert covering(single, space[:200], [], 7) == single[:7]  # one family: the shuffled order


def test_model_hints_the_next_best_ranked_candidates_and_often_picks_them_next():
    # the hint's schedules are the ones the campaign's workers compile ahead: unevaluated,
    # not in the batch just picked, and (the point) often what the next batch picks
    from farm.tuning.search import HINT_COUNT

    space = gemm_like_space()
    hints, batches = [], []
    evaluate = synthetic_evaluate(random.Random(3))

    def recording(batch):
        batches.append({s.key() for s in batch})
        return evaluate(batch)

    results = model_based(space, recording, Budget(64), random.Random(0), hint=lambda s: hints.append(s))
    assert hints and all(len(h) == HINT_COUNT for h in hints)
    seen_before = set()
    hit = []
    for index, batch in enumerate(batches):
        if index >= 1 and index - 1 < len(hints):  # batch 0 is the seeds; hint i comes with batch i + 1
            hinted = {s.key() for s in hints[index - 1]}
            assert not hinted & batch and not hinted & seen_before
            if index + 1 < len(batches):
                hit.append(len(hinted & batches[index + 1]) / len(batches[index + 1]))
        seen_before |= batch
    # the first rounds' models move a lot; later about half to three quarters of each next
    # batch was hinted (its random quarter, `explore`, never is)
    assert statistics.mean(hit) >= 0.3 and statistics.mean(hit[len(hit) // 2 :]) >= 0.5
    plain = model_based(space, synthetic_evaluate(random.Random(3)), Budget(64), random.Random(0))
    assert [r.key.schedule for r in results] == [r.key.schedule for r in plain]  # hinting changes no pick


def test_knn_predict_ranks_neighbours_as_a_stable_sort_does_ties_included():
    def reference(known, targets, query, k):
        k = min(k, len(known))
        distances = np.sqrt(((query[:, None, :] - known[None, :, :]) ** 2).sum(axis=2))
        nearest = np.argsort(distances, axis=1, kind="stable")[:, :k]
        d = np.take_along_axis(distances, nearest, axis=1)
        weights = 1.0 / (d + 1e-3)
        return (weights * targets[nearest]).sum(axis=1) / weights.sum(axis=1)

    rng = np.random.default_rng(3)
    for _ in range(200):  # small integer knob values: many equal distances, across the k-th place too
        dims = int(rng.integers(1, 7))
        known = rng.integers(0, 3, (int(rng.integers(1, 40)), dims)).astype(float)
        query = rng.integers(0, 3, (int(rng.integers(1, 60)), dims)).astype(float)
        targets = rng.standard_normal(len(known))
        for k in (1, 3, 5, 50):
            np.testing.assert_array_equal(knn_predict(known, targets, query, k), reference(known, targets, query, k))
    known, query = rng.standard_normal((300, 14)), rng.standard_normal((2000, 14))  # several chunks
    targets = rng.standard_normal(300)
    np.testing.assert_array_equal(knn_predict(known, targets, query), reference(known, targets, query, 5))
